"""Typed errors. Every error carries the spec's normative code (spec/errors.md) and whether
it is *definite* (the operation certainly did not happen) or not (outcome unknown)."""

from __future__ import annotations

from typing import Any


class DHPError(Exception):
    code = "internal"
    definite = False

    def __init__(self, message: str, *, requirement: str | None = None, details: Any = None):
        super().__init__(message)
        self.message = message
        self.requirement = requirement
        self.details = details

    def __str__(self) -> str:
        prefix = f"{self.requirement}: " if self.requirement else ""
        return f"{self.code}: {prefix}{self.message}"

    def to_dict(self) -> dict:
        """The wire form, valid against schemas/error.json."""
        out: dict[str, Any] = {"code": self.code, "message": self.message,
                               "definite": self.definite}
        if self.requirement:
            out["requirement"] = self.requirement
        if self.details is not None:
            out["details"] = self.details
        return out


class InvalidInput(DHPError, ValueError):
    code, definite = "invalid_input", True


class UnsupportedVersion(DHPError):
    code, definite = "unsupported_version", True


class NotFound(DHPError, LookupError):
    code, definite = "not_found", True


class Conflict(DHPError):
    code, definite = "conflict", True


class LeaseLost(DHPError):
    code, definite = "lease_lost", True


class Cancelled(DHPError):
    code, definite = "cancelled", True


class BudgetExceeded(DHPError):
    code, definite = "budget_exceeded", True


class SchemaViolation(DHPError):
    code, definite = "schema_violation", True


class IntegrityError(DHPError):
    code, definite = "integrity_error", True


class StoreCorrupt(IntegrityError):
    """The store's own files or stored records are damaged (not JSON, not a database, a
    corrupted page), or are not a DHP store (wire code integrity_error): nothing was changed;
    retrying cannot help, an operator must restore or repair the store."""


class Unavailable(DHPError):
    code, definite = "unavailable", False


class Internal(DHPError):
    code, definite = "internal", False


BY_CODE: dict[str, type[DHPError]] = {
    cls.code: cls
    for cls in (InvalidInput, UnsupportedVersion, NotFound, Conflict, LeaseLost, Cancelled,
                BudgetExceeded, SchemaViolation, IntegrityError, Unavailable, Internal)
}


def from_dict(obj: dict) -> DHPError:
    """Rebuild a typed error from its wire form."""
    cls = BY_CODE.get(obj.get("code"), Internal)
    return cls(obj.get("message", ""), requirement=obj.get("requirement"),
               details=obj.get("details"))
