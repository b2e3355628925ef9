"""Shared pieces of the transport tests: handoffs and chains to ship, a raw protocol client,
a fake server, a TCP proxy that can cut connections, TLS certificates, server processes."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from dhp.core import chain
from dhp.core.envelope import make_envelope, make_intent
from dhp.transport import server as net
from dhp.transport.shipper import connect

SECRET = b"transport-test-secret-0123456789"
HERE = Path(__file__).resolve().parent
OUTPUT_SCHEMA = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}


def envelope(tag: str = "a", budget: dict | None = None) -> dict:
    intent = make_intent("test.ship", {"tag": tag}, OUTPUT_SCHEMA, budget)
    return make_envelope(intent)


def records(env: dict, count: int, *, fence: int = 1, start: int = 1, prev: str | None = None,
            pad: int = 0) -> list[dict]:
    """`count` chained checkpoint records of `env`'s handoff from seq `start`."""
    hid = env["handoff_id"]
    prev = prev or hid
    out = []
    for seq in range(start, start + count):
        record = chain.make_record(hid, seq, fence, {"step": seq, "pad": "x" * pad}, 0.5, prev)
        out.append(record)
        prev = record["hash"]
    return out


def result_record(env: dict, last: dict | None, fence: int = 1, n: int = 1) -> dict:
    hid = env["handoff_id"]
    return chain.make_result_record(hid, fence, {"n": n}, last["hash"] if last else hid)


def frame(kind: str, frame_id: int, payload) -> dict:
    return {"type": kind, "id": frame_id, ("envelope" if kind == "envelope" else "record"):
            payload}


class RawClient:
    """Speaks the protocol by hand, so a test can send anything at any point."""

    def __init__(self, port: int, secret: bytes | None = SECRET, *, host: str = "127.0.0.1",
                 timeout: float = 5.0):
        if secret is None:  # no handshake at all
            self.sock = socket.create_connection((host, port), timeout=timeout)
            self.reader = net._Reader(self.sock, net.DEFAULT_MAX_FRAME)
        else:
            self.sock, self.reader, self.challenge = connect(host, port, secret,
                                                                 timeout=timeout)

    def send(self, *frames) -> None:
        self.sock.sendall(b"".join(f if isinstance(f, bytes) else net.encode(f)
                                   for f in frames))

    def answers(self, count: int) -> list[dict]:
        out: list[dict] = []
        while len(out) < count:
            out += [net.parse(line) for line in self.reader.frames()]
        return out

    def closed(self, timeout: float = 5.0) -> bool:
        """True if the server closes the connection (after any frames it still sends)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                self.reader.frames()
        except ConnectionError:
            return True
        except OSError:
            return False

    def close(self) -> None:
        self.sock.close()


class FakeServer:
    """A server that answers the handshake with a chosen secret and records every byte the
    shipper sends; `answer(frame)` returns the reply to a data frame (None: stay silent)."""

    def __init__(self, secret: bytes = SECRET, answer=None):
        self.secret, self.answer = secret, answer
        self.received = bytearray()
        self.frames: list[dict] = []
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        reader = net._Reader(conn, net.DEFAULT_MAX_FRAME)
        original = conn.recv

        def recording_recv(n: int) -> bytes:
            data = original(n)
            self.received += data
            return data

        reader.sock = type("S", (), {"recv": staticmethod(recording_recv)})()
        try:
            hello = net.parse(reader.one())
            nonce = secrets.token_hex(32)
            conn.sendall(net.encode({
                "type": "challenge", "version": "1.0", "nonce": nonce, "max_frame": 1 << 24,
                "proof": net.proof(self.secret, "server", "1.0", hello["nonce"], nonce)}))
            auth = net.parse(reader.one())
            self.frames.append(auth)
            conn.sendall(net.encode({"type": "welcome"}))
            while True:
                for line in reader.frames():
                    f = net.parse(line)
                    self.frames.append(f)
                    reply = self.answer(f) if self.answer else {"type": "ack", "id": f["id"]}
                    if reply == "close":
                        conn.close()
                        return
                    if reply is not None:
                        conn.sendall(net.encode(reply))
        except (OSError, ConnectionError, ValueError, KeyError):
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._stop = True
        self.listener.close()


class Proxy:
    """A TCP forwarder in front of a server; `cut()` drops every connection at once."""

    def __init__(self, port: int):
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.mutex = threading.Lock()
        self.cuts = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                a, _ = self.listener.accept()
            except OSError:
                return
            try:
                b = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                a.close()
                continue
            with self.mutex:
                self.pairs.append((a, b))
            for x, y in ((a, b), (b, a)):
                threading.Thread(target=self._pipe, args=(x, y), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        with self.mutex:
            pairs, self.pairs = self.pairs, []
        for a, b in pairs:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()
                except OSError:
                    pass
        self.cuts += 1

    def close(self) -> None:
        self.listener.close()
        self.cut()


def make_cert(folder: Path, name: str = "server") -> tuple[str, str] | None:
    """A self-signed certificate for localhost / 127.0.0.1 (cert, key), or None when the
    openssl command is missing."""
    if shutil.which("openssl") is None:
        return None
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                    f"/CN={name}", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return str(cert), str(key)


def make_signed_cert(folder: Path, authority: tuple[str, str], name: str) -> tuple[str, str]:
    """A certificate for `name` (cert, key) signed by `authority` (a make_cert pair), e.g. a
    client's certificate for mutual TLS. Needs the openssl command, like make_cert."""
    cert, key, request = folder / f"{name}.pem", folder / f"{name}.key", folder / f"{name}.csr"
    subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-subj", f"/CN={name}",
                    "-keyout", str(key), "-out", str(request)], check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", str(request), "-CA", authority[0],
                    "-CAkey", authority[1], "-set_serial", "2", "-days", "2", "-out", str(cert)],
                   check=True, capture_output=True)
    return str(cert), str(key)


def secret_file(folder: Path) -> str:
    path = folder / "secret"
    path.write_bytes(SECRET + b"\n")
    os.chmod(path, 0o600)
    return str(path)


class ServerProcess:
    """`dhp-transport` (python -m dhp.cli.transport) as a child process."""

    def __init__(self, root: Path, secret_path: str, port: int = 0, *extra: str,
                 quiet: bool = True):
        self.root, self.secret_path, self.extra = root, secret_path, extra
        self.port, self.quiet = port, quiet
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        cmd = [sys.executable, "-m", "dhp.cli.transport", "--root", str(self.root), "--create",
               "--port", str(self.port), "--secret-file", self.secret_path,
               *(["-q"] if self.quiet else []), *self.extra]
        deadline = time.monotonic() + 20
        while True:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True)
            line = self.proc.stdout.readline()
            if line.startswith("listening on"):
                self.port = int(line.rsplit(":", 1)[1])
                return
            self.proc.wait()
            if time.monotonic() > deadline:  # e.g. the port is still held
                raise RuntimeError(f"server did not start: {self.proc.stderr.read()}")
            time.sleep(0.1)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()

    def stop(self) -> str:
        """Stop (SIGTERM) and return what the server logged."""
        log = ""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            log = self.proc.stderr.read()
            self.proc.stdout.close()
            self.proc.stderr.close()
        return log
