"""The store clock of the embedded (SQLite) backend (DHP-LSE-001, DHP-LSE-006).

Lease expiry is judged by one clock that every process on the host shares and that a step of
the wall clock (NTP, an operator's `date -s`) does not move: CLOCK_BOOTTIME, seconds since
boot including suspend. Where it is missing we fall back to CLOCK_MONOTONIC, which is also
host-wide on Linux. Values only make sense within one boot, so the store records the host's
boot id and expires every lease when it changes (see sqlite_store.py).
"""

from __future__ import annotations

import datetime as _dt
import time
from pathlib import Path

_CLOCK_ID = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)
_BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")


def store_clock() -> float:
    """Seconds on the host-wide clock that wall-clock steps do not move."""
    return time.clock_gettime(_CLOCK_ID)


def boot_id() -> str:
    """An id of the current boot of this host; changes on every reboot.

    Without /proc (not Linux), the wall-clock time of the boot stands in for it, rounded so
    that clock drift does not make it wobble.
    """
    try:
        return _BOOT_ID_FILE.read_text(encoding="ascii").strip()
    except OSError:
        return f"boot-at-{round(time.time() - store_clock(), -1):.0f}"


def rfc3339(moment: _dt.datetime | None = None) -> str:
    """Wall-clock time as RFC 3339 UTC text with milliseconds (now when None), for metadata
    only (created_at, log lines): leases never read the wall clock."""
    moment = moment or _dt.datetime.now(_dt.timezone.utc)
    return moment.astimezone(_dt.timezone.utc).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")
