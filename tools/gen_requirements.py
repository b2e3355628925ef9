#!/usr/bin/env python3
"""Build spec/requirements.json from the normative statements in spec/*.md, and lint the spec.

Format (documented in spec/index.md): a normative statement is a paragraph that starts with
`<a id="DHP-AREA-NNN"></a>**DHP-AREA-NNN**`. Sections whose heading ends in "(informative)",
blockquotes, code blocks, inline code and HTML comments are informative.

Usage:
  gen_requirements.py              lint the spec and write spec/requirements.json
  gen_requirements.py --check      lint and exit 1 if spec/requirements.json is out of date
  gen_requirements.py --uncovered  print requirements (any level) that no vector, test or
                                   conformance check cites
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC_DIR = ROOT / "spec"
OUTPUT = SPEC_DIR / "requirements.json"
PROTOCOL = "1.0"

ID_RE = re.compile(r"DHP-[A-Z]+-[0-9]{3}")
MARKER_RE = re.compile(r'^<a id="(?P<anchor>[^"]*)"></a>\*\*(?P<id>[^*]*)\*\*\s*(?P<text>.*)$',
                       re.S)
# Order matters: two-word keywords first so "MUST NOT" is not read as "MUST".
KEYWORD_RE = re.compile(r"\b(MUST NOT|SHALL NOT|SHOULD NOT|NOT RECOMMENDED|MUST|SHALL|"
                        r"SHOULD|RECOMMENDED|REQUIRED|MAY|OPTIONAL)\b")
LEVELS = {"MUST": "MUST", "REQUIRED": "MUST", "SHALL": "MUST",
          "MUST NOT": "MUST NOT", "SHALL NOT": "MUST NOT",
          "SHOULD": "SHOULD", "RECOMMENDED": "SHOULD",
          "SHOULD NOT": "SHOULD NOT", "NOT RECOMMENDED": "SHOULD NOT",
          "MAY": "MAY", "OPTIONAL": "MAY"}
FAMILY = {"MUST": "MUST", "MUST NOT": "MUST", "SHOULD": "SHOULD", "SHOULD NOT": "SHOULD",
          "MAY": "MAY"}
# Lowercase forms that read as requirements; forbidden in statements (RFC 8174 ambiguity).
LOWER_IN_STATEMENT = re.compile(r"\b(must|shall|should|may|required)\b")
# In other normative prose only the unmistakable ones: "may" is ordinary English there.
LOWER_IN_PROSE = re.compile(r"\b(must|shall|should)\b")
CODE_SPAN = re.compile(r"(`+).*?\1", re.S)
QUOTED_KEYWORD = re.compile(r'"(MUST NOT|SHALL NOT|SHOULD NOT|NOT RECOMMENDED|MUST|SHALL|'
                            r'SHOULD|RECOMMENDED|REQUIRED|MAY|OPTIONAL)"')
HEADING_RE = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LIST_ITEM_RE = re.compile(r"^\s{0,3}([-*+]|\d+[.)])\s")
FENCE_RE = re.compile(r"^\s*(```|~~~)")
# A retired statement (spec/index.md): `*Retired, replaced by [DHP-X-NNN](...):* ~~old~~`.
RETIRED_RE = re.compile(r"\*Retired, replaced by [^*]*\*")


@dataclass
class Block:
    """A paragraph, list item, table or note, with the line it starts on."""
    page: str
    line: int
    text: str
    informative: bool


@dataclass
class Result:
    requirements: list[dict] = field(default_factory=list)
    retired: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def split_blocks(page: str, source: str) -> list[Block]:
    """Cut a Markdown page into blocks, dropping code, comments and headings."""
    blocks: list[Block] = []
    current: list[str] = []
    start = 0
    informative_below: int | None = None  # heading level that opened an informative section
    in_fence = in_comment = False
    quote = False

    def flush() -> None:
        nonlocal current
        if current:
            blocks.append(Block(page, start, "\n".join(current),
                                informative_below is not None or quote))
        current = []

    for number, line in enumerate(source.splitlines(), 1):
        if in_fence:
            in_fence = not FENCE_RE.match(line)
            continue
        if in_comment:
            in_comment = "-->" not in line
            continue
        if FENCE_RE.match(line):
            flush()
            in_fence = True
            continue
        stripped = line.strip()
        if stripped.startswith("<!--"):
            flush()
            in_comment = "-->" not in stripped
            continue
        heading = HEADING_RE.match(line)
        if heading:
            flush()
            level = len(heading.group(1))
            if informative_below is not None and level <= informative_below:
                informative_below = None
            if informative_below is None and "(informative)" in heading.group(2).lower():
                informative_below = level
            continue
        if not stripped:
            flush()
            continue
        is_quote = stripped.startswith(">")
        if current and (LIST_ITEM_RE.match(line) or is_quote != quote):
            flush()
        if not current:
            start, quote = number, is_quote
        current.append(line)
    flush()
    return blocks


def plain(text: str) -> str:
    """Statement text for the index: links reduced to their text, bold dropped, one line."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.replace("**", "")
    return " ".join(text.split())


def lint_block(block: Block, problems: list[str]) -> dict | None:
    """Check one block; return its requirement entry if it is a normative statement."""
    where = f"spec/{block.page}:{block.line}"
    text = block.text.strip()
    visible = QUOTED_KEYWORD.sub("", CODE_SPAN.sub("", text))
    if block.informative:
        if '<a id="DHP-' in visible:
            problems.append(f"{where}: requirement marker inside an informative section or note")
        return None
    marker = MARKER_RE.match(text)
    if marker is None:
        if '<a id="DHP-' in visible or re.match(r"\*\*DHP-", visible):
            problems.append(f"{where}: requirement marker must open the paragraph as "
                            '<a id="DHP-X-NNN"></a>**DHP-X-NNN**')
        keyword = KEYWORD_RE.search(visible)
        if keyword:
            problems.append(f"{where}: BCP 14 keyword {keyword.group(1)!r} in a paragraph "
                            "without a requirement ID (add one, or mark the section informative)")
        lower = LOWER_IN_PROSE.search(visible)
        if lower:
            problems.append(f"{where}: lowercase {lower.group(1)!r} in normative prose; use a "
                            "BCP 14 keyword in a numbered statement or rephrase")
        return None
    rid, anchor, body = marker.group("id"), marker.group("anchor"), marker.group("text")
    if not ID_RE.fullmatch(rid):
        problems.append(f"{where}: malformed requirement ID {rid!r} (want DHP-AREA-NNN)")
        return None
    if anchor != rid:
        problems.append(f"{where}: anchor {anchor!r} does not match requirement ID {rid}")
    retired = RETIRED_RE.match(body)
    if retired:  # kept for its anchor, binding nobody: no keyword rules apply
        successors = list(dict.fromkeys(ID_RE.findall(retired.group(0))))
        return {"id": rid, "retired": True, "replaced_by": successors,
                "text": plain(body[retired.end():]).strip("~ "), "page": block.page,
                "anchor": rid}
    body_visible = QUOTED_KEYWORD.sub("", CODE_SPAN.sub("", body))
    keywords = [LEVELS[k] for k in KEYWORD_RE.findall(body_visible)]
    if not keywords:
        problems.append(f"{where}: {rid} has no BCP 14 keyword (MUST, SHOULD, MAY, ...)")
        return None
    families = {FAMILY[k] for k in keywords}
    if len(families) > 1:
        problems.append(f"{where}: {rid} mixes {', '.join(sorted(families))}; "
                        "split it into one statement per level")
    lower = LOWER_IN_STATEMENT.search(body_visible)
    if lower:
        problems.append(f"{where}: {rid} uses lowercase {lower.group(1)!r}; BCP 14 keywords "
                        "are written in capitals only")
    return {"id": rid, "level": keywords[0], "text": plain(body), "page": block.page,
            "anchor": rid}


def extract(pages: dict[str, str]) -> Result:
    """Lint every page and collect its requirements (sorted by ID)."""
    result = Result()
    seen: dict[str, str] = {}
    mentioned: list[tuple[str, str]] = []
    for page in sorted(pages):
        for block in split_blocks(page, pages[page]):
            entry = lint_block(block, result.problems)
            for rid in ID_RE.findall(block.text):
                mentioned.append((f"spec/{page}:{block.line}", rid))
            if entry is None:
                continue
            if entry["id"] in seen:
                result.problems.append(f"spec/{page}:{block.line}: duplicate requirement ID "
                                       f"{entry['id']} (first in {seen[entry['id']]})")
                continue
            seen[entry["id"]] = f"spec/{page}:{block.line}"
            if entry.pop("retired", False):
                result.retired.append(entry)
            else:
                result.requirements.append(entry)
    for where, rid in mentioned:
        if rid not in seen:
            result.problems.append(f"{where}: reference to undefined requirement {rid}")
    live = {r["id"] for r in result.requirements}
    for entry in result.retired:
        if not entry["replaced_by"] or not set(entry["replaced_by"]) <= live:
            result.problems.append(f"spec/{entry['page']}: retired {entry['id']} must name the "
                                   "statements that replace it")
    result.requirements.sort(key=lambda r: r["id"])
    result.retired.sort(key=lambda r: r["id"])
    return result


def read_pages(spec_dir: Path | None = None) -> dict[str, str]:
    spec_dir = SPEC_DIR if spec_dir is None else spec_dir
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(spec_dir.glob("*.md"))}


def render(requirements: list[dict], retired: list[dict] | None = None) -> str:
    """The exact bytes of requirements.json: stable key order, sorted entries, final LF."""
    doc = {"dhp": PROTOCOL, "requirements": requirements}
    if retired:
        doc["retired"] = retired
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def build(spec_dir: Path | None = None) -> Result:
    return extract(read_pages(spec_dir))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="fail if requirements.json is stale")
    mode.add_argument("--uncovered", action="store_true",
                      help="list requirements (any level) that nothing cites")
    args = parser.parse_args(argv)

    result = build()
    if result.problems:
        for problem in result.problems:
            print(problem, file=sys.stderr)
        print(f"{len(result.problems)} spec lint problem(s)", file=sys.stderr)
        return 1
    text = render(result.requirements, result.retired)
    shown = OUTPUT.relative_to(ROOT) if OUTPUT.is_relative_to(ROOT) else OUTPUT
    if args.uncovered:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import traceability

        missing = traceability.uncovered(result.requirements, traceability.citations(ROOT))
        for req in missing:
            print(f"{req['id']}\t{req['level']}\tspec/{req['page']}")
        print(f"{len(missing)} uncovered requirement(s)", file=sys.stderr)
        return 1 if missing else 0
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{shown} is out of date: run tools/gen_requirements.py", file=sys.stderr)
            return 1
        print(f"{shown} is up to date ({len(result.requirements)} requirements)")
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {shown} ({len(result.requirements)} requirements)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
