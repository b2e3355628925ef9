"""`dhp dashboard` in a real browser (Debian's chromium driven by Playwright; no browser is
downloaded): it loads, shows a live handoff changing state while its worker runs and is
SIGKILLed and a standby takes over, shows the timeline and the verified chain, and requeues a
DLQ entry with the token and refuses without it; draws the charts, lists running work first,
offers only the actions that apply and fits a phone. With DHP_SCREENSHOTS=DIR they also write
the screenshots shown in the docs."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import dhp
import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
WORKER = """
import sys, time, dhp
store = dhp.Store(sys.argv[1])
with dhp.claim(store, sys.argv[2], "worker-1") as ctx:
    for n in range(1, 200):
        ctx.checkpoint({"page": n})
        print("checkpoint", n, flush=True)
        time.sleep(0.3)
"""


def browser():
    """A headless Chromium page, or a skip (a failure when DHP_REQUIRE_BROWSER=1, as in CI)."""
    why = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        why = "playwright is not installed (pip install playwright)"
    if why is None and not os.path.exists(CHROMIUM):
        why = "no chromium (apt-get install chromium)"
    if why is not None:
        if os.environ.get("DHP_REQUIRE_BROWSER") == "1":
            pytest.fail(f"DHP_REQUIRE_BROWSER=1 but {why}")
        pytest.skip(why)
    return sync_playwright()


@pytest.fixture
def dashboard(tmp_path):
    store = tmp_path / "store"
    dhp.Store(store).close()
    proc = subprocess.Popen([sys.executable, "-m", "dhp.cli.main", "dashboard", "--store",
                             str(store), "--bind", "127.0.0.1:0"], stderr=subprocess.PIPE,
                            text=True)
    found = None
    for line in proc.stderr:  # a note (no metrics without the `otel` extra) may come first
        found = re.search(r"(http://\S+/)\s+\(token for requeue and cancel: (\S+)\)", line)
        if found:
            break
    assert found, "dhp dashboard printed no address"
    yield found.group(1), found.group(2), store
    proc.terminate()
    proc.wait(30)


def dead_lettered(store, inputs: dict) -> str:
    """A handoff parked in the DLQ: one attempt allowed, taken, released, taken again."""
    hid = dhp.dispatch(store, "pages.fetch", inputs, {"type": "object"}, {"max_attempts": 1})
    dhp.claim(store, hid, "w0", heartbeat_interval=0).release()
    with pytest.raises(dhp.BudgetExceeded):
        dhp.claim(store, hid, "w0")
    return hid


def post(url: str, token: str | None) -> int:
    request = urllib.request.Request(url, method="POST", headers=(
        {"Authorization": f"Bearer {token}"} if token else {}))
    try:
        return urllib.request.urlopen(request, timeout=30).status
    except urllib.error.HTTPError as e:
        return e.code


def test_dashboard_live_takeover_and_dlq_requeue(dashboard, tmp_path):
    url, token, store_path = dashboard
    store = dhp.Store(store_path)
    live = dhp.dispatch(store, "pages.fetch", {"pages": 60}, {"type": "object"})
    parked = dead_lettered(store, {"pages": 1})
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(store_path), live],
                              stdout=subprocess.PIPE, text=True)
    shots = os.environ.get("DHP_SCREENSHOTS")
    with browser() as p:
        page = p.chromium.launch(executable_path=CHROMIUM).new_page(
            viewport={"width": 1280, "height": 800})
        page.on("dialog", lambda d: d.accept())  # each action asks first
        page.goto(url)
        row = page.locator(f'tr[data-id="{live}"]')
        row.locator("text=claimed").wait_for(timeout=30_000)
        assert "worker-1" in row.inner_text()
        for line in worker.stdout:  # a few checkpoints in
            if line.strip() == "checkpoint 3":
                break
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(30)
        ctx = dhp.recover(store, live, "standby")  # the owner is dead: taken at once
        page.wait_for_function(  # the page updated itself: no reload
            "id => document.querySelector(`tr[data-id='${id}']`).innerText.includes('standby')",
            arg=live, timeout=30_000)
        assert "\t2\t" in row.inner_text()  # fence 2
        assert re.fullmatch(r"\d+ s", row.locator("td.age").inner_text())  # since dispatch

        dead = page.locator(f'tr[data-id="{parked}"]')
        dead.locator("text=dead_lettered").wait_for(timeout=30_000)
        page.select_option("#state", "dead_lettered")  # the filters
        row.wait_for(state="detached", timeout=30_000)
        assert dead.is_visible()
        page.select_option("#state", "")
        page.fill("#kind", "no.such.kind")
        page.locator("#empty").wait_for(timeout=30_000)
        page.fill("#kind", "pages.fetch")
        row.wait_for(timeout=30_000)
        dead.locator("button", has_text="requeue").click()
        page.locator("#message", has_text="token").wait_for(timeout=30_000)
        assert dhp.status(store, parked)["state"] == "dead_lettered"  # refused without it
        assert page.locator("#token-box").get_attribute("open") is not None  # asks for it
        page.fill("#token", token)
        page.locator("#token").dispatch_event("change")
        dead.locator("button", has_text="requeue").click()
        dead.locator("text=pending").wait_for(timeout=30_000)
        assert dhp.status(store, parked)["state"] == "pending"

        ctx.checkpoint({"page": 60})
        ctx.complete({"pages": 60})
        page.goto(f"{url}#/h/{live}")
        page.locator("#d-chain", has_text="verified").wait_for(timeout=30_000)
        timeline = page.locator("#d-timeline").inner_text()
        # every take from the lease journal, with its fence and worker
        assert re.search(r"claim fence 1 by worker-1 — checkpoints 1–\d+", timeline), timeline
        assert re.search(r"recover fence 2 by standby — checkpoints \d+–\d+; [\d.]+ s after "
                         r"the owner was lost \(owner process dead\)", timeline), timeline
        assert timeline.rstrip().endswith("completed")
        assert '"pages": 60' in page.locator("#d-result").inner_text()
        if shots:
            page.screenshot(path=f"{shots}/dashboard-handoff.png", full_page=True)
        page.goto(f"{url}#/h/{parked}")  # a take that made no checkpoint is there too
        page.locator("#d-timeline", has_text="claim fence 1 by w0 — no checkpoint").wait_for(
            timeout=30_000)


def test_mutations_need_the_token_and_read_only_refuses(dashboard, tmp_path):
    url, token, store_path = dashboard
    store = dhp.Store(store_path)
    hid = dhp.dispatch(store, "k", {}, {"type": "object"})
    assert post(f"{url}api/handoffs/{hid}/cancel", None) == 401
    assert post(f"{url}api/handoffs/{hid}/cancel", "wrong") == 401
    assert dhp.status(store, hid)["state"] == "pending"
    assert post(f"{url}api/handoffs/{hid}/cancel", token) == 200
    assert dhp.status(store, hid)["state"] == "cancelled"
    assert post(f"{url}api/handoffs/{hid}/requeue", token) == 409  # not dead-lettered
    missing = "sha256:" + "0" * 64
    assert post(f"{url}api/handoffs/{missing}/cancel", token) == 404
    detail = json.loads(urllib.request.urlopen(f"{url}api/handoffs/{hid}", timeout=30).read())
    assert detail["status"]["state"] == "cancelled" and detail["chain"]["verified"]

    proc = subprocess.Popen([sys.executable, "-m", "dhp.cli.main", "dashboard", "--store",
                             str(store_path), "--bind", "127.0.0.1:0", "--read-only"],
                            stderr=subprocess.PIPE, text=True)
    try:
        ro = next(m.group(0) for m in map(re.compile(r"http://\S+/").search, proc.stderr) if m)
        assert post(f"{ro}api/handoffs/{hid}/cancel", token) == 403
    finally:
        proc.terminate()
        proc.wait(30)


def test_dashboard_charts_sort_actions_and_phone(dashboard, tmp_path):
    """The charts draw from the store (a completion, a takeover after a SIGKILL), running work
    is listed above the backlog, each row offers only the actions its state allows, each
    asking first, and on a phone the rows are cards with no sideways scroll."""
    url, token, store_path = dashboard
    store = dhp.Store(store_path)
    running = dhp.dispatch(store, "pages.fetch", {"pages": 60}, {"type": "object"})
    backlog = [dhp.dispatch(store, "pages.fetch", {"n": n}, {"type": "object"})
               for n in range(3)]  # dispatched later: newest first would list them first
    done = dhp.dispatch(store, "pages.fetch", {"done": 1}, {"type": "object"})
    parked = dead_lettered(store, {"parked": 1})
    shots = os.environ.get("DHP_SCREENSHOTS") or str(tmp_path)
    with browser() as p:
        page = p.chromium.launch(executable_path=CHROMIUM).new_page(
            viewport={"width": 1280, "height": 800})
        problems = []
        page.on("console", lambda m: m.type == "error" and problems.append(m.text))
        page.on("response", lambda r: r.status >= 400 and problems.append(f"{r.status} {r.url}"))
        page.goto(url)
        page.locator("#chart-states rect").first.wait_for(timeout=30_000)  # sampled once
        page.locator("#token-box summary").click()
        page.fill("#token", token)
        page.locator("#token").dispatch_event("change")

        worker = subprocess.Popen([sys.executable, "-c", WORKER, str(store_path), running],
                                  stdout=subprocess.PIPE, text=True)
        assert worker.stdout.readline().strip() == "checkpoint 1"
        with dhp.claim(store, done, "w1") as ctx:
            ctx.complete({"ok": True})
        row = page.locator(f'tr[data-id="{running}"]')
        row.locator("text=claimed").wait_for(timeout=30_000)
        # and a poll made after `done` completed (one made while w1 held it lists it claimed)
        page.locator(f'tr[data-id="{done}"]').locator("text=completed").wait_for(timeout=30_000)
        ids = page.eval_on_selector_all("#handoffs tbody tr", "rs => rs.map(r => r.dataset.id)")
        assert ids.index(running) < min(ids.index(b) for b in backlog)  # running work first
        assert ids.index(backlog[0]) < ids.index(done)  # the backlog before the finished
        page.select_option("#sort", "newest")
        page.wait_for_function(
            "([a, b]) => { const ids = [...document.querySelectorAll('#handoffs tbody tr')]"
            ".map(r => r.dataset.id); return ids.indexOf(b) < ids.indexOf(a); }",
            arg=[running, backlog[0]], timeout=30_000)
        page.select_option("#sort", "active")

        os.kill(worker.pid, signal.SIGKILL)  # a takeover, for the delay chart
        worker.wait(30)
        # no heartbeats: a lease long enough to stay claimed on a slow machine
        dhp.recover(store, running, "standby", heartbeat_interval=0, ttl=600)
        page.locator("#chart-throughput rect").first.wait_for(timeout=30_000)
        page.locator("#chart-takeover rect").first.wait_for(timeout=30_000)
        row.locator("text=standby").wait_for(timeout=30_000)

        def buttons(hid: str) -> list[str]:
            return page.locator(f'tr[data-id="{hid}"] button').all_inner_texts()
        assert buttons(running) == ["cancel"] and buttons(backlog[0]) == ["cancel"]
        assert buttons(done) == [] and buttons(parked) == ["requeue"]
        page.once("dialog", lambda d: d.dismiss())  # asked first: no
        page.locator(f'tr[data-id="{backlog[0]}"] button').click()
        page.wait_for_timeout(1500)
        assert dhp.status(store, backlog[0])["state"] == "pending"
        page.once("dialog", lambda d: d.accept())
        page.locator(f'tr[data-id="{backlog[0]}"] button').click()
        page.locator(f'tr[data-id="{backlog[0]}"]', has_text="cancelled").wait_for(
            timeout=30_000)
        assert buttons(backlog[0]) == []  # cancelled: nothing more to do from here
        page.screenshot(path=f"{shots}/dashboard-list.png", full_page=True)

        page.set_viewport_size({"width": 390, "height": 844})
        page.reload()
        owner = page.locator(f'tr[data-id="{running}"] td.owner')
        owner.wait_for(timeout=30_000)
        assert "standby" in owner.inner_text()
        box = owner.bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390
        assert page.locator(f'tr[data-id="{running}"] td.lease').is_visible()
        assert page.evaluate("document.documentElement.scrollWidth") <= 390  # no sideways
        page.screenshot(path=f"{shots}/dashboard-phone.png", full_page=True)
        assert problems == []  # the favicon is served: no 404 in the console
