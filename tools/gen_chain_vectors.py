"""Generate vectors/checkpoint-chain.json, vectors/log.json and the log files in vectors/log/.

Hashes are computed here independently of the reference (`rfc8785` + `hashlib`, never `dhp`),
so the vectors check the reference rather than echo it. Each chain test carries the intent
its handoff_id is the hash of, so a reader can write the log header the chain belongs under.
Output is deterministic; keep test ids stable (never renumber or reuse one).

    python tools/gen_chain_vectors.py          # rewrite the files
    python tools/gen_chain_vectors.py --check  # exit 1 if a file is out of date
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from pathlib import Path

import rfc8785

ROOT = Path(__file__).resolve().parent.parent
VECTORS = ROOT / "vectors"


def digest(obj) -> str:
    return "sha256:" + hashlib.sha256(rfc8785.dumps(obj)).hexdigest()


def seal(record: dict) -> dict:
    """Set `hash` over the record without it."""
    body = {k: v for k, v in record.items() if k != "hash"}
    return dict(body, hash=digest(body))


def intent(task: str = "vector-chain", output_schema: dict | None = None) -> dict:
    return {"dhp": "1.0", "task_kind": task, "inputs": {"doc": "report.pdf", "pages": 12},
            "output_schema": output_schema or {"type": "object", "required": ["summary"],
                                               "properties": {"summary": {"type": "string"}}},
            "budget": {"max_attempts": 3, "max_steps": 100}}


INTENT = intent()
HID = digest(INTENT)
OTHER_HID = digest(intent("another-task"))
ENVELOPE = {"dhp": "1.0", "handoff_id": HID, "intent": INTENT}


def chain(states, fences=None, spends=None, hid=HID) -> list[dict]:
    """A valid chain with one record per state."""
    out, prev = [], hid
    for i, state in enumerate(states):
        rec = seal({"handoff_id": hid, "seq": i + 1, "fence": (fences or [1] * len(states))[i],
                    "state": state, "spend": (spends or [0] * len(states))[i], "prev": prev})
        out.append(rec)
        prev = rec["hash"]
    return out


def rechain(records: list[dict], start: int = 0) -> list[dict]:
    """Re-link prev/hash from index `start` on, as a forger who knows the scheme would."""
    out = [dict(r) for r in records]
    for i in range(start, len(out)):
        if i > 0:
            out[i]["prev"] = out[i - 1]["hash"]
        out[i] = seal(out[i])
    return out


STATES = [{"step": i, "done": [f"page-{j}" for j in range(i)]} for i in range(1, 6)]
BASE = chain(STATES)

# --- checkpoint-chain suite ------------------------------------------------------------------

CKP_CASES: list[tuple[str, list[str], dict, dict]] = []


def ckp(description: str, requirements: list[str], records: list[dict], expected: dict) -> None:
    # Every chain test belongs to the one handoff INTENT; carrying the intent lets a reader
    # write the log header {"dhp", "handoff_id", "intent"} the records go under.
    CKP_CASES.append((description, requirements,
                      {"handoff_id": HID, "intent": copy.deepcopy(INTENT),
                       "records": copy.deepcopy(records)}, expected))


def ok() -> dict:
    return {"valid": True}


def bad(at: int, code: str = "integrity_error") -> dict:
    return {"error": code, "at": at}


def build_ckp() -> None:
    ckp("A chain of one record whose prev is the handoff id is valid.",
        ["DHP-CKP-001", "DHP-CKP-003", "DHP-CKP-005"], BASE[:1], ok())
    ckp("A chain of two records linked by prev is valid.",
        ["DHP-CKP-002", "DHP-CKP-004", "DHP-CKP-005"], BASE[:2], ok())
    ckp("A chain of five records is valid.", ["DHP-CKP-002", "DHP-CKP-004"], BASE, ok())
    ckp("An empty chain (no checkpoint yet) is valid.", ["DHP-CKP-002"], [], ok())
    ckp("Fences rising across two recoveries (1, 1, 2, 3, 3) are valid.",
        ["DHP-CKP-006"], chain(STATES, fences=[1, 1, 2, 3, 3]), ok())
    ckp("Fractional and exponent spends are hashed with ECMAScript number formatting.",
        ["DHP-CKP-005", "DHP-CJ-005"],
        chain([{"a": 1}, {"a": 2}, {"a": 3}], spends=[0.1, 1e-7, 2.5e21]), ok())
    ckp("States with non-ASCII, astral-plane keys, escapes and nesting hash canonically.",
        ["DHP-CKP-005", "DHP-CJ-001", "DHP-CJ-002"],
        chain([{"\U0001F600": "smile", "\u00e9": "e-acute", "z": [None, True, False]},
               "tab\there \"quoted\" \\ back\u0001", [[[]], {}, {"\ue000": 1, "\U00010000": 2}],
               None]), ok())
    ckp("Dropping the last record leaves a valid shorter chain (truncation at the tail is "
        "only visible against the store's acknowledged count).", ["DHP-CKP-008"],
        BASE[:4], ok())

    changed = copy.deepcopy(BASE)
    changed[2]["state"]["step"] = 99
    ckp("A changed state in the middle record breaks its hash.",
        ["DHP-CKP-005", "DHP-CKP-008"], changed, bad(2))
    changed = copy.deepcopy(BASE)
    changed[0]["state"] = {"step": 1, "done": ["forged"]}
    ckp("A changed state in the first record breaks its hash.",
        ["DHP-CKP-005", "DHP-CKP-008"], changed, bad(0))
    changed = copy.deepcopy(BASE)
    changed[1]["spend"] = 5
    ckp("A changed spend breaks the record's hash.", ["DHP-CKP-005", "DHP-CKP-008"],
        changed, bad(1))
    changed = copy.deepcopy(BASE)
    changed[3]["fence"] = 2
    ckp("A changed fence without a new hash breaks the record's hash.",
        ["DHP-CKP-005"], changed, bad(3))
    ckp("A dropped middle record is detected at the record after the gap.",
        ["DHP-CKP-002", "DHP-CKP-004", "DHP-CKP-008"], BASE[:2] + BASE[3:], bad(2))
    ckp("A dropped first record is detected at the new first record.",
        ["DHP-CKP-002", "DHP-CKP-003", "DHP-CKP-008"], BASE[1:], bad(0))
    ckp("Two swapped records are detected at the first one out of place.",
        ["DHP-CKP-002", "DHP-CKP-004", "DHP-CKP-008"],
        [BASE[0], BASE[2], BASE[1], BASE[3], BASE[4]], bad(1))
    ckp("A reversed chain is detected at its first record.", ["DHP-CKP-008"],
        list(reversed(BASE)), bad(0))
    wrong = BASE[:3] + [seal({**BASE[3], "prev": BASE[1]["hash"]})]
    wrong.append(seal({**BASE[4], "prev": wrong[3]["hash"]}))
    ckp("A prev naming an earlier record (resealed) breaks the chain.",
        ["DHP-CKP-004"], wrong, bad(3))
    wrong = copy.deepcopy(BASE)
    wrong[0]["prev"] = OTHER_HID
    ckp("A first record whose prev is another handoff's id (resealed) is refused.",
        ["DHP-CKP-003"], [seal(wrong[0])], bad(0))
    wrong = copy.deepcopy(BASE)
    wrong[0]["prev"] = "sha256:" + "0" * 64
    ckp("A first record whose prev is all zeros instead of the handoff id is refused.",
        ["DHP-CKP-003"], rechain(wrong), bad(0))
    ckp("A fence lower than the record before it (resealed) is refused.",
        ["DHP-CKP-006"], chain(STATES, fences=[2, 2, 1, 2, 2]), bad(2))
    ckp("A first record of another handoff is refused.", ["DHP-CKP-007"],
        chain(STATES[:2], hid=OTHER_HID), bad(0))
    foreign = copy.deepcopy(BASE)
    foreign[2]["handoff_id"] = OTHER_HID
    ckp("A record of another handoff spliced in (resealed, prev kept) is refused.",
        ["DHP-CKP-007"], rechain(foreign, 2), bad(2))
    ckp("The same record twice (duplicate seq) is refused at the copy.",
        ["DHP-CKP-002", "DHP-CKP-008"], BASE[:3] + [BASE[2]] + BASE[3:], bad(3))
    dup = copy.deepcopy(BASE[:3])
    dup.append(seal({**BASE[2], "state": {"step": 3, "other": True}, "prev": BASE[2]["hash"]}))
    ckp("A second record with seq 3 chained to the first seq 3 is refused.",
        ["DHP-CKP-002", "DHP-CKP-008"], dup, bad(3))
    gap = copy.deepcopy(BASE[:3])
    gap.append(seal({**BASE[3], "seq": 5, "prev": BASE[2]["hash"]}))
    ckp("A seq gap (1, 2, 3, 5) with correct prev links is refused.",
        ["DHP-CKP-002"], gap, bad(3))
    zero = copy.deepcopy(BASE[:2])
    zero[0]["seq"] = 0
    zero[1]["seq"] = 1
    ckp("A chain starting at seq 0 is malformed (seq is at least 1).",
        ["DHP-CKP-001", "DHP-CKP-002"], rechain(zero), bad(0, "invalid_input"))
    two = copy.deepcopy(BASE[:2])
    two[0]["seq"] = 2
    ckp("A chain starting at seq 2 is refused.", ["DHP-CKP-002"], rechain(two)[:1], bad(0))
    wrong = copy.deepcopy(BASE)
    wrong[1]["hash"] = "sha256:" + "ab" * 32
    ckp("A wrong hash value is refused.", ["DHP-CKP-005"], wrong, bad(1))
    upper = copy.deepcopy(BASE)
    upper[1]["hash"] = "sha256:" + upper[1]["hash"][7:].upper()
    ckp("A hash in upper-case hex is malformed (digests are lowercase hex).",
        ["DHP-CKP-001", "DHP-CKP-005"], upper, bad(1, "invalid_input"))
    noncanon = copy.deepcopy(BASE[:2])
    body = {k: v for k, v in noncanon[0].items() if k != "hash"}
    noncanon[0]["hash"] = "sha256:" + hashlib.sha256(json.dumps(body).encode()).hexdigest()
    ckp("A hash over non-canonical JSON (insertion order, spaces) is refused.",
        ["DHP-CKP-005", "DHP-CJ-001"], noncanon, bad(0))
    selfhash = copy.deepcopy(BASE[:1])
    selfhash[0]["hash"] = digest({**selfhash[0], "hash": ""})
    ckp("A hash computed over the record including an empty hash member is refused.",
        ["DHP-CKP-005"], selfhash, bad(0))
    missing = copy.deepcopy(BASE[:3])
    del missing[1]["spend"]
    ckp("A record without spend is malformed.", ["DHP-CKP-001"], missing,
        bad(1, "invalid_input"))
    extra = copy.deepcopy(BASE[:2])
    extra[1]["note"] = "hi"
    ckp("A record with an unknown member is malformed.", ["DHP-CKP-001"],
        rechain(extra, 1), bad(1, "invalid_input"))
    negative = copy.deepcopy(BASE[:2])
    negative[0]["spend"] = -1
    ckp("A negative spend is malformed.", ["DHP-CKP-001"], rechain(negative),
        bad(0, "invalid_input"))
    fence0 = copy.deepcopy(BASE[:1])
    fence0[0]["fence"] = 0
    ckp("A fence of 0 is malformed (fences start at 1).", ["DHP-CKP-001"], rechain(fence0),
        bad(0, "invalid_input"))


# --- log suite -----------------------------------------------------------------------------

LOG_CASES: list[tuple[str, list[str], str, dict]] = []
LOG_FILES: dict[str, bytes] = {}


def line(obj) -> bytes:
    return rfc8785.dumps(obj) + b"\n"


def header(envelope=None) -> bytes:
    return line({"type": "header", "envelope": envelope or ENVELOPE})


def ckps(records) -> bytes:
    return b"".join(line({"type": "checkpoint", "record": r}) for r in records)


def result(prev: str, value=None, fence: int = 1, hid: str = HID) -> dict:
    return seal({"handoff_id": hid, "fence": fence,
                 "result": {"summary": "done"} if value is None else value, "prev": prev})


def res(record) -> bytes:
    return line({"type": "result", "record": record})


def log(name: str, description: str, requirements: list[str], data: bytes,
        expected: dict) -> None:
    LOG_FILES[name] = data
    if not expected["valid"]:  # every refusal has its fixed code (DHP-LOG-011)
        requirements = [*requirements, "DHP-LOG-011"]
    LOG_CASES.append((description, requirements, f"log/{name}.jsonl", expected))


def valid(*warnings: str) -> dict:
    return {"valid": True, "warnings": list(warnings)}


# The code a reader refuses with, by the requirement the first bad line breaks (DHP-LOG-011):
# bad bytes, JSON, schema or place are invalid_input; a broken chain or id integrity_error.
CODES = {"DHP-LOG-001": "invalid_input", "DHP-LOG-002": "invalid_input",
         "DHP-LOG-004": "invalid_input", "DHP-LOG-007": "invalid_input",
         "DHP-ENV-001": "invalid_input", "DHP-ENV-002": "integrity_error",
         "DHP-ENV-003": "unsupported_version", "DHP-LOG-003": "integrity_error",
         "DHP-RES-005": "integrity_error"}


def invalid(line_no: int, requirement: str, code: str | None = None) -> dict:
    return {"valid": False, "errors": [{"line": line_no, "requirement": requirement,
                                        "code": code or CODES[requirement]}]}


def build_log() -> None:
    good = header() + ckps(BASE[:3])
    last = BASE[2]["hash"]
    log("valid", "A header and three chained checkpoints form a valid log.",
        ["DHP-LOG-001", "DHP-LOG-002", "DHP-LOG-003", "DHP-LOG-007"], good, valid())
    log("valid-result", "A log closed by a result chained to the last checkpoint is valid.",
        ["DHP-LOG-004", "DHP-LOG-003"], good + res(result(last)), valid())
    log("valid-header-only", "A log of only the header (no progress yet) is valid.",
        ["DHP-LOG-002"], header(), valid())
    log("valid-result-only", "A result right after the header chains to the handoff id.",
        ["DHP-LOG-004"], header() + res(result(HID)), valid())
    recovered = chain(STATES[:3], fences=[1, 2, 2])
    log("valid-recovery", "Fences rising across a recovery, with the result at the new fence, "
        "are valid.", ["DHP-LOG-003", "DHP-CKP-006"],
        header() + ckps(recovered) + res(result(recovered[-1]["hash"], fence=2)), valid())
    torn = line({"type": "checkpoint", "record": BASE[3]})[:57]
    log("torn-last-line", "A final line cut short without LF is dropped with a warning.",
        ["DHP-LOG-005"], good + torn, valid("DHP-LOG-005"))
    cut = line({"type": "checkpoint", "record": chain(["\u00e9t\u00e9 \U0001F600"])[0]})
    cut_at = cut.index("\U0001F600".encode()) + 2
    log("torn-last-line-utf8", "A final line torn inside a multi-byte UTF-8 character is "
        "dropped with a warning.", ["DHP-LOG-005", "DHP-LOG-001"],
        header() + cut[:cut_at], valid("DHP-LOG-005"))
    log("torn-last-line-result", "A torn result line is dropped; the checkpoints stand.",
        ["DHP-LOG-005"], good + res(result(last))[:-20], valid("DHP-LOG-005"))
    log("no-final-lf", "A complete final line without LF is kept, with a warning.",
        ["DHP-LOG-005", "DHP-LOG-009"], good[:-1], valid("DHP-LOG-009"))
    lines = good.split(b"\n")
    log("corrupt-middle-line", "An unparseable middle line is an error at its line.",
        ["DHP-LOG-001", "DHP-LOG-006"],
        b"\n".join(lines[:2] + [b"#" + lines[2][1:]] + lines[3:]),
        invalid(3, "DHP-LOG-001"))
    log("corrupt-last-line-lf", "An unparseable last line that ends with LF is an error, "
        "not a torn line.", ["DHP-LOG-001", "DHP-LOG-005", "DHP-LOG-006"],
        good + b'{"type":"checkpoint","rec\n', invalid(5, "DHP-LOG-001"))
    log("header-not-first", "A log starting with a checkpoint has no header.",
        ["DHP-LOG-002"], ckps(BASE[:1]) + header(), invalid(1, "DHP-LOG-002"))
    log("header-twice", "A second header line is an error.", ["DHP-LOG-002"],
        header() + ckps(BASE[:1]) + header(), invalid(3, "DHP-LOG-002"))
    log("header-invalid-envelope", "A header whose envelope lacks its intent is an error.",
        ["DHP-LOG-007", "DHP-ENV-001"], header({"dhp": "1.0", "handoff_id": HID}),
        invalid(1, "DHP-ENV-001"))
    log("header-wrong-id", "A header whose handoff_id does not match its intent is an error.",
        ["DHP-ENV-002", "DHP-SEC-001"],
        header({"dhp": "1.0", "handoff_id": OTHER_HID, "intent": INTENT}),
        invalid(1, "DHP-ENV-002"))
    log("header-unsupported-version", "A header with envelope version 2.0 is refused.",
        ["DHP-ENV-003"], header({"dhp": "2.0", "handoff_id": HID, "intent": INTENT}),
        invalid(1, "DHP-ENV-003"))
    tampered = copy.deepcopy(BASE[:3])
    tampered[1]["state"]["step"] = 7
    log("tampered-checkpoint", "A checkpoint whose state was changed is an error at its line.",
        ["DHP-LOG-003", "DHP-CKP-005", "DHP-SEC-001"], header() + ckps(tampered),
        invalid(3, "DHP-LOG-003"))
    log("wrong-chain", "A checkpoint whose prev skips its predecessor (resealed) is an error.",
        ["DHP-LOG-003", "DHP-CKP-004"],
        header() + ckps(BASE[:2] + [seal({**BASE[2], "prev": BASE[0]["hash"]})]),
        invalid(4, "DHP-LOG-003"))
    log("reordered-checkpoints", "Checkpoints out of seq order are an error at the first one "
        "out of place.", ["DHP-LOG-003", "DHP-CKP-002"],
        header() + ckps([BASE[0], BASE[2], BASE[1]]), invalid(3, "DHP-LOG-003"))
    log("dropped-checkpoint", "A missing checkpoint is an error at the line after the gap.",
        ["DHP-LOG-003", "DHP-CKP-008"], header() + ckps([BASE[0], BASE[2]]),
        invalid(3, "DHP-LOG-003"))
    log("fence-decreasing", "A checkpoint with a lower fence than its predecessor is an error.",
        ["DHP-LOG-003", "DHP-CKP-006"], header() + ckps(chain(STATES[:3], fences=[2, 2, 1])),
        invalid(4, "DHP-LOG-003"))
    log("other-handoff", "A checkpoint of another handoff is an error.",
        ["DHP-LOG-003", "DHP-CKP-007"], header() + ckps(chain(STATES[:1], hid=OTHER_HID)),
        invalid(2, "DHP-LOG-003"))
    log("result-not-last", "A checkpoint after the result is an error.", ["DHP-LOG-004"],
        header() + ckps(BASE[:2]) + res(result(BASE[1]["hash"])) + ckps(BASE[2:3]),
        invalid(5, "DHP-LOG-004"))
    first = result(last)
    log("two-results", "A second result line is an error.", ["DHP-LOG-004", "DHP-RES-003"],
        good + res(first) + res(result(first["hash"], {"summary": "again"})),
        invalid(6, "DHP-LOG-004"))
    log("result-wrong-prev", "A result not chained to the last checkpoint is an error.",
        ["DHP-RES-005", "DHP-LOG-006"], good + res(result(BASE[1]["hash"])),
        invalid(5, "DHP-RES-005"))
    log("result-fence-lower", "A result whose fence is below the last checkpoint's is an error.",
        ["DHP-RES-005"], header() + ckps(recovered) + res(result(recovered[-1]["hash"])),
        invalid(5, "DHP-RES-005"))
    log("result-tampered", "A result whose value was changed after hashing is an error.",
        ["DHP-RES-005", "DHP-SEC-001"],
        good + res({**result(last), "result": {"summary": "forged"}}),
        invalid(5, "DHP-RES-005"))
    log("result-bad-shape", "A result record without prev is an error.",
        ["DHP-LOG-007", "DHP-RES-005"],
        good + res({k: v for k, v in result(last).items() if k != "prev"}),
        invalid(5, "DHP-LOG-007"))
    log("result-schema-violation", "A result that does not satisfy the output_schema is an "
        "error, refused with schema_violation as complete would be.",
        ["DHP-LOG-007", "DHP-RES-001"], good + res(result(last, {"summary": 42})),
        invalid(5, "DHP-LOG-007", "schema_violation"))
    log("crlf", "CR LF line endings are an error.", ["DHP-LOG-001"],
        good.replace(b"\n", b"\r\n"), invalid(1, "DHP-LOG-001"))
    log("invalid-utf8", "A line holding bytes that are not UTF-8 is an error.",
        ["DHP-LOG-001"], header() + ckps(BASE[:1]) + line(
            {"type": "checkpoint", "record": BASE[1]}).replace(b"page-0", b"page-\xff"),
        invalid(3, "DHP-LOG-001"))
    log("empty-file", "An empty file has no header.", ["DHP-LOG-002"], b"",
        invalid(1, "DHP-LOG-002"))
    log("torn-header-only", "A file whose only line is a torn header has no header.",
        ["DHP-LOG-002", "DHP-LOG-005"], header()[:30], invalid(1, "DHP-LOG-002"))
    log("blank-line", "An empty line between records is an error.", ["DHP-LOG-001"],
        header() + b"\n" + ckps(BASE[:1]), invalid(2, "DHP-LOG-001"))
    log("schema-invalid-line", "A checkpoint line whose record lacks spend is an error.",
        ["DHP-LOG-007", "DHP-CKP-001"],
        header() + line({"type": "checkpoint",
                         "record": {k: v for k, v in BASE[0].items() if k != "spend"}}),
        invalid(2, "DHP-LOG-007"))
    log("unknown-line-type", "A line of an unknown type is an error.", ["DHP-LOG-007"],
        good + line({"type": "note", "text": "hello"}), invalid(5, "DHP-LOG-007"))
    log("duplicate-member", "A line with a duplicate member name is an error.",
        ["DHP-LOG-001", "DHP-CJ-001"],
        header() + b'{"type":"checkpoint","type":"checkpoint","record":{}}\n',
        invalid(2, "DHP-LOG-001"))


# --- output --------------------------------------------------------------------------------

def suite(name: str, description: str, cases: list[dict]) -> dict:
    return {"suite": name, "description": description, "tests": cases}


def render(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, indent=2) + "\n"


def outputs() -> dict[Path, str | bytes]:
    """Every file this script writes, by path."""
    for cases in (CKP_CASES, LOG_CASES, LOG_FILES):
        cases.clear()  # the builders append: a second call starts afresh
    build_ckp()
    build_log()
    tests = [{"id": f"checkpoint-chain-{i:03d}", "description": d, "requirements": r,
              "input": inp, "expected": e} for i, (d, r, inp, e) in enumerate(CKP_CASES, 1)]
    out: dict[Path, str | bytes] = {VECTORS / "checkpoint-chain.json": render(suite(
        "checkpoint-chain",
        "Checkpoint hash chains. input.intent is the intent of the handoff and input.handoff_id "
        "its id (\"sha256:\" + hex(SHA-256(RFC 8785(intent)))); a log of the chain is the "
        "header {\"dhp\": \"1.0\", \"handoff_id\": ..., \"intent\": ...} followed by the "
        "records. Feed input.records, in order, to a chain verifier for input.handoff_id. "
        "expected is {\"valid\": true}, or {\"error\": code, \"at\": i} where "
        "i is the index of the first record refused: integrity_error for a broken chain, "
        "invalid_input for a record that is not valid against schemas/checkpoint.json.",
        tests))}
    for name, data in LOG_FILES.items():
        out[VECTORS / "log" / f"{name}.jsonl"] = data
    tests = [{"id": f"log-{i:03d}", "description": d, "requirements": r,
              "input": {"file": f}, "expected": e} for i, (d, r, f, e) in enumerate(LOG_CASES, 1)]
    out[VECTORS / "log.json"] = render(suite(
        "log",
        "JSON-lines logs. input.file is a path relative to this file's folder; read it as "
        "bytes. expected is {\"valid\": true, \"warnings\": [requirement ids]} or "
        "{\"valid\": false, \"errors\": [{\"line\": n, \"requirement\": id, \"code\": code}]}, "
        "where errors holds the first bad line (reading stops there) with lines numbered from "
        "1 and the error code a reader refuses the log with (DHP-LOG-011). Chain faults in "
        "a log cite DHP-LOG-003 (DHP-RES-005 for the result record's links, hash and fence), "
        "misplaced results DHP-LOG-004, bad lines DHP-LOG-001 (bytes, JSON) or DHP-LOG-007 "
        "(schema), and header envelope faults the envelope requirement.",
        tests))
    return out


if __name__ == "__main__":
    from vector_files import main  # a sibling in tools/, on sys.path when run as a script

    sys.exit(main(outputs(), sys.argv[1:], __file__))
