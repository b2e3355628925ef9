"""DHP, the Durable Handoff Protocol: the reference implementation.

See spec/ for the normative text. Everything a user needs is importable from here. The names
are loaded on first use (PEP 562), so `import dhp` and the command line start fast: a
command that never touches a store never imports the store, the schemas or jsonschema.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

PROTOCOL_VERSION = "1.0"
__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    **dict.fromkeys((
        "Store", "StoreBackend", "TaskContext", "cancel", "check_integrity", "checkpoints",
        "claim", "claim_next", "dispatch", "dispatch_intent", "dispatch_many", "dlq", "drain",
        "envelope_of", "export_log", "import_log", "install_sigterm_drain", "iter_handoffs",
        "last_checkpoint", "list_handoffs", "orphan", "recover", "requeue", "result", "status"),
        "dhp.api"),
    **dict.fromkeys(("canonical_json", "handoff_id", "parse_json", "sha256_of"),
                    "dhp.core.canonical"),
    **dict.fromkeys(("check_envelope", "check_intent", "make_envelope", "make_intent"),
                    "dhp.core.envelope"),
    **dict.fromkeys((
        "BudgetExceeded", "Cancelled", "Conflict", "DHPError", "IntegrityError", "Internal",
        "InvalidInput", "LeaseLost", "NotFound", "SchemaViolation", "Unavailable",
        "UnsupportedVersion"), "dhp.core.errors"),
    "Limits": "dhp.core.limits",
    "TransportServer": "dhp.transport.server",
    "NetShipper": "dhp.transport.shipper",
    **dict.fromkeys(("FileShipper", "ingest_folder"), "dhp.transport.file"),
    **dict.fromkeys(("Task", "task"), "dhp.worker.task"),
}

__all__ = ["PROTOCOL_VERSION", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dhp' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain global
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # what type checkers and IDEs see: the same names, eagerly
    from dhp.api import (  # noqa: F401
        Store,
        StoreBackend,
        TaskContext,
        cancel,
        check_integrity,
        checkpoints,
        claim,
        claim_next,
        dispatch,
        dispatch_intent,
        dispatch_many,
        dlq,
        drain,
        envelope_of,
        export_log,
        import_log,
        install_sigterm_drain,
        iter_handoffs,
        last_checkpoint,
        list_handoffs,
        orphan,
        recover,
        requeue,
        result,
        status,
    )
    from dhp.core.canonical import canonical_json, handoff_id, parse_json, sha256_of  # noqa: F401
    from dhp.core.envelope import (  # noqa: F401
        check_envelope,
        check_intent,
        make_envelope,
        make_intent,
    )
    from dhp.core.errors import (  # noqa: F401
        BudgetExceeded,
        Cancelled,
        Conflict,
        DHPError,
        IntegrityError,
        Internal,
        InvalidInput,
        LeaseLost,
        NotFound,
        SchemaViolation,
        Unavailable,
        UnsupportedVersion,
    )
    from dhp.core.limits import Limits  # noqa: F401
    from dhp.transport.file import FileShipper, ingest_folder  # noqa: F401
    from dhp.transport.server import TransportServer  # noqa: F401
    from dhp.transport.shipper import NetShipper  # noqa: F401
    from dhp.worker.task import Task, task  # noqa: F401
