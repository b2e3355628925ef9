"""The TCP transport (spec: transport, DHP-TRN-*): the frame codec shared by both ends and
`TransportServer` on the peer (the worker's end, `NetShipper`, is in dhp.transport.shipper).

Frames are JSON objects, one per LF-terminated line (schemas/transport-frame.json). A
connection opens with a hello that negotiates the version and authenticates both sides by
HMAC-SHA256 challenge-response over a shared secret; the secret itself never crosses the
wire. TLS (the standard library's `ssl`) can wrap the connection, with the server's
certificate verified by default and client certificates possible.

The server answers every data frame (envelope, checkpoint, result) with an ack or an error,
in order. It reads whatever frames have arrived, verifies and stores them in one store
transaction (dhp.transport.file.Ingest), and acknowledges them only after that transaction is
durable: one fsync covers a batch, which is what makes pipelined shipping fast.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import json
import logging
import os
import secrets
import select
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any

from dhp.core import schemas
from dhp.core.backend import StoreBackend
from dhp.core.canonical import STRICT_DECODER
from dhp.core.errors import (
    DHPError,
    IntegrityError,
    Internal,
    InvalidInput,
    UnsupportedVersion,
)
from dhp.store import Store
from dhp.transport.file import DUPLICATE, KINDS, Ingest

VERSIONS = ("1.0",)  # transport protocol versions this implementation speaks, preferred first
DEFAULT_PORT = 7461
DEFAULT_MAX_FRAME = 16 * 1024 * 1024  # bytes, LF excluded (DHP-TRN-002, DHP-SEC-002)
MIN_MAX_FRAME = 64 * 1024
MIN_SECRET = 16
_RECV = 256 * 1024

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
    """Read a secret file: its bytes without a trailing line break. Warns when the file is
    open to group or others: it belongs to the service account alone (DHP-TRN-012)."""
    mode = os.stat(path).st_mode
    if os.name == "posix" and mode & 0o077:
        log.warning("the secret file %s is accessible to group or others (mode %o); "
                    "restrict it to its owner: chmod 600 %s", path, mode & 0o777, path)
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
            _shutdown(conn)
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
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            self._reject(peer, session, "handshake not completed within "
                         f"{self.handshake_timeout:g} s")
            _shutdown(raw)  # wakes the blocked read or write of this connection's thread

        # One deadline for the whole handshake, TLS included, rather than a timeout per read:
        # a peer sending a byte at a time cannot hold the connection open (DHP-TRN-008).
        deadline = threading.Timer(self.handshake_timeout, expire)
        deadline.daemon = True
        deadline.start()
        try:
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.ssl_context is not None:
                try:
                    sock = self.ssl_context.wrap_socket(raw, server_side=True)
                except (ssl.SSLError, OSError) as exc:
                    if not expired.is_set():
                        self._reject(peer, session, f"TLS handshake failed: {exc}")
                    return
            reader = _Reader(sock, self.max_frame)
            name = self._handshake(sock, reader, peer, session)
            deadline.cancel()
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
            deadline.cancel()
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

    def _before_auth(self, sock: socket.socket, reader: _Reader, peer: str, session: str,
                     kind: str, why: str) -> dict | None:
        """The next handshake frame, which must be of `kind`; anything else refuses the
        connection (DHP-TRN-006) and gives None."""
        try:
            frame = parse(reader.one())
            if not isinstance(frame, dict) or frame.get("type") != kind:
                raise InvalidInput(f"{why}; nothing is accepted before authentication",
                                   requirement="DHP-TRN-006")
            return check_frame(frame, kind)
        except InvalidInput as exc:
            self._refuse(sock, peer, session, exc)
            return None

    def _handshake(self, sock: socket.socket, reader: _Reader, peer: str,
                   session: str) -> str | None:
        """hello -> challenge -> auth -> welcome (DHP-TRN-004..006). Returns the shipper's
        name, or None after refusing the connection."""
        hello = self._before_auth(sock, reader, peer, session, "hello",
                                  "the first frame of a connection must be hello")
        if hello is None:
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
        auth = self._before_auth(sock, reader, peer, session, "auth", "expected the auth frame")
        if auth is None:
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


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _send(sock: socket.socket, frame: dict) -> None:
    try:
        sock.sendall(encode(frame))
    except OSError:
        pass
