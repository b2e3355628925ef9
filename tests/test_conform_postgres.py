"""The conformance kit, unchanged, against the reference on Postgres: `python -m dhp.adapter
--store URL` gives each of the kit's data folders its own schema in the test database (all
of them under the test session's prefix, dropped at the end).

The quick run is part of every test run; the full run on five seeds (several minutes each)
runs with DHP_SLOW=1."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import dhp
import pytest

pytestmark = pytest.mark.usefixtures("postgres_schemas")


def run_kit(tmp_path, postgres_schemas, *args: str, timeout: float) -> tuple[int, dict, str]:
    server = postgres_schemas.url_for(f"{postgres_schemas.prefix}_kit")
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "dhp_conform", "--impl",
         f"{sys.executable} -m dhp.adapter --store {server}", "--report", str(out),
         "--history", str(tmp_path / "run"), *args],
        capture_output=True, text=True, timeout=timeout)
    report = json.loads(out.read_text()) if out.exists() else {}
    return proc.returncode, report, proc.stdout + proc.stderr


def findings(report: dict) -> list[dict]:
    return [r for r in report["results"] if r["status"] in ("FAIL", "WARN")]


@pytest.mark.covers("DHP-FEN-003", "DHP-FEN-005", "DHP-CKP-009", "DHP-SRV-001", "DHP-SRV-004")
def test_quick_run_on_postgres(tmp_path, postgres_schemas):
    code, report, output = run_kit(tmp_path, postgres_schemas, "--quick", "--seed", "7",
                                   timeout=900)
    assert code == 0, output
    assert findings(report) == [], output
    assert {v["verdict"] for v in report["verdicts"].values()} == {"PASS"}, report["verdicts"]


@pytest.mark.skipif(os.environ.get("DHP_SLOW") != "1",
                    reason="five full conformance runs on Postgres take about half an hour; "
                           "set DHP_SLOW=1 to run them")
@pytest.mark.parametrize("seed", range(1, 6))
def test_full_run_on_postgres_has_zero_findings(tmp_path, postgres_schemas, seed):
    code, report, output = run_kit(tmp_path, postgres_schemas, "--seed", str(seed),
                                   timeout=1800)
    assert code == 0, output
    assert findings(report) == [], output
    assert {v["verdict"] for v in report["verdicts"].values()} == {"PASS"}, report["verdicts"]


def test_a_fresh_data_folder_gets_a_fresh_schema_on_the_server(tmp_path, postgres_schemas):
    """A reused --history folder maps to the same schema names: the kit clears the folder,
    and the adapter's first init of the new folder drops what the earlier run left there."""
    from dhp.adapter import Adapter

    server = postgres_schemas.url_for(f"{postgres_schemas.prefix}_reuse")
    data = tmp_path / "run" / "data" / "001-scenario"
    init = {"data": str(data), "ttl": 5.0}
    first = Adapter(server)
    first.cmd_init(init)
    first.cmd_dispatch({"task_kind": "k", "inputs": {}, "output_schema": {}, "budget": {}})
    second = Adapter(server)  # another process of the same scenario: the same store
    second.cmd_init(init)
    assert len(dhp.list_handoffs(second.store)) == 1
    for adapter in (first, second):
        adapter.store.close()
    shutil.rmtree(tmp_path / "run")  # what the kit does to a reused --history folder
    again = Adapter(server)
    again.cmd_init(init)
    assert dhp.list_handoffs(again.store) == []
    again.store.close()
