"""Listing a big store: `dhp ls` and `dhp.list_handoffs` at --sizes handoffs (issue 12: 19 s
and 826 MiB at 100,000 before listing paged).

For each size, one store is filled with `dhp.dispatch_many` (batches of 1,000; its rate is
reported too, against single `dhp.dispatch` calls), then measured, each in a fresh process:
- `dhp ls` (the default page, newest first): wall time of the whole command and its peak RSS,
  next to `dhp --version` (interpreter start and imports, the part no store size changes);
- `dhp ls --all > /dev/null` (every handoff streamed): wall time and peak RSS, which must not
  grow with the store;
- the SDK: `list_handoffs(limit=50)` and the last page by cursor, median seconds in-process;
- the dashboard: its list (500, running work first, state by state: dhp.observe.listing) and
  one sample of its chart series (a count of the store and the journal: dhp.observe.series).

Prints one JSON line.
Usage: python bench/list_bench.py [--sizes 1000,100000] [--repeat 3] [--quick]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

import _common as C

BATCH = 1000


def fill(path: str, n: int) -> dict:
    import dhp

    store = dhp.Store(path)
    stamp = time.time()
    begin = time.perf_counter()
    for start in range(0, n, BATCH):
        dhp.dispatch_many(store, [{"task_kind": "bench.list", "inputs": {"i": i, "t": stamp},
                                   "output_schema": C.OUTPUT_SCHEMA}
                                  for i in range(start, min(n, start + BATCH))])
    many_s = time.perf_counter() - begin
    single = min(n, 500)
    begin = time.perf_counter()
    for i in range(single):
        dhp.dispatch(store, "bench.single", {"i": i, "t": stamp}, C.OUTPUT_SCHEMA)
    single_s = time.perf_counter() - begin
    store.close()
    return {"dispatch_many_per_s": round(n / many_s, 1),
            "dispatch_per_s": round(single / single_s, 1)}


def command(argv: list[str], repeat: int) -> dict:
    """Median wall seconds and the largest peak RSS of `dhp ARGV` in fresh processes."""
    walls, rss = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        begin = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "dhp.cli.main", *argv],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        walls.append(time.perf_counter() - begin)
        if proc.returncode != 0:
            raise RuntimeError(f"dhp {' '.join(argv)} failed: {proc.stderr}")
        # ru_maxrss of children is the largest child so far: measure in rising order only.
        rss.append(max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
    return {"wall_s": round(statistics.median(walls), 3), "peak_rss_mib": round(max(rss) / 1024, 1)}


def sdk(path: str, repeat: int) -> dict:
    import dhp

    store = dhp.Store(path)
    first, last = [], []
    for _ in range(repeat):
        begin = time.perf_counter()
        page = dhp.list_handoffs(store, limit=50)
        first.append(time.perf_counter() - begin)
        begin = time.perf_counter()
        dhp.list_handoffs(store, limit=50, after="51")  # the oldest page but one
        last.append(time.perf_counter() - begin)
    assert len(page) == 50 and page.cursor
    from dhp.observe import listing
    from dhp.observe.series import Series

    board, sample = [], []
    for _ in range(repeat):
        begin = time.perf_counter()
        assert len(listing.handoffs(store, None, None, "active", 500)) == 500
        board.append(time.perf_counter() - begin)
        begin = time.perf_counter()
        Series(store).sample()
        sample.append(time.perf_counter() - begin)
    store.close()
    return {"list_handoffs_first_page_s": round(statistics.median(first), 4),
            "list_handoffs_oldest_page_s": round(statistics.median(last), 4),
            "dashboard_list_s": round(statistics.median(board), 4),
            "dashboard_series_sample_s": round(statistics.median(sample), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,100000")
    ap.add_argument("--repeat", type=int, default=3)
    args = C.parse(ap, {"sizes": "200,1000", "repeat": 1})
    run = C.Run("list", args)
    out = {"dhp_version": command(["--version"], args.repeat), "sizes": {}}
    # Smallest first: RUSAGE_CHILDREN keeps the largest child's peak, so a later, smaller
    # reading could not be seen; with sizes rising each reading is that size's own or less.
    for n in sorted(int(s) for s in args.sizes.split(",")):
        path = C.scratch(f"list-{n}")
        C.log(f"list: filling {n} handoffs")
        row = fill(path, n)
        env_store = ["--store", path]
        C.log(f"list: dhp ls at {n}")
        row["dhp_ls"] = command([*env_store, "ls"], args.repeat)
        row["dhp_ls_all"] = command([*env_store, "ls", "--all"], 1)
        row.update(sdk(path, args.repeat))
        row["store_mib"] = round(sum(f.stat().st_size for f in os.scandir(path)
                                     if f.is_file()) / 2**20, 1)
        out["sizes"][str(n)] = row
    run.finish(out)


if __name__ == "__main__":
    sys.exit(main())
