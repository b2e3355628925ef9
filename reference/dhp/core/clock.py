"""The store clock of the embedded (SQLite) backend (DHP-LSE-001, DHP-LSE-006).

Lease expiry is judged by one clock that every process on the host shares and that a step of
the wall clock (NTP, an operator's `date -s`) does not move: CLOCK_BOOTTIME, seconds since
boot including suspend. Where it is missing we fall back to CLOCK_MONOTONIC, which is also
host-wide on Linux. Values only make sense within one boot, so the store records the host's
boot id and expires every lease when it changes (see sqlite_store.py).

A Linux time namespace (`unshare --time --boottime N`) adds its own offset to both clocks in
the processes inside it, which would then judge every lease N seconds off (take a live lease
at once, or keep a dead one). The offsets are in /proc/self/timens_offsets; the store clock
subtracts them, so every process reads the host's clock (DHP-LSE-015).
"""

from __future__ import annotations

import datetime as _dt
import time
from pathlib import Path

_CLOCK_ID = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)
_BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")
_OFFSETS_FILE = Path("/proc/self/timens_offsets")
_NAMES = {time.CLOCK_MONOTONIC: "monotonic", getattr(time, "CLOCK_BOOTTIME", -1): "boottime"}
_offsets: tuple[int, dict[str, float]] | None = None  # (pid, offsets) of this process


def timens_offsets() -> dict[str, float]:
    """Seconds this process's time namespace adds to `monotonic` and `boottime`: none
    outside one, or on a kernel without them (no file). Read once per process (a namespace's
    offsets never change; a forked child may be in another one)."""
    global _offsets
    import os

    pid = os.getpid()
    if _offsets is None or _offsets[0] != pid:
        _offsets = (pid, _read_offsets(_OFFSETS_FILE))
    return _offsets[1]


def _read_offsets(path: Path) -> dict[str, float]:
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise _skew(f"cannot read {path} ({exc})") from None
    out = {}
    for line in text.splitlines():
        parts = line.split()
        try:
            out[parts[0]] = int(parts[1]) + int(parts[2]) / 1e9
        except (IndexError, ValueError):
            raise _skew(f"{path} holds {line!r}, not '<clock> <seconds> <nanoseconds>'") \
                from None
    return out


def _skew(why: str) -> Exception:
    from dhp.core.errors import Unavailable

    return Unavailable(f"clock skew unknown: {why}; this process's clock may disagree with "
                       "the store's, so it does not judge leases", requirement="DHP-LSE-015")


def host_clock(clock_id: int) -> float:
    """`clock_id` (CLOCK_MONOTONIC or CLOCK_BOOTTIME) as the host reads it, without the
    offset of this process's time namespace (DHP-LSE-015)."""
    return time.clock_gettime(clock_id) - timens_offsets().get(_NAMES.get(clock_id), 0.0)


def store_clock() -> float:
    """Seconds on the host-wide clock that wall-clock steps do not move."""
    return host_clock(_CLOCK_ID)


def host_monotonic() -> float:
    """CLOCK_MONOTONIC of the host: what processes compare with each other's readings of
    it (the WAL's group commit, dhp.store.wal_sync)."""
    return host_clock(time.CLOCK_MONOTONIC)


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
