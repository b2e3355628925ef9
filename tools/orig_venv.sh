#!/usr/bin/env bash
# Create (once) a virtual environment holding the original third-party
# `dhp-protocol==1.3.0` package, used by bench/ and the conformance kit's
# adapter for it. It imports as `dhp` too, so it must never share an
# environment with ours. Prints the venv's python path on stdout.
#   DHP_ORIG_VENV   venv folder (default: .venv-orig at the repo root)
#   PYTHON          interpreter to build the venv with (default: python3)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${DHP_ORIG_VENV:-$repo_root/.venv-orig}"
py="$venv/bin/python"
want="1.3.0"

installed() {
    [ -x "$py" ] && "$py" - "$want" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
sys.exit(0 if version("dhp-protocol") == sys.argv[1] else 1)
PY
}

if ! installed; then
    echo "orig_venv: installing dhp-protocol==$want into $venv" >&2
    "${PYTHON:-python3}" -m venv "$venv" >&2
    "$py" -m pip install --quiet "dhp-protocol==$want" >&2
    installed || { echo "orig_venv: dhp-protocol==$want did not install" >&2; exit 1; }
fi
echo "$py"
