"""`dhp mcp-config`: register the `dhp-mcp` server with an MCP client (the logic is
dhp.agents.mcp_config; this is its argparse)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dhp.cli.commands import _common, default_store, epilog
from dhp.core.errors import DHPError

HELP = "register the dhp-mcp server with an MCP client (Claude Code, Claude Desktop, ...)"
EXAMPLES = ["dhp mcp-config --client claude-code --store ./dhp-data",
            "dhp mcp-config --client claude-desktop --store ~/dhp --dry-run",
            "dhp mcp-config --client vscode --print"]
CODES = {0: "registered, already registered, or printed", 1: "the config file cannot be "
         "read as JSON (nothing changed)", 2: "usage error"}


def configure(p: argparse.ArgumentParser) -> None:
    from dhp.agents.mcp_config import CLIENTS, SERVER_NAME

    _common(p, json_flag=False)  # --store: the store the server will serve
    p.add_argument("--client", required=True, choices=list(CLIENTS),
                   help="; ".join(f"{k}: {c.label}, {c.where}" for k, c in CLIENTS.items()))
    p.add_argument("--project", type=Path, default=Path.cwd(),
                   help="the project folder of a per-project config (default: this folder)")
    p.add_argument("--config", type=Path, default=None, metavar="FILE",
                   help="edit this file instead of the client's usual one")
    p.add_argument("--name", default=SERVER_NAME, help=f"the server's name (default {SERVER_NAME})")
    p.add_argument("--dry-run", action="store_true",
                   help="show the change as a diff; write nothing")
    p.add_argument("--print", action="store_true", dest="print_only",
                   help="print the entry to paste into the client's config; read no file")
    p.add_argument("--skill", action="store_true",
                   help="claude-code: also install the DHP agent skill as "
                        "PROJECT/.claude/skills/dhp/SKILL.md")
    p.add_argument("--no-compile", action="store_true",
                   help="do not compile the server's modules ahead of its first start")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dhp.agents import mcp_config as mc

    store = args.store or default_store()
    command = mc.server_command(store)
    if args.print_only:
        key = mc.CLIENTS[args.client].key
        print(json.dumps({key: {args.name: mc.entry(args.client, command)}}, indent=2))
        return 0
    if args.skill and args.client != "claude-code":
        parser.error("--skill goes with --client claude-code")
    try:
        path = args.config or mc.config_path(args.client, project=args.project.resolve(),
                                             home=Path.home())
        plans = [mc.plan(args.client, path, command, args.name)]
        if args.skill:
            plans.append(mc.skill_plan(args.project.resolve()))
    except (DHPError, OSError) as exc:
        print(f"dhp mcp-config: error: {exc}", file=sys.stderr)
        return 1
    for p in plans:
        if not p.changed:
            print(f"{p.path}: already holds {p.name}; nothing to change")
        elif args.dry_run:
            print(f"{p.path}: would write (dry run):\n{p.diff()}", end="")
        else:
            backup = mc.apply(p)
            print(f"{p.path}: wrote {p.name}"
                  + (f" (the old file is kept as {backup})" if backup else ""))
    if not args.dry_run and not args.no_compile:
        mc.warm_bytecode()
    if not args.dry_run and any(p.changed for p in plans):
        print(f"Restart {mc.CLIENTS[args.client].label} to load the server.")
    return 0


def register(command) -> None:
    command("mcp-config", HELP, configure, epilog(EXAMPLES, CODES))(run)
