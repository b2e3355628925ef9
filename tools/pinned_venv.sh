#!/usr/bin/env bash
# Create (once) a virtual environment holding one pinned package, and print its python path
# on stdout. Used by orig_venv.sh and dbos_venv.sh.
#   usage: pinned_venv.sh PACKAGE VERSION VENV_DIR
#   PYTHON   interpreter to build the venv with (default: python3)
set -euo pipefail

package="$1" want="$2" venv="$3"
py="$venv/bin/python"

installed() {
    [ -x "$py" ] && "$py" - "$package" "$want" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
sys.exit(0 if version(sys.argv[1]) == sys.argv[2] else 1)
PY
}

if ! installed; then
    echo "$(basename "$0"): installing $package==$want into $venv" >&2
    "${PYTHON:-python3}" -m venv "$venv" >&2
    "$py" -m pip install --quiet "$package==$want" >&2
    installed || { echo "$(basename "$0"): $package==$want did not install" >&2; exit 1; }
fi
echo "$py"
