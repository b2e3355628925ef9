"""The benchmark figures of bench/README.md are generated from bench/results, and the ratios
in them are medians of per-pair ratios of interleaved windows (issue 17)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))

import _common  # noqa: E402
import gen_bench_tables  # noqa: E402
from run_all import BENCHMARKS  # noqa: E402


def test_readme_tables_are_what_the_saved_results_give():
    assert gen_bench_tables.main(["--check"]) == 0


def test_every_renderer_has_a_block_and_every_block_a_result_or_a_note():
    text = gen_bench_tables.README.read_text(encoding="utf-8")
    names = [m.group("name") for m in gen_bench_tables.BLOCK.finditer(text)]
    assert sorted(names) == sorted(gen_bench_tables.RENDER)
    for name in names:
        path = gen_bench_tables.RESULTS / f"{name}.json"
        if path.exists():
            rec = json.loads(path.read_text(encoding="utf-8"))
            # made by the command run_all runs for it (one script may make several)
            assert rec["name"] == name
            assert rec["command"].startswith("python bench/" + " ".join(BENCHMARKS[name]))
            assert "fsync_per_s" in rec["result"]["env"]


def test_a_hand_edit_between_the_markers_is_caught(tmp_path, monkeypatch):
    readme = tmp_path / "README.md"
    text = gen_bench_tables.README.read_text(encoding="utf-8")
    edited = text.replace("<!-- /bench: failover -->", "| made up | 1 |\n<!-- /bench: failover -->")
    readme.write_text(edited, encoding="utf-8")
    monkeypatch.setattr(gen_bench_tables, "README", readme)
    assert gen_bench_tables.main(["--check"]) == 1
    assert gen_bench_tables.main([]) == 0
    assert readme.read_text(encoding="utf-8") == text


def test_ratio_is_the_median_of_per_pair_ratios_not_a_ratio_of_totals():
    # One slow pair (a disk stall in both windows) dominates the totals, not the pairs.
    fast = [10.0, 10.0, 1000.0]
    slow = [5.0, 5.0, 1000.0]
    got = _common.paired(fast, slow)
    assert got == {"median": 2.0, "min": 1.0, "max": 2.0, "n": 3}
    assert sum(fast) / sum(slow) < 1.02


def test_sides_alternate_which_goes_first():
    seen = []
    _common.interleave(["a", "b"], 4, lambda side, w: seen.append(side))
    assert seen == ["a", "b", "b", "a", "a", "b", "b", "a"]


def test_fsync_probe_measures_the_scratch_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("DHP_BENCH_SESSION", str(tmp_path))  # the run's folder, not a new one
    got = _common.fsync_probe(seconds=0.2, limit=20)
    assert list(tmp_path.glob("fsync-probe-*/probe"))
    assert 0 < got["fsyncs"] <= 20 and got["per_s"] > 0 and got["median_ms"] > 0
