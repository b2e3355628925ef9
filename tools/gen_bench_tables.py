"""Render the figures of bench/README.md from the saved runs in bench/results/*.json.

Every figure table of the README sits between `<!-- bench: NAME -->` and
`<!-- /bench: NAME -->` and is made here from bench/results/NAME.json (written by
`python bench/run_all.py`), with the run's provenance above it: date, command, CPUs, load
average at start and end, and the fsync rate of the disk measured in the same run. Nothing
between the markers is edited by hand.

    python tools/gen_bench_tables.py           # rewrite bench/README.md
    python tools/gen_bench_tables.py --check   # exit 1 if it is not what the results give
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "bench" / "README.md"
RESULTS = ROOT / "bench" / "results"
BLOCK = re.compile(r"(<!-- bench: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /bench: (?P=name) -->)",
                   re.S)
SIDE = {"ours": "ours", "orig": "original 1.3.0", "ours_pg": "ours, Postgres",
        "ours_fsync": "ours, `fsync_interval=0`", "sqlite_full": "bare SQLite, FULL",
        "sqlite_normal": "bare SQLite, NORMAL"}


# ------------------------------------------------------------------ formatting

def num(x, unit: str = "", digits: int = 3) -> str:
    """A figure with `digits` significant digits (thousands grouped), or a dash."""
    if x is None:
        return "–"
    x = float(x)
    if abs(x) >= 10 ** (digits - 1):
        text = f"{round(x):,}"
    else:
        text = f"{x:.{digits}g}" if x else "0"
        if "e" in text:
            text = f"{x:.{digits - 1}f}"
    return f"{text}{unit}"


def ratio(r: dict | None) -> str:
    """A per-pair ratio: median and its min-max spread."""
    if not r:
        return "–"
    return f"**{num(r['median'])}×** ({num(r['min'])}–{num(r['max'])}, n={r['n']})"


def spread(median, values: list | None, unit: str = "") -> str:
    """An absolute figure: the median over the windows with their min-max in brackets."""
    if not values or len(values) < 2:
        return num(median, unit)
    return f"{num(median, unit)} [{num(min(values))}–{num(max(values))}]"


def table(head: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def met(flag: bool | None) -> str:
    return "–" if flag is None else ("**met**" if flag else "**not met**")


def provenance(rec: dict) -> str:
    res, host = rec["result"], rec["host"]
    fsync = res.get("env", {}).get("fsync_per_s")  # the raw disk, probed in the same run
    disk = (f"disk fsync {num(fsync['start'])} /s at the start, {num(fsync['end'])} /s at "
            f"the end" if fsync else "no fsync probe")
    load = f"load average {host['loadavg_start'][0]:.1f} → {host['loadavg_end'][0]:.1f}"
    env = res.get("env", {})
    cpus = f"{host['cpus']} CPUs" + (f" ({host['cpu_model']})" if host.get("cpu_model") else "")
    soft = f"Python {env['python']}, SQLite {env['sqlite']}" if "python" in env else ""
    text = (f"_Run {rec['date'].replace('T', ' ')[:16]} UTC: `{rec['command']}`; {cpus}; "
            f"{soft}; {load}; {disk}._")
    if rec.get("quick"):
        text += ("\n_**Quick mode**: small sizes and few pairs, to check the script; these "
                 "figures are not to be quoted. Rerun without `--quick` on a quiet machine._")
    return text


# ------------------------------------------------------------------ one renderer each

def failover(r: dict) -> str:
    sides = [s for s in ("ours", "ours_pg", "orig") if s in r]
    lat = {s: r[s]["latency_s"] for s in sides}
    rows = [["median"] + [num(lat[s]["median"], " s") for s in sides],
            ["p95"] + [num(lat[s]["p95"], " s") for s in sides],
            ["min / max"] + [f"{num(lat[s]['min'])} / {num(lat[s]['max'], ' s')}"
                             for s in sides],
            ["lost checkpoints"] + [f"{r[s]['lost_checkpoints']} / {lat[s]['n']}"
                                    for s in sides],
            ["supervisor needed"] + ["yes" if r[s]["supervisor"] else "no" for s in sides]]
    if any(f"ratio_{s}_over_ours" in r for s in sides):
        rows.append(["this side / ours, per repetition"] +
                    ["1" if s == "ours" else ratio(r.get(f"ratio_{s}_over_ours"))
                     for s in sides])
    return (table([f"{r['reps']} repetitions each, taking turns"] + [SIDE[s] for s in sides],
                  rows) +
            f"\n\nTarget (ours: median < 0.5 s, p95 < 1 s): {met(r.get('target_met'))}.")


def checkpoint_rate(r: dict) -> str:
    sides = [s for s in SIDE if s in r]
    sizes = list(r[sides[0]]["per_s"])
    label = {"100": "100 B", "10240": "10 KB"}
    def cell(s: str, z: str) -> str:
        text = f"{spread(r[s]['per_s'][z], r[s].get('per_s_runs', {}).get(z))}; " \
               f"{num(r[s]['cpu_us'][z])} µs"
        written = r[s].get("bytes_written", {}).get(z)
        return text + (f"; {num(written / 1024, ' KiB')}" if written else "")

    rates = table(["state"] + [f"{SIDE[s]}: writes/s; CPU per write; bytes written per write"
                               for s in sides],
                  [[label.get(z, f"{z} B")] + [cell(s, z) for s in sides] for z in sizes])
    pairs = [(k, t) for k, t in (
        ("ratio_ours_over_orig", "ours / original"),
        ("ratio_cpu_ours_over_orig", "CPU per write: ours / original"),
        ("ratio_bytes_written_ours_over_orig", "bytes written per write: ours / original"),
        ("ratio_ours_fsync_over_orig", "`fsync_interval=0` / original"),
        ("ratio_ours_over_sqlite_normal", "ours / bare NORMAL (no fsync)"),
        ("ratio_ours_over_sqlite_full", "ours / bare FULL (fsync each)"),
        ("ratio_ours_fsync_over_sqlite_full", "`fsync_interval=0` / bare FULL")) if k in r]
    ratios = table(["per-window ratio"] + [label.get(z, z) for z in sizes],
                   [[t] + [ratio(r[k].get(z)) for z in sizes] for k, t in pairs])
    out = [rates, ratios]
    hist = [(s, r[s]["history"]) for s in sides if "history" in r[s]]
    if hist:
        out.append(table(
            ["after " + num(r["history"]) + " checkpoints", "state", "rate at 0 /s",
             "rate at history /s", "history / 0, per round"],
            [[SIDE[s], label.get(z, z), num(h["at_0"][z]), num(h["at_history"][z]),
              ratio(h["history_over_0"][z])] for s, h in hist for z in h["at_0"]]))
    targets = r.get("targets_met", {})
    words = {"ours_10x_orig": "ours ≥ 10× the original",
             "ours_fsync_2x_orig": "`fsync_interval=0` ≥ 2× the original",
             "history_within_20pct": "within 20% after the history",
             "bytes_written_at_most_orig": "bytes written per checkpoint at most the original's"}
    out.append("Targets, judged on the medians: " + "; ".join(
        f"{words.get(k, k)}: {met(v)}" for k, v in targets.items()) + ".")
    return "\n\n".join(out)


def supervisor_pass(r: dict) -> str:
    sides = [s for s in ("ours", "orig") if s in r]
    rows = []
    for i, row in enumerate(r[sides[0]]["sizes"]):
        n = row["running"]
        cells = [num(n)]
        for s in sides:
            got = r[s]["sizes"][i]
            cells += [spread(got["pass_10_expired_ms"], got.get("pass_10_expired_ms_runs"), " ms"),
                      num(got["pass_0_expired_ms"], " ms")]
        cells.append(ratio(r.get("ratio_orig_over_ours_10_expired", {}).get(str(n))))
        rows.append(cells)
    rows.append([f"growth {num(r[sides[0]]['sizes'][0]['running'])} → "
                 f"{num(r[sides[0]]['sizes'][-1]['running'])}"] +
                [c for s in sides for c in
                 (f"{num(r[s]['growth_10_expired_largest_over_smallest'])}×", "")] + [""])
    head = ["running"] + [f"{SIDE[s]}, {k} expired" for s in sides for k in (10, 0)]
    return table(head + ["original / ours, 10 expired, per round"], rows)


def sdk_ops(r: dict) -> str:
    ratios = r.get("ratio", {})
    rows = [["dispatch /s", "dispatch_per_s", "dispatch"],
            ["CPU µs per dispatch", "dispatch_cpu_us", "dispatch_cpu"],
            ["claim + complete /s", "claim_complete_per_s", "claim_complete"],
            ["CPU µs per claim + complete", "claim_complete_cpu_us", "claim_complete_cpu"],
            [f"worker peak RSS, {num(r['rss_checkpoints_10kb'])} × 10 KB checkpoints",
             "peak_rss_mib", None],
            ["worker RSS after import + store open", "rss_after_open_mib", None]]
    sides = [s for s in ("ours", "orig", "sqlite_full") if s in r]
    body = [[label] + [spread(r[s].get(key), r[s].get(f"{key}_windows"),
                              " MiB" if "rss" in key else "") for s in sides] +
            [ratio(ratios.get(f"{rk}_ours_over_orig")) if rk else "",
             ratio(ratios.get(f"{rk}_ours_over_sqlite_full")) if rk else ""]
            for label, key, rk in rows]
    head = [f"{r['pairs']} windows of {r['window']} each, taking turns"] + \
        [SIDE[s] for s in sides] + ["ours / original, per window",
                                    "ours / bare FULL, per window"]

    def below(key: str) -> bool | None:
        got = ratios.get(key)
        return None if not got else got["median"] <= 1

    dispatch = ratios.get("dispatch_ours_over_orig")
    return (table(head, body) + "\n\nBare SQLite, FULL: one fsynced commit per dispatch, two "
            "per claim + complete, in the same windows (the disk's ceiling for each). Targets "
            "(issue 17), judged on the medians: CPU per dispatch at or below the original's: "
            f"{met(below('dispatch_cpu_ours_over_orig'))}; CPU per claim + complete at or "
            f"below: {met(below('claim_complete_cpu_ours_over_orig'))}; dispatch rate at "
            f"least the original's: {met(None if not dispatch else dispatch['median'] >= 1)}.")


def dispatch(r: dict) -> str:
    out = []
    for size in sorted((k for k in r if k.isdigit()), key=int):
        row = r[size]
        sides = [s for s in ("ours", "orig") if s in row]
        ratios = row.get("orig_over_ours", {})
        out.append(table(
            [f"{num(int(size))} handoffs in the store"] + [SIDE[s] for s in sides] +
            ["original / ours, per window"],
            [["CPU per dispatch"] + [spread(row[s]["cpu_ms_per_dispatch"],
                                            row[s].get("cpu_ms_windows"), " ms")
                                     for s in sides] +
             [ratio(ratios.get("cpu"))],
             ["wall, median (fsync included)"] + [num(row[s]["wall_ms"]["median"], " ms")
                                                  for s in sides] +
             [ratio(ratios.get("wall_median"))],
             ["wall, p95"] + [num(row[s]["wall_ms"]["p95"], " ms") for s in sides] + [""]]))
    return "\n\n".join(out)


def listing(r: dict) -> str:
    sizes = sorted(r["sizes"], key=int)
    v = r["dhp_version"]

    def cmd(x: dict) -> str:
        return f"{num(x['wall_s'], ' s')}, {num(x['peak_rss_mib'], ' MiB')}"

    rows = [["`dhp --version` (no store)"] + [cmd(v)] * len(sizes),
            ["`dhp ls` (default page of 50), median"] + [cmd(r["sizes"][s]["dhp_ls"])
                                                         for s in sizes],
            ["`dhp ls --all > /dev/null`"] + [cmd(r["sizes"][s]["dhp_ls_all"]) for s in sizes],
            ["`list_handoffs(limit=50)`, in-process, median"] +
            [num(r["sizes"][s]["list_handoffs_first_page_s"], " s") for s in sizes],
            ["`list_handoffs(limit=50, after=...)`, an old page"] +
            [num(r["sizes"][s]["list_handoffs_oldest_page_s"], " s") for s in sizes],
            ["filled with `dispatch_many` / single `dispatch`, per s"] +
            [f"{num(r['sizes'][s]['dispatch_many_per_s'])} / {num(r['sizes'][s]['dispatch_per_s'])}"
             for s in sizes]]
    return table(["handoffs in the store"] + [num(int(s)) for s in sizes], rows)


def transport(r: dict) -> str:
    rates, ratios = r["rates"], r.get("ratio_ours_over_orig", {})
    rows = []
    for case in rates.get("ours", rates.get("orig", {})):
        orig = rates.get("orig", {}).get(case)
        if orig is not None or "orig" not in rates:
            orig_text = spread(orig, r.get("runs", {}).get("orig", {}).get(case), " /s")
        else:  # a TLS case: the original ran plain in the same turns (it has no TLS)
            plain = statistics.median(r["runs"]["orig"][case])
            orig_text = f"(no TLS; plain in the same turns: {num(plain, ' /s')})"
        ours = rates.get("ours", {}).get(case)
        rows.append([case.replace("_", " "),
                     spread(ours, r.get("runs", {}).get("ours", {}).get(case), " /s"),
                     orig_text, ratio(ratios.get(case))])
    return (table([f"{num(r['count_per_shipper'])} checkpoints of {r['state_bytes']} B per "
                   "shipper", "ours", "original 1.3.0", "ours / original, per turn"], rows) +
            "\n\nTarget (5× in the same run): " +
            met(all(v["median"] >= 5 for v in ratios.values()) if ratios else None) + ".")


def preauth_attack(r: dict) -> str:
    return table(["attackers", "server RSS idle", "server RSS peak", "shipper acks/s alone",
                  "under attack", "attack connections cut"],
                 [[r["attackers"], num(r["server_rss_idle_mib"], " MiB"),
                   num(r["server_rss_peak_mib"], " MiB"), num(r["shipper_acks_per_s_baseline"]),
                   num(r["shipper_acks_per_s_attack"]), num(r["attack_connections_cut"])]])


def worker_pool(r: dict) -> str:
    def lat(x: dict) -> str:
        return (f"median {num(x['median'], ' s')}, p95 {num(x['p95'], ' s')}, "
                f"max {num(x['max'], ' s')} (n={x['n']})")

    reads = r["idle_reads_per_minute"]
    return table(["measure", "result"], [
        ["store reads per minute of one `claim_next(wait=...)` on an idle store",
         num(reads["idle"])],
        ["the same, beside a live heartbeated handoff of its kinds", num(reads["other_busy"])],
        ["a dispatch in another process to the waiter holding it", lat(r["wake_latency_s"])],
        ["`dhp worker -c 2`: kill -9 of the busy worker to its sibling's first checkpoint",
         lat(r["pool_failover_s"])],
        ["checkpoints written twice across the kills", r["rework_checkpoints"]],
        ["supervisor needed", "yes" if r["supervisor"] else "no"]])


def worker_concurrency(r: dict) -> str:
    base = {x["store"]: x["units_per_s"] for x in r["rows"]
            if x["units"] == 1 and x["kind"] == "bench.unit"}
    rows = [[STORE_NAME[x["store"]], x["units"],
             "async" if x["kind"].endswith("_async") else "sync",
             num(x["units_per_s"]), f"{num(x['units_per_s'] / base[x['store']])}×",
             num(x["cpu_ms_per_unit"], " ms"), x["lost_or_failed"]] for x in r["rows"]]
    return table(["store", "U (units at once)", "task", "units/s", "vs U = 1",
                  "worker CPU per unit", "lost or failed"], rows) + (
        f"\n\n{r['n']} units per run, each {r['io_ms_per_unit']} ms of sleep, a checkpoint "
        "and a completion; one worker process.")


STORE_NAME = {"sqlite": "SQLite", "postgres": "Postgres"}


def pickup_latency(r: dict) -> str:
    target = r["target_ms"]
    return table(["store", "p50", "p99", "max", f"target (p50 ≤ {num(target['p50'])} ms, "
                  f"p99 ≤ {num(target['p99'])} ms)"],
                 [[name, num(r[key]["p50_ms"], " ms"), num(r[key]["p99_ms"], " ms"),
                   num(r[key]["max_ms"], " ms"), "met" if r[key]["targets_met"] else "missed"]
                  for key, name in (("sqlite", "SQLite (FIFO doorbell)"),
                                    ("postgres", "Postgres (LISTEN/NOTIFY)"))])


def tracing_overhead(r: dict) -> str:
    cpu = r["cpu_us_per_checkpoint"]
    names = {"bare": "bare: OpenTelemetry not installed",
             "api": "api: installed, no SDK configured",
             "sdk": "sdk: spans (batch processor) and metrics really made"}
    return table(["setup", "CPU µs per checkpoint (median of rounds)",
                  "ratio to bare, per round"],
                 [[names[m], num(cpu[m]), ratio(r.get(f"{m}_over_bare")) if m != "bare" else "1"]
                  for m in ("bare", "api", "sdk")])


def startup(r: dict) -> str:
    return table(["command", "median", "p90"],
                 [[f"`{c}`" if c != "python" else "`python -c pass`", num(v["median"], " ms"),
                   num(v["p90"], " ms")] for c, v in r["ms"].items()])


def mcp(r: dict) -> str:
    rows = [[f"{op}: p50 / p99", f"{num(r['stdio'][op]['p50_ms'])} / "
             f"{num(r['stdio'][op]['p99_ms'], ' ms')}",
             f"{num(r['in_process_sdk'][op]['p50_ms'])} / "
             f"{num(r['in_process_sdk'][op]['p99_ms'], ' ms')}",
             num(r["overhead_p50_ms"][op], " ms")] for op in ("checkpoint", "claim_next")]
    rec = r["recovery_after_agent_kill_s"]
    if "median" in rec:  # a run before the transports and stores were measured apart
        rec = {"stdio_sqlite": rec}
    labels = {"stdio": "stdio", "http_stream": "HTTP, event stream open",
              "http_no_stream": "HTTP, no stream (agent timeout 8 s)"}
    order = [f"{t}_{s}" for t in labels for s in ("sqlite", "postgres")]
    recovery_rows = [[f"{labels[key.rsplit('_', 1)[0]]} on {key.rsplit('_', 1)[1]}",
                      f"**{num(v['median'], ' s')}** / {num(v['p95'], ' s')} / "
                      f"{num(v['min'], ' s')} / {num(v['max'], ' s')} ({v['n']} reps)"]
                     for key, v in sorted(rec.items(), key=lambda kv: order.index(kv[0]))]
    return (table([f"{num(r['calls'])} calls each", "over stdio", "SDK in-process",
                   "stdio overhead (p50)"], rows) + "\n\n" +
            table(["recovery: kill -9 of the agent → standby's `recover` succeeds",
                   "median / p95 / min / max"], recovery_rows))


def throughput(r: dict) -> str:
    sides = [s for s in ("ours", "ours_pg") if s in r]
    pairs = next((v for k, v in r.items() if k.startswith("ratio_")), {})
    rows = []
    for i, row in enumerate(r[sides[0]]):
        cells = [row["workers"]]
        for s in sides:
            x = r[s][i]
            errors = sum(x["errors"].values())
            cells += [spread(x["handoffs_per_s"], x.get("handoffs_per_s_runs")),
                      f"{num(x['claim_ms_p50'])} / {num(x['claim_ms_p99'], ' ms')}",
                      f"{errors}, {x['expired_leases']}"]
        if len(sides) > 1:
            cells.append(ratio(pairs.get(str(row["workers"]))))
        rows.append(cells)
    head = ["W"] + [f"{SIDE[s]}: {c}" for s in sides for c in
                    ("handoffs/s", "claim p50 / p99", "errors, expired leases")]
    if len(sides) > 1:
        head.append("Postgres / SQLite handoffs/s, per turn")
    return table(head, rows) + (f"\n\n{r['rounds']} runs per side and W, "
                                f"{r['per_worker']} handoffs per worker; rates and latencies "
                                "are medians of the runs, errors and expired leases their sums.")


def group_commit(r: dict) -> str:
    ratios = r.get("ratio_on_over_off", {})
    rows = []
    for on, off in zip(r["on"], r["off"], strict=True):
        rows.append([on["workers"]] + [
            c for x in (on, off) for c in (
                spread(x["checkpoints_per_s"], x.get("checkpoints_per_s_runs")),
                spread(x["fsyncs_per_checkpoint"], x.get("fsyncs_per_checkpoint_runs")))] +
            [ratio(ratios.get(str(on["workers"])))])
    unsynced = sum(x["unsynced"] for mode in ("on", "off") for x in r[mode])
    return (table(["W", "on: checkpoints/s", "on: fsyncs per checkpoint",
                   "off: checkpoints/s", "off: fsyncs per checkpoint",
                   "on / off checkpoints/s, per window"], rows) +
            f"\n\n{r['windows']} windows per mode and W, {num(r['per_window'])} checkpoints of "
            f"{r['state_bytes']} B per writer per window, `fsync_interval=0`; rates are "
            "medians of the windows. Checkpoints acknowledged without an fsync of their own or "
            f"a shared one: {unsynced} (must be 0)." +
            (f" Each fsync is a simulated slow device's: the real fdatasync, then "
             f"{num(r['flush_ms'])} ms more, one flush at a time across the writers "
             "(`--flush-ms`)." if r.get("flush_ms") else ""))


def claim_latency(r: dict) -> str:
    sides = [s for s in ("ours", "ours_pg") if s in r]
    rows = [[SIDE[s], num(r[s]["empty"]["p50_ms"], " ms"), num(r[s]["full"]["p50_ms"], " ms"),
             f"{num(r[s]['empty']['p99_ms'])} / {num(r[s]['full']['p99_ms'], ' ms')}",
             ratio(r[s]["ratio_p50_full_over_empty"])] for s in sides]
    full = f"{num(r['completed'])} completed + {num(r['pending'])} pending"
    return table(["", "claim p50, empty", f"claim p50, full ({full})", "p99 empty / full",
                  "full / empty p50, per window"], rows)


def fleet_pg(r: dict) -> str:
    def side(x: dict) -> str:
        return f"{num(x['median'])} [{num(x['min'])}–{num(x['max'])}]"

    rows = []
    targets = {"units": 1.5, "steps": 3.0}
    for label, fig, per, target in (
            *((f"{num(r['units'])} small units, {p} worker process{'es' if p != '1' else ''}",
               f, "unit", targets["units"]) for p, f in r["procs"].items()),
            (f"one unit of {num(r['steps'])} steps of 100 B", r["one_unit"], "step",
             targets["steps"])):
        rate = f"{per}s_per_s"
        cpu = f"server_cpu_ms_per_{per}"
        rows.append([label, f"{side(fig['dhp_' + rate])} {per}s/s",
                     f"{side(fig['dbos_' + rate])} {per}s/s", ratio(fig["rate_x_dbos"]),
                     met(fig["rate_x_dbos"]["median"] >= target),
                     f"{num(fig['dhp_' + cpu]['median'])} / {num(fig['dbos_' + cpu]['median'])}",
                     ratio(fig["server_cpu_x_dbos"]),
                     met(fig["server_cpu_x_dbos"]["median"] <= 1)])
    work = [[f"{p} process{'es' if p != '1' else ''}", *(
        f"{w[s]['commits']} commits, {w[s]['rows_read']} rows read, "
        f"{w[s]['rows_written']} rows written" for s in ("dhp", "dbos"))]
        for p, f in r["procs"].items() if (w := f.get("work_per_unit"))]
    text = table(["run", "DHP", "DBOS", "DHP / DBOS, per window", "target (≥ 1.5× units, "
                  "≥ 3× steps)", "server CPU ms per unit, DHP / DBOS", "CPU ratio, per window",
                  "CPU ≤ DBOS"], rows)
    if work:
        text += "\n\nServer work per unit (pg_stat_database, median of the windows):\n\n" + \
            table(["", "DHP", "DBOS"], work)
    return text


def _cost_cell(row: dict, key: str) -> str:
    """One side's figure in the write cost table: CPU with its spread, or WAL bytes."""
    if key == "cpu":
        return spread(row.get("cpu_us"), row.get("cpu_us_windows"), " µs")
    return num(row.get(key))


def write_cost(r: dict) -> str:
    sides = [s for s in ("ours", "orig") if s in r]
    targets = r.get("targets", {})
    rows = [("CPU per dispatch", "dispatch", "cpu", "dispatch"),
            ("CPU per claim + complete", "claim_complete", "cpu", "claim_complete"),
            (f"CPU per checkpoint ({num(r['size'])} B)", "checkpoint", "cpu", "checkpoint"),
            ("WAL bytes per checkpoint", "checkpoint", "wal_bytes", "wal_bytes")]
    places = {"disk": "stores on disk (the kernel's share of each fsync counted)",
              "tmpfs": "stores on tmpfs (no fsync cost: the implementation's own CPU)"}
    out = []
    for place, title in places.items():
        got = r.get(place)
        if not got or "skipped" in got:
            continue
        body = [[label] + [_cost_cell(got.get(op, {}).get(s, {}), key) for s in sides] +
                [ratio(got.get(op, {}).get(f"{key}_ours_over_orig")),
                 f"≤ {num(targets.get(target))}×: {met(got['targets_met'].get(target))}"]
                for label, op, key, target in rows]
        body.append(["SQL statements (ours): dispatch / claim + complete / checkpoint"] +
                    [" / ".join(num(got.get(op, {}).get(s, {}).get("statements"))
                                for op in ("dispatch", "claim_complete", "checkpoint"))
                     if s == "ours" else "–" for s in sides] + ["", ""])
        out.append(table([f"{r['pairs']} windows of {num(r['count'])} each, taking turns; "
                          f"{title}"] + [SIDE[s] for s in sides] +
                         ["ours / original, per window", "target (issue 17)"], body))
    return "\n\n".join(out)


def validate(r: dict) -> str:
    return table(["lines", "seconds", "lines/s", "CPU s", "peak RSS"],
                 [[num(r["lines"]), num(r["seconds"]), num(r["lines_per_s"]),
                   num(r["cpu_seconds"]), num(r["peak_rss_mib"], " MiB")]])


def server_load(r: dict) -> str:
    def row(what: str, use: dict, call: str | None) -> list:
        timed = use.get(call) if call else None
        return [what, num(use.get("n", 0)), num(use["rss_mb"], " MB"), num(use["fds"]),
                num(use["threads"]),
                f"{num(timed['median_ms'], ' ms')} (max {num(timed['max_ms'], ' ms')})"
                if timed else ""]
    rows = [row("dhp-mcp idle", r["mcp"]["idle_server"], None),
            row("dhp-mcp, idle MCP sessions", r["mcp"]["sessions"], "health"),
            row("dhp-mcp, open event streams", r["mcp"]["streams"], "health")]
    if "streams" in r.get("a2a", {}):
        rows += [row("dhp-a2a idle", r["a2a"]["idle_server"], None),
                 row("dhp-a2a, open task streams", r["a2a"]["streams"], "get_task")]
    return table(["server", "clients", "resident memory", "descriptors", "threads",
                  "one more call: median"], rows)


def container(r: dict) -> str:
    size, build, start = r["size_mb"], r["build_s"], r["start"]
    rows = [["image `localhost/dhp` (every command, all extras)", num(size["dhp"], " MB")],
            ["of which the Debian base `localhost/dhp-base:bookworm`", num(size["base"], " MB")],
            ["image `localhost/dhp-postgres:15`", num(size["postgres"], " MB")],
            ["build from nothing (debootstrap, every download): `tools/container_image.sh`",
             num(build.get("cold"), " s")],
            ["rebuild, nothing changed (every layer reused; the wheel builds reproducibly)",
             num(build["warm"], " s")]]
    labels = {"ready_s": "`podman-compose up -d` → both worker pools started",
              "first_result_s": "`podman-compose up -d` → a first handoff completed",
              "down_s": "`podman-compose down` (workers drained)"}
    rows += [[labels[k], f"{num(v['median'], ' s')} (max {num(v['max'], ' s')}, "
              f"{r['runs']} runs)"] for k, v in sorted(start.items(), key=lambda kv:
                                                      list(labels).index(kv[0]))]
    return table(["container image and stack", "measured"], rows)


def store_failover(r: dict) -> str:
    rows = [["primary killed → standby promoted", spread(r["promoted_s"]["median"],
             [f["promoted_s"] for f in r["failovers"]], " s")],
            ["primary killed → first checkpoint on the new primary",
             spread(r["first_write_s"]["median"], [f["first_write_s"] for f in r["failovers"]],
                    " s")],
            ["calls answered `unavailable` in between (median)",
             num(statistics.median(f["unavailable_calls"] for f in r["failovers"]))],
            ["acknowledged checkpoints lost", f"{r['lost_checkpoints']} (of {r['reps']} "
             "failovers)"]]
    text = table([f"{r['reps']} failovers, a fresh pair each", "median [min–max]"], rows)
    if r["rates"]:
        text += "\n\n" + table(
            ["round trip to the standby", "workers", "checkpoints/s", "median latency",
             "p95 latency"],
            [[num(x["rtt_ms"], " ms"), x["workers"], num(x["per_s"]),
              num(x["median_ms"], " ms"), num(x["p95_ms"], " ms")] for x in r["rates"]])
    return text


RENDER: dict[str, Callable[[dict], str]] = {
    "failover": failover, "checkpoint_rate": checkpoint_rate,
    "supervisor_pass": supervisor_pass, "sdk_ops": sdk_ops, "dispatch": dispatch,
    "list": listing, "transport": transport, "preauth_attack": preauth_attack,
    "worker_pool": worker_pool, "pickup_latency": pickup_latency,
    "tracing_overhead": tracing_overhead, "startup": startup,
    "worker_concurrency": worker_concurrency,
    "mcp": mcp, "server_load": server_load, "throughput": throughput,
    "claim_latency": claim_latency, "validate": validate,
    "write_cost": write_cost, "group_commit": group_commit,
    "group_commit_slow": group_commit, "fleet_pg": fleet_pg, "container": container,
    "store_failover": store_failover}


# ------------------------------------------------------------------ the README

def block(name: str) -> str:
    if name not in RENDER:
        raise SystemExit(f"bench/README.md: no renderer for the block {name!r}")
    path = RESULTS / f"{name}.json"
    if not path.exists():
        return (f"_Not measured yet: `python bench/run_all.py --only {name}` writes "
                f"bench/results/{name}.json._\n")
    rec = json.loads(path.read_text(encoding="utf-8"))
    return f"{provenance(rec)}\n\n{RENDER[name](rec['result'])}\n"


def generated(text: str) -> str:
    return BLOCK.sub(lambda m: f"{m.group(1)}{block(m.group('name'))}{m.group(4)}", text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if bench/README.md differs from what the results give")
    args = ap.parse_args(argv)
    text = README.read_text(encoding="utf-8")
    names = [m.group("name") for m in BLOCK.finditer(text)]
    missing = sorted(set(RENDER) - set(names))
    if missing:
        print(f"bench/README.md has no block for: {', '.join(missing)}", file=sys.stderr)
        return 1
    want = generated(text)
    if args.check:
        if want != text:
            print("bench/README.md is not what bench/results gives: run "
                  "python tools/gen_bench_tables.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(want, encoding="utf-8")
    print(f"bench/README.md: {len(names)} tables from bench/results")
    return 0


if __name__ == "__main__":
    sys.exit(main())
