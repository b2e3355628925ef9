"""The dashboard's list order and chart series, without a browser."""

from __future__ import annotations

import dhp
import pytest
from dhp.observe import listing
from dhp.observe.series import KEEP_MIN, Series


def test_running_work_is_listed_before_the_backlog_and_the_finished(tmp_path):
    store = dhp.Store(tmp_path / "s")
    running = dhp.dispatch(store, "k", {"n": 0}, {"type": "object"})
    done = dhp.dispatch(store, "k", {"n": 1}, {"type": "object"})
    pending = dhp.dispatch(store, "k", {"n": 2}, {"type": "object"})
    dhp.claim(store, running, "w", heartbeat_interval=0)
    dhp.claim(store, done, "w", heartbeat_interval=0).complete({})
    ids = [s["handoff_id"] for s in listing.handoffs(store, None, None, None, 10)]
    assert ids == [running, pending, done]
    ids = [s["handoff_id"] for s in listing.handoffs(store, None, None, "newest", 10)]
    assert ids == [pending, done, running]
    assert len(listing.handoffs(store, None, None, "active", 2)) == 2  # one bounded page
    assert [s["handoff_id"] for s in listing.handoffs(store, "pending", "k", None, 9)] == \
        [pending]
    with pytest.raises(dhp.InvalidInput, match="unknown sort"):
        listing.handoffs(store, None, None, "oldest", 10)


def test_series_counts_states_completions_and_takeover_delays(tmp_path):
    store = dhp.Store(tmp_path / "s")
    now = [1_000_000 * 60.0]
    series = Series(store, clock=lambda: now[0])
    a = dhp.dispatch(store, "k", {"n": 0}, {"type": "object"})
    series.sample()  # the first sample sets the baseline: no completions yet
    dhp.claim(store, a, "w", heartbeat_interval=0).complete({})
    now[0] += 61
    series.sample()
    rows = series.window(2)["minutes"]
    assert [r["completed"] for r in rows] == [0, 1]
    assert rows[0]["states"]["pending"] == 1 and rows[1]["states"]["completed"] == 1
    assert series.window(5)["minutes"][0]["states"] is None  # never sampled
    with pytest.raises(dhp.InvalidInput):
        series.window(KEEP_MIN + 1)


def test_series_buckets_takeovers_from_the_journal(tmp_path):
    import time

    store = dhp.Store(tmp_path / "s")
    series = Series(store)  # the real clock: the journal's wall times are real
    hid = dhp.dispatch(store, "k", {}, {"type": "object"})
    dhp.claim(store, hid, "w1", heartbeat_interval=0, ttl=0.05)
    time.sleep(0.1)  # the lease expires; the recover ends it
    dhp.recover(store, hid, "w2", heartbeat_interval=0)
    series.sample()
    rows = series.window(2)["minutes"]  # the take may fall in the minute before
    assert sum(r["takeovers"] for r in rows) == 1
    assert max(r["delay_max"] or 0 for r in rows) >= 0


def test_listing_the_claimed_reads_no_stored_orphan(tmp_path, monkeypatch):
    from dhp.store.sqlite import SQLiteTx

    store = dhp.Store(tmp_path / "s")
    live = dhp.dispatch(store, "k", {"n": 0}, {"type": "object"})
    lost = dhp.dispatch(store, "k", {"n": 1}, {"type": "object"})
    dhp.claim(store, live, "w", heartbeat_interval=0)
    dhp.claim(store, lost, "w", heartbeat_interval=0, ttl=0.01)
    import time
    time.sleep(0.05)
    dhp.orphan(store, lost)  # stored orphaned
    asked = []
    real = SQLiteTx.select_page
    monkeypatch.setattr(SQLiteTx, "select_page",
                        lambda self, **kw: asked.append(kw["states"]) or real(self, **kw))
    assert [s["handoff_id"] for s in listing.handoffs(store, "claimed", None, None, 9)] == \
        [live]
    assert asked == [("claimed",)]
    assert [s["handoff_id"] for s in listing.handoffs(store, "orphaned", None, None, 9)] == \
        [lost]


def test_the_sampler_rests_longer_after_a_slow_sample():
    from dhp.observe.series import SAMPLE_S, pause

    assert pause(0.01) == SAMPLE_S
    assert pause(3.0) >= 27.0  # a big store: at most a tenth of a core
