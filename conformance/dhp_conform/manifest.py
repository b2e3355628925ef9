"""How to start an implementation's adapter: a command line, or an adapter manifest file.

A manifest is a JSON object `{"command": [argv...], "env": {NAME: value}, "cwd": folder}`
(`command` may also be one string, split like a shell would). `env` is added to the kit's own
environment; a relative `cwd` is relative to the manifest's folder. `--impl @FILE` and
`--manifest FILE` both name a manifest.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every kit command shares: which implementation to run, and how long to
    wait for any one of its answers."""
    parser.add_argument("--impl", help="the adapter command, e.g. 'python -m dhp.adapter', or "
                        "@FILE for an adapter manifest")
    parser.add_argument("--manifest", type=Path, help="an adapter manifest file: "
                        '{"command": [...], "env": {...}, "cwd": "..."}')
    parser.add_argument("--seed", type=int, help="seed of the run's random choices")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="seconds to wait for any one response (default 10)")


class ManifestError(ValueError):
    """The manifest cannot be used; the message names the file and the member."""


@dataclass(frozen=True)
class Impl:
    argv: list[str]
    env: dict[str, str] | None = None  # the whole environment of the adapter, or None: inherit
    cwd: str | None = None

    def describe(self) -> str:
        return shlex.join(self.argv) + (f" (in {self.cwd})" if self.cwd else "")


def resolve(impl: str | None, manifest: str | Path | None = None) -> Impl:
    """The adapter to start, from `--impl` (a command, or @FILE) and/or `--manifest FILE`."""
    if manifest is not None and impl is not None:
        raise ManifestError("give either --impl or --manifest, not both")
    if manifest is None and impl is not None and impl.startswith("@"):
        manifest = impl[1:]
    if manifest is not None:
        return load(Path(manifest))
    if not impl or not impl.strip():
        raise ManifestError("no adapter command: give --impl 'COMMAND' or --manifest FILE "
                            "(the reference implementation's: --impl 'python -m dhp.adapter')")
    return _runnable(Impl(shlex.split(impl)), "--impl")


def _runnable(impl: Impl, source: str) -> Impl:
    """`impl`, once its program is found: on PATH, or as a path (relative to its cwd)."""
    program = impl.argv[0]
    path = (impl.env or os.environ).get("PATH")
    if os.sep in program:
        found = Path(impl.cwd or ".", program)
        ok = found.is_file() and os.access(found, os.X_OK)
    else:
        ok = shutil.which(program, path=path) is not None
    if not ok:
        raise ManifestError(f"{source}: the adapter command {program!r} was not found "
                            + ("(not an executable file)" if os.sep in program
                               else "on PATH") + f"; the command line was {impl.describe()}")
    return impl


def load(path: Path) -> Impl:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ManifestError(f"cannot read the adapter manifest {path}: {exc}") from None
    except ValueError as exc:
        raise ManifestError(f"the adapter manifest {path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ManifestError(f"{path}: the manifest must be a JSON object")
    unknown = set(data) - {"command", "env", "cwd", "description"}
    if unknown:
        raise ManifestError(f"{path}: unknown member(s) {sorted(unknown)}; a manifest has "
                            "command, env, cwd (and an optional description)")
    command = data.get("command")
    if isinstance(command, str):
        command = shlex.split(command)
    if not isinstance(command, list) or not command \
            or not all(isinstance(a, str) and a for a in command):
        raise ManifestError(f"{path}: $.command must be a non-empty list of strings "
                            "(or one command string)")
    extra = data.get("env") or {}
    if not isinstance(extra, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in extra.items()):
        raise ManifestError(f"{path}: $.env must map names to string values")
    cwd = data.get("cwd")
    if cwd is not None:
        if not isinstance(cwd, str) or not cwd:
            raise ManifestError(f"{path}: $.cwd must be a folder path")
        folder = (path.parent / cwd).resolve()
        if not folder.is_dir():
            raise ManifestError(f"{path}: $.cwd {cwd!r} is not a folder ({folder})")
        cwd = str(folder)
    env = dict(os.environ, **extra) if extra else None
    return _runnable(Impl(command, env, cwd), str(path))
