"""DHP, the Durable Handoff Protocol: the reference implementation.

See spec/ for the normative text. Everything a user needs is importable from here.
"""

from dhp.api import (
    Store,
    StoreBackend,
    TaskContext,
    cancel,
    check_integrity,
    checkpoints,
    claim,
    claim_next,
    dispatch,
    dlq,
    drain,
    envelope_of,
    export_log,
    import_log,
    install_sigterm_drain,
    last_checkpoint,
    list_handoffs,
    orphan,
    recover,
    requeue,
    result,
    status,
)
from dhp.core.canonical import canonical_json, handoff_id, parse_json, sha256_of
from dhp.core.envelope import check_envelope, check_intent, make_envelope, make_intent
from dhp.core.errors import (
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
from dhp.transport.file import FileShipper, ingest_folder
from dhp.transport.server import TransportServer
from dhp.transport.shipper import NetShipper
from dhp.worker.task import Task, task

PROTOCOL_VERSION = "1.0"
__version__ = "0.1.0"

__all__ = [
    "PROTOCOL_VERSION", "BudgetExceeded", "Cancelled", "Conflict", "DHPError", "IntegrityError",
    "Internal", "InvalidInput", "LeaseLost", "NetShipper", "NotFound", "SchemaViolation", "Store",
    "StoreBackend", "Task", "TaskContext", "TransportServer", "Unavailable", "FileShipper",
    "ingest_folder", "UnsupportedVersion", "cancel",
    "canonical_json", "check_envelope", "check_integrity", "check_intent", "checkpoints", "claim",
    "claim_next", "dispatch", "dlq", "drain", "envelope_of", "export_log", "handoff_id",
    "import_log", "install_sigterm_drain", "last_checkpoint", "list_handoffs", "make_envelope",
    "make_intent", "orphan", "parse_json", "recover", "requeue", "result", "sha256_of", "status",
    "task",
]
