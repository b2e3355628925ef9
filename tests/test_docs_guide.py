"""The user guide (docs/guide/) shows only programs that run: every example it includes from
docs/examples/ runs in a fresh folder and prints exactly the output the page shows next to
it. Also the docs hook's placeholders (exit-code table, --help text, includes) and the
benchmarks page, which are generated from the sources rather than copied."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "guide"
sys.path.insert(0, str(ROOT / "tools"))

import gen_docs  # noqa: E402

INCLUDE = re.compile(r"^<!-- dhp: include (\S+) -->", re.M)
PYTHON_BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```", re.M | re.S)


def included() -> dict[str, list[str]]:
    """Repository path of each included file -> the guide pages that include it."""
    out: dict[str, list[str]] = {}
    for page in sorted(GUIDE.glob("*.md")):
        for rel in INCLUDE.findall(page.read_text(encoding="utf-8")):
            out.setdefault(rel, []).append(page.name)
    return out


def programs() -> list[str]:
    return sorted(rel for rel in included() if rel.endswith((".py", ".sh")))


def test_the_guide_includes_examples():
    assert GUIDE.is_dir() and len(programs()) >= 8, programs()


@pytest.mark.parametrize("rel", programs())
def test_example_prints_what_the_page_shows(rel, tmp_path, request):
    program = ROOT / rel
    if "(needs: postgres)" in program.read_text(encoding="utf-8"):
        request.getfixturevalue("postgres_schemas")  # a server, or a visible skip
    expected = program.with_suffix(".out")
    assert expected.is_file(), f"{rel} has no expected output {expected.name}"
    shown = expected.relative_to(ROOT).as_posix()
    assert shown in included(), f"no guide page shows the output of {rel} ({shown})"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DHP_")}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    if program.suffix == ".py":
        cmd, stderr = [sys.executable, str(program)], subprocess.PIPE
    else:  # a shell session: its error messages are part of what the page shows
        cmd, stderr = ["bash", str(program)], subprocess.STDOUT
    run = subprocess.run(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=stderr, text=True,
                         env=env, timeout=300)
    assert run.returncode == 0, f"{rel} exited {run.returncode}:\n{run.stdout}\n{run.stderr}"
    assert run.stdout == expected.read_text(encoding="utf-8")


def test_complete_programs_live_in_examples():
    """A Python block with imports is a program: it belongs in docs/examples/, run above."""
    for page in sorted(GUIDE.glob("*.md")):
        for block in PYTHON_BLOCK.findall(page.read_text(encoding="utf-8")):
            imports = [line for line in block.splitlines()
                       if re.match(r"(import|from)\s+\w", line)]
            assert not imports, f"docs/guide/{page.name}: a program inline ({imports[0]!r}); " \
                "put it in docs/examples/ and include it"


def test_every_include_exists():
    for rel, pages in included().items():
        assert (ROOT / rel).is_file(), f"{pages} include {rel}, which does not exist"


def test_exit_code_table_comes_from_the_cli():
    from dhp.cli.commands import EXIT_CODES

    table = gen_docs.exit_codes_table()
    codes = re.findall(r"^\| (\d+) \|", table, re.M)
    assert codes == re.findall(r"^  (\d+)  ", EXIT_CODES, re.M) == ["0", "1", "2", "3", "4"]
    assert "no result yet, a log that fails verification)" in table  # continuation joined
    assert "safe to retry" in table
    custom = gen_docs.exit_codes_table("exit codes:\n  0  fine\n  7  odd,\n     very odd")
    assert custom.splitlines()[2:] == ["| 0 | fine |", "| 7 | odd, very odd |"]


def test_placeholders_are_filled_or_refused():
    page = "a\n<!-- dhp: include docs/examples/first_worker.out -->\nb\n<!-- dhp: exit-codes -->\n"
    filled = gen_docs.fill_placeholders(page, "x.md")
    assert '```text title="output"\ndispatched sha256:' in filled
    assert "| 3 |" in filled and "<!--" not in filled
    helped = gen_docs.fill_placeholders("<!-- dhp: help dhp dispatch -->", "x.md")
    assert helped.startswith("```text\n$ dhp dispatch --help\nusage: dhp dispatch")
    assert "--progress-timeout" in helped
    for bad, message in [("<!-- dhp: exit-code -->", "unknown placeholder"),
                         ("<!-- dhp: include docs/examples/nope.py -->", "no file"),
                         ("<!-- dhp: include ../../etc/passwd -->", "no file"),
                         ("<!-- dhp: help dhp nosuch -->", "failed")]:
        with pytest.raises(ValueError, match=message):
            gen_docs.fill_placeholders(bad, "x.md")


def test_benchmarks_page_is_bench_readme():
    readme = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    page = gen_docs.generated()["benchmarks.md"]
    assert page.startswith("# Benchmarks\n") and "bench/README.md" in page.splitlines()[2]
    body = readme.partition("\n")[2]
    assert page.endswith(body)


def test_site_header_shows_the_release_and_links_the_repository(monkeypatch):
    """Issue 12: the header had no version and no repository link."""
    from importlib import metadata
    from types import SimpleNamespace

    real = metadata.metadata("durable-handoff")

    class Meta(dict):
        def get_all(self, name):
            return ["Repository, https://example.org/dhp"] if name == "Project-URL" else None

    monkeypatch.setattr(metadata, "metadata", lambda name: Meta(Version=real["Version"]))
    config = SimpleNamespace(site_name="DHP", repo_url=None, nav=[])
    gen_docs.on_config(config)
    assert config.site_name == f"DHP {real['Version']}"
    assert config.repo_url == "https://example.org/dhp"
    gen_docs.on_config(config)  # idempotent (mkdocs serve rebuilds)
    assert config.site_name == f"DHP {real['Version']}"
    css = (ROOT / "docs" / "stylesheets" / "extra.css").read_text(encoding="utf-8")
    assert "white-space: pre-wrap" in css
    assert "stylesheets/extra.css" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
