"""The MCP profile's checks that only streamable HTTP has (run when the server command has
`{port}`, see mcp_http; over stdio each is skipped with the reason):

- the agent-death bound (DHP-MCP-020, -021): a bridge agent holding a lease is SIGKILLed, and
  the kit's own session retries `recover` until it succeeds, under a 60 s TTL so that only the
  server's own judgement of the dead client can explain a fast recovery;
- the server bar (DHP-SEC-006..009), each check isolating one rule with plain HTTP requests
  (http_probe) next to a control request that must pass, so a refusal is the rule's.

Bounds are the requirement's numbers plus SLACK_S, stated in every failure."""

from __future__ import annotations

import asyncio
import time

from .. import http_probe
from ..mcp_http import free_port
from .base import SCHEMA, Check, CheckAborted, Ctx, state_mark
from .mcp import _need, _scenario, _session, over_http

SLACK_S = 1.0  # a loaded 2-core machine: scheduling, process exit, the kit's 20 ms polling
END_S = 1.0  # DHP-MCP-021: recoverable within 1 s of the session's end
MAX_AGENT_TIMEOUT_S = 10.0  # DHP-MCP-020
TTL_S = 60.0  # no recovery within the bounds below can come from expiry
BODY_LIMIT = 4 * 1024 * 1024  # DHP-SEC-008's default
READ_TIMEOUT_S = 2.0  # what the kit sets {read_timeout} to for its stalled request
SESSION_CAP = 3  # what the kit sets {max_sessions_per_address} to


def _http_only(ctx: Ctx) -> bool:
    if over_http(ctx):
        return True
    for rid in ctx.check.requirements:
        ctx.skip(rid, "the server was reached over stdio: streamable HTTP is judged when the "
                 "server command has {port} (mcp_http)")
    return False


def _settable(ctx: Ctx, placeholder: str, why: str) -> bool:
    """Over HTTP, and the server command lets the kit set `placeholder`; else skipped."""
    if not _http_only(ctx):
        return False
    if ctx.run.harness.mcp_servers.has(placeholder):
        return True
    for rid in ctx.check.requirements:
        ctx.skip(rid, f"the server command has no {{{placeholder}}}: {why}")
    return False


def _note(ctx: Ctx, text: str) -> None:
    ctx.run.harness.notes.append(f"{ctx.check.id}: {text}")


# --- the agent-death bound -----------------------------------------------------------------

def _agent_death(ctx: Ctx, mode: str) -> None:
    """An agent (a bridge process, one HTTP session in `mode`) claims and checkpoints, and is
    SIGKILLed; another session retries recover from the kill on."""
    if not _http_only(ctx):
        return
    agent_timeout = ctx.run.harness.mcp_servers.agent_timeout
    stream = mode == "legacy"
    if not stream:
        ctx.expect("DHP-MCP-020", agent_timeout <= MAX_AGENT_TIMEOUT_S,
                   f"the agent timeout is {agent_timeout:g} s, over the spec's "
                   f"{MAX_AGENT_TIMEOUT_S:g} s (dhp-conform --agent-timeout)")
    # Over a stream the session ends at the kill; without one, at the agent timeout after
    # its last request: the bound runs from there.
    bound = END_S + SLACK_S + (0.0 if stream else agent_timeout)
    params, sc = _scenario(ctx, f"agent-death-{mode}", TTL_S, mode=mode)
    agent = sc.spawn("agent")
    hid = ctx.need(agent.call("dispatch", {"task_kind": "conform.mcp", "inputs": {
        "n": ctx.rng.getrandbits(40)}, "output_schema": SCHEMA, "budget": {}}),
        "dispatch")["handoff_id"]
    fence = ctx.need(agent.call("claim", {"handoff_id": hid, "worker": agent.worker}),
                     "claim")["fence"]
    state = state_mark(ctx, "held")
    ctx.need(agent.call("checkpoint", {"handoff_id": hid, "worker": agent.worker,
                                       "fence": fence, "state": state}), "checkpoint")
    last_request = time.monotonic()

    async def run() -> tuple[float | None, float, object]:
        async with _session(ctx, params, "standby") as s:
            _need(ctx, await s.call("health", {}), "health")
            killed = time.monotonic()
            sc.kill(agent)
            start = killed if stream else last_request
            reply = None
            while time.monotonic() - start < bound + 5.0:
                reply = await s.call("recover", {"handoff_id": hid, "worker_id": "standby"})
                if reply.ok:
                    return time.monotonic() - start, time.monotonic() - killed, reply
                await asyncio.sleep(0.02)
            return None, time.monotonic() - killed, reply

    took, since_kill, reply = asyncio.run(run())
    what = ("with its event stream open (a stateful session)" if stream else
            f"without an event stream (stateless requests; agent timeout {agent_timeout:g} s)")
    origin = "the kill" if stream else "its last request"
    measured = (f"recover succeeded {took:.3f} s after {origin} ({since_kill:.3f} s after "
                f"the kill)" if took is not None else
                f"recover still refused {since_kill:.1f} s after the kill: "
                f"{getattr(reply, 'text', '')[:200]}")
    _note(ctx, f"agent killed {what}: {measured}; bound {bound:g} s, lease TTL {TTL_S:g} s")
    ctx.expect("DHP-MCP-021", took is not None and took <= bound,
               f"an agent killed {what}: {measured}; the bound is {END_S:g} s after the "
               f"session's end + {SLACK_S:g} s slack = {bound:g} s from {origin} (lease TTL "
               f"{TTL_S:g} s, so the lease had not expired)")
    if stream:
        # Recovered only around the agent timeout: the stream's close was not the end.
        ctx.expect("DHP-MCP-020", took is not None and took <= bound,
                   f"the killed agent's event stream closed at the kill, which ends its "
                   f"session at once; {measured}")
    else:
        ctx.expect("DHP-MCP-020", took is not None,
                   f"the session of a killed agent without a stream never ended: {measured}")
    if took is not None:
        ctx.expect("DHP-MCP-021", reply.content["last_checkpoint"] == state,
                   f"recovered from {reply.content['last_checkpoint']!r}, not the last "
                   f"checkpoint {state!r}")


def agent_death_stream(ctx: Ctx) -> None:
    _agent_death(ctx, "legacy")


def agent_death_stateless(ctx: Ctx) -> None:
    _agent_death(ctx, "auto")


# --- the server bar --------------------------------------------------------------------------

def _address(sc) -> tuple[str, int]:
    return sc.server.host, sc.server.port


def _control(what: str, answer: http_probe.Answer, want: int = 200) -> None:
    """The same request without the rule's trigger must pass, else the check proves nothing."""
    if answer.status != want:
        raise CheckAborted(f"the control request ({what}) answered {answer}, not HTTP {want}")


def host_header(ctx: Ctx) -> None:
    """DHP-SEC-006: a Host naming another site is refused with 403, on each loopback
    address the kit can bind the server to."""
    if not _http_only(ctx):
        return
    hosts = ["127.0.0.1"]
    if not ctx.run.harness.mcp_servers.has("host"):
        _note(ctx, "judged on 127.0.0.1 only: the server command has no {host}")
    else:
        try:
            free_port("127.0.0.2")
            hosts.append("127.0.0.2")
        except OSError as exc:
            _note(ctx, f"judged on 127.0.0.1 only: the kit cannot bind 127.0.0.2 ({exc})")
    for host in hosts:
        params, sc = _scenario(ctx, f"host-{host}", 5.0, host=host)
        addr, port = _address(sc)
        token = params.get("token")
        _control(f"initialize with Host {addr}:{port}",
                 http_probe.open_session(addr, port, token)[0])
        for bad in ("evil.example", f"evil.example:{port}"):
            got = http_probe.post(addr, port, http_probe.INIT, host_header=bad,
                                  headers=http_probe.bearer(token))
            ctx.expect("DHP-SEC-006", got.status == 403,
                       f"a server bound to {addr} answered a request with Host {bad!r} "
                       f"with {got}, not HTTP 403")


def origin_header(ctx: Ctx) -> None:
    """DHP-SEC-006: an Origin of another site is refused with 403."""
    if not _http_only(ctx):
        return
    params, sc = _scenario(ctx, "origin", 5.0)
    addr, port = _address(sc)
    auth = http_probe.bearer(params.get("token"))
    _control(f"initialize with Origin http://{addr}:{port}", http_probe.post(
        addr, port, http_probe.INIT, headers={"Origin": f"http://{addr}:{port}", **auth}))
    got = http_probe.post(addr, port, http_probe.INIT,
                          headers={"Origin": "http://evil.example", **auth})
    ctx.expect("DHP-SEC-006", got.status == 403, f"a request with Origin http://evil.example "
               f"(and a loopback Host) was answered with {got}, not HTTP 403")


def body_limit(ctx: Ctx) -> None:
    """DHP-SEC-008: a body of 4 MiB + 1 is refused with 413, before it is read whole (the kit
    sends only its first 64 KiB and waits for the answer)."""
    if not _http_only(ctx):
        return
    params, sc = _scenario(ctx, "body-limit", 5.0)
    addr, port = _address(sc)
    line = http_probe.oversized(addr, port, BODY_LIMIT + 1, 65536, params.get("token"))
    ctx.expect("DHP-SEC-008", " 413 " in f"{line} ", f"a request announcing a body of "
               f"{BODY_LIMIT + 1} bytes (4 MiB + 1), of which the kit sent 64 KiB, was "
               f"answered with {line!r}, not HTTP 413")


def read_timeout(ctx: Ctx) -> None:
    """DHP-SEC-008: a connection whose request headers never end is closed within the read
    timeout (+ slack), though a byte arrives every 0.25 s."""
    if not _settable(ctx, "read_timeout", "the kit cannot know the bound to judge a "
                     "stalled request by"):
        return
    _, sc = _scenario(ctx, "read-timeout", 5.0, read_timeout=READ_TIMEOUT_S)
    addr, port = _address(sc)
    bound = READ_TIMEOUT_S + SLACK_S
    took = http_probe.stalled(addr, port, every=0.25, give_up=bound + 10.0)
    shown = f"closed after {took:.2f} s" if took is not None else \
        f"still open after {bound + 10.0:g} s"
    _note(ctx, f"a stalled request (read timeout {READ_TIMEOUT_S:g} s): {shown}")
    ctx.expect("DHP-SEC-008", took is not None and took <= bound,
               f"a request whose headers trickled in a byte every 0.25 s and never ended: "
               f"the connection was {shown}; the bound is the read timeout "
               f"{READ_TIMEOUT_S:g} s + {SLACK_S:g} s slack")


def session_cap(ctx: Ctx) -> None:
    """DHP-SEC-007: past the sessions-per-address cap, a new session is refused with 429
    naming the bound, and the open ones still answer."""
    if not _settable(ctx, "max_sessions_per_address", "the kit judges a cap only where "
                     "the implementation lets it set one"):
        return
    params, sc = _scenario(ctx, "session-cap", 5.0, max_sessions_per_address=SESSION_CAP)
    addr, port = _address(sc)
    token = params.get("token")
    sids = []
    for n in range(SESSION_CAP):
        answer, sid = http_probe.open_session(addr, port, token)
        _control(f"session {n + 1} of the cap {SESSION_CAP}", answer)
        if not sid:
            raise CheckAborted(f"initialize answered no Mcp-Session-Id: {answer}")
        sids.append(sid)
    over, _ = http_probe.open_session(addr, port, token)
    ctx.expect("DHP-SEC-007", over.status == 429 and "session" in over.body.lower(),
               f"session {SESSION_CAP + 1} from one address, past max_sessions_per_address "
               f"{SESSION_CAP}, was answered with {over}, not HTTP 429 naming the bound")
    still = http_probe.in_session(addr, port, sids[0], token)
    ctx.expect("DHP-SEC-007", still.status == 200, f"after the refusal an open session's "
               f"ping was answered with {still}: what is open must be unaffected")


def principal(ctx: Ctx) -> None:
    """DHP-SEC-009: a session id presented under another token is answered as unknown (404);
    under its own token it answers."""
    if not _settable(ctx, "token_file", "the kit cannot give the server two principals"):
        return
    servers = ctx.run.harness.mcp_servers
    _, sc = _scenario(ctx, "principal", 5.0)
    addr, port = _address(sc)
    mine, other = servers.tokens
    answer, sid = http_probe.open_session(addr, port, mine)
    _control("initialize with the first token", answer)
    if not sid:
        raise CheckAborted(f"initialize answered no Mcp-Session-Id: {answer}")
    _control("a ping in the session under the token that opened it",
             http_probe.in_session(addr, port, sid, mine))
    got = http_probe.in_session(addr, port, sid, other)
    ctx.expect("DHP-SEC-009", got.status == 404, f"a ping in a session opened under one "
               f"token, sent under another, was answered with {got}, not HTTP 404 (as if "
               f"the session did not exist)")


CHECKS = [
    Check("mcp", "agent-death-stream", ["DHP-MCP-021", "DHP-MCP-020"], agent_death_stream,
          timing=True),
    Check("mcp", "agent-death-stateless", ["DHP-MCP-021", "DHP-MCP-020"],
          agent_death_stateless, timing=True),
    Check("mcp", "http-host", ["DHP-SEC-006"], host_header, cls="mcp-server"),
    Check("mcp", "http-origin", ["DHP-SEC-006"], origin_header, cls="mcp-server"),
    Check("mcp", "http-body-limit", ["DHP-SEC-008"], body_limit, cls="mcp-server"),
    Check("mcp", "http-read-timeout", ["DHP-SEC-008"], read_timeout, cls="mcp-server",
          timing=True),
    Check("mcp", "http-session-cap", ["DHP-SEC-007"], session_cap, cls="mcp-server"),
    Check("mcp", "http-principal", ["DHP-SEC-009"], principal, cls="mcp-server"),
]
