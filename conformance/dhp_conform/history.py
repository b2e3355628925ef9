"""The run's history (Jepsen style): invoke / ok / fail / info events plus faults, each with a
monotonic timestamp. `info` means the outcome is unknown (the process died or went silent
mid-request), and checkers must allow both outcomes for it."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

COMPLETIONS = ("ok", "fail", "info")


class History:
    def __init__(self) -> None:
        self.events: list[dict] = []
        self._lock = threading.Lock()
        self._t0 = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self._t0

    def add(self, kind: str, **fields: Any) -> dict:
        """Append one event; `time` is taken under the lock so indices and times agree."""
        with self._lock:
            event = {"index": len(self.events), "time": round(self.now(), 6), "type": kind}
            event.update(fields)
            self.events.append(event)
            return event

    def of(self, scenario: str) -> list[dict]:
        with self._lock:
            return [e for e in self.events if e.get("scenario") == scenario]

    def save(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        out = folder / "history.jsonl"
        with self._lock, out.open("w", encoding="utf-8") as f:
            for e in self.events:
                f.write(json.dumps(e, default=repr) + "\n")  # ASCII: lone surrogates too
        return out


def describe(event: dict) -> str:
    """One readable line for an event, used in evidence and explanations."""
    head = f"#{event['index']} t={event['time']:.3f} {event.get('process', '-')}"
    kind = event["type"]
    if kind == "invoke":
        return f"{head} invoke {event['op']} {_short(event.get('args'))}"
    if kind == "ok":
        return f"{head} ok {event['op']} -> {_short(event.get('data'))}"
    if kind == "fail":
        err = event.get("error") or {}
        return f"{head} fail {event['op']} -> {err.get('code')}: {err.get('message')}"
    if kind == "info":
        return f"{head} info {event['op']} (outcome unknown: {event.get('why')})"
    return f"{head} {kind} {event.get('detail', '')}".rstrip()


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr, sort_keys=True)
    return text if len(text) <= limit else text[:limit - 3] + "..."
