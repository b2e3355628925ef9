"""Generated pages of the documentation site, used as a MkDocs hook (mkdocs.yml `hooks:`).

Nothing generated is written to docs/: at build time the hook adds, in memory,
- spec/*.md: the specification pages, each requirement ID made a link to its own anchor;
- requirements.md: every requirement with its level and the vectors, tests and checks citing it;
- schemas/index.md, schemas/<name>.md (pretty-printed) and schemas/<name>.json (the file itself);
- benchmarks.md: bench/README.md (commands, method, results) as a page;
- conformance/coverage.md: per requirement, the kit checks that judge it, and the gaps.
Hand-written pages may hold placeholders that the hook fills from the sources (see
`fill_placeholders`): example programs and their checked output, the `dhp` exit-code table
from `dhp.cli.commands.EXIT_CODES`, and the `--help` text of a command.
So `mkdocs build --strict` works from a clean clone and the site never drifts from the sources.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import gen_requirements  # noqa: E402
import traceability  # noqa: E402

SPEC_ORDER = ["index", "terminology", "identity", "envelope", "states", "leases-fencing",
              "checkpoints", "budgets", "results", "log", "errors", "supervisor", "server-stores",
              "security", "transport", "adapter", "a2a", "mcp"]
MARKER = re.compile(r'<a id="(DHP-[A-Z]+-[0-9]{3})"></a>\*\*\1\*\*')
SCHEMA_LINK = re.compile(r"\]\(\.\./schemas/([A-Za-z0-9_-]+)\.json\)")


def spec_pages(root: Path = ROOT) -> dict[str, str]:
    """`spec/<page>.md` -> site Markdown."""
    out = {}
    for path in sorted((root / "spec").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        text = MARKER.sub(r'<a id="\1"></a>[**\1**](#\1)', text)
        text = SCHEMA_LINK.sub(r"](../schemas/\1.md)", text)
        out[f"spec/{path.name}"] = text
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def requirements_page(requirements: list[dict], found: list[traceability.Citation]) -> str:
    cited = traceability.by_requirement(found)
    lines = [
        "# Requirements index",
        "",
        "Generated from the specification (`spec/requirements.json`, built by",
        "`tools/gen_requirements.py`) and from the sources that cite each requirement: the",
        "`requirements` lists of the test vectors, the `@pytest.mark.covers(...)` markers of the",
        "tests, and the conformance kit's checks.",
        "",
        f"{len(requirements)} requirements; every one outside the reserved areas, whatever its",
        "level, is cited at least once (the traceability test enforces it).",
        "",
        "| Requirement | Level | Statement | Cited by |",
        "|-------------|-------|-----------|----------|",
    ]
    for req in requirements:
        page = req["page"]
        link = f"[{req['id']}](spec/{page}#{req['anchor']})"
        by_kind: dict[str, list[str]] = {}
        for c in cited.get(req["id"], []):
            names = by_kind.setdefault(c.kind, [])
            if c.name not in names:
                names.append(c.name)
        parts = []
        for kind, label in (("vector", "vectors"), ("test", "tests"), ("check", "kit checks")):
            if by_kind.get(kind):
                parts.append(f"{label}: " + ", ".join(f"`{n}`" for n in by_kind[kind]))
        if not parts:
            parts = ["**not cited**" if traceability.checked(req) else "—"]
        lines.append(f"| {link} | {req['level']} | {_cell(req['text'])} | "
                     f"{_cell('<br>'.join(parts))} |")
    return "\n".join(lines) + "\n"


def schema_names(root: Path = ROOT) -> list[str]:
    return sorted(p.stem for p in (root / "schemas").glob("*.json"))


def schema_page(name: str, root: Path = ROOT) -> str:
    raw = (root / "schemas" / f"{name}.json").read_text(encoding="utf-8")
    schema = json.loads(raw)
    lines = [f"# {name}.json", ""]
    if schema.get("title"):
        lines += [f"**{schema['title']}**", ""]
    if schema.get("description"):
        lines += [schema["description"], ""]
    lines += [f"`$id`: `{schema.get('$id', '')}` · [raw file]({name}.json)", "",
              "```json", json.dumps(schema, indent=2, ensure_ascii=False), "```", ""]
    return "\n".join(lines)


def schemas_index(names: list[str], root: Path = ROOT) -> str:
    lines = ["# Schemas", "",
             "The JSON Schemas (draft 2020-12) of every DHP wire object, rendered from the files",
             "in `schemas/`, which are the single source of truth.", "",
             "| Schema | Title |", "|--------|-------|"]
    for name in names:
        title = json.loads((root / "schemas" / f"{name}.json").read_text(encoding="utf-8"))
        lines.append(f"| [{name}.json]({name}.md) | {_cell(title.get('title', ''))} |")
    return "\n".join(lines) + "\n"


def generated(root: Path = ROOT) -> dict[str, str]:
    """Every generated file of the site: path inside the docs -> content."""
    result = gen_requirements.build(root / "spec")
    if result.problems:
        raise ValueError("spec lint failed:\n" + "\n".join(result.problems))
    files = spec_pages(root)
    files["requirements.md"] = requirements_page(result.requirements,
                                                 traceability.citations(root))
    names = schema_names(root)
    files["schemas/index.md"] = schemas_index(names, root)
    for name in names:
        files[f"schemas/{name}.md"] = schema_page(name, root)
        files[f"schemas/{name}.json"] = (root / "schemas" / f"{name}.json").read_text(
            encoding="utf-8")
    files["benchmarks.md"] = benchmarks_page(root)
    files["conformance/coverage.md"] = kit_coverage_page(traceability.citations(root))
    return files


def kit_coverage_page(found: list[traceability.Citation]) -> str:
    """The kit's own count (`dhp-conform coverage`), beside what else cites each gap."""
    from dhp_conform import coverage

    rows = coverage.table()
    s = coverage.summary(rows)
    cited = traceability.by_requirement(found)
    lines = [
        "# Kit coverage",
        "",
        "Which checks of the conformance kit judge each requirement: the kit is what another",
        "implementation can run, so it is where requirement coverage is counted. A requirement",
        "that only the reference's own tests (or no executable check) cover is a **gap**: no",
        "third party gets it judged. Generated from the checks' declarations, the same data as",
        "`dhp-conform coverage`.",
        "",
        f"**{s['judged']} of {s['requirements']} requirements are judged by a kit check "
        f"({s['must_judged']} of {s['must']} MUST); {len(s['gaps'])} gaps.**",
        "",
        "| Requirement | Level | Class | Kit checks | Else cited by (gaps only) |",
        "|-------------|-------|-------|------------|---------------------------|",
    ]
    for r in rows:
        checks = ", ".join(f"`{c}`" for c in r["checks"]) or "**gap**"
        other = ""
        if not r["checks"]:
            kinds = sorted({c.kind for c in cited.get(r["id"], []) if c.kind != "check"})
            other = ", ".join(kinds) or "nothing"
        lines.append(f"| {r['id']} | {r['level']} | {r['class']} | {checks} | {other} |")
    return "\n".join(lines) + "\n"


def benchmarks_page(root: Path = ROOT) -> str:
    """bench/README.md as a site page, under a note saying where it comes from."""
    text = (root / "bench" / "README.md").read_text(encoding="utf-8")
    title, _, body = text.partition("\n")
    note = ("> Generated from `bench/README.md`, the benchmarks' own description and results; "
            "the scripts are in `bench/`.")
    return f"{title}\n\n{note}\n{body}"


# --- placeholders in hand-written pages --------------------------------------------------------

PLACEHOLDER = re.compile(r"^<!-- dhp: (?P<kind>[a-z-]+)(?: (?P<arg>[^>]*?))? -->[ \t]*$", re.M)
LANGUAGES = {".py": "python", ".sh": "sh", ".out": "text", ".json": "json", ".jsonl": "json"}


def include(rel: str, root: Path = ROOT) -> str:
    """A file of the repository as a fenced block titled with its path."""
    path = (root / rel).resolve()
    if root.resolve() not in path.parents or not path.is_file():
        raise ValueError(f"include: no file {rel} in the repository")
    title = "output" if path.suffix == ".out" else rel
    body = path.read_text(encoding="utf-8").rstrip("\n")
    return f'```{LANGUAGES.get(path.suffix, "text")} title="{title}"\n{body}\n```'


def markdown_file(rel: str, root: Path = ROOT) -> str:
    """A Markdown file of the repository, inlined as it is (e.g. the agent guide shipped in
    the package)."""
    path = (root / rel).resolve()
    if root.resolve() not in path.parents or path.suffix != ".md" or not path.is_file():
        raise ValueError(f"markdown: no Markdown file {rel} in the repository")
    return path.read_text(encoding="utf-8").rstrip("\n")


def exit_codes_table(text: str | None = None) -> str:
    """`dhp.cli.commands.EXIT_CODES` (the text every command's --help shows) as a table."""
    if text is None:
        from dhp.cli.commands import EXIT_CODES as text
    rows: list[list[str]] = []
    for line in text.split("exit codes:", 1)[-1].splitlines()[1:]:  # after the title
        code = re.match(r"^\s+(\d+)\s+(.*)$", line)
        if code and (not rows or len(line) - len(line.lstrip()) < 4):
            rows.append([code.group(1), code.group(2)])
        elif rows and line.strip():
            rows[-1][1] += " " + line.strip()
    if not rows:
        raise ValueError("exit-codes: found no codes in dhp.cli.commands.EXIT_CODES")
    return "\n".join(["| Exit code | Meaning |", "|-----------|---------|"]
                     + [f"| {c} | {_cell(m)} |" for c, m in rows])


def help_text(command: str) -> str:
    """The --help output of `dhp SUBCOMMAND`, `dhp-supervisor` or `dhp-mcp`, 96 columns wide."""
    if command in ("dhp-supervisor", "dhp-mcp"):
        if command == "dhp-mcp":
            from dhp.agents.mcp_cli import main
        else:
            from dhp.cli.supervisor import main
        argv = ["--help"]
    else:
        from dhp.cli.main import main
        argv = [*command.split()[1:], "--help"]
        if command.split()[0] != "dhp":
            raise ValueError(f"help: unknown program in {command!r}")
    out = io.StringIO()
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "96"
    try:
        with contextlib.redirect_stdout(out):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's own --help exits
                code = exc.code or 0
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    if code != 0 or not out.getvalue().startswith("usage:"):
        raise ValueError(f"help: `{command} --help` failed (exit {code})")
    return f"```text\n$ {command} --help\n{out.getvalue().rstrip()}\n```"


def fill_placeholders(markdown: str, where: str = "page", root: Path = ROOT) -> str:
    """Replace each `<!-- dhp: KIND ARG -->` line: `include PATH`, `markdown PATH`, `exit-codes`,
    `help PROGRAM [SUBCOMMAND]`. An unknown kind is an error, so a typo cannot pass."""
    def fill(m: re.Match) -> str:
        kind, arg = m.group("kind"), (m.group("arg") or "").strip()
        try:
            if kind == "include" and arg:
                return include(arg, root)
            if kind == "markdown" and arg:
                return markdown_file(arg, root)
            if kind == "exit-codes" and not arg:
                return exit_codes_table()
            if kind == "help" and arg:
                return help_text(arg)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        raise ValueError(f"{where}: unknown placeholder {m.group(0)!r}")
    return PLACEHOLDER.sub(fill, markdown)


# --- MkDocs hooks ----------------------------------------------------------------------------

def on_config(config):
    """Fill the nav's "Specification" and "Schemas" entries from the sources; put the
    release in the header and link the repository named in pyproject.toml."""
    from importlib.metadata import metadata

    meta = metadata("durable-handoff")
    if f" {meta['Version']}" not in config.site_name:
        config.site_name = f"{config.site_name} {meta['Version']}"
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    if urls.get("Repository") and not config.repo_url:
        config.repo_url = urls["Repository"]
    spec = [p.stem for p in (ROOT / "spec").glob("*.md")]
    ordered = [s for s in SPEC_ORDER if s in spec] + sorted(set(spec) - set(SPEC_ORDER))
    for entry in config.nav or []:
        if isinstance(entry, dict) and "Specification" in entry:
            entry["Specification"] = [f"spec/{s}.md" for s in ordered]
        if isinstance(entry, dict) and "Schemas" in entry:
            entry["Schemas"] = ["schemas/index.md"] + [
                {f"{n}.json": f"schemas/{n}.md"} for n in schema_names()]
    return config


def on_files(files, config):
    from mkdocs.structure.files import File

    for src_uri, content in generated().items():
        if files.get_file_from_path(src_uri) is not None:
            raise ValueError(f"docs/{src_uri} would hide a generated page; remove it")
        files.append(File.generated(config, src_uri, content=content))
    return files


def on_page_markdown(markdown, page, config, files):
    return fill_placeholders(markdown, f"docs/{page.file.src_uri}")
