"""Turn raw check results into the report: statuses by level, verdicts per class, the JSON
report (schemas/report.json), JUnit XML and the terminal summary."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from xml.etree import ElementTree as ET

from . import __version__
from .requirements import conformance_class, level

ORDER = {"FAIL": 0, "WARN": 1, "SKIP": 2, "PASS": 3}


def finalize(raw: list[dict]) -> list[dict]:
    """Attach levels, turn a failed SHOULD into WARN, merge duplicates of (requirement, check)
    keeping the worst outcome (and its reason and evidence)."""
    merged: dict[tuple[str, str], dict] = {}
    for r in raw:
        r = dict(r, level=level(r["requirement"]))
        if r["status"] == "FAIL" and r["level"] != "MUST":
            r["status"] = "WARN"
        key = (r["requirement"], r["check"])
        if key not in merged or ORDER[r["status"]] < ORDER[merged[key]["status"]]:
            merged[key] = r
    return sorted(merged.values(), key=lambda r: (r["requirement"], r["check"]))


def verdicts(results: list[dict], classes: list[str], incomplete: bool) -> dict:
    out = {}
    for cls in classes:
        mine = [r for r in results
                if (r.get("class") or conformance_class(r["requirement"])) == cls]
        count = {s: sum(1 for r in mine if r["status"] == s) for s in ORDER}
        failed = sorted({r["requirement"] for r in mine if r["status"] == "FAIL"})
        verdict = "FAIL" if failed else ("INCOMPLETE" if incomplete or not mine else "PASS")
        out[cls] = {"verdict": verdict, "passed": count["PASS"], "failed": count["FAIL"],
                    "warned": count["WARN"], "skipped": count["SKIP"],
                    "failed_requirements": failed}
    return out


def build(results: list[dict], hello: dict | None, seed: int, started: str,
          incomplete: bool, notes: list[str] | None = None) -> dict:
    hello = hello or {}
    impl = hello.get("implementation") or {"name": "unknown", "version": "unknown",
                                           "language": "unknown"}
    classes = list(hello.get("classes") or [])
    return {"dhp": "1.0", "tool": {"name": "dhp-conform", "version": __version__},
            "implementation": {k: impl.get(k, "unknown") for k in ("name", "version",
                                                                    "language")},
            "seed": seed, "started": started, "finished": now(), "classes": classes,
            "results": results, "verdicts": verdicts(results, classes, incomplete),
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
        elif r["status"] == "SKIP":
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
        lines.append(f"  {cls}: {v['verdict']}  {v['passed']} passed, {v['failed']} failed, "
                     f"{v.get('warned', 0)} warned, {v.get('skipped', 0)} skipped{extra}")
    text = "\n".join(lines)  # evidence may hold lone surrogates: print them escaped
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
