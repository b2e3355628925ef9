"""The operating docs tell the truth about what is installed and how: the commands listed are
the ones pyproject installs, the `dhp` subcommands are the registered ones, install lines
work without a package index, no example uses a deprecated form, and every --help says
what --store takes and ends with examples and the exit codes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from dhp.cli import main as cli

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
WORDS = {5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
            *sorted((ROOT / "docs" / "examples").glob("*.py")),
            *sorted((ROOT / "docs" / "examples").glob("*.sh"))]


def _row(text: str, command: str) -> str:
    return re.search(rf"^\| `{re.escape(command)}[` ].*$", text, re.M).group(0)


def test_getting_started_lists_every_installed_command():
    text = (ROOT / "docs" / "guide" / "getting-started.md").read_text()
    assert f"It installs {WORDS[len(SCRIPTS)]} commands" in text
    for name in SCRIPTS:
        assert _row(text, name), name


@pytest.mark.parametrize("page", ["README.md", "docs/guide/getting-started.md"])
def test_the_dhp_row_names_every_subcommand(page):
    cli.build_parser()
    row = _row((ROOT / page).read_text(), "dhp")
    missing = [name for name in cli.COMMANDS if not re.search(rf"\b{name}\b", row)]
    assert not missing, f"{page}: the `dhp` row lacks {missing}"


def test_no_install_line_names_a_package_index_that_does_not_have_it():
    # `pip install 'durable-handoff[x]'` needs the package index; `... @ URL` does not.
    named = re.compile(r"pip install '?durable-handoff(\[[^\]]*\])?")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in _docs()
             for n, line in enumerate(p.read_text().splitlines(), 1)
             for m in named.finditer(line) if not line[m.end():].startswith(" @ ")]
    assert not found, found


def test_the_readme_says_the_demo_writes_a_csv_only_with_out():
    text = " ".join((ROOT / "README.md").read_text().split())
    for sentence in re.split(r"(?<=\.) ", text):
        if re.search(r"\bCSV\b", sentence):
            assert "--out" in sentence, sentence


def test_no_doc_uses_the_deprecated_supervisor_form():
    # `dhp-supervisor ROOT ID`: a first argument that is not an option
    def old_form(line: str) -> bool:
        for m in re.finditer(r"dhp-supervisor\b", line):
            rest = line[m.end():].lstrip("\"', ")
            if rest[:1].isalnum() or rest[:1] in ("$", ".", "/", "{", "<"):
                return True
        return False

    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in _docs()
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if old_form(line) and "deprecat" not in line]
    assert not found, found


def test_the_license_is_the_apache_license_2():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text) > 10000
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] \
        == "Apache-2.0"


def test_task_documents_its_required_output_schema():
    import dhp

    assert "`output_schema` (required)" in dhp.task.__doc__
    assert "`output_schema` is required" in (ROOT / "docs" / "guide" / "workers.md").read_text()


@pytest.mark.parametrize("argv", [["ls"], ["worker"], ["init"], ["supervisor"]])
def test_store_help_mentions_urls(argv, capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args([*argv, "--help"])
    assert "postgresql://" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("module", ["dhp.agents.mcp_cli", "dhp.agents.a2a_server",
                                    "dhp.cli.supervisor", "dhp.cli.transport"])
def test_server_help_has_examples_and_the_shared_exit_codes(module):
    pytest.importorskip("uvicorn", reason="the agent servers need their extras")
    run = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "examples:\n  " in run.stdout and "\nexit codes:\n  0  " in run.stdout
    for code in ("1  refused or not found", "3  store unavailable", "4  store corrupt"):
        assert code in run.stdout, (module, code)
    assert "postgresql://" in run.stdout
