// The DHP dashboard: polls the JSON API once a second and redraws; no framework, no build.
"use strict";
const $ = (sel) => document.querySelector(sel);
const tokenInput = $("#token");
// A dashboard off loopback prints its URL with #token=...: every read needs the token there.
const given = new URLSearchParams(location.hash.slice(1)).get("token");
if (given) { sessionStorage.setItem("dhp-token", given); history.replaceState(null, "", location.pathname); }
tokenInput.value = sessionStorage.getItem("dhp-token") || "";
tokenInput.addEventListener("change", () => sessionStorage.setItem("dhp-token", tokenInput.value));

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v); else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : String(c ?? ""));
  return node;
}
const short = (id) => id.slice(7, 19);
const lease = (s) => s == null ? "" : s <= 0 ? "expired" : `${s.toFixed(1)} s`;
const stateTag = (s) => el("span", { class: `state ${s}` }, s);
const age = (s) => s == null ? "" : s < 60 ? `${Math.floor(s)} s` : s < 3600
  ? `${Math.floor(s / 60)} min` : s < 86400 ? `${Math.floor(s / 3600)} h` : `${Math.floor(s / 86400)} d`;

async function getJSON(url) {
  const headers = tokenInput.value ? { Authorization: `Bearer ${tokenInput.value}` } : {};
  const r = await fetch(url, { cache: "no-store", headers });
  if (!r.ok) throw new Error((await r.json()).error || r.statusText);
  return r.json();
}

async function act(hid, action) {
  const r = await fetch(`/api/handoffs/${hid}/${action}`, {
    method: "POST", headers: { Authorization: `Bearer ${tokenInput.value}` } });
  const body = await r.json();
  $("#message").textContent = r.ok ? "" : `${action} refused: ${body.error}`;
  if (!r.ok && r.status === 401) $("#token-box").open = true;
  refresh();
}

function actions(s, readOnly) {
  const box = el("span");
  if (readOnly) return box;
  if (s.state === "dead_lettered")
    box.append(el("button", { onclick: () => act(s.handoff_id, "requeue") }, "requeue"), " ");
  if (!["completed", "dead_lettered", "cancelled"].includes(s.state))
    box.append(el("button", { onclick: () => act(s.handoff_id, "cancel") }, "cancel"));
  return box;
}

function drawOverview(o) {
  $("#counts").replaceChildren(...Object.entries(o.states).filter(([, n]) => n)
    .map(([s, n]) => el("span", {}, stateTag(s), " ", n)),
    el("span", {}, `leases ${o.leases.live} live / ${o.leases.expired} expired`),
    el("span", {}, `DLQ ${o.dlq}`));
  $("#leader").textContent = o.supervisor
    ? `supervisor leader: ${o.supervisor.holder} (fence ${o.supervisor.fence})`
    : "no supervisor leader";
}

function drawList(items, readOnly) {
  $("#handoffs tbody").replaceChildren(...items.map((s) => el("tr", { "data-id": s.handoff_id },
    el("td", { class: "id" }, el("a", { href: `#/h/${s.handoff_id}` }, short(s.handoff_id))),
    el("td", {}, s.task_kind), el("td", {}, stateTag(s.state)), el("td", {}, s.owner ?? ""),
    el("td", {}, s.fence), el("td", {}, s.attempts), el("td", {}, lease(s.lease_expires_in)),
    el("td", {}, s.checkpoints.count), el("td", { class: "age" }, age(s.age_s)),
    el("td", {}, actions(s, readOnly)))));
  $("#empty").hidden = items.length > 0;
}

function drawDetail(d, readOnly) {
  const s = d.status;
  $("#d-title").replaceChildren(stateTag(s.state), " ", s.handoff_id);
  const cards = [["kind", s.task_kind], ["owner", s.owner ?? "—"], ["fence", s.fence],
    ["attempts", s.attempts], ["lease", lease(s.lease_expires_in) || "—"],
    ["checkpoints", s.checkpoints.count], ["spend", s.spend], ["DLQ reason", s.dlq_reason ?? "—"]];
  $("#d-status").replaceChildren(...cards.map(([k, v]) => el("div", {}, el("b", {}, k), v)));
  $("#d-timeline").replaceChildren(...d.timeline.map((e) => el("li", {},
    el("b", {}, e.what), e.fence ? ` fence ${e.fence}` : "", e.worker ? ` by ${e.worker}` : "",
    e.detail ? ` — ${e.detail}` : "", e.at ? ` (${e.at})` : "",
    e.traceback ? el("details", {}, el("summary", {}, "traceback"), el("pre", {}, e.traceback))
      : "")));
  $("#d-chain").replaceChildren(d.chain.verified
    ? el("span", { class: "ok" }, `✓ verified (${d.chain.count} records)`)
    : el("span", { class: "bad" }, `✗ broken: ${d.chain.problem}`));
  $("#d-shown").textContent = d.chain.count > d.checkpoints.length
    ? `the last ${d.checkpoints.length} of ${d.chain.count} records` : "";
  $("#d-checkpoints tbody").replaceChildren(...d.checkpoints.map((c) => el("tr", {},
    el("td", {}, c.seq), el("td", {}, c.fence), el("td", {}, c.hash.slice(0, 19)),
    el("td", {}, c.state))));
  $("#d-result").textContent = d.result == null ? "—" : JSON.stringify(d.result, null, 2);
  $("#d-actions").replaceChildren(actions(s, readOnly));
}

async function refresh() {
  const detail = location.hash.match(/^#\/h\/(sha256:[0-9a-f]{64})$/);
  $("#list-view").hidden = !!detail;
  $("#detail-view").hidden = !detail;
  try {
    const o = await getJSON("/api/overview");
    drawOverview(o);
    if (detail) drawDetail(await getJSON(`/api/handoffs/${detail[1]}`), o.read_only);
    else {
      const q = new URLSearchParams({ state: $("#state").value, kind: $("#kind").value });
      drawList(await getJSON(`/api/handoffs?${q}`), o.read_only);
    }
    $("#live").classList.remove("stale");
  } catch (e) {
    $("#live").classList.add("stale");
    $("#message").textContent = `could not update: ${e.message}`;
  }
}

window.addEventListener("hashchange", refresh);
$("#state").addEventListener("change", refresh);
$("#kind").addEventListener("input", refresh);
refresh();
setInterval(refresh, 1000);
