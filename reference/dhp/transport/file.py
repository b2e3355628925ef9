"""Shipping a handoff to a peer (spec: transport, DHP-TRN-*): the ingest both transports share,
and the file transport.

`Ingest` is the receiving side. It takes envelopes, checkpoint records and result records that
arrived from another party, verifies each one completely (the envelope's id, every record's
hash and its place in the chain, by dhp.core.chain's verifier; the result against the output
schema) and stores it through the store's transaction API, so the peer's store ends up with
a handoff a standby can recover from the last shipped checkpoint. A record the store already
holds is a duplicate: acknowledged, stored once (DHP-TRN-016). A rejected item leaves nothing
of itself behind.

The file transport writes one log (dhp.core.logfile's format) per handoff into a shared folder.
Appends happen under an exclusive lock on the log file, one write per line, fsynced before
the call returns; a torn tail left by a writer that died mid-line is cut off before the next
append, so the file stays a valid log. `ingest_folder` reads every log there completely
before it stores anything of it (DHP-LOG-008).
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from dhp.core import chain, journal, limits, machine
from dhp.core.backend import StoreBackend
from dhp.core.clock import rfc3339
from dhp.core.envelope import check_envelope
from dhp.core.errors import (
    Conflict,
    DHPError,
    IntegrityError,
    InvalidInput,
    LeaseLost,
    NotFound,
    SchemaViolation,
)
from dhp.core.logfile import encode_line, read_log
from dhp.core.operations import result_errors
from dhp.observe import tracing

DUPLICATE = "duplicate"
STORED = "stored"
KINDS = ("envelope", "checkpoint", "result")


# --- ingest ----------------------------------------------------------------------------------

@dataclass
class _Chain:
    """What ingest needs to know of a stored chain: every hash (for duplicates at any seq),
    the last fence, the number of distinct fences (attempts seen) and the total spend."""
    hashes: list[str] = field(default_factory=list)
    last_fence: int = 0
    fences: int = 0
    spend: float = 0
    # The verifier of the record being ingested (set by _continue): its last_text is what
    # the store keeps, already canonical, so the record is not encoded a second time.
    verifier: _IngestVerifier | None = None

    def add(self, record: dict) -> None:
        if record["fence"] != self.last_fence:
            self.fences += 1  # fences never decrease, so a change is a new attempt
        self.hashes.append(record["hash"])
        self.last_fence = record["fence"]
        self.spend += record["spend"]


class _Batch:
    """Rows and chains read once per transaction; new checkpoints and records written at the
    end (the checkpoints in one statement)."""

    def __init__(self, ingest: Ingest, tx: Any, now: float):
        self.ingest, self.tx, self.now = ingest, tx, now
        self.rows: dict[str, dict | None] = {}
        self.chains: dict[str, _Chain] = {}
        self.dirty: set[str] = set()
        self.appends: list[tuple[dict, str | None]] = []
        self.events: list[dict] = []  # lease journal entries of fences granted on a peer

    def adopt_fence(self, hid: str, fence: int) -> None:
        """A record under `fence`, above the stored fence, was taken on another host: the
        journal records that take (no worker: records do not name one)."""
        record = self.rows[hid]["record"]
        if fence > record["fence"]:
            self.events.append(journal.entry(hid, "import", fence, None, self.now))
            record["fence"] = fence

    def row(self, hid: str) -> dict | None:
        if hid not in self.rows:
            self.rows[hid] = self.tx.get(hid)
        return self.rows[hid]

    def known(self, hid: str, what: str) -> dict:
        row = self.row(hid)
        if row is None:
            raise NotFound(f"{what} for handoff {hid}, whose envelope this peer does not hold: "
                           "ship the envelope first", requirement="DHP-TRN-014")
        return row

    def chain(self, hid: str) -> _Chain:
        if hid not in self.chains:
            self.chains[hid] = self.ingest._stored_chain(self.tx, hid)
        return self.chains[hid]

    def flush(self) -> None:
        self.tx.append_checkpoints(self.appends)
        for event in self.events:
            self.tx.add_lease_event(event)
        for hid in self.dirty:
            self.tx.put_record(hid, self.rows[hid]["record"], None)


@dataclass
class _Request:
    """One caller's items, waiting for a transaction."""
    items: list[tuple[str, Any]]
    atomic: bool
    parsed: bool
    out: list[str | DHPError] = field(default_factory=list)
    error: BaseException | None = None
    done: bool = False
    # id(result record) -> its violations of the output schema, judged before the lock
    problems: dict[int, list[dict]] = field(default_factory=dict)


class Ingest:
    """Verify and store records from another party into `store`. Thread-safe: one batch at a
    time runs in one store transaction (DHP-TRN-017: committed durably before `apply`
    returns)."""

    def __init__(self, store: StoreBackend, *, cache_size: int = 256):
        self.store = store
        self._lock = threading.Lock()  # one transaction at a time
        self._queue_mutex = threading.Lock()
        self._queue: list[_Request] = []
        self._cache: OrderedDict[str, _Chain] = OrderedDict()
        self._cache_size = cache_size

    def apply(self, items: Iterable[tuple[str, Any]], *, atomic: bool = False,
              parsed: bool = False) -> list[str | DHPError]:
        """Store each `(kind, obj)` (kind: envelope, checkpoint or result) durably. Returns per
        item STORED, DUPLICATE or the rejection (a DHPError); a rejected item stores nothing.
        With `atomic`, the first rejection is raised instead and nothing of the items is stored
        (a whole log, DHP-LOG-008). `parsed` promises the objects came straight from a JSON
        parser (a faster canonicaliser, chain.py).

        Group commit: callers in other threads that arrive while a transaction commits are
        served together by the next one, so one fsync acknowledges many connections' frames
        (each item is still decided on its own)."""
        request = _Request(list(items), atomic, parsed)
        request.problems = self._judge_results(request.items)
        with self._queue_mutex:
            self._queue.append(request)
        with self._lock:
            if not request.done:  # else an earlier leader already served it
                with self._queue_mutex:
                    queued, self._queue = self._queue, []
                self._serve([r for r in queued if not r.atomic])
                for alone in (r for r in queued if r.atomic):
                    self._serve([alone])
        if request.error is not None:
            raise request.error
        return request.out

    def _judge_results(self, items: list[tuple[str, Any]]) -> dict[int, list[dict]]:
        """Validate the results among `items` against their output schemas before any write
        lock is taken (DHP-LIM-008): a costly schema must not stall other connections."""
        envelopes = {obj.get("handoff_id"): obj for kind, obj in items
                     if kind == "envelope" and isinstance(obj, dict)}
        out = {}
        for kind, obj in items:
            if kind != "result" or not isinstance(obj, dict) or "result" not in obj:
                continue
            envelope = envelopes.get(obj.get("handoff_id"))
            if envelope is None and isinstance(obj.get("handoff_id"), str):
                with self.store.transaction(write=False) as tx:
                    row = tx.get(obj["handoff_id"])
                envelope = row["envelope"] if row else None
            try:
                out[id(obj)] = result_errors(envelope, obj["result"])
            except (DHPError, KeyError, TypeError):
                continue  # a bad envelope or record: judged (and refused) in the transaction
        return out

    def _serve(self, requests: list[_Request]) -> None:
        """One transaction for `requests` (lock held); results or the error onto each."""
        if not requests:
            return
        try:
            with self.store.transaction() as tx:
                batch = _Batch(self, tx, self.store.now())
                for request in requests:
                    request.out = [self._decide(batch, kind, obj, request)
                                   for kind, obj in request.items]
                batch.flush()
        except BaseException as exc:
            self._cache.clear()  # rolled back: the cached chains may be ahead of the store
            for request in requests:
                request.error, request.done = exc, True
            if not isinstance(exc, Exception):
                raise
            return
        for hid, ch in batch.chains.items():
            self._remember(hid, ch)
        for request in requests:
            request.done = True

    def _decide(self, batch: _Batch, kind: str, obj: Any, request: _Request) -> str | DHPError:
        try:
            return self._one(batch, kind, obj, request)
        except DHPError as exc:
            if request.atomic:
                raise
            return exc
        except RecursionError:
            exc = InvalidInput("value nested too deeply to verify", requirement="DHP-SEC-002")
            if request.atomic:
                raise exc from None
            return exc

    # --- the three kinds ---

    def _one(self, batch: _Batch, kind: str, obj: Any, request: _Request) -> str:
        if kind == "envelope":
            return self._envelope(batch, obj)
        if kind == "checkpoint":
            return self._checkpoint(batch, obj, request.parsed)
        if kind == "result":
            return self._result(batch, obj, request)
        raise InvalidInput(f"unknown item kind {kind!r}; expected one of {KINDS}",
                           requirement="DHP-TRN-001")

    def _envelope(self, batch: _Batch, envelope: Any) -> str:
        check_envelope(envelope)  # schema, version, output schema, id (DHP-ENV-*, DHP-TRN-015)
        hid = envelope["handoff_id"]
        if batch.row(hid) is not None:
            return DUPLICATE  # same id, so the same intent (DHP-ID-004)
        record = machine.new_record(envelope["intent"]["budget"])
        created = envelope.get("created_at") or rfc3339()
        batch.tx.insert(hid, envelope, record, created)
        batch.rows[hid] = {"handoff_id": hid, "envelope": envelope, "record": record,
                           "result": None, "owner_incarnation": None}
        batch.chains[hid] = _Chain()
        return STORED

    def _checkpoint(self, batch: _Batch, record: Any, parsed: bool) -> str:
        chain.check_checkpoint_shape(record)  # DHP-CKP-001
        hid, seq = record["handoff_id"], record["seq"]
        row = batch.known(hid, f"checkpoint seq {seq}")
        stored = batch.chain(hid)
        if seq <= len(stored.hashes):
            if chain.record_hash(record, parsed=parsed) != record["hash"]:
                raise IntegrityError(f"checkpoint seq {seq}: hash does not match its content: "
                                     "the record was changed", requirement="DHP-CKP-005")
            if stored.hashes[int(seq) - 1] == record["hash"]:
                return DUPLICATE
            raise IntegrityError(
                f"seq {seq} of {hid} is already stored here with hash "
                f"{stored.hashes[int(seq) - 1]}; this record (hash {record['hash']}) differs",
                requirement="DHP-TRN-016",
                details={"seq": seq, "stored": stored.hashes[int(seq) - 1],
                         "found": record["hash"]})
        if row["result"] is not None:
            raise Conflict(f"handoff {hid} is completed here; its chain is closed",
                           requirement="DHP-TRN-019")
        limits.check_fence(record["fence"], f"checkpoint seq {seq} of {hid}")
        _continue(stored, hid, parsed).add(record)  # hash, seq, prev, fence (DHP-CKP-002..008)
        _check_peer_state(row, record["fence"], batch.now)
        batch.appends.append((record, stored.verifier.last_text))  # written by flush()
        stored.add(record)
        # In place: the row is this transaction's own copy, written back once by flush().
        mine = row["record"]
        if mine["state"] != "dead_lettered":
            mine["state"] = "orphaned"
        mine["owner"] = mine["lease_expires_at"] = None
        batch.adopt_fence(hid, record["fence"])
        mine["attempts"] = max(mine["attempts"], stored.fences)
        mine["steps"] = max(mine["steps"], int(seq))
        mine["spend"] = max(mine["spend"], stored.spend)
        batch.dirty.add(hid)
        return STORED

    def _result(self, batch: _Batch, record: Any, request: _Request) -> str:
        parsed = request.parsed
        chain.check_result_shape(record)
        hid = record["handoff_id"]
        row = batch.known(hid, "the result")
        if chain.record_hash(record, parsed=parsed) != record["hash"]:
            raise IntegrityError("result hash does not match its content: the record was "
                                 "changed", requirement="DHP-RES-005")
        if row["result"] is not None:
            if row["result"]["hash"] == record["hash"]:
                return DUPLICATE
            raise IntegrityError(f"handoff {hid} already has a different result here",
                                 requirement="DHP-TRN-016")
        stored = batch.chain(hid)
        _continue(stored, hid, parsed).add_result(record)  # prev, fence (DHP-RES-005)
        problems = request.problems.get(id(record))
        if problems is None:  # its envelope was not known before the lock (rare)
            problems = result_errors(row["envelope"], record["result"])
        if problems:
            listing = "; ".join(f"{p['path']}: {p['message']}" for p in problems)
            raise SchemaViolation(f"the result does not satisfy the output schema: {listing}",
                                  requirement="DHP-RES-001", details=problems)
        _check_peer_state(row, record["fence"], batch.now)
        batch.tx.put_result(hid, record)
        row["result"] = record
        row["record"] = dict(row["record"], state="completed", owner=None,
                             lease_expires_at=None)
        batch.adopt_fence(hid, record["fence"])
        batch.dirty.add(hid)
        return STORED

    # --- the chain cache ---

    def _stored_chain(self, tx: Any, hid: str) -> _Chain:
        """The stored chain's summary: from the cache when it still matches the store's last
        record (another writer may have appended), else rebuilt from the store."""
        last = tx.last_checkpoint(hid)
        cached = self._cache.get(hid)
        if cached is not None:
            if (last is None and not cached.hashes) or (
                    last is not None and len(cached.hashes) == last["seq"]
                    and cached.hashes[-1] == last["hash"]):
                return _Chain(list(cached.hashes), cached.last_fence, cached.fences,
                              cached.spend)
        built = _Chain()
        if last is not None:
            for record in tx.checkpoints(hid):
                built.add(record)
        return built

    def _remember(self, hid: str, ch: _Chain) -> None:
        self._cache[hid] = ch
        self._cache.move_to_end(hid)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)


class _IngestVerifier(chain.ChainVerifier):
    """The chain verifier of ingest: the caller has checked each record's shape already, and
    the canonical text that was hashed is kept (`last_text`) for the store to write."""

    last_text: str | None = None

    def _verify_shape(self, record: Any, check: Any) -> None:
        pass  # ingest checked it before looking the chain up

    def _verify_hash(self, record: dict, what: str) -> str:
        self.last_text = super()._verify_hash(record, what)
        return self.last_text


def _continue(stored: _Chain, hid: str, parsed: bool) -> chain.ChainVerifier:
    """A verifier positioned after the stored chain, so the next record is checked by the
    same code that verifies whole chains (its shape was checked by the caller)."""
    verifier = stored.verifier = _IngestVerifier(hid, parsed=parsed)
    if stored.hashes:
        verifier.last_seq = len(stored.hashes)
        verifier.last_hash = stored.hashes[-1]
        verifier.last_fence = stored.last_fence
    return verifier


def _check_peer_state(row: dict, fence: int, now: float) -> None:
    """New records extend a handoff only while nobody here owns or finished it
    (DHP-TRN-019)."""
    record, hid = row["record"], row["handoff_id"]
    state = machine.effective_state(record, now)
    if state in machine.TERMINAL:
        raise Conflict(f"handoff {hid} is {state} here; shipped records cannot change it",
                       requirement="DHP-TRN-019")
    if state == "claimed":
        raise Conflict(f"handoff {hid} is claimed by {record['owner']!r} on this peer; the "
                       "shipper's worker no longer owns it", requirement="DHP-TRN-019")
    if fence < record["fence"]:
        raise LeaseLost(f"fence {fence} is stale: this peer already granted fence "
                        f"{record['fence']} for {hid}", requirement="DHP-TRN-019")



# --- the file transport ----------------------------------------------------------------------

def log_name(handoff_id: str) -> str:
    """The file name of a handoff's log in a shared folder: its digest and `.dhp.jsonl`."""
    if not isinstance(handoff_id, str) or not chain._is_digest(handoff_id):
        raise InvalidInput(f"not a handoff id: {handoff_id!r}", requirement="DHP-ENV-001")
    return handoff_id[len("sha256:"):] + ".dhp.jsonl"


@dataclass
class _FileTail:
    """What a writer knows of a log file up to `size` bytes."""
    size: int
    verifier: chain.ChainVerifier
    hashes: list[str]
    result_hash: str | None = None


class FileShipper:
    """Ships handoffs into a shared folder as logs, one file per handoff (DHP-TRN-026).

    Every ship call returns after the line is fsynced (a shared folder is storage, not a
    network peer, so there is nothing to buffer). Safe for several processes and threads
    writing the same folder: appends to one file are serialised by an exclusive lock, and a
    record that does not continue the file's chain is refused, so a stale worker cannot fork
    the log. The same methods as `dhp.NetShipper`, so either can be given to the SDK."""

    def __init__(self, folder: str | os.PathLike, *, fsync: bool = True):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self._tails: dict[str, _FileTail] = {}
        self._headed: set[str] = set()
        self._mutex = threading.Lock()

    def path(self, handoff_id: str) -> Path:
        return self.folder / log_name(handoff_id)

    def ship_envelope(self, envelope: dict) -> None:
        """Create the handoff's log with its header, atomically (DHP-TRN-028); idempotent."""
        if isinstance(envelope, dict) and envelope.get("handoff_id") in self._headed:
            return  # this writer already saw the file with its header
        check_envelope(envelope)
        path = self.path(envelope["handoff_id"])
        if path.exists():
            self._headed.add(envelope["handoff_id"])
            return
        line = encode_line({"type": "header", "envelope": envelope})
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=self.folder)
        try:
            _write_all(fd, line)
            if self.fsync:
                os.fsync(fd)
            os.close(fd)
            fd = -1
            try:
                os.link(tmp, path)  # atomic, and fails if another writer was first
            except FileExistsError:
                pass
            if self.fsync:
                _fsync_dir(self.folder)
            self._headed.add(envelope["handoff_id"])
        finally:
            if fd >= 0:
                os.close(fd)
            os.unlink(tmp)

    def ship_checkpoint(self, envelope: dict, record: dict) -> None:
        """Append one checkpoint line (after the header, created if missing)."""
        self._append(envelope, "checkpoint", record)

    def ship_result(self, envelope: dict, record: dict) -> None:
        """Append the result line that closes the log."""
        self._append(envelope, "result", record)

    def ship_chain(self, envelope: dict, records: Iterable[dict],
                   result: dict | None = None) -> None:
        """Ship a whole handoff (what a worker calls after a claim: fills any gap a crashed
        predecessor left); records already in the file are skipped."""
        self.ship_envelope(envelope)
        for record in records:
            self.ship_checkpoint(envelope, record)
        if result is not None:
            self.ship_result(envelope, result)

    def flush(self, timeout: float | None = None) -> bool:
        return True  # every ship call is already durable

    def close(self, timeout: float | None = None) -> None:
        self._tails.clear()
        self._headed.clear()

    def __enter__(self) -> FileShipper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _append(self, envelope: dict, kind: str, record: dict) -> None:
        if record.get("handoff_id") != envelope.get("handoff_id"):
            raise IntegrityError(f"{kind} record belongs to handoff {record.get('handoff_id')}, "
                                 f"not {envelope.get('handoff_id')}", requirement="DHP-CKP-007")
        self.ship_envelope(envelope)
        hid = envelope["handoff_id"]
        path = self.path(hid)
        line = encode_line({"type": kind, "record": record})
        with self._mutex:
            fd = os.open(path, os.O_RDWR | os.O_APPEND)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # released by close
                tail = self._tail(fd, path, hid)
                if not self._needs(tail, kind, record):
                    return
                _write_all(fd, line)
                if self.fsync:
                    os.fsync(fd)
                tail.size += len(line)
                if kind == "checkpoint":
                    tail.hashes.append(record["hash"])
                else:
                    tail.result_hash = record["hash"]
            finally:
                os.close(fd)

    def _needs(self, tail: _FileTail, kind: str, record: dict) -> bool:
        """False when the record is already in the file; raises when it cannot follow."""
        if kind == "checkpoint":
            chain.verify_record(record)
            seq = record["seq"]
            if seq <= len(tail.hashes):
                if tail.hashes[int(seq) - 1] == record["hash"]:
                    return False
                raise IntegrityError(f"seq {seq} is already in {log_name(record['handoff_id'])}"
                                     " with another hash", requirement="DHP-TRN-027")
            if tail.result_hash is not None:
                raise Conflict("the log already ends with a result", requirement="DHP-TRN-027")
            tail.verifier.add(record)
            return True
        if tail.result_hash == record.get("hash"):
            return False
        if tail.result_hash is not None:
            raise IntegrityError("the log already holds a different result",
                                 requirement="DHP-TRN-027")
        tail.verifier.add_result(record)
        return True

    def _tail(self, fd: int, path: Path, hid: str) -> _FileTail:
        """Bring the cached tail up to the file's end (other writers may have appended),
        cutting off a torn last line a crashed writer left (DHP-TRN-027)."""
        tail = self._tails.get(hid)
        size = os.fstat(fd).st_size
        if tail is None or size < tail.size:
            tail = _FileTail(0, chain.ChainVerifier(hid), [])
        if size == tail.size:
            self._tails[hid] = tail
            return tail
        data = os.pread(fd, size - tail.size, tail.size)
        end = data.rfind(b"\n") + 1
        if end < len(data):  # a torn line: its writer died holding the lock
            os.ftruncate(fd, tail.size + end)
            data = data[:end]
        offset = tail.size
        for raw in data.splitlines(keepends=True):
            obj = json.loads(raw)
            kind = obj.get("type") if isinstance(obj, dict) else None
            if kind == "header":
                if offset != 0 or obj["envelope"]["handoff_id"] != hid:
                    raise IntegrityError(f"{path}: unexpected header", requirement="DHP-LOG-002")
            elif kind == "checkpoint":
                tail.hashes.append(tail.verifier.add(obj["record"]))
            elif kind == "result":
                tail.result_hash = tail.verifier.add_result(obj["record"])
            else:
                raise InvalidInput(f"{path}: not a log line at byte {offset}",
                                   requirement="DHP-LOG-007")
            offset += len(raw)
        tail.size = offset
        self._tails[hid] = tail
        return tail


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ingest_file(store: StoreBackend, path: str | os.PathLike,
                ingest: Ingest | None = None) -> dict:
    """Verify one shipped log completely, then store what is new of it in one transaction
    (DHP-TRN-029, DHP-LOG-008). Returns `{handoff_id, stored, duplicates, warnings}`;
    raises the log's first error, having stored nothing."""
    return ingest_items(store, *log_items(path), ingest, source=os.fspath(path))


def log_items(source: str | os.PathLike | BinaryIO) -> tuple[list[tuple[str, Any]], list[dict]]:
    """Read and verify a log (a path, or a binary file): its items for `Ingest.apply` and
    the reader's warnings (a dropped torn last line)."""
    items: list[tuple[str, Any]] = []
    warnings: list[dict] = []
    for _line, kind, obj in read_log(source):
        if kind == "warning":
            warnings.append(obj)
        else:
            items.append(("envelope" if kind == "header" else kind, obj))
    return items, warnings


def ingest_items(store: StoreBackend, items: list[tuple[str, Any]], warnings: list[dict],
                 ingest: Ingest | None = None, *, source: str | None = None) -> dict:
    """Store what is new of one log's verified items (log_items) in one transaction, all or
    nothing; the report of ingest_file. A span `dhp.transport.ingest` (dhp.source) when
    tracing is set up."""
    started = time.time_ns()
    try:
        outcome = (ingest or Ingest(store)).apply(items, atomic=True, parsed=True)
    except DHPError as exc:
        _trace_log(items, [exc] * len(items), started, source)
        raise
    _trace_log(items, outcome, started, source)
    return {"handoff_id": items[0][1]["handoff_id"], "stored": outcome.count(STORED),
            "duplicates": outcome.count(DUPLICATE), "warnings": warnings}


def _trace_log(items: list[tuple[str, Any]], outcome: list[Any], started_ns: int,
               source: str | None) -> None:
    if tracing.configured():
        tracing.transport("transport.ingest", [
            tracing.frame_of(kind, obj, started_ns, done)
            for (kind, obj), done in zip(items, outcome, strict=True)], **{"dhp.source": source})


def ingest_folder(store: StoreBackend, folder: str | os.PathLike) -> dict[str, Any]:
    """Ingest every `*.dhp.jsonl` log of a shared folder. Returns per file name the report of
    `ingest_file`, or the error (a dict valid against error.json) that rejected it."""
    ingest = Ingest(store)
    out: dict[str, Any] = {}
    for path in sorted(Path(folder).glob("*.dhp.jsonl")):
        try:
            out[path.name] = ingest_file(store, path, ingest)
        except DHPError as exc:
            out[path.name] = {"error": exc.to_dict()}
    return out
