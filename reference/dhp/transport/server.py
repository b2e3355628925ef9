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

import asyncio
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
from concurrent.futures import ThreadPoolExecutor
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
from dhp.observe import tracing
from dhp.store import Store
from dhp.transport.file import DUPLICATE, KINDS, Ingest

VERSIONS = ("1.0",)  # transport protocol versions this implementation speaks, preferred first
DEFAULT_PORT = 7461
DEFAULT_MAX_FRAME = 16 * 1024 * 1024  # bytes, LF excluded (DHP-TRN-002, DHP-SEC-002)
MIN_MAX_FRAME = 64 * 1024
HANDSHAKE_MAX_FRAME = 4096  # bytes of one frame before authentication (DHP-TRN-033)
MIN_SECRET = 32
MIN_DISTINCT_SECRET_BYTES = 10
_RECV = 256 * 1024
_STREAM_LIMIT = 16 * 1024  # asyncio pauses reading a connection whose buffer passes 2x this
_PREAUTH_READ = 8 * 1024  # bytes read from the socket at a time before authentication

log = logging.getLogger("dhp.transport")


# --- secrets and proofs ----------------------------------------------------------------------

def check_secret(secret: str | bytes) -> bytes:
    """The shared secret as bytes. The server's challenge lets anyone who connects test
    guesses of the secret offline, so only a machine-made secret is safe: one shorter than
    32 bytes, or with fewer than 10 distinct byte values (a word, a repeated pattern), is
    refused (DHP-TRN-013). `generate_secret()` makes a good one."""
    if isinstance(secret, str):
        secret = secret.encode("utf-8")
    if not isinstance(secret, (bytes, bytearray)):
        raise InvalidInput("the transport secret must be bytes or str", requirement="DHP-TRN-013")
    if len(secret) < MIN_SECRET:
        raise InvalidInput(f"the transport secret has {len(secret)} bytes; at least {MIN_SECRET} "
                           "are required: generate one with `dhp-transport --generate-secret "
                           "FILE`", requirement="DHP-TRN-013")
    if len(set(secret)) < MIN_DISTINCT_SECRET_BYTES:
        raise InvalidInput(f"the transport secret has only {len(set(secret))} distinct byte "
                           "values: it is guessable offline from one challenge; generate one "
                           "with `dhp-transport --generate-secret FILE`",
                           requirement="DHP-TRN-013")
    return bytes(secret)


def generate_secret() -> str:
    """A shared secret of 32 random bytes, as 64 hex digits (DHP-TRN-012)."""
    return secrets.token_hex(32)


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


def _too_large(limit: int, requirement: str = "DHP-TRN-002") -> FrameTooLarge:
    return FrameTooLarge(f"frame longer than the maximum of {limit} bytes",
                         requirement=requirement)


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

class _Frames:
    """LF-delimited frames from an asyncio stream. The buffer is a bytearray (appends and
    cuts without quadratic copies) and never holds more than `limit` bytes of one unfinished
    frame: `limit` is small before authentication and `max_frame` after (DHP-TRN-002)."""

    def __init__(self, reader: asyncio.StreamReader, limit: int, deadline: float):
        self.reader, self.limit, self.deadline = reader, limit, deadline
        self.requirement = "DHP-TRN-033"  # the limit before authentication
        self.buf = bytearray()

    async def next(self) -> list[bytes]:
        """Every complete frame that has arrived, waiting for at least one until `deadline`
        (loop time). Raises ConnectionError at EOF, FrameTooLarge for an oversized frame and
        asyncio.TimeoutError past the deadline."""
        loop = asyncio.get_running_loop()
        while True:
            end = self.buf.rfind(b"\n")
            if end >= 0:
                lines = bytes(self.buf[:end]).split(b"\n")
                del self.buf[:end + 1]
                if any(len(line) > self.limit for line in lines) or len(self.buf) > self.limit:
                    raise _too_large(self.limit, self.requirement)
                return lines
            if len(self.buf) > self.limit:
                raise _too_large(self.limit, self.requirement)
            try:
                data = await asyncio.wait_for(
                    self.reader.read(min(_RECV, self.limit + 1 - len(self.buf))),
                    max(0.0, self.deadline - loop.time()))
            except (ConnectionResetError, BrokenPipeError):  # asyncio: "Connection lost"
                raise ConnectionResetError("connection reset by peer" + (
                    " in the middle of a frame" if self.buf else "")) from None
            if not data:
                raise ConnectionError("connection closed by the peer"
                                      + (" in the middle of a frame" if self.buf else ""))
            self.buf += data

    async def one(self) -> bytes:
        """The next frame (handshake: exactly one is expected at a time)."""
        lines = await self.next()
        if len(lines) > 1:
            self.buf[:0] = b"\n".join(lines[1:]) + b"\n"
        return lines[0]


class _Refused(Exception):
    """The connection was refused (and logged); the handler just closes it."""


class TransportServer:
    """Receives shipped handoffs into the store at `root` (a folder, or a StoreBackend).

    One asyncio event loop in a background thread serves every connection (no thread per
    connection); store transactions run on a small pool of `ingest_threads`, where
    concurrent connections' batches share a transaction (group commit). Before
    authentication a frame may be at most `handshake_max_frame` bytes and the whole
    handshake must finish within `handshake_timeout`; one peer address may hold at most
    `max_per_peer` of the `max_connections` connections; an authenticated connection that
    completes no frame for `idle_timeout` seconds is closed (DHP-TRN-008, DHP-TRN-033,
    DHP-TRN-034).
    `port=0` picks a free port (read `server.port` after `bind()` or `start()`). Every
    connection and every rejection is logged on the `dhp.transport` logger, one line each."""

    def __init__(self, root: str | os.PathLike | StoreBackend, host: str = "127.0.0.1",
                 port: int = DEFAULT_PORT, *, secret: str | bytes,
                 ssl_context: ssl.SSLContext | None = None, max_frame: int = DEFAULT_MAX_FRAME,
                 handshake_timeout: float = 10.0, idle_timeout: float = 600.0,
                 max_connections: int = 512, max_per_peer: int = 64,
                 handshake_max_frame: int = HANDSHAKE_MAX_FRAME, ingest_threads: int = 4):
        if not isinstance(max_frame, int) or max_frame < MIN_MAX_FRAME:
            raise InvalidInput(f"max_frame must be an integer >= {MIN_MAX_FRAME}",
                               requirement="DHP-TRN-002")
        self.secret = check_secret(secret)
        if isinstance(root, StoreBackend):
            self.store, self._own_store = root, False
        else:
            self.store, self._own_store = Store(root), True
        self.host, self.port = host, port
        self.ssl_context = ssl_context
        self.max_frame, self.handshake_max_frame = max_frame, handshake_max_frame
        self.handshake_timeout, self.idle_timeout = handshake_timeout, idle_timeout
        self.max_connections, self.max_per_peer = max_connections, max_per_peer
        self.ingest = Ingest(self.store)
        self.stats: collections.Counter[str] = collections.Counter()
        self._pool = ThreadPoolExecutor(ingest_threads, thread_name_prefix="dhp-ingest")
        self._listener: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task] = set()
        self._open = 0
        self._per_peer: collections.Counter[str] = collections.Counter()
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
            sock.setblocking(False)
            self._listener = sock
            self.port = sock.getsockname()[1]
            log.info("listening on %s:%d (tls=%s, max_frame=%d, store=%s)", self.host,
                     self.port, "on" if self.ssl_context else "off", self.max_frame, self.store)
        return self

    def start(self) -> TransportServer:
        """Bind and serve in a background thread; returns self."""
        self.bind()
        ready = threading.Event()
        self._thread = threading.Thread(target=self.serve_forever, args=(ready,), daemon=True,
                                        name="dhp-transport")
        self._thread.start()
        ready.wait(30)
        return self

    def serve_forever(self, ready: threading.Event | None = None) -> None:
        """Serve until stop() (from another thread)."""
        self.bind()
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._main(loop, ready))
        finally:
            loop.close()

    async def _main(self, loop: asyncio.AbstractEventLoop, ready: threading.Event | None) -> None:
        self._loop, self._closed = loop, asyncio.Event()
        accepting = loop.create_task(self._accept_forever(loop))
        if ready is not None:
            ready.set()
        await self._closed.wait()
        accepting.cancel()
        assert self._listener is not None
        self._listener.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(accepting, *self._tasks, return_exceptions=True)

    async def _accept_forever(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self._listener is not None
        while True:
            try:
                conn, addr = await loop.sock_accept(self._listener)
            except OSError:
                await asyncio.sleep(0.05)  # e.g. out of file descriptors: do not spin
                continue
            task = loop.create_task(self._serve(loop, conn, addr))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def stop(self) -> None:
        """Stop accepting, cut every connection, close the store if this server opened it."""
        if self._loop is not None and self._closed is not None:
            try:
                self._loop.call_soon_threadsafe(self._closed.set)
            except RuntimeError:
                pass  # the loop has ended already
        if self._thread is not None:
            self._thread.join(10)
        elif self._listener is not None:
            self._listener.close()
        self._pool.shutdown(wait=True)
        if self._own_store:
            self.store.close()

    def __enter__(self) -> TransportServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- one connection ---

    async def _serve(self, loop: asyncio.AbstractEventLoop, conn: socket.socket,
                     addr: Any) -> None:
        peer, host = _addr(addr), str(addr[0]) if isinstance(addr, tuple) else "?"
        self._seq += 1
        session = f"c{self._seq}"
        self._count("connections")
        if self._open >= self.max_connections or self._per_peer[host] >= self.max_per_peer:
            why = ("too many connections" if self._open >= self.max_connections
                   else f"{host} holds {self.max_per_peer} connections already")
            self._reject(peer, session, why)
            conn.close()
            return
        self._open += 1
        self._per_peer[host] += 1
        writer = None
        try:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # One deadline for the whole handshake, TLS included: a peer sending a byte at a
            # time cannot hold the connection open (DHP-TRN-008).
            deadline = loop.time() + self.handshake_timeout
            try:
                reader, writer = await asyncio.wait_for(self._open_streams(loop, conn),
                                                        self.handshake_timeout)
            except (ssl.SSLError, OSError, ConnectionError) as exc:
                self._reject(peer, session, f"TLS handshake failed: {exc!r}")
                return
            except asyncio.TimeoutError:
                self._reject(peer, session, "handshake not completed within "
                             f"{self.handshake_timeout:g} s")
                return
            frames = _Frames(reader, self.handshake_max_frame, deadline)
            _read_size(writer, _PREAUTH_READ)  # small reads until the peer is authenticated
            try:
                name = await self._handshake(writer, frames, peer, session)
            except asyncio.TimeoutError:
                self._reject(peer, session, "handshake not completed within "
                             f"{self.handshake_timeout:g} s")
                return
            frames.limit, frames.requirement = self.max_frame, "DHP-TRN-002"
            _read_size(writer, _RECV)
            log.info("connection %s from %s: authenticated shipper %r (tls=%s)", session, peer,
                     name, "on" if self.ssl_context else "off")
            await self._receive(writer, frames, peer, session)
        except _Refused:
            pass
        except FrameTooLarge as exc:
            self._reject(peer, session, exc.message)
            await _send(writer, _error_frame(exc))
        except (ConnectionResetError, BrokenPipeError):  # asyncio says only "Connection lost"
            log.info("connection %s from %s closed: connection reset by peer", session, peer)
        except (OSError, ConnectionError, ssl.SSLError, asyncio.IncompleteReadError) as exc:
            log.info("connection %s from %s closed: %s", session, peer, exc or "reset")
        except Exception as exc:  # a bug must not kill the server, only this connection
            log.exception("connection %s from %s: internal error", session, peer)
            await _send(writer, _error_frame(Internal(f"internal error: {exc}")))
        finally:
            self._open -= 1
            self._per_peer[host] -= 1
            if not self._per_peer[host]:
                del self._per_peer[host]
            if writer is not None:
                writer.transport.abort()
            else:
                conn.close()

    async def _open_streams(self, loop: asyncio.AbstractEventLoop, conn: socket.socket) -> tuple:
        """Streams over an accepted socket, after the TLS handshake when TLS is on."""
        reader = asyncio.StreamReader(limit=_STREAM_LIMIT, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        transport, _ = await loop.connect_accepted_socket(
            lambda: protocol, conn, ssl=self.ssl_context,
            ssl_handshake_timeout=self.handshake_timeout if self.ssl_context else None)
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)

    def _count(self, key: str, n: int = 1) -> None:
        self.stats[key] += n  # only the loop's thread writes stats

    def _reject(self, peer: str, session: str, why: str) -> None:
        self._count("rejected_connections")
        log.warning("rejected connection %s from %s: %s", session, peer, why)

    async def _refuse(self, writer: asyncio.StreamWriter, peer: str, session: str,
                      exc: DHPError) -> None:
        self._reject(peer, session, f"{exc.code}: {exc.message}")
        await _send(writer, _error_frame(exc))
        raise _Refused

    async def _before_auth(self, writer: asyncio.StreamWriter, frames: _Frames, peer: str,
                           session: str, kind: str, why: str) -> dict:
        """The next handshake frame, which must be of `kind`; anything else refuses the
        connection (DHP-TRN-006)."""
        try:
            frame = parse(await frames.one())
            if not isinstance(frame, dict) or frame.get("type") != kind:
                raise InvalidInput(f"{why}; nothing is accepted before authentication",
                                   requirement="DHP-TRN-006")
            return check_frame(frame, kind)
        except InvalidInput as exc:
            await self._refuse(writer, peer, session, exc)
            raise  # not reached: _refuse raises

    async def _handshake(self, writer: asyncio.StreamWriter, frames: _Frames, peer: str,
                         session: str) -> str:
        """hello -> challenge -> auth -> welcome (DHP-TRN-004..006). Returns the shipper's
        name; raises _Refused after refusing the connection."""
        hello = await self._before_auth(writer, frames, peer, session, "hello",
                                        "the first frame of a connection must be hello")
        version = next((v for v in VERSIONS if v in hello["versions"]), None)
        if version is None:
            await self._refuse(writer, peer, session, UnsupportedVersion(
                f"no common transport version: the shipper speaks {hello['versions']}, this "
                f"server {list(VERSIONS)}", requirement="DHP-TRN-004"))
        nonce = secrets.token_hex(32)
        await _send(writer, {"type": "challenge", "version": version, "nonce": nonce,
                             "proof": proof(self.secret, "server", version, hello["nonce"],
                                            nonce),
                             "max_frame": self.max_frame})
        auth = await self._before_auth(writer, frames, peer, session, "auth",
                                       "expected the auth frame")
        expected = proof(self.secret, "client", version, hello["nonce"], nonce)
        if not hmac.compare_digest(expected, auth["proof"]):
            await self._refuse(writer, peer, session, IntegrityError(
                "authentication failed: the proof does not match the shared secret",
                requirement="DHP-TRN-006"))
        await _send(writer, {"type": "welcome", "session": session})
        return hello.get("shipper", "")

    async def _receive(self, writer: asyncio.StreamWriter, frames: _Frames, peer: str,
                       session: str) -> None:
        """Data frames until the shipper leaves: each batch of arrived frames is verified and
        stored in one durable transaction, then answered in order (DHP-TRN-017/018). A
        connection that completes no frame within idle_timeout is closed (DHP-TRN-035)."""
        loop = asyncio.get_running_loop()
        while True:
            frames.deadline = loop.time() + self.idle_timeout
            try:
                lines = await frames.next()
            except asyncio.TimeoutError:
                log.info("connection %s from %s closed: no complete frame in %g s", session,
                         peer, self.idle_timeout)
                return
            except ConnectionError as exc:
                log.info("connection %s from %s closed: %s", session, peer, exc or "reset")
                return
            answers, items, where, closing = self._read_batch(lines, peer, session)
            if items:
                started = time.time_ns()
                try:
                    outcomes = await loop.run_in_executor(
                        self._pool, lambda items=items: self.ingest.apply(items, parsed=True))
                except DHPError as exc:  # the store failed (not definite): the shipper retries
                    outcomes = [exc] * len(items)
                for (slot, frame_id, kind, payload), outcome in zip(where, outcomes,
                                                                     strict=True):
                    if isinstance(outcome, DHPError):
                        self._count("rejected_frames")
                        log.warning("rejected %s frame %d on %s from %s (%s): %s", kind,
                                    frame_id, session, peer, _about(kind, payload), outcome)
                        answers[slot] = _error_frame(outcome, frame_id)
                    else:
                        self._count("duplicates" if outcome == DUPLICATE else "stored")
                        answers[slot] = (b'{"type":"ack","id":%d,"duplicate":true}\n'
                                         % frame_id if outcome == DUPLICATE
                                         else b'{"type":"ack","id":%d}\n' % frame_id)
                if tracing.configured():
                    tracing.transport("transport.ingest", [
                        tracing.frame_of(kind, payload, started, outcome)
                        for (_slot, _id, kind, payload), outcome in zip(where, outcomes,
                                                                         strict=True)],
                        **{"dhp.peer": peer})
            if answers:
                writer.write(b"".join(a if isinstance(a, bytes) else encode(a)
                                      for a in answers if a is not None))
                await writer.drain()
            if closing is _BYE:
                await _send(writer, {"type": "bye"})
                return
            if closing is not None:
                await self._refuse(writer, peer, session, closing)

    def _read_batch(self, lines: list[bytes], peer: str, session: str) -> tuple:
        """Parse a batch of frames: the answer slots, the data items for ingest, where each
        item's answer goes, and why the connection must close (bye, or a frame without an
        id to answer to). Frames refused for their shape are answered and logged."""
        answers: list[dict | bytes | None] = []
        items, where = [], []
        closing: DHPError | None = None
        for line in lines:
            frame = None  # a line that does not parse has no id (not the previous frame's)
            try:
                try:
                    frame = parse(line)
                    if isinstance(frame, dict) and frame.get("type") == "bye" \
                            and len(frame) == 1:
                        closing = _BYE
                        break
                    kind, frame_id, payload = data_frame(frame)
                except RecursionError:
                    raise InvalidInput("frame nested too deeply to check",
                                       requirement="DHP-SEC-002") from None
            except InvalidInput as exc:
                frame_id = frame.get("id") if isinstance(frame, dict) else None
                if not _is_id(frame_id):
                    closing = exc  # no id to answer to: the stream cannot be trusted
                    break
                self._count("rejected_frames")
                log.warning("rejected frame %d on %s from %s: %s", frame_id, session, peer, exc)
                answers.append(_error_frame(exc, frame_id))
                continue
            answers.append(None)
            items.append((kind, payload))
            where.append((len(answers) - 1, frame_id, kind, payload))
        return answers, items, where, closing


_BYE = Internal("bye")


def _about(kind: str, payload: Any) -> str:
    if not isinstance(payload, dict):
        return "?"
    hid = str(payload.get("handoff_id", "?"))[:19]
    return f"{hid} seq {payload['seq']}" if kind == "checkpoint" and "seq" in payload else hid


def _addr(addr: Any) -> str:
    return f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) and len(addr) >= 2 else str(addr)


def _read_size(writer: asyncio.StreamWriter, size: int) -> None:
    """How much the transport reads from the socket at a time (asyncio's default is 256 KiB):
    small before authentication, so idle junk connections cost little memory. A TLS
    transport reads through its own layer and keeps its default."""
    transport = writer.transport
    if hasattr(transport, "max_size"):
        transport.max_size = size


async def _send(writer: asyncio.StreamWriter, frame: dict) -> None:
    try:
        writer.write(encode(frame))
        await asyncio.wait_for(writer.drain(), 10)
    except (OSError, ConnectionError, asyncio.TimeoutError):
        pass


def _send_blocking(sock: socket.socket, frame: dict) -> None:
    """A frame on a blocking socket (the shipper's side)."""
    try:
        sock.sendall(encode(frame))
    except OSError:
        pass
