"""What `dhp-a2a` puts between HTTP and the official a2a-sdk's JSON-RPC dispatcher: the caller's
principal for the request handler, DHP's JSON rules on request bodies, and integers on the way
out.

- **Principal.** `http_guard.Guard` puts the admitted principal into the ASGI scope; the
  context builder hands it to the request handler as the call's `user`.
- **Bodies.** The SDK parses a body with `json.loads` and turns anything it did not expect
  (nesting too deep for Python's parser, for example) into -32603 internal error. Bodies are
  read here first with DHP's rules (identity.md: no NaN or Infinity, no integers past 2^53-1,
  no duplicate names, bounded nesting): a breach is -32602 invalid params naming the DHP code
  and requirement, as every other bad input is.
- **Integers.** A protobuf `Value` keeps every number as a double, so the SDK writes a result's
  `12` as `12.0`. A whole double within +-2^53 is written as a JSON integer, exactly as RFC 8785
  (DHP-CJ-005) writes it, so JSON clients get back the integers they sent.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncGenerator
from typing import Any

from a2a.auth.user import User
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.utils.errors import InvalidParamsError
from starlette.routing import Route

from dhp.core.errors import DHPError, InvalidInput
from dhp.transport.http_guard import LOCAL

MAX_DEPTH = 100        # the SDK's protobuf parser refuses deeper values anyway
EXACT = 2 ** 53        # whole doubles up to this magnitude are exact integers
INVALID_PARAMS = -32602


# --- the caller ------------------------------------------------------------------------------

class Principal(User):
    """The caller as the guard admitted it: a token's principal (or `local` without tokens)."""

    def __init__(self, name: str, operator: bool):
        self.name, self.operator = name, operator

    @property
    def is_authenticated(self) -> bool:
        return self.name != LOCAL

    @property
    def user_name(self) -> str:
        return self.name


class PrincipalContext(DefaultServerCallContextBuilder):
    def build_user(self, request: Any) -> User:
        return Principal(request.scope.get("dhp.principal", LOCAL),
                         bool(request.scope.get("dhp.operator", False)))


def principal_of(context: Any) -> Principal:
    user = getattr(context, "user", None)
    return user if isinstance(user, Principal) else Principal(LOCAL, False)


# --- errors ----------------------------------------------------------------------------------

def invalid(error: DHPError) -> InvalidParamsError:
    """A DHP refusal as A2A invalid params (-32602): the message starts with the DHP code,
    and the data holds DHP's error object (schemas/error.json)."""
    return InvalidParamsError(str(error), data={"dhp_error": error.to_dict()})


# --- request bodies --------------------------------------------------------------------------

def _refuse_constant(name: str) -> Any:
    raise InvalidInput(f"{name} is not a JSON number", requirement="DHP-CJ-006")


def _int(text: str) -> int:
    value = int(text)
    if abs(value) >= EXACT:
        raise InvalidInput(f"the integer {text[:40]} is outside -(2^53-1)..2^53-1 (I-JSON)",
                           requirement="DHP-CJ-004")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InvalidInput(f"the number {text[:40]} is not a finite double",
                           requirement="DHP-CJ-006")
    if value.is_integer() and EXACT <= abs(value) < 1e21:
        raise InvalidInput(f"the number {text[:40]} is an integer outside "
                           "-(2^53-1)..2^53-1 (I-JSON)", requirement="DHP-CJ-004")
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        name = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise InvalidInput(f"the member name {name!r} appears twice in one object",
                           requirement="DHP-CJ-001")
    return out


def _depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value, without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if depth <= MAX_DEPTH:
                todo.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict)
                                                     else item))
    return deepest


def check_body(body: bytes) -> tuple[Any, DHPError | None]:
    """(request id or None, the DHP refusal or None) of a JSON-RPC body; a body that is not
    JSON at all is left to the SDK (-32700 parse error)."""
    try:
        parsed = json.loads(body, parse_constant=_refuse_constant, parse_int=_int,
                            parse_float=_float, object_pairs_hook=_object)
    except InvalidInput as exc:
        return None, exc
    except RecursionError:
        return None, InvalidInput(f"the request nests deeper than {MAX_DEPTH} levels",
                                  requirement="DHP-ATOA-005")
    except ValueError:
        return None, None
    request_id = parsed.get("id") if isinstance(parsed, dict) else None
    if not isinstance(request_id, str | int) or isinstance(request_id, bool):
        request_id = None
    if _depth(parsed) > MAX_DEPTH:
        return request_id, InvalidInput(f"the request nests deeper than {MAX_DEPTH} levels",
                                        requirement="DHP-ATOA-005")
    return request_id, None


class StrictBodies:
    """ASGI middleware: a POST body breaking DHP's JSON rules is answered -32602 here; any
    other body goes on to the SDK unchanged (the guard has already bounded its size)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        request_id, problem = check_body(body)
        if problem is not None:
            reply = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": {
                "code": INVALID_PARAMS, "message": str(problem),
                "data": {"dhp_error": problem.to_dict()}}}).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(reply)).encode())]})
            await send({"type": "http.response.body", "body": reply})
            return
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


# --- responses -------------------------------------------------------------------------------

def integral(value: Any) -> Any:
    """`value` with every whole double within +-2^53 as an int (RFC 8785 writes it so)."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= EXACT:
        return int(value)
    if isinstance(value, dict):
        return {k: integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [integral(v) for v in value]
    return value


class IntegralDispatcher(JsonRpcDispatcher):
    """The SDK's JSON-RPC dispatcher, with whole numbers written as integers in every answer
    and stream event (`_create_response` is where the SDK turns both into HTTP responses)."""

    def _create_response(self, context: Any, handler_result: Any) -> Any:
        if isinstance(handler_result, AsyncGenerator):
            return super()._create_response(context, _integral_stream(handler_result))
        return super()._create_response(context, integral(handler_result))


async def _integral_stream(stream: AsyncGenerator) -> AsyncGenerator[Any]:
    async for item in stream:
        yield integral(item)


def jsonrpc_routes(handler: Any, rpc_url: str = "/") -> list[Route]:
    dispatcher = IntegralDispatcher(handler, context_builder=PrincipalContext())
    return [Route(path=rpc_url, endpoint=dispatcher.handle_requests, methods=["POST"])]
