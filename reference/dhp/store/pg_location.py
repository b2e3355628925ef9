"""A Postgres store's location: the `postgresql://` URL, the schema it names, and what a
failure to connect to it means. Pure parsing (no psycopg), so a bad URL is refused before any
connection is tried.

A store URL is bad input (`invalid_input`, exit 2), never "unavailable": a malformed URL, a
schema name that is not a lower-case identifier or that belongs to the server
(`information_schema`, `pg_*`), a database or role that does not exist. Retrying cannot mend
any of them; only a server that cannot be reached (or fails) is `unavailable`.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from dhp.core.errors import DHPError, InvalidInput, Unavailable

DEFAULT_SCHEMA = "dhp"
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
# The server's own schemas: PostgreSQL reserves every name that starts with pg_.
_SYSTEM_SCHEMA = re.compile(r"^(information_schema|pg_.*)$")
# libpq's startup errors carry no SQLSTATE for the client to read: these are its texts for a
# name in the URL that the server does not know.
_UNKNOWN_NAME = re.compile(r'(database|role) "[^"]*" does not exist')


def split_location(url: str) -> tuple[str, str]:
    """(libpq conninfo URL, schema) of a store location; `schema` is our URL parameter."""
    try:
        parts = urlsplit(url)
        _check_ports(parts.netloc)
    except ValueError as exc:
        raise InvalidInput(f"malformed store URL {url!r}: {exc}") from None
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in query if k == "schema"]
    schema = schemas[-1] if schemas else DEFAULT_SCHEMA
    if not _SCHEMA_NAME.match(schema):
        raise InvalidInput(f"schema {schema!r} in the store URL must be a lower-case SQL "
                           "identifier (letters, digits, _; at most 63)")
    if _SYSTEM_SCHEMA.match(schema):
        raise InvalidInput(f"schema {schema!r} in the store URL is one of the server's own "
                           "(information_schema, pg_*): name a schema of your own, e.g. "
                           "?schema=dhp")
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema


def _check_ports(netloc: str) -> None:
    """Parse every host's port, so a bad one raises here, not in libpq. libpq's multi-host
    form (`h1:5432,h2:5432`) names a primary and its standbys: each host may carry a port."""
    for host in netloc.rpartition("@")[2].split(","):
        if host.startswith("["):  # an IPv6 address: [::1]:5432
            host = host.partition("]")[2]
        port = host.rpartition(":")[2] if ":" in host else ""
        if port and not (port.isdigit() and int(port) <= 65535):
            raise ValueError(f"port {port!r} is not a number from 0 to 65535")


def connect_failure(message: str, display_url: str, *, malformed: bool) -> DHPError:
    """The typed error for a failure to connect to the store at `display_url`: bad input when
    the URL is malformed or names a database or role the server does not have, else
    `unavailable` (the server may be back on a retry)."""
    reason = message.strip()
    if malformed:
        return InvalidInput(f"malformed store URL {display_url}: {reason}")
    if (m := _UNKNOWN_NAME.search(reason)):
        hint = (" (DHP creates its schema, never the database: create it, e.g. `createdb`)"
                if m.group(1) == "database" else "")
        return InvalidInput(f"cannot open the store {display_url}: {m.group(0)}{hint}")
    return Unavailable(f"cannot open the store {display_url}: {reason}")
