#!/usr/bin/env bash
# Create (once) a virtual environment holding the original third-party
# `dhp-protocol==1.3.0` package, used by bench/ and the conformance kit's
# adapter for it. It imports as `dhp` too, so it must never share an
# environment with ours. Prints the venv's python path on stdout.
#   DHP_ORIG_VENV   venv folder (default: .venv-orig at the repo root)
#   PYTHON          interpreter to build the venv with (default: python3)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$repo_root/tools/pinned_venv.sh" dhp-protocol 1.3.0 "${DHP_ORIG_VENV:-$repo_root/.venv-orig}"
