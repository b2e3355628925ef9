"""The TCP transport (spec: transport, DHP-TRN-*): `TransportServer` on the peer and
`NetShipper` in the worker.

Frames are JSON objects, one per LF-terminated line (schemas/transport-frame.json). A
connection opens with a hello that negotiates the version and authenticates both sides by
HMAC-SHA256 challenge-response over a shared secret; the secret itself never crosses the
wire. TLS (the standard library's `ssl`) can wrap the connection, with the server's
certificate verified by default and client certificates possible.

The server answers every data frame (envelope, checkpoint, result) with an ack or an error,
in order. It reads whatever frames have arrived, verifies and stores them in one store
transaction (dhp.transport.Ingest), and acknowledges them only after that transaction is
durable: one fsync covers a batch, which is what makes pipelined shipping fast.

The shipper appends each frame to a local buffer file in the caller's thread (a single
write; the worker never waits for the network) and a background thread fsyncs the buffer,
sends, and collects acks. A frame leaves the buffer only when acknowledged (or definitely
rejected); after a lost connection, a server restart or the shipper's own restart, every
unacknowledged frame is sent again, in order, with capped exponential backoff between
attempts. The server's ingest is idempotent, so a frame sent twice is stored once.
"""

from __future__ import annotations

import collections
import hashlib
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
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from . import schemas
from .backend import StoreBackend
from .canonical import STRICT_DECODER
from .envelope import check_envelope
from .errors import (
    DHPError,
    IntegrityError,
    Internal,
    InvalidInput,
    Unavailable,
    UnsupportedVersion,
    from_dict,
)
from .store import Store
from .transport import DUPLICATE, KINDS, Ingest

VERSIONS = ("1.0",)  # transport protocol versions this implementation speaks, preferred first
DEFAULT_PORT = 7461
DEFAULT_MAX_FRAME = 16 * 1024 * 1024  # bytes, LF excluded (DHP-TRN-002, DHP-SEC-002)
MIN_MAX_FRAME = 64 * 1024
MIN_SECRET = 16
_RECV = 256 * 1024
_CHUNK = 1 << 20  # bytes of the shipper's buffer read per batch

log = logging.getLogger("dhp.transport")


# --- secrets and proofs ----------------------------------------------------------------------

def check_secret(secret: str | bytes) -> bytes:
    """The shared secret as bytes; refuses one shorter than 16 bytes (DHP-TRN-013)."""
    if isinstance(secret, str):
        secret = secret.encode("utf-8")
    if not isinstance(secret, (bytes, bytearray)):
        raise InvalidInput("the transport secret must be bytes or str", requirement="DHP-TRN-013")
    if len(secret) < MIN_SECRET:
        raise InvalidInput(f"the transport secret has {len(secret)} bytes; at least {MIN_SECRET} "
                           "are required (32 random bytes recommended)", requirement="DHP-TRN-013")
    return bytes(secret)


def load_secret(path: str | os.PathLike) -> bytes:
    """Read a secret file: its bytes without a trailing line break."""
    data = Path(path).read_bytes().rstrip(b"\r\n")
    return check_secret(data)


def proof(secret: bytes, role: str, version: str, client_nonce: str, server_nonce: str) -> str:
    """HMAC-SHA256(secret, "dhp-transport/<version> <role> <client_nonce> <server_nonce>") in
    lowercase hex (DHP-TRN-005). The role ("server" or "client") keeps one side's proof from
    being replayed as the other's; the nonces make every proof single-use."""
    message = f"dhp-transport/{version} {role} {client_nonce} {server_nonce}".encode("ascii")
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


# --- TLS -------------------------------------------------------------------------------------

def server_ssl_context(certfile: str, keyfile: str | None = None, *,
                       client_cafile: str | None = None) -> ssl.SSLContext:
    """A TLS server context; with `client_cafile`, clients must present a certificate it
    signed (mutual TLS, DHP-TRN-011)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(certfile, keyfile)
    if client_cafile:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(client_cafile)
    return ctx


def client_ssl_context(cafile: str | None = None, *, certfile: str | None = None,
                       keyfile: str | None = None) -> ssl.SSLContext:
    """A TLS client context that verifies the server's certificate and host name
    (DHP-TRN-010): against `cafile`, else the system's trust store."""
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if certfile:
        ctx.load_cert_chain(certfile, keyfile)
    return ctx


# --- frames ----------------------------------------------------------------------------------

class FrameTooLarge(InvalidInput):
    pass


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode(frame: dict) -> bytes:
    """One frame: compact JSON and LF."""
    try:
        return _ENCODER.encode(frame).encode("utf-8") + b"\n"
    except (ValueError, TypeError, UnicodeEncodeError) as exc:
        raise InvalidInput(f"frame is not JSON: {exc}", requirement="DHP-TRN-001") from None


def parse(raw: bytes) -> Any:
    """A frame's JSON value, strictly: UTF-8, no duplicate names, no NaN (DHP-TRN-001)."""
    try:
        text = raw.decode("utf-8")
        value, end = STRICT_DECODER.raw_decode(text)
        if text[end:].strip(" \t\r"):
            raise ValueError("extra data after the JSON value")
        return value
    except InvalidInput as exc:  # duplicate names, NaN: the frame is not strict JSON
        raise InvalidInput(f"frame is not strict JSON: {exc.message}",
                           requirement="DHP-TRN-001") from None
    except (ValueError, RecursionError) as exc:
        raise InvalidInput(f"frame is not a JSON value: {exc}", requirement="DHP-TRN-001") \
            from None


def check_frame(frame: Any, *types: str) -> dict:
    """Raise InvalidInput unless `frame` is valid against transport-frame.json and of one of
    `types`."""
    if not isinstance(frame, dict) or frame.get("type") not in types:
        found = frame.get("type") if isinstance(frame, dict) else type(frame).__name__
        raise InvalidInput(f"expected a frame of type {' or '.join(types)}, got {found!r}",
                           requirement="DHP-TRN-001")
    schemas.check("transport-frame", frame, requirement="DHP-TRN-001")
    return frame


def _is_id(value: Any) -> bool:
    return type(value) is int and 0 <= value <= 9007199254740991


def data_frame(frame: Any) -> tuple[str, int, Any]:
    """(kind, id, payload) of an envelope, checkpoint or result frame. The payload is
    verified by ingest; the frame around it here (fast path, schema on any doubt)."""
    if type(frame) is dict and len(frame) == 3 and frame.get("type") in KINDS \
            and _is_id(frame.get("id")):
        key = "envelope" if frame["type"] == "envelope" else "record"
        if key in frame:
            return frame["type"], frame["id"], frame[key]
    check_frame(frame, *KINDS)  # raises with the schema's message
    raise InvalidInput("not a data frame", requirement="DHP-TRN-001")


class _Reader:
    """LF-delimited frames from a socket, never holding more than `max_frame` bytes of one
    unfinished frame (DHP-TRN-002)."""

    def __init__(self, sock: socket.socket, max_frame: int):
        self.sock, self.max_frame = sock, max_frame
        self.buf = b""

    def frames(self, drain: bool = False) -> list[bytes]:
        """Every complete frame that has arrived (blocks until there is one); with `drain`,
        also what arrives meanwhile, up to 256 KiB. Raises ConnectionError at EOF,
        FrameTooLarge for an oversized frame."""
        while True:
            if b"\n" in self.buf:
                if drain:
                    self._drain()
                *lines, self.buf = self.buf.split(b"\n")
                for line in lines:
                    if len(line) > self.max_frame:
                        raise _too_large(self.max_frame)
                if len(self.buf) > self.max_frame:
                    raise _too_large(self.max_frame)
                return lines
            if len(self.buf) > self.max_frame:
                raise _too_large(self.max_frame)
            # never more than max_frame + 1 bytes of an unfinished frame (DHP-TRN-002)
            data = self.sock.recv(min(_RECV, self.max_frame + 1 - len(self.buf)))
            if not data:
                raise ConnectionError("connection closed by the peer"
                                      + (" in the middle of a frame" if self.buf else ""))
            self.buf += data

    def _drain(self) -> None:
        """Also take what has already arrived, without blocking: TLS hands out one record
        (16 KiB) per recv, and a caller that stores each batch in one transaction would
        otherwise commit every 16 KiB. Bounded like recv above (DHP-TRN-002)."""
        sock = self.sock
        tls = isinstance(sock, ssl.SSLSocket)
        timeout = sock.gettimeout()
        if tls:
            sock.settimeout(0)  # a half-arrived TLS record must not hold up what is in hand
        try:
            while len(self.buf) < _RECV:
                if not (tls and sock.pending()) and not _readable(sock):
                    return
                tail = len(self.buf) - self.buf.rfind(b"\n") - 1
                try:
                    data = sock.recv(min(_RECV, self.max_frame + 1 - tail))
                except OSError:  # nothing more yet (want-read), or a failure the next recv reports
                    return
                if not data:
                    return  # EOF: the frames in hand first; the next recv reports it
                self.buf += data
                if len(self.buf) - self.buf.rfind(b"\n") - 1 > self.max_frame:
                    return  # frames() raises FrameTooLarge
        finally:
            if tls:
                sock.settimeout(timeout)

    def one(self) -> bytes:
        """The next frame (handshake: exactly one is expected at a time)."""
        lines = self.frames()
        if len(lines) > 1:
            self.buf = b"\n".join(lines[1:]) + b"\n" + self.buf
        return lines[0]


def _readable(sock: socket.socket) -> bool:
    """Whether a recv would not block (False when unknown: select() cannot take the fd)."""
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (ValueError, OSError):
        return False


def _too_large(limit: int) -> FrameTooLarge:
    return FrameTooLarge(f"frame longer than the maximum of {limit} bytes",
                         requirement="DHP-TRN-002")


def _error_frame(exc: DHPError, frame_id: int | None = None) -> dict:
    out: dict[str, Any] = {"type": "error", "error": exc.to_dict()}
    if exc.details is not None:
        try:
            encode(exc.details)
        except InvalidInput:
            out["error"].pop("details")
    if frame_id is not None:
        out["id"] = frame_id
    return out


# --- the server ------------------------------------------------------------------------------

class TransportServer:
    """Receives shipped handoffs into the store at `root` (a folder, or a StoreBackend).

    One thread per connection; many shippers at once. `port=0` picks a free port (read
    `server.port` after `start()`). Every connection and every rejection is logged on the
    `dhp.transport` logger, one line each."""

    def __init__(self, root: str | os.PathLike | StoreBackend, host: str = "127.0.0.1",
                 port: int = DEFAULT_PORT, *, secret: str | bytes,
                 ssl_context: ssl.SSLContext | None = None, max_frame: int = DEFAULT_MAX_FRAME,
                 handshake_timeout: float = 10.0, idle_timeout: float = 600.0,
                 max_connections: int = 512):
        if isinstance(root, StoreBackend):
            self.store, self._own_store = root, False
        else:
            self.store, self._own_store = Store(root), True
        self.host, self.port = host, port
        self.secret = check_secret(secret)
        self.ssl_context = ssl_context
        if not isinstance(max_frame, int) or max_frame < MIN_MAX_FRAME:
            raise InvalidInput(f"max_frame must be an integer >= {MIN_MAX_FRAME}",
                               requirement="DHP-TRN-002")
        self.max_frame = max_frame
        self.handshake_timeout, self.idle_timeout = handshake_timeout, idle_timeout
        self.max_connections = max_connections
        self.ingest = Ingest(self.store)
        self.stats: collections.Counter[str] = collections.Counter()
        self._stats_mutex = threading.Lock()
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._mutex = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._seq = 0

    # --- life cycle ---

    def bind(self) -> TransportServer:
        if self._listener is None:
            infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
            family, _, _, _, address = infos[0]
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(128)
            self._listener = sock
            self.port = sock.getsockname()[1]
            log.info("listening on %s:%d (tls=%s, max_frame=%d, store=%s)", self.host,
                     self.port, "on" if self.ssl_context else "off", self.max_frame, self.store)
        return self

    def start(self) -> TransportServer:
        """Bind and serve in a background thread; returns self."""
        self.bind()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True,
                                        name="dhp-transport-accept")
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.bind()
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                conn, addr = self._listener.accept()
            except OSError:
                if self._stopping.is_set():
                    return
                time.sleep(0.05)  # e.g. out of file descriptors: do not spin
                continue
            with self._mutex:
                if len(self._conns) >= self.max_connections:
                    log.warning("rejected %s: too many connections", _addr(addr))
                    conn.close()
                    continue
                self._conns.add(conn)
                self._seq += 1
                session = f"c{self._seq}"
            threading.Thread(target=self._serve, args=(conn, addr, session), daemon=True,
                             name=f"dhp-transport-{session}").start()

    def stop(self) -> None:
        """Stop accepting, cut every connection, close the store if this server opened it."""
        self._stopping.set()
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept(); close alone does not
            except OSError:
                pass
            self._listener.close()
        with self._mutex:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(5)
        deadline = time.monotonic() + 5
        while self._conns and time.monotonic() < deadline:
            time.sleep(0.01)
        if self._own_store:
            self.store.close()

    def __enter__(self) -> TransportServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- one connection ---

    def _serve(self, raw: socket.socket, addr: Any, session: str) -> None:
        peer, sock = _addr(addr), raw
        self._count("connections")
        try:
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            raw.settimeout(self.handshake_timeout)
            if self.ssl_context is not None:
                try:
                    sock = self.ssl_context.wrap_socket(raw, server_side=True)
                except (ssl.SSLError, OSError) as exc:
                    self._reject(peer, session, f"TLS handshake failed: {exc}")
                    return
            reader = _Reader(sock, self.max_frame)
            name = self._handshake(sock, reader, peer, session)
            if name is None:
                return
            log.info("connection %s from %s: authenticated shipper %r (tls=%s)", session, peer,
                     name, "on" if self.ssl_context else "off")
            sock.settimeout(self.idle_timeout)
            self._receive(sock, reader, peer, session)
        except FrameTooLarge as exc:
            self._reject(peer, session, exc.message)
            _send(sock, _error_frame(exc))
        except (OSError, ConnectionError, ssl.SSLError) as exc:
            log.info("connection %s from %s closed: %s", session, peer, exc or "timeout")
        except Exception as exc:  # a bug must not kill the server, only this connection
            log.exception("connection %s from %s: internal error", session, peer)
            _send(sock, _error_frame(Internal(f"internal error: {exc}")))
        finally:
            with self._mutex:
                self._conns.discard(raw)
            try:
                sock.close()
            except OSError:
                pass

    def _count(self, key: str) -> None:
        with self._stats_mutex:
            self.stats[key] += 1

    def _reject(self, peer: str, session: str, why: str) -> None:
        self._count("rejected_connections")
        log.warning("rejected connection %s from %s: %s", session, peer, why)

    def _refuse(self, sock: socket.socket, peer: str, session: str, exc: DHPError) -> None:
        self._reject(peer, session, f"{exc.code}: {exc.message}")
        _send(sock, _error_frame(exc))

    def _handshake(self, sock: socket.socket, reader: _Reader, peer: str,
                   session: str) -> str | None:
        """hello -> challenge -> auth -> welcome (DHP-TRN-004..006). Returns the shipper's
        name, or None after refusing the connection."""
        try:
            hello = parse(reader.one())
            if not isinstance(hello, dict) or hello.get("type") != "hello":
                raise InvalidInput("the first frame of a connection must be hello; nothing is "
                                   "accepted before authentication", requirement="DHP-TRN-006")
            check_frame(hello, "hello")
        except InvalidInput as exc:
            self._refuse(sock, peer, session, exc)
            return None
        version = next((v for v in VERSIONS if v in hello["versions"]), None)
        if version is None:
            self._refuse(sock, peer, session, UnsupportedVersion(
                f"no common transport version: the shipper speaks {hello['versions']}, this "
                f"server {list(VERSIONS)}", requirement="DHP-TRN-004"))
            return None
        nonce = secrets.token_hex(32)
        _send(sock, {"type": "challenge", "version": version, "nonce": nonce,
                     "proof": proof(self.secret, "server", version, hello["nonce"], nonce),
                     "max_frame": self.max_frame})
        try:
            auth = parse(reader.one())
            if not isinstance(auth, dict) or auth.get("type") != "auth":
                raise InvalidInput("expected the auth frame; nothing is accepted before "
                                   "authentication", requirement="DHP-TRN-006")
            check_frame(auth, "auth")
        except InvalidInput as exc:
            self._refuse(sock, peer, session, exc)
            return None
        expected = proof(self.secret, "client", version, hello["nonce"], nonce)
        if not hmac.compare_digest(expected, auth["proof"]):
            self._refuse(sock, peer, session, IntegrityError(
                "authentication failed: the proof does not match the shared secret",
                requirement="DHP-TRN-006"))
            return None
        _send(sock, {"type": "welcome", "session": session})
        return hello.get("shipper", "")

    def _receive(self, sock: socket.socket, reader: _Reader, peer: str, session: str) -> None:
        """Data frames until the shipper leaves: each batch of arrived frames is verified and
        stored in one durable transaction, then answered in order (DHP-TRN-017/018)."""
        while not self._stopping.is_set():
            try:
                lines = reader.frames(drain=True)  # one transaction for all that arrived
            except ConnectionError:
                return
            answers: list[dict | bytes | None] = []
            items, where = [], []
            closing: DHPError | None = None
            for line in lines:
                frame = None  # a line that does not parse has no id (not the previous frame's)
                try:
                    frame = parse(line)
                    if isinstance(frame, dict) and frame.get("type") == "bye" and len(frame) == 1:
                        closing = closing or _BYE
                        break
                    kind, frame_id, payload = data_frame(frame)
                except InvalidInput as exc:
                    frame_id = frame.get("id") if isinstance(frame, dict) else None
                    if not _is_id(frame_id):
                        closing = exc  # no id to answer to: the stream cannot be trusted
                        break
                    answers.append(_error_frame(exc, frame_id))
                    continue
                answers.append(None)
                items.append((kind, payload))
                where.append((len(answers) - 1, frame_id, kind, payload))
            if items:
                try:
                    outcomes = self.ingest.apply(items, parsed=True)
                except DHPError as exc:  # the store failed (not definite): the shipper retries
                    outcomes = [exc] * len(items)
                counts: collections.Counter[str] = collections.Counter()
                for (slot, frame_id, kind, payload), outcome in zip(where, outcomes,
                                                                     strict=True):
                    if isinstance(outcome, DHPError):
                        counts["rejected_frames"] += 1
                        log.warning("rejected %s frame %d on %s from %s (%s): %s", kind,
                                    frame_id, session, peer, _about(kind, payload), outcome)
                        answers[slot] = _error_frame(outcome, frame_id)
                    else:
                        counts["duplicates" if outcome == DUPLICATE else "stored"] += 1
                        answers[slot] = (b'{"type":"ack","id":%d,"duplicate":true}\n'
                                         % frame_id if outcome == DUPLICATE
                                         else b'{"type":"ack","id":%d}\n' % frame_id)
                with self._stats_mutex:
                    self.stats.update(counts)
            if answers:
                sock.sendall(b"".join(a if isinstance(a, bytes) else encode(a)
                                      for a in answers if a is not None))
            if closing is _BYE:
                _send(sock, {"type": "bye"})
                return
            if closing is not None:
                self._refuse(sock, peer, session, closing)
                return


_BYE = Internal("bye")


def _about(kind: str, payload: Any) -> str:
    if not isinstance(payload, dict):
        return "?"
    hid = str(payload.get("handoff_id", "?"))[:19]
    return f"{hid} seq {payload['seq']}" if kind == "checkpoint" and "seq" in payload else hid


def _addr(addr: Any) -> str:
    return f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) and len(addr) >= 2 else str(addr)


def _send(sock: socket.socket, frame: dict) -> None:
    try:
        sock.sendall(encode(frame))
    except OSError:
        pass


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
        self.last_error: BaseException | None = None
        self.connected = False
        self._cond = threading.Condition()
        self._announced: set[str] = set()
        self._closing = False
        self._sock: socket.socket | None = None
        self._inflight: collections.deque[tuple[int, int]] = collections.deque()
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
        """Wait until every queued frame is acknowledged or rejected; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._acked_off < self._end:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left if left is not None else 1.0)
            return True

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
            frames = []
            if always_envelope or hid not in self._announced:
                check_envelope(envelope)
                frames.append(("envelope", envelope))
            frames += items
            lines, ids = [], []
            for kind, payload in frames:
                key = "envelope" if kind == "envelope" else "record"
                line = encode({"type": kind, "id": self._next_id, key: payload})
                if len(line) - 1 > self.max_frame:
                    raise InvalidInput(f"a {kind} frame of {len(line) - 1} bytes exceeds the "
                                       f"maximum of {self.max_frame}", requirement="DHP-TRN-002")
                lines.append(line)
                ids.append(self._next_id)
                self._next_id += 1
            data = b"".join(lines)
            _write_all(self._fd, data)  # one append: survives kill -9 once it returns
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
        delay = self.backoff[0]
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
                delay = self.backoff[0]
                self._pump(self._sock, reader)
            except (OSError, DHPError, ssl.SSLError, ConnectionError, ValueError) as exc:
                self.last_error = exc
                log.info("shipper %s: %s; retrying in %.2fs", self.path.name, exc, delay)
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
                self._cond.wait(delay * random.uniform(0.5, 1.0))  # jitter: no stampede
            delay = min(delay * 2, self.backoff[1])
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
                    _send(sock, {"type": "bye"})
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
        acked, rejected = [], []
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
            self._cond.notify_all()
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
