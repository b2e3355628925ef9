"""Planted-bug mutants of the reference, kept as data: each is one or more exact text
replacements in reference/dhp (every `old` must occur exactly once in its file), the kit
options that reach the bug quickly, and the requirement the kit must name when it fails the
mutant. tests/test_conform.py applies each to a temporary copy and runs the kit on it.

A mutant whose bug needs a race to show (a claim that is not atomic, a checkpoint made durable
late) widens the window with a short sleep or timer: the bug is real, the delay only makes the
kit see it on every run rather than now and then.
"""

from __future__ import annotations

MUTANTS: list[dict] = [
    {"name": "no-fence-check-on-writes", "file": "core/machine.py",
     "old": 'or record["fence"] != op["fence"]', "new": "",
     "suite": "fencing", "expected_requirement": "DHP-FEN-003"},
    {"name": "fence-not-bumped-on-recover", "file": "core/machine.py",
     "old": 'fence=record["fence"] + 1,',
     "new": 'fence=record["fence"] + (op["name"] != "recover"),',
     "suite": "fencing", "expected_requirement": "DHP-FEN-001"},
    {"name": "no-hash-chain", "file": "core/operations.py",
     "old": "prev, state_text=text)", "new": "hid, state_text=text)",
     "suite": "lifecycle", "expected_requirement": "DHP-CKP-004"},
    {"name": "max-steps-off-by-one", "file": "core/machine.py",
     "old": 'record["steps"] + 1 > budget["max_steps"]',
     "new": 'record["steps"] > budget["max_steps"]',
     "suite": "lifecycle", "expected_requirement": "DHP-BUD-002"},
    {"name": "result-not-validated", "file": "core/operations.py",
     "old": 'op["result_errors"] = problems',
     "new": 'op["result_errors"] = []',
     "suite": "lifecycle", "expected_requirement": "DHP-RES-002"},
    # --- a claim that is not atomic: read in one transaction, write in another -------------
    {"name": "claim-not-atomic", "file": "core/operations.py",
     "old": ("    with backend.transaction() as tx:\n"
             "        row = tx.get(hid)\n"
             "        now = backend.now()\n"
             '        op = {"name": name, "worker": worker, "ttl": ttl}\n'),
     "new": ("    with backend.transaction(write=False) as tx:\n"
             "        row = tx.get(hid)\n"
             '    __import__("time").sleep(0.05)\n'
             "    with backend.transaction() as tx:\n"
             "        now = backend.now()\n"
             '        op = {"name": name, "worker": worker, "ttl": ttl}\n'),
     "suite": "concurrency", "expected_requirement": "DHP-FEN-005"},
    # --- a checkpoint acknowledged before it is stored: appended 0.3 s later ----------------
    {"name": "checkpoint-acked-before-durable",
     "edits": [
         ("core/operations.py", "tx.append_checkpoint(made, text=made_text)",
          '__import__("threading").Timer(0.3, _append_later, (backend, made)).start()'),
         ("core/operations.py", "def result_problems(",
          "def _append_later(backend, made):\n"
          "    with backend.transaction() as tx:\n"
          "        tx.append_checkpoint(made)\n\n\n"
          "def result_problems("),
     ],
     "suite": "fencing", "expected_requirement": "DHP-CKP-010"},
    # --- a supervisor that takes every liveness lock file for a dead owner ------------------
    {"name": "supervisor-orphans-live-leases", "file": "supervisor.py",
     "old": "if token == self._token or not liveness.owner_dead(token):",
     "new": "if token == self._token:",
     "suite": "supervisor", "expected_requirement": "DHP-SUP-002"},
    # --- supervisor bugs: each must fail under the supervisor's own requirement -------------
    {"name": "supervisor-skips-wall-clock", "file": "supervisor.py",
     "old": ('            actions += self._sweep("dead_letter", self._over_wall_clock_ids,\n'
             "                                   self._out_of_time)\n"),
     "new": "",
     "suite": "supervisor", "expected_requirement": "DHP-SUP-005"},
    {"name": "orphan-not-parked-when-exhausted", "file": "supervisor.py",
     "old": 'if action == "orphan":\n            parked', "new": "if False:\n            parked",
     "suite": "supervisor", "expected_requirement": "DHP-SUP-006"},
    {"name": "two-leaders", "file": "supervisor.py",
     "old": "why = self._vacancy(row, now, mine)",
     "new": 'why = self._vacancy(row, now, mine) or "taken while another leads"',
     "suite": "supervisor", "expected_requirement": "DHP-SUP-009"},
    # --- found by the cosmic-ray run: a lapsed own lease renewed instead of taken anew ------
    {"name": "own-lapsed-leadership-renewed", "file": "supervisor.py",
     "old": 'if mine and row["expires_at"] > now and row["fence"] == self.fence:',
     "new": 'if mine and row["fence"] == self.fence:',
     "suite": "supervisor", "only": "DHP-SUP-010", "expected_requirement": "DHP-SUP-010"},
    {"name": "dlq-entry-lost", "file": "api.py",
     "old": 'for row in operations.rows(store, state="dead_lettered")]',
     "new": 'for row in operations.rows(store, state="dead_lettered")][:-1]',
     "suite": "lifecycle", "expected_requirement": "DHP-BUD-006"},
    {"name": "max-attempts-off-by-one", "file": "core/machine.py",
     "old": 'cap is not None and record["attempts"] >= cap:\n        return _dead_letter(',
     "new": 'cap is not None and record["attempts"] > cap:\n        return _dead_letter(',
     "suite": "lifecycle", "expected_requirement": "DHP-BUD-001"},
    {"name": "max-spend-ignores-this-spend", "file": "core/machine.py",
     "old": 'record["spend"] + spend > budget["max_spend"]',
     "new": 'record["spend"] > budget["max_spend"]',
     "suite": "lifecycle", "expected_requirement": "DHP-BUD-003"},
    # --- a lease still live at its exact expiry instant: only the manual clock can see it ----
    {"name": "lease-live-at-expiry-instant", "file": "core/machine.py",
     "old": "return expires is not None and now < expires",
     "new": "return expires is not None and now <= expires",
     "suite": "vectors", "only": "DHP-LSE-*", "expected_requirement": "DHP-LSE-002"},
    # --- cancel accepted but a claimed handoff keeps running --------------------------------
    {"name": "cancel-not-reaching-worker", "file": "core/machine.py",
     "old": ('    return Outcome(True, dict(record, state="cancelled", owner=None, '
             "lease_expires_at=None))"),
     "new": ('    return Outcome(True, record if record["state"] == "claimed" else '
             'dict(record, state="cancelled", owner=None, lease_expires_at=None))'),
     "suite": "lifecycle", "expected_requirement": "DHP-FEN-006"},
    {"name": "release-keeps-the-lease", "file": "core/machine.py",
     "old": ('return Outcome(True, dict(record, state="released", owner=None, '
             "lease_expires_at=None,\n"),
     "new": "return Outcome(True, dict(record,\n",
     "suite": "lifecycle", "expected_requirement": "DHP-STM-002"},
    {"name": "complete-accepted-twice",
     "edits": [
         ("core/machine.py",
          'return Outcome(True, dict(record, state="completed", owner=None, '
          "lease_expires_at=None))",
          'return Outcome(True, dict(record, state="completed"))'),
         ("core/machine.py", 'if state != "claimed" or record["owner"] != op["worker"]',
          'if state not in ("claimed", "completed") or record["owner"] != op["worker"]'),
     ],
     "suite": "lifecycle", "expected_requirement": "DHP-RES-003"},
    {"name": "fence-reused-after-requeue", "file": "core/machine.py",
     "old": 'dict(record, state="pending", attempts=0,',
     "new": 'dict(record, state="pending", fence=0, attempts=0,',
     "suite": "lifecycle", "expected_requirement": "DHP-FEN-002"},
    # --- an export that re-seals every checkpoint onto the handoff id: no chain -------------
    {"name": "export-without-chain",
     "edits": [
         ("core/logfile.py",
          '    for record in records:\n        yield {"type": "checkpoint", "record": record}',
          '    from .chain import make_record\n'
          '    for record in records:\n'
          '        yield {"type": "checkpoint", "record": make_record(\n'
          '            record["handoff_id"], record["seq"], record["fence"], record["state"],\n'
          '            record["spend"], envelope["handoff_id"])}'),
         ("core/logfile.py",
          'verifier.add(line["record"])\n'
          '                elif line["type"] == "result":\n'
          '                    verifier.add_result(line["record"])',
          'pass\n'
          '                elif line["type"] == "result":\n'
          '                    pass'),
     ],
     "suite": "lifecycle", "expected_requirement": "DHP-CKP-004"},
    {"name": "recover-ignores-owner-liveness", "file": "core/operations.py",
     "old": ('machine.lease_live(row["record"], now):\n'
             '            op["owner_dead"] = backend.liveness.owner_dead('
             'row["owner_incarnation"])'),
     "new": 'machine.lease_live(row["record"], now):\n            op["owner_dead"] = True',
     "suite": "fencing", "expected_requirement": "DHP-FEN-005"},
    # --- a transport peer that checks a new record's place in the chain but not its hash ---
    {"name": "ingest-without-hash-check", "file": "transport/file.py",
     "old": "_continue(stored, hid, parsed).add(record)",
     "new": "_continue(stored, hid, parsed).add(dict(record, hash=chain.record_hash(record)))",
     "suite": "transport", "expected_requirement": "DHP-TRN-015"},
    # --- reach: states, instants and paths the easy scenarios never get to (issue 9) -------
    {"name": "requeue-keeps-steps", "file": "core/machine.py",
     "old": "attempts=0, steps=0, spend=0,", "new": "attempts=0, spend=0,",
     "suite": "reach", "only": "DHP-BUD-002", "expected_requirement": "DHP-BUD-002"},
    {"name": "wall-clock-spent-at-its-cap", "file": "core/machine.py",
     "old": "now - started > cap", "new": "now - started >= cap",
     "suite": "reach", "only": "DHP-BUD-004", "expected_requirement": "DHP-BUD-004"},
    {"name": "supervisor-orphans-exhausted-without-parking", "file": "core/machine.py",
     "old": "if state in TAKEABLE and cap is not None", "new": "if False and cap is not None",
     "suite": "reach", "only": "DHP-SUP-006", "expected_requirement": "DHP-SUP-006"},
    {"name": "claim-next-skips-expired-claims", "file": "store/sqlite.py",
     "old": "_EXPIRED = \"state = 'claimed' AND lease_due <= ? AND lease_expires_at <= ?\"",
     "new": "_EXPIRED = \"state = 'claimed' AND lease_due <= ? AND lease_expires_at <= ? - 1e12\"",
     "suite": "reach", "only": "DHP-STM-007", "expected_requirement": "DHP-STM-007"},
    {"name": "import-keeps-a-lower-fence", "file": "transport/file.py",
     "old": 'self.now))\n            record["fence"] = fence', "new": "self.now))",
     "suite": "reach", "only": "DHP-LOG-010", "expected_requirement": "DHP-LOG-010"},
    {"name": "status-lease-rounded", "file": "core/operations.py",
     "old": "round(expires - now, 6)", "new": "round(expires - now, 1)",
     "suite": "reach", "only": "DHP-LSE-004", "expected_requirement": "DHP-LSE-004"},
    {"name": "file-shipper-keeps-a-torn-line", "file": "transport/file.py",
     "old": "            os.ftruncate(fd, tail.size + end)\n", "new": "",
     "suite": "reach", "only": "DHP-TRN-027", "expected_requirement": "DHP-TRN-027"},
]


def edits(mutant: dict) -> list[tuple[str, str, str]]:
    """The (file, old, new) replacements of a mutant."""
    if "edits" in mutant:
        return [tuple(e) for e in mutant["edits"]]
    return [(mutant["file"], mutant["old"], mutant["new"])]
