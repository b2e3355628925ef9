"""The run folder (`--history DIR`): history, stderr of every process, the scenarios' data.

A folder left by an earlier run is cleared first: its data folders would otherwise be opened
again by this run's scenarios (same names) and turn stale state into false failures. A folder
that holds anything a run does not write is refused rather than cleared, so a mistyped path
never deletes someone's files.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

ENTRIES = {"history.jsonl", "data", "stderr"}  # everything a run writes into its folder


class RunDirError(Exception):
    pass


def prepare(folder: Path | None, prefix: str) -> tuple[Path, bool]:
    """The folder to run in and whether to keep it afterwards (only when the user named it)."""
    if folder is None:
        return Path(tempfile.mkdtemp(prefix=prefix)), False
    if folder.exists() and not folder.is_dir():
        raise RunDirError(f"--history {folder}: exists and is not a folder")
    present = {p.name for p in folder.iterdir()} if folder.exists() else set()
    foreign = sorted(present - ENTRIES)
    if foreign:
        raise RunDirError(f"--history {folder}: the folder holds files a run does not write "
                          f"({', '.join(foreign[:5])}); name an empty or new folder, or one "
                          "an earlier run wrote (it is cleared first)")
    for name in present:
        path = folder / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    return folder, True
