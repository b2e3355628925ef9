#!/usr/bin/env bash
# Create (once) a virtual environment holding a pinned `dbos` (DBOS Transact, the current
# release when pinned), the runtime bench/side_dbos.py measures beside DHP on the same
# Postgres; its own venv, so its dependencies never mix with ours. Prints its python path.
#   DHP_DBOS_VENV   venv folder (default: .venv-dbos at the repo root)
#   PYTHON          interpreter to build the venv with (default: python3)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$repo_root/tools/pinned_venv.sh" dbos 3.4.0 "${DHP_DBOS_VENV:-$repo_root/.venv-dbos}"
