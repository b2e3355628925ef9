"""Per-minute series for the dashboard's charts: handoffs by state, completions, takeovers.

Kept in memory by the dashboard process, which samples the store every SAMPLE_S seconds.
The store keeps each handoff's current state only, not its history, so the count by state
at a past minute cannot be read back from it: it has to be sampled while the dashboard runs
(and a restarted dashboard starts a fresh picture). Completions per minute are the growth of
the completed count between samples (completed is final: nothing leaves it). Takeover
delays come from the store's lease journal (`lost_s` of each take that ended a lost lease),
read incrementally by metrics.JournalFollower and bucketed by the take's wall time, so they
include takeovers from before the dashboard started, as far back as the window reaches.

Bounded: KEEP_MIN buckets of a few numbers each; each sample is one count of the store (the
same read as /api/overview) and at most a few pages of the journal, and the sampler rests
IDLE_FACTOR times as long as a sample took (see pause).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from dhp.core.errors import DHPError, InvalidInput
from dhp.observe.metrics import JournalFollower, store_counts

SAMPLE_S = 2.0
KEEP_MIN = 180  # three hours of minutes
# A sample counts every handoff (about 3 s at 100,000 in bench/list_bench.py): the sampler
# then waits this many times as long, so it takes at most a tenth of a core at any size.
IDLE_FACTOR = 9.0


def _bucket() -> dict:
    return {"states": None, "completed": 0, "takeovers": 0, "delay_sum": 0.0,
            "delay_max": None}


class Series:
    def __init__(self, store: Any, clock: Callable[[], float] = time.time):
        self.store, self.clock = store, clock
        self.buckets: dict[int, dict] = {}  # minute since the epoch -> bucket
        self.completed: int | None = None
        self.follower = JournalFollower()
        self.lock = threading.Lock()

    def sample(self) -> None:
        """Read the store once and fold it into the current minute."""
        counts = store_counts(self.store)["states"]
        takes = self.follower.new_takeovers(self.store)
        minute = int(self.clock() // 60)
        with self.lock:
            now = self._at(minute)
            now["states"] = counts
            if self.completed is not None:
                now["completed"] += max(0, counts["completed"] - self.completed)
            self.completed = counts["completed"]
            for take in takes:
                at = _minute_of(take["wall"])
                if at is None or not minute - KEEP_MIN < at <= minute:
                    continue
                bucket = self._at(at)
                bucket["takeovers"] += 1
                bucket["delay_sum"] += take["lost_s"]
                bucket["delay_max"] = max(bucket["delay_max"] or 0.0, take["lost_s"])
            for old in [m for m in self.buckets if m <= minute - KEEP_MIN]:
                del self.buckets[old]

    def window(self, minutes: int) -> dict:
        """The last `minutes` minutes, oldest first; a minute never sampled has states None."""
        if not 1 <= minutes <= KEEP_MIN:
            raise InvalidInput(f"minutes must be 1..{KEEP_MIN}, not {minutes}")
        last = int(self.clock() // 60)
        with self.lock:
            rows = []
            for minute in range(last - minutes + 1, last + 1):
                b = self.buckets.get(minute) or _bucket()
                rows.append({"t": minute * 60, "states": b["states"],
                             "completed": b["completed"], "takeovers": b["takeovers"],
                             "delay_mean": b["delay_sum"] / b["takeovers"]
                             if b["takeovers"] else None,
                             "delay_max": b["delay_max"]})
        return {"bucket_s": 60, "sample_s": SAMPLE_S, "minutes": rows}

    def _at(self, minute: int) -> dict:
        return self.buckets.setdefault(minute, _bucket())

    def run(self, stop: threading.Event) -> None:
        """Sample until `stop` is set; a store that fails a read is tried again next time."""
        while True:
            began = time.monotonic()
            try:
                self.sample()
            except DHPError:
                pass
            if stop.wait(pause(time.monotonic() - began)):
                return


def pause(took_s: float) -> float:
    """Seconds to rest after a sample that took `took_s`."""
    return max(SAMPLE_S, IDLE_FACTOR * took_s)


def _minute_of(wall: str | None) -> int | None:
    try:
        return int(datetime.fromisoformat(wall.replace("Z", "+00:00")).timestamp() // 60)
    except (AttributeError, TypeError, ValueError):  # written by another implementation
        return None
