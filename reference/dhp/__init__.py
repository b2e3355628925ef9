"""DHP, the Durable Handoff Protocol: the reference implementation.

See spec/ for the normative text. Everything a user needs is importable from here.
"""

from .canonical import canonical_json, handoff_id, parse_json, sha256_of
from .errors import (
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

PROTOCOL_VERSION = "1.0"
__version__ = "0.1.0"

__all__ = [
    "PROTOCOL_VERSION", "BudgetExceeded", "Cancelled", "Conflict", "DHPError", "IntegrityError",
    "Internal", "InvalidInput", "LeaseLost", "NotFound", "SchemaViolation", "Unavailable",
    "UnsupportedVersion", "canonical_json", "handoff_id", "parse_json", "sha256_of",
]
