"""Write generated vector files, or check that the files on disk are what a generator writes.

Shared by tools/gen_*_vectors.py, so each generator only builds its outputs. Files are
compared and written as bytes: no newline translation, and the log vectors hold bytes that
are deliberately not UTF-8.
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def show(path: Path) -> str:
    """The path relative to the repository root when it is inside it (for messages)."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def write_or_check(path: Path, data: str | bytes, check: bool) -> bool:
    """True when `path` already holds `data`. Otherwise, unless `check`, write it."""
    content = data.encode("utf-8") if isinstance(data, str) else data
    if path.is_file() and path.read_bytes() == content:
        return True
    if not check:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return False


def main(outputs: dict[Path, str | bytes], argv: list[str] | None, script: str) -> int:
    """The command line of a generator: write `outputs`, or with --check exit 1 naming
    every file that differs. `script` is the generator's __file__."""
    command = f"python {show(Path(script))}"
    parser = argparse.ArgumentParser(
        prog=command, description=f"Write the {len(outputs)} vector file(s) this generator builds.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a file differs from what would be "
                             "written")
    check = parser.parse_args(argv).check
    stale = [path for path, data in outputs.items() if not write_or_check(path, data, check)]
    for path in stale:
        if check:
            state = "is out of date" if path.exists() else "is missing"
            print(f"{show(path)} {state}: regenerate it with {command}")
        else:
            print(f"wrote {show(path)}")
    current = len(outputs) - len(stale)
    if check:
        print(f"{current} of {len(outputs)} file(s) up to date")
        return 1 if stale else 0
    if current:
        print(f"{current} file(s) unchanged")
    return 0
