#!/usr/bin/env python3
"""Make the Agent Skill `SKILL.md` from the agent guide (reference/dhp/agents/guide.md, which
the MCP server serves as dhp://guide), so the two never say different things.

The skill is the guide with the Agent Skills front matter (`name`, `description`) and one
paragraph on reaching the server. It is written twice: into the package
(reference/dhp/agents/SKILL.md, shipped in the wheel, installed by `dhp mcp-config --skill`)
and at skills/dhp/SKILL.md, where people browsing the repository look for skills.

    python tools/gen_skill.py           # write both
    python tools/gen_skill.py --check   # exit 1 if either is not what the guide gives
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "reference" / "dhp" / "agents" / "guide.md"
OUTPUTS = [ROOT / "reference" / "dhp" / "agents" / "SKILL.md", ROOT / "skills" / "dhp" / "SKILL.md"]

NAME = "dhp"
DESCRIPTION = (
    "Keep long agent work alive across crashes with DHP, the Durable Handoff Protocol, through "
    "the dhp MCP server's tools. Use when a task takes more than a few minutes, must be done "
    "exactly once, or should be resumable by another agent if you die: dispatch it, claim it, "
    "checkpoint progress, complete it with a schema-valid result, or recover a dead agent's "
    "handoff from its last checkpoint.")
REACH = (
    "The tools named below (`dispatch`, `claim_next`, `checkpoint`, `complete`, `recover`, "
    "...) are those of the `dhp` MCP server. If they are not available, register the server "
    "first: `pip install 'durable-handoff[mcp]'`, then `dhp mcp-config --client claude-code` "
    "(or `claude-desktop`, `cursor`, `vscode`) and restart the client.")


def render(guide: str) -> str:
    title, _, body = guide.partition("\n")
    if not title.startswith("# "):
        raise SystemExit(f"gen_skill: {GUIDE} must start with a '# ' title line")
    # A JSON string is a YAML double-quoted scalar: the colons in the text stay text.
    return (f"---\nname: {NAME}\ndescription: {json.dumps(DESCRIPTION)}\n---\n\n"
            f"<!-- Generated from reference/dhp/agents/guide.md by tools/gen_skill.py: edit "
            f"the guide, then run the tool. -->\n\n{title}\n\n{REACH}\n{body}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true",
                   help="exit 1 if a SKILL.md differs from what the guide gives")
    args = p.parse_args(argv)
    want = render(GUIDE.read_text(encoding="utf-8"))
    stale = [out for out in OUTPUTS
             if not out.exists() or out.read_text(encoding="utf-8") != want]
    if args.check:
        for out in stale:
            print(f"gen_skill: {os.path.relpath(out, ROOT)} is out of date: run "
                  "python tools/gen_skill.py", file=sys.stderr)
        return 1 if stale else 0
    for out in stale:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(want, encoding="utf-8")
        print(f"wrote {os.path.relpath(out, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
