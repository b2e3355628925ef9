"""The worker's end of the TCP transport (spec: transport, DHP-TRN-*): `connect`, the
client handshake, and `NetShipper`.

The shipper appends each frame to a local buffer file in the caller's thread (a single
write; the worker never waits for the network) and a background thread fsyncs the buffer,
sends, and collects acks. A frame leaves the buffer only when acknowledged (or definitely
rejected); after a lost connection, a server restart or the shipper's own restart, every
unacknowledged frame is sent again, in order, with capped exponential backoff between
attempts. The server's ingest is idempotent, so a frame sent twice is stored once.
"""

from __future__ import annotations

import collections
import hmac
import json
import logging
import os
import random
import re
import secrets
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from dhp.core.envelope import check_envelope
from dhp.core.errors import DHPError, IntegrityError, InvalidInput, Unavailable, from_dict
from dhp.observe import tracing
from dhp.transport.server import (
    DEFAULT_MAX_FRAME,
    DEFAULT_PORT,
    VERSIONS,
    _Reader,
    _send_blocking,
    check_frame,
    check_secret,
    encode,
    parse,
    proof,
)

log = logging.getLogger("dhp.transport")
_CHUNK = 1 << 20  # bytes of the shipper's buffer read per batch


# --- the client handshake --------------------------------------------------------------------

def connect(host: str, port: int, secret: bytes, *, ssl_context: ssl.SSLContext | None = None,
            server_hostname: str | None = None, timeout: float = 10.0,
            name: str = "") -> tuple[socket.socket, _Reader, dict]:
    """Open an authenticated connection: the server proves the secret first, and the
    shipper sends its proof only after checking it (DHP-TRN-007). Returns the socket, its
    reader and the server's challenge frame. Raises the server's refusal as a DHPError."""
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ssl_context is not None:
            sock = ssl_context.wrap_socket(sock, server_hostname=server_hostname or host)
        reader = _Reader(sock, DEFAULT_MAX_FRAME)
        nonce = secrets.token_hex(32)
        hello = {"type": "hello", "versions": list(VERSIONS), "nonce": nonce}
        if name:
            hello["shipper"] = name[:200]
        sock.sendall(encode(hello))
        challenge = _expect(reader, "challenge")
        if challenge["version"] not in VERSIONS:
            raise InvalidInput(f"the server chose version {challenge['version']!r}, which this "
                               "shipper did not offer", requirement="DHP-TRN-004")
        expected = proof(secret, "server", challenge["version"], nonce, challenge["nonce"])
        if not hmac.compare_digest(expected, challenge["proof"]):
            raise IntegrityError("the server did not prove knowledge of the shared secret: "
                                 "not talking to it", requirement="DHP-TRN-007")
        sock.sendall(encode({"type": "auth", "proof": proof(
            secret, "client", challenge["version"], nonce, challenge["nonce"])}))
        _expect(reader, "welcome")
        reader.max_frame = max(DEFAULT_MAX_FRAME, challenge["max_frame"])
        return sock, reader, challenge
    except BaseException:
        sock.close()
        raise


def _expect(reader: _Reader, kind: str) -> dict:
    frame = parse(reader.one())
    if isinstance(frame, dict) and frame.get("type") == "error" \
            and isinstance(frame.get("error"), dict):
        raise from_dict(frame["error"])
    return check_frame(frame, kind)


# --- the shipper -----------------------------------------------------------------------------

def backoff(first: float, cap: float, rng: random.Random | None = None) -> Iterator[float]:
    """The waits between connection attempts (DHP-TRN-022): a step that starts at `first`
    and doubles up to `cap`, each wait drawn from [step / 2, step] so that shippers cut off
    together do not all come back at the same instant."""
    uniform = rng.uniform if rng is not None else random.uniform
    step = first
    while True:
        yield step * uniform(0.5, 1.0)
        step = min(step * 2, cap)


_ID = re.compile(rb'"id":(\d+)')
_ACK = re.compile(rb'\{"type":"ack","id":(\d{1,16})(,"duplicate":true)?\}')


class NetShipper:
    """Ships handoffs to a `TransportServer` without ever making the caller wait for the
    network (DHP-TRN-021..025).

    `local_logpath` is the durable buffer, a file (created if missing). The ship_* methods
    append frames to it and return; a background thread delivers them. Use `flush(timeout)`
    to wait until everything is acknowledged and `close()` when done. Frames still in the
    buffer when the process ends are sent by the next NetShipper opened on the same file.

    Attributes: `acked` (frames acknowledged), `rejected` (frames the server definitely
    refused: `(frame_id, error)`; they are also appended to `<local_logpath>.rejected`),
    `last_error` (why the last connection attempt or connection failed), `connected`.
    `on_ack(frame_id, duplicate)` and `on_reject(frame_id, error)` are called from the
    background thread."""

    def __init__(self, host: str, port: int = DEFAULT_PORT, *,
                 local_logpath: str | os.PathLike, secret: str | bytes,
                 ssl_context: ssl.SSLContext | None = None, server_hostname: str | None = None,
                 max_frame: int = DEFAULT_MAX_FRAME, window: int = 2048,
                 backoff: tuple[float, float] = (0.05, 2.0), timeout: float = 10.0,
                 name: str = "", compact_bytes: int = 8 * 1024 * 1024, fsync: bool = True,
                 on_ack: Callable[[int, bool], None] | None = None,
                 on_reject: Callable[[int, DHPError], None] | None = None):
        self.host, self.port = host, port
        self.secret = check_secret(secret)
        self.ssl_context, self.server_hostname = ssl_context, server_hostname
        self.max_frame, self.window = max_frame, window
        self.backoff, self.timeout, self.name = backoff, timeout, name
        self.compact_bytes, self.fsync = compact_bytes, fsync
        self.on_ack, self.on_reject = on_ack, on_reject
        self.path = Path(local_logpath)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.acked = 0
        self.rejected: list[tuple[int, DHPError]] = []
        # handoff id -> why a frame of it could not be queued: nothing later of it is
        # shipped (it would only meet seq-gap refusals) and flush() reports False.
        self.unshippable: dict[str, DHPError] = {}
        self.last_error: BaseException | None = None
        self.connected = False
        self._cond = threading.Condition()
        self._announced: set[str] = set()
        self._closing = False
        self._sock: socket.socket | None = None
        self._inflight: collections.deque[tuple[int, int]] = collections.deque()
        # frame id -> tracing.frame_of, for the frames queued while tracing is set up
        self._traced: dict[int, dict] = {}
        self._sleeping = True  # the pump may be in select(): a queued frame must wake it
        self._open_buffer()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"dhp-shipper-{self.path.name}")
        self._thread.start()

    # --- the worker's side (never touches the network) ---

    def ship_envelope(self, envelope: dict) -> list[int]:
        """Queue a handoff's envelope; returns the frame ids queued ([] if already sent)."""
        return self._queue(envelope, [])

    def ship_checkpoint(self, envelope: dict, record: dict) -> list[int]:
        """Queue one checkpoint record (and the envelope first, if not yet queued). Returns
        the ids of the queued frames, the record's last. Call it after the store made the
        checkpoint durable."""
        return self._queue(envelope, [("checkpoint", record)])

    def ship_result(self, envelope: dict, record: dict) -> list[int]:
        """Queue the result record."""
        return self._queue(envelope, [("result", record)])

    def ship_chain(self, envelope: dict, records: Iterable[dict],
                   result: dict | None = None) -> list[int]:
        """Queue a whole handoff (what a worker calls after a claim or recover, so a frame a
        crashed predecessor never buffered still reaches the peer; duplicates are acked)."""
        items = [("checkpoint", r) for r in records]
        if result is not None:
            items.append(("result", result))
        return self._queue(envelope, items, always_envelope=True)

    @property
    def pending(self) -> int:
        """Bytes in the buffer not yet acknowledged."""
        with self._cond:
            return self._end - self._acked_off

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued frame is acknowledged or rejected; False on timeout, and
        False when a handoff could not be shipped at all (`unshippable`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._acked_off < self._end:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left if left is not None else 1.0)
            return not self.unshippable

    def close(self, timeout: float = 5.0) -> bool:
        """Flush for up to `timeout` seconds, then stop. Returns whether all was delivered;
        what was not stays in the buffer for the next shipper on the same file."""
        delivered = self.flush(timeout)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._wake()
        self._thread.join(timeout + 5)
        os.close(self._wake_r)
        os.close(self._wake_w)
        os.close(self._fd)
        return delivered

    def __enter__(self) -> NetShipper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _queue(self, envelope: dict, items: list[tuple[str, dict]],
               always_envelope: bool = False) -> list[int]:
        hid = envelope.get("handoff_id") if isinstance(envelope, dict) else None
        for kind, record in items:
            if not isinstance(record, dict) or record.get("handoff_id") != hid:
                raise InvalidInput(f"a {kind} record of another handoff than the envelope's",
                                   requirement="DHP-CKP-007")
        with self._cond:
            if self._closing:
                raise Unavailable("the shipper is closed")
            if hid in self.unshippable:
                raise self.unshippable[hid]
            frames = []
            if always_envelope or hid not in self._announced:
                check_envelope(envelope)
                frames.append(("envelope", envelope))
            frames += items
            lines, ids = [], []
            started = time.time_ns() if tracing.configured() else None
            for kind, payload in frames:
                key = "envelope" if kind == "envelope" else "record"
                line = encode({"type": kind, "id": self._next_id, key: payload})
                if len(line) - 1 > self.max_frame:
                    self.unshippable[hid] = InvalidInput(
                        f"a {kind} frame of {len(line) - 1} bytes exceeds the maximum of "
                        f"{self.max_frame}: handoff {hid} can no longer be shipped",
                        requirement="DHP-TRN-002")
                    raise self.unshippable[hid]
                lines.append(line)
                ids.append(self._next_id)
                self._next_id += 1
            data = b"".join(lines)
            _write_all(self._fd, data)  # one append: survives kill -9 once it returns
            if started is not None:
                for frame_id, (kind, payload) in zip(ids, frames, strict=True):
                    self._traced[frame_id] = tracing.frame_of(kind, payload, started)
            self._end += len(data)
            self._announced.add(hid)
            self._cond.notify_all()
            wake, self._sleeping = self._sleeping, False  # one wake-up per pump sleep
        if wake:
            self._wake()
        return ids

    # --- the buffer ---

    def _open_buffer(self) -> None:
        """Open the buffer, dropping a torn last frame (a crash mid-append; it was never
        returned to a caller as queued) and learning the next frame id."""
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        size = os.fstat(self._fd).st_size
        data = os.pread(self._fd, size, 0) if size else b""
        end = data.rfind(b"\n") + 1
        if end < size:
            os.ftruncate(self._fd, end)
        ids = (_ID.search(line) for line in data[:end].split(b"\n"))
        self._next_id = max((int(m.group(1)) for m in ids if m), default=-1) + 1
        self._end = end
        self._synced = 0  # fsync before the first send
        self._acked_off = self._send_off = 0  # replay everything: the server dedups

    def _compact(self) -> None:
        """Drop the acknowledged head of the buffer: copy the rest to a new file and rename
        it over the old one (atomic; a crash leaves one or the other, both valid)."""
        cut = self._acked_off
        tmp = self.path.with_name(self.path.name + ".compact")
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            pos = cut
            while pos < self._end:
                chunk = os.pread(self._fd, min(1 << 20, self._end - pos), pos)
                _write_all(out, chunk)
                pos += len(chunk)
            os.fsync(out)
        finally:
            os.close(out)
        os.replace(tmp, self.path)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        self._end -= cut
        self._synced = self._end
        self._acked_off = 0
        self._send_off -= cut
        self._inflight = collections.deque((i, e - cut) for i, e in self._inflight)

    # --- the background thread ---

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass  # already awake (pipe full) or closing

    def _run(self) -> None:
        waits = backoff(*self.backoff)
        while True:
            with self._cond:
                while not self._closing and self._acked_off >= self._end:
                    self._cond.wait()
                if self._closing:
                    break
            try:
                self._sock, reader, _ = connect(
                    self.host, self.port, self.secret, ssl_context=self.ssl_context,
                    server_hostname=self.server_hostname, timeout=self.timeout, name=self.name)
                self.connected = True
                waits = backoff(*self.backoff)  # a connection that worked starts over
                self._pump(self._sock, reader)
                wait = next(waits)
            except (OSError, DHPError, ssl.SSLError, ConnectionError, ValueError) as exc:
                self.last_error = exc
                wait = next(waits)
                log.info("shipper %s: %s; retrying in %.2fs", self.path.name, exc, wait)
            finally:
                self.connected = False
                if self._sock is not None:
                    self._sock.close()
                    self._sock = None
                with self._cond:
                    self._inflight.clear()
                    self._send_off = self._acked_off  # resend what was not acknowledged
            with self._cond:
                if self._closing:
                    break
                self._cond.wait(wait)
        sock = self._sock
        if sock is not None:
            sock.close()

    def _pump(self, sock: socket.socket, reader: _Reader) -> None:
        """Send and collect acks until the connection fails or the shipper closes."""
        sock.settimeout(self.timeout)
        last_answer = time.monotonic()
        while True:
            with self._cond:
                if self._closing:
                    _send_blocking(sock, {"type": "bye"})
                    return
                if self._acked_off >= self.compact_bytes and self._acked_off * 2 >= self._end:
                    self._compact()
                idle = not self._inflight
                batch, sync_to = self._next_batch()
                self._sleeping = True  # from here, frames queued must wake the select below
            if sync_to:
                # Outside the lock, so the worker keeps appending meanwhile (DHP-TRN-023);
                # only this thread sends, so nothing goes on the wire before the fsync.
                os.fsync(self._fd)
                with self._cond:
                    self._synced = max(self._synced, sync_to)
            if batch:
                if idle:  # the answer clock starts with the first frame in flight
                    last_answer = time.monotonic()
                sock.sendall(batch)
            waiting = bool(self._inflight)
            pending_tls = isinstance(sock, ssl.SSLSocket) and sock.pending()
            ready = [sock] if pending_tls or b"\n" in reader.buf else \
                select.select([sock, self._wake_r], [], [], 1.0)[0]
            if self._wake_r in ready:
                os.read(self._wake_r, 4096)
            if sock in ready:
                self._answers(reader.frames())
                last_answer = time.monotonic()
            elif waiting and time.monotonic() - last_answer > self.timeout:
                raise Unavailable(f"no answer from the server in {self.timeout}s")

    def _next_batch(self) -> tuple[bytes, int]:
        """Frames to send now (up to the window) and the buffer offset to fsync first (0 if
        none): a frame is durable in the buffer before it is on the wire (DHP-TRN-021).
        Called with the lock held."""
        room = self.window - len(self._inflight)
        if room <= 0 or self._send_off >= self._end:
            return b"", 0
        left = self._end - self._send_off
        data = os.pread(self._fd, min(left, _CHUNK), self._send_off)
        if len(data) < left and b"\n" not in data:  # one frame longer than the chunk
            data = os.pread(self._fd, min(left, self.max_frame + 1), self._send_off)
        lines = data.split(b"\n", room)[:-1]  # at most `room` whole lines, split no further
        if not lines:
            return b"", 0
        out = b"\n".join(lines) + b"\n"
        stop = self._send_off + len(out)
        sync_to = self._end if self.fsync and self._synced < stop else 0
        pos = self._send_off
        for line in lines:
            pos += len(line) + 1
            found = _ID.search(line)
            self._inflight.append((int(found.group(1)) if found else -1, pos))
        self._send_off = stop
        return out, sync_to

    def _answers(self, lines: list[bytes]) -> None:
        """Match the server's answers to the frames in flight, in order (DHP-TRN-018)."""
        acked, rejected, shipped = [], [], []
        failure: BaseException | None = None
        with self._cond:
            for line in lines:
                try:
                    fast = _ACK.fullmatch(line)  # the common case, without a JSON parse
                    done = self._answer(
                        {"type": "ack", "id": int(fast.group(1)), "duplicate": bool(
                            fast.group(2))} if fast else parse(line), line)
                except (DHPError, ConnectionError) as exc:
                    failure = exc
                    break
                frame_id, error, duplicate = done
                if error is None:
                    acked.append((frame_id, duplicate))
                    self.acked += 1
                else:
                    rejected.append((frame_id, error))
                    self.rejected.append((frame_id, error))
                traced = self._traced.pop(frame_id, None)
                if traced is not None:
                    traced["outcome"] = error or ("duplicate" if duplicate else "ack")
                    shipped.append(traced)
            self._cond.notify_all()
        if shipped:
            tracing.transport("transport.ship", shipped,
                              **{"dhp.peer": f"{self.host}:{self.port}"})
        for frame_id, error in rejected:
            log.warning("shipper %s: frame %d rejected: %s", self.path.name, frame_id, error)
            with open(self.path.with_name(self.path.name + ".rejected"), "a",
                      encoding="utf-8") as f:
                f.write(json.dumps({"id": frame_id, "error": error.to_dict()}) + "\n")
            if self.on_reject:
                self.on_reject(frame_id, error)
        if self.on_ack:
            for frame_id, duplicate in acked:
                self.on_ack(frame_id, duplicate)
        if failure is not None:
            raise failure

    def _answer(self, frame: Any, line: bytes) -> tuple[int, DHPError | None, bool]:
        """Settle the oldest frame in flight by one answer (lock held). A definite error
        settles it for good; any other error means the outcome is unknown: raise, so the
        connection is dropped and the frame sent again."""
        kind = frame.get("type") if isinstance(frame, dict) else None
        if kind == "bye":
            raise ConnectionError("the server said bye")
        if kind == "error" and "id" not in frame:
            raise from_dict(frame.get("error") or {})
        if kind not in ("ack", "error") or not self._inflight \
                or frame.get("id") != self._inflight[0][0]:
            raise InvalidInput(f"unexpected answer {line[:80]!r}", requirement="DHP-TRN-018")
        frame_id, end = self._inflight[0]
        error = None
        if kind == "error":
            error = from_dict(frame.get("error") if isinstance(frame.get("error"), dict) else {})
            if not error.definite:
                raise error
        self._inflight.popleft()
        self._acked_off = end
        return frame_id, error, bool(frame.get("duplicate"))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
