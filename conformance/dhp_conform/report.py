"""Turn raw check results into the report: statuses by level, verdicts per class, the JSON
report (schemas/report.json), JUnit XML and the terminal summary."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from xml.etree import ElementTree as ET

from . import __version__
from .requirements import BEYOND_A_RUN, all_ids, conformance_class, level, member_of, selected

ORDER = {"FAIL": 0, "WARN": 1, "CONSEQUENCE": 2, "NOT_RUN": 3, "SKIP": 4, "PASS": 5}
JUDGED = ("FAIL", "WARN", "SKIP", "PASS")  # outcomes that judge a requirement


def finalize(raw: list[dict]) -> tuple[list[dict], list[dict]]:
    """Attach levels, turn a failed SHOULD into WARN, mark consequences, merge duplicates of
    (requirement, check) keeping the worst outcome (and its reason and evidence).

    Attribution: the first failed MUST of a check (in history order) is its finding. Every
    later failure of the same check follows from it (a step that could not go on, a count the
    same bug corrupted) and is reported as a CONSEQUENCE naming it, not as another failed
    requirement; a check that got back on track (base.take_over) starts afresh. A history
    checker's violations group the same way, by checker.

    Returns the results and the findings, most direct first: a check's failure of a
    requirement it was built for before a failure it found on the way (a history checker's,
    say), then in the order the checks are listed."""
    raw = [dict(r, level=level(r["requirement"])) for r in raw]
    for r in raw:
        if r["status"] == "FAIL" and r["level"] != "MUST":
            r["status"] = "WARN"  # a SHOULD or MAY not met: never a finding, never its cause
    first: dict[str, dict] = {}
    failures = [r for r in raw if r["status"] == "FAIL"]
    for r in sorted(failures, key=lambda r: (r.get("_at", 0), r.get("_rank", 0))):
        origin = r.get("_origin", r["check"])
        lead = first.setdefault(origin, r)
        if lead is not r and lead["requirement"] != r["requirement"]:
            r["consequence_of"] = f"{lead['requirement']} ({lead['check']})"
            r["status"] = "CONSEQUENCE"
            r["reason"] = f"consequence of {r['consequence_of']}: {r['reason']}"
    leads = sorted(first.values(), key=lambda r: (not r.get("_built", False),
                                                   r.get("_order", 0), r.get("_at", 0)))
    found = [{"requirement": r["requirement"], "check": r["check"], "reason": r["reason"]}
             for r in leads]
    merged: dict[tuple[str, str], dict] = {}
    for r in raw:
        r = {k: v for k, v in r.items() if not k.startswith("_")}
        key = (r["requirement"], r["check"])
        if key not in merged or ORDER[r["status"]] < ORDER[merged[key]["status"]]:
            merged[key] = r
    return sorted(merged.values(), key=lambda r: (r["requirement"], r["check"])), found


def verdicts(results: list[dict], classes: list[str], incomplete: bool,
             only: list[str] | None = None, findings: list[dict] | None = None,
             scope: set[str] | None = None) -> dict:
    """Per class: FAIL when a MUST failed; else INCOMPLETE when the run was incomplete, or
    judged nothing of the class, or a MUST of the class was judged by no check; else PASS.
    Every verdict lists the class's requirements no check judged, and those no run can judge.
    The class's requirements are those selected by `only` and, when the run was narrowed to
    some suites, in `scope` (what their checks are built for)."""
    judged = {r["requirement"] for r in results if r["status"] in JUDGED}
    out = {}
    for cls in classes:
        mine = [r for r in results
                if (r.get("class") or conformance_class(r["requirement"])) == cls]
        count = {s: sum(1 for r in mine if r["status"] == s) for s in ORDER}
        failed = _in_finding_order({r["requirement"] for r in mine if r["status"] == "FAIL"},
                                   findings or [])
        members = [rid for rid in all_ids() if member_of(rid) == cls
                   and selected(rid, only) and (scope is None or rid in scope)]
        beyond = [rid for rid in members if rid in BEYOND_A_RUN]
        unjudged = [rid for rid in members if rid not in judged and rid not in BEYOND_A_RUN]
        must_unjudged = [rid for rid in unjudged if level(rid) == "MUST"]
        verdict = "FAIL" if failed else ("INCOMPLETE" if incomplete or not mine or must_unjudged
                                         else "PASS")
        out[cls] = {"verdict": verdict, "passed": count["PASS"], "failed": count["FAIL"],
                    "warned": count["WARN"], "skipped": count["SKIP"],
                    "not_run": count["NOT_RUN"], "consequences": count["CONSEQUENCE"],
                    "failed_requirements": failed, "unjudged": unjudged,
                    "beyond_a_run": beyond}
    return out


def _in_finding_order(rids: set[str], findings: list[dict]) -> list[str]:
    place = {}
    for n, f in enumerate(findings):
        place.setdefault(f["requirement"], n)
    return sorted(rids, key=lambda rid: (place.get(rid, len(findings)), rid))


def exit_code(report: dict) -> int:
    """0 nothing failed and every MUST in the run's scope was judged, 1 a class FAIL, 3 a MUST
    of a claimed class judged by no check (2, adapter errors, is the caller's)."""
    verdicts = report["verdicts"].values()
    if any(v["verdict"] == "FAIL" for v in verdicts):
        return 1
    return 3 if any(level(rid) == "MUST" for v in verdicts for rid in v["unjudged"]) else 0


def build(results: list[dict], hello: dict | None, seed: int, started: str,
          incomplete: bool, notes: list[str] | None = None,
          only: list[str] | None = None, findings: list[dict] | None = None,
          scope: set[str] | None = None) -> dict:
    hello = hello or {}
    impl = hello.get("implementation") or {"name": "unknown", "version": "unknown",
                                           "language": "unknown"}
    classes = list(hello.get("classes") or [])
    return {"dhp": "1.0", "tool": {"name": "dhp-conform", "version": __version__},
            "implementation": {k: impl.get(k, "unknown") for k in ("name", "version",
                                                                    "language")},
            "seed": seed, "started": started, "finished": now(), "classes": classes,
            "findings": list(findings or []), "results": results,
            "verdicts": verdicts(results, classes, incomplete, only, findings, scope),
            "notes": list(notes or [])}


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def write_json(report: dict, path: Path) -> None:
    path.write_text(json.dumps(report, indent=2, default=repr) + "\n",
                    encoding="utf-8")


def write_junit(report: dict, path: Path) -> None:
    suite = ET.Element("testsuite", name="dhp-conform", tests=str(len(report["results"])))
    failures = skipped = 0
    for r in report["results"]:
        case = ET.SubElement(suite, "testcase", classname=r["requirement"], name=r["check"])
        text = r.get("reason", "")
        if r.get("evidence"):
            text += "\n" + "\n".join(map(str, r["evidence"]))
        if r["status"] == "FAIL":
            failures += 1
            ET.SubElement(case, "failure", message=r.get("reason", "")).text = text
        elif r["status"] in ("SKIP", "NOT_RUN", "CONSEQUENCE"):
            skipped += 1
            ET.SubElement(case, "skipped", message=r.get("reason", ""))
        elif r["status"] == "WARN":
            ET.SubElement(case, "system-out").text = "WARN: " + text
    suite.set("failures", str(failures))
    suite.set("skipped", str(skipped))
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)


def summary(report: dict, adapter_errors: list[str]) -> str:
    """The terminal summary: one line per requirement, details of every non-PASS."""
    lines = []
    impl = report["implementation"]
    lines.append(f"dhp-conform {report['tool']['version']}: {impl['name']} {impl['version']} "
                 f"({impl['language']}), seed {report['seed']}")
    if report.get("findings"):
        lines.append("findings (later failures of the same check are listed as their "
                     "consequences):")
        for n, f in enumerate(report["findings"], 1):
            lines.append(f"  {n}. {f['requirement']} ({f['check']}): {f['reason']}")
    by_req: dict[str, list[dict]] = {}
    for r in report["results"]:
        by_req.setdefault(r["requirement"], []).append(r)
    for rid, items in by_req.items():
        worst = min(items, key=lambda r: ORDER[r["status"]])
        checks = ", ".join(sorted({r["check"] for r in items}))
        lines.append(f"  {worst['status']:4} {rid} [{items[0]['level']}] {checks}")
        for r in items:
            if r["status"] != "PASS":
                lines.append(f"         {r['check']}: {r['reason']}")
                for ev in (r.get("evidence") or [])[:8]:
                    lines.append(f"           | {ev}")
    for note in report.get("notes", []):
        lines.append(f"  NOTE: {note}")
    for err in adapter_errors:
        lines.append(f"  ADAPTER ERROR: {err}")
    lines.append("verdicts:")
    for cls, v in report["verdicts"].items():
        extra = f" (failed: {', '.join(v['failed_requirements'])})" if v["failed"] else ""
        more = "".join(f", {v[k]} {k.replace('_', ' ')}" for k in ("consequences", "not_run")
                       if v.get(k))
        lines.append(f"  {cls}: {v['verdict']}  {v['passed']} passed, {v['failed']} failed, "
                     f"{v.get('warned', 0)} warned, {v.get('skipped', 0)} skipped{more}{extra}")
        if v.get("unjudged"):
            lines.append(f"    judged by no check: {_levels(v['unjudged'])}")
        if v.get("beyond_a_run"):
            lines.append(f"    beyond any run of the kit: {', '.join(v['beyond_a_run'])}")
    text = "\n".join(lines)  # evidence may hold lone surrogates: print them escaped
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _levels(rids: list[str]) -> str:
    """IDs with the MUSTs first and marked, so a reader sees what keeps a class from PASS."""
    musts = [rid for rid in rids if level(rid) == "MUST"]
    rest = [rid for rid in rids if rid not in musts]
    return ", ".join([f"{rid} (MUST)" for rid in musts] + rest)
