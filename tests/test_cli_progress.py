"""Progress of long CLI work on stderr (dhp.cli.progress): a bar redrawn on a terminal, plain
lines in a log, nothing with -q; `dhp import` reports while it verifies a log."""

from __future__ import annotations

import io

import dhp
import pytest
from dhp.cli import progress
from dhp.cli.main import main


@pytest.fixture
def immediate(monkeypatch):
    """Every step reported (no initial delay, no spacing)."""
    monkeypatch.setattr(progress, "DELAY_S", 0)
    monkeypatch.setattr(progress, "EVERY_S", {True: 0, False: 0})


def read_all(p: progress.Progress, data: bytes) -> None:
    f = io.BytesIO(data)
    reading = p.reading(f, len(data), "verifying")
    while reading.readline():
        pass
    p.close()


def test_terminal_redraws_a_bar_then_clears_it(immediate):
    out = io.StringIO()
    read_all(progress.Progress("dhp import", stream=out, tty=True), b"a\n" * 4)
    text = out.getvalue()
    assert "\rdhp import [######..................] 25% verifying" in text
    assert "\rdhp import [########################] 100% verifying" in text
    assert text.endswith("\r" + " " * progress.LINE + "\r") and "\n" not in text


def test_a_log_gets_plain_lines(immediate):
    out = io.StringIO()
    read_all(progress.Progress("dhp import", stream=out, tty=False), b"a\n" * 2)
    lines = out.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == ["dhp import: verifying 50%",
                                                       "dhp import: verifying 100%"]


def test_quiet_and_short_work_print_nothing(immediate, monkeypatch):
    out = io.StringIO()
    read_all(progress.Progress("dhp import", stream=out, tty=True, quiet=True), b"a\n" * 4)
    monkeypatch.setattr(progress, "DELAY_S", 60)  # work shorter than the delay
    read_all(progress.Progress("dhp import", stream=out, tty=False), b"a\n" * 4)
    assert out.getvalue() == ""


def test_import_reports_progress_on_stderr_unless_quiet(immediate, tmp_path, capsys):
    source = dhp.Store(tmp_path / "source")
    hid = dhp.dispatch(source, "progress", {}, {"type": "object"})
    with dhp.claim(source, hid, "w", heartbeat_interval=0) as ctx:
        for n in range(3):
            ctx.checkpoint({"n": n})
        ctx.complete({})
    log = tmp_path / "h.jsonl"
    dhp.export_log(source, hid, log)
    assert main(["import", str(log), "--store", str(tmp_path / "a")]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == hid
    assert "dhp import: verifying 100% (" in err
    assert main(["import", "-q", str(log), "--store", str(tmp_path / "b")]) == 0
    out, err = capsys.readouterr()
    assert (out.strip(), err) == (hid, "")
    assert dhp.status(dhp.Store(tmp_path / "b"), hid)["state"] == "completed"
