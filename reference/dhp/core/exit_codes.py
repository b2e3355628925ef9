"""The one exit-code table of the DHP runtime commands (`dhp`, `dhp-supervisor`,
`dhp-transport`, `dhp-mcp`, `dhp-a2a`), and the end of their --help that shows it.

It lives in core, not in the command line, so that every command (the agents' servers too)
maps a typed error to the same code without importing `dhp.cli`.
"""

from __future__ import annotations

from dhp.core.errors import DHPError, InvalidInput, StoreCorrupt, UnsupportedVersion

EXIT_MEANINGS = {
    0: "success",
    1: "refused or not found (unknown handoff, missing store, conflict, no result yet,\n"
       "     a log that fails verification)",
    2: "usage error or bad input (bad option, malformed id or store URL, invalid JSON\n"
       "     argument)",
    3: "store unavailable or failed: outcome unknown, safe to retry",
    4: "store corrupt (its file is damaged or not a DHP store, or a stored record is not\n"
       "     JSON): retrying cannot help; `dhp check` lists what is wrong; restore a backup,\n"
       "     or export what still verifies",
}


def exit_code(exc: DHPError) -> int:
    """The exit code of a command that failed with `exc`."""
    if isinstance(exc, StoreCorrupt):
        return 4
    if isinstance(exc, (InvalidInput, UnsupportedVersion)):
        return 2
    return 1 if exc.definite else 3


def epilog(examples: list[str], codes: dict[int, str] | None = None) -> str:
    """The end of every DHP command's --help: examples, then the exit codes, in one format.
    `codes` replaces the table (the demo's own); a server that only says what its 0 means
    passes `{**EXIT_MEANINGS, 0: ...}`."""
    codes = EXIT_MEANINGS if codes is None else codes
    return "\n".join(["examples:", *(f"  {e}" for e in examples), "", "exit codes:",
                      *(f"  {n}  {text}" for n, text in sorted(codes.items()))])
