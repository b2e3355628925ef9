"""Mutation score of the conformance kit and of the pytest suite, with cosmic-ray.

    python tools/mutation.py --sample 60 --jobs 2 --out bench/mutation   # a seeded sample
    python tools/mutation.py --all --out bench/mutation                 # every mutant (days)
    python tools/mutation.py --report bench/mutation                    # the summary again

`cosmic-ray init` enumerates every mutant of the modules below (its operators: comparison,
boolean, number, arithmetic, break/continue, exception and decorator mutations ...) over a
private copy of reference/dhp (OUT/work, not kept in git). Each sampled mutant is applied with
cosmic-ray's own `mutate_and_test` to a copy of that, and tested twice: by the kit alone
(`dhp-conform --quick`, limited to the suites that exercise the module, against
`python -m dhp.adapter` importing the copy) and by the pytest files that test the module
followed by the suite's own run of the whole kit (SUITE_KIT_RUN): a part of the whole suite,
so a lower bound of what it kills (`--recheck --whole-suite` runs all of it). A
mutant is killed when the command fails or times out; for the kit that includes a SHOULD-level
finding (`--strict`: the kit reported the deviation). `--recheck` runs the kit again on the
kit's survivors and the test files on theirs (after a check or a test was added). Results go
to OUT/results.jsonl (a rerun goes on where it stopped: finished mutants are not run again)
and the summary, one line of JSON, to OUT/summary.json. Mutants inside type annotations are
counted and left out (every module has `from __future__ import annotations`, so they are
equivalent).
Survivors are triaged by hand in OUT/triage.json, {"job_id": "KIND: why"} with KIND
`equivalent` (nothing observable changes: out of both denominators), `unspecified` (what
changes is not fixed by the spec: out of the kit's denominator), `beyond the kit` (only the
reference's own commands or a fault inside the implementation reach it: out of the kit's
denominator) or `missing check` /
`missing test` (then added: `--recheck` runs the kit, or the module's test files, again).
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import random
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

# module -> (kit suites that exercise it, pytest files that test it)
STORE = ("adapter vectors lifecycle fencing limits schedule reach",
         "tests/test_store.py tests/test_fencing_vectors.py tests/test_lifecycle_vectors.py "
         "tests/test_api.py tests/test_store_model.py tests/test_hardening.py "
         "tests/test_schedule.py tests/test_cli_edges.py tests/test_mutation_found.py "
         "tests/test_store_sync.py tests/test_journal.py")
CHAIN = ("adapter vectors lifecycle limits reach transport",  # the transport ingests records
         "tests/test_chain.py tests/test_identity.py tests/test_envelope.py tests/test_log.py "
         "tests/test_api.py tests/test_hardening.py tests/test_mutation_found.py")
TRANSPORT = ("transport reach",
             "tests/test_net.py tests/test_transport_file.py tests/test_ship_to.py "
             "tests/test_mutation_found.py")
MODULES = {
    "core/machine.py": STORE,
    "core/operations.py": STORE,
    "store/sqlite.py": STORE,
    "store/wal_sync.py": STORE,
    "core/chain.py": CHAIN,
    "core/canonical.py": CHAIN,
    "core/envelope.py": CHAIN,
    "supervisor.py": ("supervisor reach", "tests/test_supervisor.py "
                      "tests/test_supervisor_spec.py tests/test_mutation_found.py"),
    "transport/server.py": TRANSPORT,
    "transport/shipper.py": TRANSPORT,
    "transport/file.py": TRANSPORT,
}
# The test of the suite that runs every kit suite against the reference (the copy, here).
SUITE_KIT_RUN = "tests/test_conform.py::test_reference_passes_quick_run"
KIT_TIMEOUT, TEST_TIMEOUT = 600, 900


def init(out: Path) -> Path:
    """The cosmic-ray session over a pristine copy of reference/dhp (OUT/base)."""
    session = out / "work" / "session.sqlite"
    if session.exists():
        return session
    base = out / "work" / "base"
    shutil.copytree(ROOT / "reference" / "dhp", base / "dhp")
    paths = [str(base / "dhp" / m) for m in MODULES]
    config = out / "work" / "cosmic-ray.toml"
    config.write_text("[cosmic-ray]\n"
                      f"module-path = {json.dumps(paths)}\n"
                      f"timeout = {KIT_TIMEOUT}\n"
                      "excluded-modules = []\n"
                      'test-command = "false"\n'
                      "[cosmic-ray.distributor]\nname = \"local\"\n", encoding="utf-8")
    # the venv's own cosmic-ray, also when the venv is not on PATH
    tool = Path(PY).parent / "cosmic-ray"
    subprocess.run([str(tool) if tool.exists() else "cosmic-ray", "init", str(config),
                    str(session)], check=True)
    return session


def mutants(session: Path) -> list[dict]:
    from cosmic_ray.work_db import WorkDB, use_db
    with use_db(str(session), WorkDB.Mode.open) as db:
        items = list(db.work_items)
    out = []
    for item in items:
        (spec,) = item.mutations
        module = Path(spec.module_path).relative_to(session.parent / "base" / "dhp").as_posix()
        out.append({"job_id": item.job_id, "module": module, "operator": spec.operator_name,
                    "occurrence": spec.occurrence, "line": spec.start_pos[0],
                    "start": list(spec.start_pos), "end": list(spec.end_pos)})
    return out


def in_annotation(mutant: dict, base: Path) -> bool:
    """A mutant inside a type annotation: every module has `from __future__ import
    annotations`, so annotations are never evaluated and such a mutant is equivalent."""
    spans = _annotation_spans(base / "dhp" / mutant["module"])
    at = tuple(mutant["start"])
    return any(start <= at < end for start, end in spans)


@functools.cache
def _annotation_spans(path: Path) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    spans = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        notes = [getattr(node, "returns", None), getattr(node, "annotation", None)]
        for note in notes:
            if isinstance(note, ast.AST):
                spans.append(((note.lineno, note.col_offset),
                              (note.end_lineno, note.end_col_offset)))
    return spans


def sample(all_mutants: list[dict], n: int | None, seed: int) -> list[dict]:
    """A seeded uniform sample."""
    if n is None or n >= len(all_mutants):
        return all_mutants
    # in random order, so that a run stopped early is still a uniform sample
    return random.Random(seed).sample(all_mutants, n)


def run_one(mutant: dict, out: Path, seed: int, kit: bool = True,
            tests: str | None = "files") -> dict:
    """Apply one mutant to a private copy and run against it the kit and the tests (`tests`:
    "files", the module's test files; "suite", the whole pytest suite; None, none)."""
    from cosmic_ray.mutating import mutate_and_test
    from cosmic_ray.work_item import MutationSpec
    work = Path(tempfile.mkdtemp(prefix="dhp-mut-"))
    try:
        shutil.copytree(out / "work" / "base" / "dhp", work / "dhp")
        path = work / "dhp" / mutant["module"]
        spec = MutationSpec(module_path=path, operator_name=mutant["operator"],
                            occurrence=mutant["occurrence"], start_pos=(mutant["line"], 0),
                            end_pos=(mutant["line"], 1))
        suites, files = MODULES[mutant["module"]]
        env = f"env PYTHONPATH={work}"  # both commands, and the adapters, import the copy
        conform = (f"{env} {PY} -m dhp_conform --impl '{PY} -m dhp.adapter' --quick --strict "
                   f"--seed {seed} " + " ".join(f"--suite {s}" for s in suites.split())
                   + f" --history {work}/run")
        # The module's files, then the suite's own run of the whole kit against the copy
        # (last: with -x it runs only when the files pass).
        paths = str(ROOT / "tests") if tests == "suite" else \
            " ".join(str(ROOT / t) for t in (*files.split(), SUITE_KIT_RUN))
        pytest = f"{env} {PY} -m pytest -x -q -p no:cacheprovider --rootdir {ROOT} {paths}"
        result = dict(mutant)
        if kit:
            by_kit = mutate_and_test([spec], conform, KIT_TIMEOUT)
            result.update(diff=by_kit.diff, kit=_outcome(by_kit),
                          kit_output=_tail(by_kit.output))
        if tests:
            timeout = TEST_TIMEOUT * (4 if tests == "suite" else 1)
            result["tests"] = _outcome(mutate_and_test([spec], pytest, timeout))
            if tests == "suite":
                result["tests_scope"] = "whole suite"
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def recheck(out: Path, seed: int, jobs: int, whole_suite: bool,
            only: list[str] | None = None, tests_only: bool = False) -> None:
    """The kit again on its survivors and the module's test files on theirs (after a check or
    a test was added); with `whole_suite`, the whole pytest suite on the tests' survivors."""
    path = out / "results.jsonl"
    results = [json.loads(x) for x in path.read_text().splitlines() if x]

    def again(r: dict) -> dict:
        r.setdefault("first", {"kit": r["kit"], "tests": r["tests"]})  # before any addition
        fresh = run_one(r, out, seed, kit=r["kit"] == "survived" and not tests_only,
                        tests=None if r["tests"] != "survived" else
                        "suite" if whole_suite else "files")
        r.update({k: v for k, v in fresh.items()
                  if k in ("kit", "kit_output", "tests", "tests_scope")})
        print(f"{r['module']}:{r['line']} {r['operator']}: kit {r['kit']}, tests {r['tests']}",
              file=sys.stderr, flush=True)
        return r

    todo = [r for r in results if "survived" in ((r["tests"],) if tests_only
                                                 else (r["kit"], r["tests"]))
            and (not only or r["job_id"] in only)]
    with ThreadPoolExecutor(jobs) as pool:
        fresh = {r["job_id"]: r for r in pool.map(again, todo)}
    # read again: a sampling run may have appended results meanwhile
    now = [json.loads(x) for x in path.read_text().splitlines() if x]
    path.write_text("".join(json.dumps(fresh.get(r["job_id"], r)) + "\n" for r in now),
                    encoding="utf-8")


def _outcome(result) -> str:
    if result.worker_outcome.value == "no-test":
        return "no-mutation"
    if result.worker_outcome.value != "normal":
        return "error"
    return "killed" if result.is_killed else "survived"


def _tail(output: str | None) -> str:
    lines = [x for x in (output or "").splitlines()
             if x.startswith(("  FAIL", "  WARN", "  ADAPTER ERROR", "--strict"))]
    return "\n".join(lines[:6])


def summary(out: Path) -> dict:
    path = out / "results.jsonl"
    results = [json.loads(x) for x in path.read_text().splitlines() if x] \
        if path.exists() else []
    triage = json.loads((out / "triage.json").read_text()) if (out / "triage.json").exists() \
        else {}
    real = [r for r in results if r["kit"] in ("killed", "survived")
            and r["tests"] in ("killed", "survived")]

    def kind(r: dict) -> str:
        return triage.get(r["job_id"], "").split(":", 1)[0]

    # equivalent: nothing observable changes; unspecified: something changes that the spec
    # does not fix (a message's wording, a log line, a default timeout, flow control), so
    # the kit must not judge it, while the project's own tests may; beyond the kit: what
    # only the reference's own commands run (its supervisor command's signal handling) or
    # only a fault inside the implementation shows (a failed storage transaction), which
    # no adapter operation reaches and the kit may not cause, so only the tests can.
    for_tests = [r for r in real if kind(r) != "equivalent"]
    for_kit = [r for r in for_tests if kind(r) not in ("unspecified", "beyond the kit")]

    def score(rows: list[dict], key: str, first: bool = False) -> float:
        killed = sum((r.get("first", r) if first else r)[key] == "killed" for r in rows)
        return round(100 * killed / max(len(rows), 1), 1)

    per_module = {}
    for module in MODULES:
        mine = [r for r in for_tests if r["module"] == module]
        per_module[module] = {"mutants": len(mine),
                              "kit_killed": sum(r["kit"] == "killed" for r in mine),
                              "tests_killed": sum(r["tests"] == "killed" for r in mine)}
    census = json.loads((out / "census.json").read_text()) \
        if (out / "census.json").exists() else {}
    return {**census, "mutants_run": len(results),
            "equivalent": len(real) - len(for_tests),
            "unspecified": sum(kind(r) == "unspecified" for r in for_tests),
            "beyond_the_kit": sum(kind(r) == "beyond the kit" for r in for_tests),
            "kit_judged": len(for_kit), "kit_score": score(for_kit, "kit"),
            "tests_judged": len(for_tests), "tests_score": score(for_tests, "tests"),
            # the same before the checks and tests the survivors led to (--recheck)
            "kit_score_first": score(for_kit, "kit", first=True),
            "tests_score_first": score(for_tests, "tests", first=True),
            "tests_rechecked_by_whole_suite": sum(r.get("tests_scope") == "whole suite"
                                                  for r in for_tests),
            "kit_survivors": [r["job_id"] for r in for_kit if r["kit"] == "survived"],
            "tests_survivors": [r["job_id"] for r in for_tests if r["tests"] == "survived"],
            "untriaged": [r["job_id"] for r in real if "survived" in (r["kit"], r["tests"])
                          and r["job_id"] not in triage],
            "per_module": per_module}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "mutation")
    p.add_argument("--sample", type=int, default=60, help="how many mutants (seeded)")
    p.add_argument("--all", action="store_true", help="every mutant, not a sample")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--only", help="only mutants of this module (e.g. core/machine.py)")
    p.add_argument("--report", action="store_true", help="print the summary only")
    p.add_argument("--recheck", action="store_true",
                   help="run the kit again on every mutant it let survive")
    p.add_argument("--job", action="append", help="with --recheck: only this job id")
    p.add_argument("--tests-only", action="store_true",
                   help="with --recheck: only the tests, on the mutants they let survive")
    p.add_argument("--whole-suite", action="store_true",
                   help="with --recheck: run the whole pytest suite on the tests' survivors")
    args = p.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.recheck:
        recheck(out, args.seed, args.jobs, args.whole_suite, args.job, args.tests_only)
    elif not args.report:
        session = init(out)
        found = [m for m in mutants(session) if args.only in (None, m["module"])]
        every = [m for m in found if not in_annotation(m, out / "work" / "base")]
        chosen = sample(every, None if args.all else args.sample, args.seed)
        census = {"mutants": len(found), "in_annotations": len(found) - len(every)}
        (out / "census.json").write_text(json.dumps(census) + "\n", encoding="utf-8")
        done_path = out / "results.jsonl"
        done = {json.loads(x)["job_id"] for x in done_path.read_text().splitlines() if x} \
            if done_path.exists() else set()
        todo = [m for m in chosen if m["job_id"] not in done]
        print(f"{len(found)} mutants, {len(found) - len(every)} of them in type annotations "
              f"(equivalent), {len(chosen)} chosen, {len(todo)} to run", file=sys.stderr)

        def one(m: dict) -> None:
            r = run_one(m, out, args.seed)
            with done_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(r) + "\n")
            print(f"{m['module']}:{m['line']} {m['operator']}: kit {r['kit']}, "
                  f"tests {r['tests']}", file=sys.stderr, flush=True)

        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(one, todo))
    result = summary(out)
    (out / "summary.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, (list, dict))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
