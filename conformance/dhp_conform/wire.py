"""The kit's own end of the TCP transport (spec/transport.md), written from the spec and
schemas/transport-frame.json alone: frames, the HMAC handshake, a minimal client (the kit as a
shipper) and a minimal server (the kit as a peer receiving from an implementation's shipper).

Both ends keep every byte they receive, so a check can show the exact frames as evidence and
search them for a secret that must never cross the wire (DHP-TRN-005).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from . import oracle

VERSION = "1.0"
DEFAULT_MAX_FRAME = 16 * 1024 * 1024  # DHP-TRN-002
READ_LIMIT = 64 * 1024 * 1024  # the kit never buffers more than this of one frame


def new_nonce() -> str:
    """32 secure random bytes as 64 lowercase hex digits (DHP-TRN-005)."""
    return secrets.token_hex(32)


def proof(secret: bytes, role: str, version: str, client_nonce: str, server_nonce: str) -> str:
    """HMAC-SHA256(secret, "dhp-transport/" V " " role " " Nc " " Ns), hex (DHP-TRN-005)."""
    message = f"dhp-transport/{version} {role} {client_nonce} {server_nonce}".encode("ascii")
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def encode(frame: dict) -> bytes:
    return json.dumps(frame, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"


def frame_problems(frame: Any) -> list[str]:
    """Violations of schemas/transport-frame.json (DHP-TRN-001)."""
    return oracle.schema_errors("transport-frame", frame)


class Closed(Exception):
    """The peer closed the connection (or reset it) before a whole frame arrived."""


class Conn:
    """One TCP (or TLS) connection read as LF-terminated frames, with every byte kept."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""
        self.received = bytearray()  # everything read, for evidence and secret searches
        self.sent = bytearray()
        self.eof = False

    @classmethod
    def open(cls, host: str, port: int, timeout: float = 5.0,
             context: ssl.SSLContext | None = None) -> Conn:
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if context is not None:
            sock = context.wrap_socket(sock, server_hostname=host)
        return cls(sock)

    def send(self, data: dict | bytes) -> bool:
        """Send a frame (dict) or raw bytes; False when the peer has closed the connection."""
        raw = encode(data) if isinstance(data, dict) else data
        try:
            self.sock.sendall(raw)
        except OSError:
            return False
        self.sent += raw
        return True

    def _fill(self, deadline: float) -> bool:
        """Read once more; False at EOF, reset or deadline."""
        if self.eof:
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        pending = isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()
        if not pending and not select.select([self.sock], [], [], left)[0]:
            return False
        try:
            self.sock.settimeout(max(left, 0.01))
            data = self.sock.recv(256 * 1024)
        except (OSError, ssl.SSLError):
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        self.received += data
        return True

    def line(self, timeout: float = 5.0) -> bytes | None:
        """The next frame's bytes without its LF; None when the connection ended or nothing
        came in time (then `eof` tells which)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            if len(self.buf) > READ_LIMIT or not self._fill(deadline):
                return None
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def frame(self, timeout: float = 5.0) -> Any:
        """The next frame parsed (any JSON value, or the raw bytes if not JSON); None as
        `line`."""
        raw = self.line(timeout)
        if raw is None:
            return None
        try:
            return json.loads(raw.decode("utf-8"))
        except ValueError:
            return raw

    def closed_within(self, timeout: float) -> bool:
        """Whether the peer closes the connection within `timeout`, reading (and keeping)
        whatever else it sends meanwhile."""
        deadline = time.monotonic() + timeout
        while not self.eof and time.monotonic() < deadline:
            self._fill(deadline)
        return self.eof

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


# --- the kit as a shipper ------------------------------------------------------------------

def hello_frame(nonce: str | None = None, versions: list[str] | None = None) -> dict:
    return {"type": "hello", "versions": versions or [VERSION], "nonce": nonce or new_nonce(),
            "shipper": "dhp-conform"}


@dataclass
class Session:
    """An authenticated connection of the kit as a shipper."""
    conn: Conn
    hello: dict
    challenge: Any
    welcome: Any
    auth: dict | None = None

    @property
    def ok(self) -> bool:
        return isinstance(self.welcome, dict) and self.welcome.get("type") == "welcome"


def handshake(host: str, port: int, secret: bytes, *, timeout: float = 5.0,
              context: ssl.SSLContext | None = None) -> Session:
    """hello, challenge, auth, welcome; the caller judges each step from the Session."""
    conn = Conn.open(host, port, timeout, context)
    hello = hello_frame()
    conn.send(hello)
    challenge = conn.frame(timeout)
    session = Session(conn, hello, challenge, None)
    if not isinstance(challenge, dict) or challenge.get("type") != "challenge":
        return session
    version, server_nonce = challenge.get("version"), challenge.get("nonce")
    if not isinstance(version, str) or not isinstance(server_nonce, str):
        return session
    session.auth = {"type": "auth", "proof": proof(secret, "client", version, hello["nonce"],
                                                    server_nonce)}
    conn.send(session.auth)
    session.welcome = conn.frame(timeout)
    return session


def answers(conn: Conn, count: int, timeout: float = 5.0) -> list[Any]:
    """Up to `count` answers (fewer if the connection ends or goes silent)."""
    out = []
    for _ in range(count):
        frame = conn.frame(timeout)
        if frame is None:
            break
        out.append(frame)
    return out


# --- the kit as a server --------------------------------------------------------------------

@dataclass
class Peer:
    """What the kit's server saw on one connection."""
    number: int
    hello: Any = None
    auth: Any = None
    proof_ok: bool | None = None  # the shipper's proof, when one came
    frames: list[Any] = field(default_factory=list)  # every frame after the handshake
    acked: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # handshake or frame defects
    raw: bytearray = field(default_factory=bytearray)
    cut: bool = False  # the kit dropped the connection on purpose

    @property
    def data(self) -> list[dict]:
        return [f for f in self.frames if isinstance(f, dict)
                and f.get("type") in ("envelope", "checkpoint", "result")]


class Server:
    """The kit as a transport server, on 127.0.0.1 and a free port (or `port`).

    `acks[i]` bounds how many data frames connection number i (0-based) gets acknowledged
    before the kit cuts it (None, or beyond the list: no bound). With the wrong secret the
    kit's challenge carries a proof the shipper cannot verify; a correct shipper then sends
    nothing more (DHP-TRN-007)."""

    def __init__(self, secret: bytes, *, acks: list[int | None] | None = None,
                 max_frame: int = DEFAULT_MAX_FRAME, port: int = 0):
        self.secret, self.acks, self.max_frame = secret, list(acks or []), max_frame
        self.peers: list[Peer] = []
        self._lock = threading.Lock()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._conns: list[Conn] = []
        self._thread = threading.Thread(target=self._accept, daemon=True,
                                        name=f"conform-wire-{self.port}")
        self._thread.start()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        try:
            self._listener.close()
        except OSError:
            pass
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            conn.close()
        self._thread.join(2)

    def received(self) -> bytes:
        with self._lock:
            return b"".join(bytes(p.raw) for p in self.peers)

    def wait(self, condition, timeout: float) -> bool:
        """Poll `condition()` (over self.peers) until true or `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if condition():
                    return True
            time.sleep(0.02)
        with self._lock:
            return bool(condition())

    def _accept(self) -> None:
        self._listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                peer = Peer(len(self.peers))
                self.peers.append(peer)
                conn = Conn(sock)
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn, peer), daemon=True).start()

    def _serve(self, conn: Conn, peer: Peer) -> None:
        try:
            self._session(conn, peer)
        finally:
            with self._lock:
                peer.raw[:] = conn.received
            conn.close()

    def _keep(self, conn: Conn, peer: Peer) -> None:
        with self._lock:
            peer.raw[:] = conn.received

    def _session(self, conn: Conn, peer: Peer) -> None:
        hello = conn.frame(5.0)
        with self._lock:
            peer.hello = hello
        problems = frame_problems(hello) if isinstance(hello, dict) else ["not a JSON object"]
        if problems or hello.get("type") != "hello":
            peer.problems.append(f"first frame is not a valid hello: {hello!r:.200} "
                                 f"{problems[:3]}")
            return
        nonce = new_nonce()
        conn.send({"type": "challenge", "version": VERSION, "nonce": nonce,
                   "proof": proof(self.secret, "server", VERSION, hello["nonce"], nonce),
                   "max_frame": self.max_frame})
        auth = conn.frame(5.0)
        self._keep(conn, peer)
        with self._lock:
            peer.auth = auth
        if auth is None:
            return
        if not isinstance(auth, dict) or auth.get("type") != "auth" or frame_problems(auth):
            peer.problems.append(f"second frame is not a valid auth: {auth!r:.200}")
            with self._lock:
                peer.frames.append(auth)
            return
        expected = proof(self.secret, "client", VERSION, hello["nonce"], nonce)
        peer.proof_ok = hmac.compare_digest(expected, auth["proof"])
        if not peer.proof_ok:
            conn.send({"type": "error", "error": {"code": "integrity_error", "definite": True,
                                                  "message": "authentication failed"}})
            return
        conn.send({"type": "welcome", "session": f"k{peer.number}"})
        limit = self.acks[peer.number] if peer.number < len(self.acks) else None
        while not self._stop.is_set():
            frame = conn.frame(0.5)
            self._keep(conn, peer)
            if frame is None:
                if conn.eof:
                    return
                continue
            with self._lock:
                peer.frames.append(frame)
            if not isinstance(frame, dict):
                peer.problems.append(f"a frame that is not a JSON object: {frame!r:.200}")
                return
            problems = frame_problems(frame)
            if problems:
                peer.problems.append(f"frame {json.dumps(frame)[:200]} is not valid against "
                                     f"schemas/transport-frame.json: {problems[:3]}")
            if frame.get("type") == "bye":
                conn.send({"type": "bye"})
                return
            if frame.get("type") not in ("envelope", "checkpoint", "result"):
                peer.problems.append(f"unexpected {frame.get('type')!r} frame after welcome")
                return
            if limit is not None and len(peer.acked) >= limit:
                with self._lock:
                    peer.cut = True
                return  # cut mid-stream: this frame and any behind it stay unanswered
            conn.send({"type": "ack", "id": frame.get("id")})
            with self._lock:
                peer.acked.append(frame.get("id"))
