"""The protocol's data files: JSON Schemas, test vectors and the requirements index.

Shared by the reference (`dhp`) and the conformance kit (`dhp_conform`), which must not
import each other. In an installed wheel the files live inside this package; when running
from a source checkout (editable install) they are read from the repository root.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent
_REPO_ROOT = _HERE.parent.parent


def root() -> Path:
    """The folder holding `schemas/`, `vectors/` and `requirements.json`."""
    if (_HERE / "schemas").is_dir():
        return _HERE
    return _REPO_ROOT


def path(*parts: str) -> Path:
    """A data file; `requirements.json` is found under `spec/` in a source checkout."""
    base = root()
    if parts == ("requirements.json",) and base == _REPO_ROOT:
        return base / "spec" / "requirements.json"
    return base.joinpath(*parts)
