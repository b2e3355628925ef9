"""One bar for every HTTP server DHP runs (dhp-mcp, dhp-a2a, the dashboard, metrics): who may
call, from which Host and Origin, with how big a body, and how many requests at once.

`Access` is the credential policy: bearer tokens (each token its own principal, named by a
hash of it, never the token itself), operator tokens, and the Host/Origin check. Every server
asks `Access.admit` the same question; `Guard` asks it for an ASGI app, and also bounds the
request body, the time to receive it, and the open requests (streams) in total and per client
address. Connections and the time to receive a request's headers are bounded where they are
accepted (`dhp.transport.http_serve` for ASGI, the dashboard's server for the standard
library's).

Why a Host check on loopback: a web page can make a browser send requests to 127.0.0.1
through a name it controls (DNS rebinding); the Host header then names the attacker's host.
Only IP literals, `localhost` and names given with `--allow-host` are accepted there.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import ipaddress
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dhp.core.errors import InvalidInput

LOCAL = "local"  # the principal of every caller on loopback when no token is set


@dataclass(frozen=True)
class Limits:
    """What one server accepts at once; every refusal names the limit and its value."""
    max_body: int = 4 * 1024 * 1024      # bytes of one request body
    read_timeout: float = 10.0           # seconds to receive a request's headers and body
    idle_timeout: float = 30.0           # seconds a keep-alive connection may sit unused
    max_connections: int = 512
    max_connections_per_address: int = 128
    max_streams: int = 512               # open requests (an SSE stream is one while open)
    max_streams_per_address: int = 128


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def principal_of(token: str) -> str:
    """A token's principal: a name derived from it, so logs and task maps never hold it."""
    return "token-" + hashlib.sha256(token.encode()).hexdigest()[:12]


def read_tokens(path: Path) -> list[str]:
    """One token per non-empty line (`#` starts a comment line)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InvalidInput(f"cannot read the token file {path}: {exc.strerror}") from None
    tokens = [t.strip() for t in lines if t.strip() and not t.lstrip().startswith("#")]
    if not tokens:
        raise InvalidInput(f"the token file {path} holds no token")
    short = [t for t in tokens if len(t) < 16]
    if short:
        raise InvalidInput(f"the token file {path} holds a token of {len(short[0])} "
                           "characters: use at least 16 (e.g. `openssl rand -hex 24`)")
    return tokens


@dataclass
class Decision:
    status: int             # 200 when admitted
    message: str = ""
    principal: str = LOCAL
    operator: bool = False


@dataclass
class Access:
    """Who may call a server bound at `host`."""
    host: str
    tokens: dict[str, str] = field(default_factory=dict)   # token -> principal
    operators: frozenset[str] = frozenset()                 # principals with every right
    allowed_hosts: frozenset[str] = frozenset()             # names accepted in Host/Origin
    realm: str = "dhp"

    def __post_init__(self) -> None:
        self._expected = {f"Bearer {t}".encode(): p for t, p in self.tokens.items()}

    @property
    def needs_token(self) -> bool:
        return bool(self.tokens)

    def check_bind(self) -> None:
        """Refuse to serve off loopback without a credential."""
        if not self.tokens and not loopback(self.host):
            raise InvalidInput(f"serving on {self.host}, off loopback, needs a bearer token: "
                               "give --token-file FILE (or the token variable)")

    def host_allowed(self, value: str) -> bool:
        """Whether a Host header (or an Origin's host[:port]) may reach this server."""
        name = urlsplit(f"//{value}").hostname if value else None
        if name is None:
            return False
        if name in self.allowed_hosts:
            return True
        if loopback(self.host):  # DNS rebinding: only literal or local names
            return loopback(name)
        if not self.allowed_hosts:
            return True  # off loopback the token decides; --allow-host narrows it
        return False

    def admit(self, host: str | None, origin: str | None,
              authorization: bytes | None) -> Decision:
        if host is None or not self.host_allowed(host):
            return Decision(403, f"the Host header {host!r} is not allowed here: a server on "
                                 "loopback answers only loopback addresses and localhost "
                                 "(add names with --allow-host)")
        if origin and origin != "null":
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or not self.host_allowed(parts.netloc) \
                    or (not loopback(self.host) and not self.allowed_hosts
                        and parts.netloc != host):
                return Decision(403, f"the Origin {origin!r} is not allowed here (a page of "
                                     "another site may not call this server)")
        if not self._expected:
            return Decision(200)
        principal = None
        for expected, name in self._expected.items():
            if hmac.compare_digest(authorization or b"", expected):
                principal = name
        if principal is None:
            return Decision(401, "a valid bearer token is required (Authorization: Bearer "
                                 "TOKEN)")
        return Decision(200, principal=principal, operator=principal in self.operators)


def add_access_options(parser: Any, token_env: str, *, operators: bool = True) -> None:
    parser.add_argument("--token-file", type=Path, action="append", default=[],
                        help="bearer tokens, one per line, each its own principal (or the "
                             f"environment variable {token_env}); required unless HOST is a "
                             "loopback address; may be repeated")
    if operators:
        parser.add_argument("--operator-token-file", type=Path, action="append", default=[],
                            help="tokens whose holders may act on every principal's work")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="a host name clients may use in Host/Origin besides IP "
                             "literals and localhost (e.g. behind a reverse proxy)")


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"want a positive whole number, not {text!r}")
    return int(text)


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"want a positive number of seconds, not {text!r}")
    return value


def add_limit_options(parser: Any, streams: str = "open requests and streams") -> None:
    """--read-timeout, --idle-timeout and the connection and stream caps (Limits)."""
    limits = Limits()
    parser.add_argument("--read-timeout", type=positive_seconds, default=limits.read_timeout,
                        metavar="SECONDS", help="a request's headers and body must arrive "
                        f"within this (default {limits.read_timeout:g})")
    parser.add_argument("--idle-timeout", type=positive_seconds, default=limits.idle_timeout,
                        metavar="SECONDS", help="an unused keep-alive connection is closed "
                        f"after this (default {limits.idle_timeout:g})")
    for name, what in (("max_connections", "connections at once"),
                       ("max_connections_per_address", "connections at once from one address"),
                       ("max_streams", f"{streams} at once"),
                       ("max_streams_per_address", f"{streams} at once from one address")):
        default = getattr(limits, name)
        parser.add_argument(f"--{name.replace('_', '-')}", type=positive_int, default=default,
                            metavar="N", help=f"the most {what} (default {default})")


def limits_from(args: Any) -> Limits:
    """The Limits of add_limit_options' options."""
    return Limits(read_timeout=args.read_timeout, idle_timeout=args.idle_timeout,
                  max_connections=args.max_connections,
                  max_connections_per_address=args.max_connections_per_address,
                  max_streams=args.max_streams,
                  max_streams_per_address=args.max_streams_per_address)


def access_from(args: Any, host: str, token_env: str, realm: str) -> Access:
    """The Access of a server bound at `host`, from add_access_options' options."""
    tokens = [t for path in args.token_file for t in read_tokens(path)]
    operator_tokens = [t for path in getattr(args, "operator_token_file", [])
                       for t in read_tokens(path)]
    if os.environ.get(token_env):
        tokens.append(os.environ[token_env].strip())
    named = {t: principal_of(t) for t in tokens + operator_tokens}
    access = Access(host, tokens=named,
                    operators=frozenset(principal_of(t) for t in operator_tokens),
                    allowed_hosts=frozenset(h.lower() for h in args.allow_host), realm=realm)
    access.check_bind()
    return access


def _reply(status: int, message: str, realm: str) -> tuple[dict, dict]:
    headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
    if status == 401:
        headers.append((b"www-authenticate", f'Bearer realm="{realm}"'.encode()))
    body = json.dumps({"error": message}).encode()
    headers.append((b"content-length", str(len(body)).encode()))
    return ({"type": "http.response.start", "status": status, "headers": headers},
            {"type": "http.response.body", "body": body})


class BodyTooLarge(Exception):
    pass


class Guard:
    """ASGI middleware: admits a request (Host, Origin, token), bounds its body and the time
    to receive it, and counts open requests in total and per client address. The admitted
    principal is `scope["dhp.principal"]`, operator rights `scope["dhp.operator"]`."""

    def __init__(self, app: Any, access: Access, limits: Limits):
        self.app, self.access, self.limits = app, access, limits
        self.open: Counter[str] = Counter()
        self.open_total = 0

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        decision = self.access.admit(
            _text(headers.get(b"host")), _text(headers.get(b"origin")),
            headers.get(b"authorization"))
        if decision.status != 200:
            return await self._refuse(send, decision.status, decision.message)
        length = headers.get(b"content-length", b"0")
        if not length.isdigit() or int(length) > self.limits.max_body:
            return await self._refuse(send, 413, self._too_large())
        address = (scope.get("client") or ("?", 0))[0]
        if self.open_total >= self.limits.max_streams:
            return await self._refuse(send, 503, "too many open requests on this server "
                                                 f"(max_streams {self.limits.max_streams})")
        if self.open[address] >= self.limits.max_streams_per_address:
            return await self._refuse(send, 429, f"too many open requests from {address} "
                                                 "(max_streams_per_address "
                                                 f"{self.limits.max_streams_per_address})")
        scope = dict(scope, **{"dhp.principal": decision.principal,
                               "dhp.operator": decision.operator})
        self.open[address] += 1
        self.open_total += 1
        started = False

        async def sending(message: dict) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await self.app(scope, self._bounded(receive), sending)
        except (BodyTooLarge, TimeoutError) as exc:
            if started:
                raise
            too_large = isinstance(exc, BodyTooLarge)
            await self._refuse(send, 413 if too_large else 408, self._too_large() if too_large
                               else f"the request body did not arrive within "
                                    f"{self.limits.read_timeout:g} s (read_timeout)")
        finally:
            self.open[address] -= 1
            self.open_total -= 1
            if not self.open[address]:
                del self.open[address]

    def _bounded(self, receive: Any) -> Any:
        """receive() that refuses a body past max_body or arriving past read_timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.read_timeout
        got = 0
        done = False

        async def bounded() -> dict:
            nonlocal got, done
            if done:  # the body is in: what follows is the client leaving, however late
                return await receive()
            message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            if message["type"] == "http.request":
                got += len(message.get("body", b""))
                if got > self.limits.max_body:
                    raise BodyTooLarge()
                done = not message.get("more_body", False)
            return message

        return bounded

    def _too_large(self) -> str:
        return f"the request body is larger than {self.limits.max_body} bytes (max_body)"

    async def _refuse(self, send: Any, status: int, message: str) -> None:
        start, body = _reply(status, message, self.access.realm)
        await send(start)
        await send(body)


def _text(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value is not None else None
