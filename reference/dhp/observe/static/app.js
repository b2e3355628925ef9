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
  // Both change work another process may be doing: ask first.
  const why = action === "cancel" ? "Cancel this handoff? Its owner loses the lease."
    : "Requeue this handoff? It goes back to pending with a fresh attempt count.";
  if (!confirm(`${why}\n${hid}`)) return;
  const r = await fetch(`/api/handoffs/${hid}/${action}`, {
    method: "POST", headers: { Authorization: `Bearer ${tokenInput.value}` } });
  const body = await r.json();
  $("#message").textContent = r.ok ? "" : `${action} refused: ${body.error}`;
  if (!r.ok && r.status === 401) $("#token-box").open = true;
  refresh();
}

// Only what the store accepts: requeue takes dead-lettered work (DHP-BUD-007); cancel is
// offered on live work only (cancelling finished or parked work would change nothing useful).
const LIVE = ["pending", "claimed", "released", "orphaned"];
function actions(s, readOnly) {
  const box = el("span");
  if (readOnly) return box;
  if (s.state === "dead_lettered")
    box.append(el("button", { onclick: () => act(s.handoff_id, "requeue") }, "requeue"));
  if (LIVE.includes(s.state))
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

// data-label names each cell on a phone, where the rows become cards (style.css).
const cell = (label, content, cls = "") => el("td", { "data-label": label, class: cls }, content);
function drawList(items, readOnly) {
  $("#handoffs tbody").replaceChildren(...items.map((s) => el("tr", { "data-id": s.handoff_id },
    cell("handoff", el("a", { href: `#/h/${s.handoff_id}` }, short(s.handoff_id)), "id"),
    cell("kind", s.task_kind), cell("state", stateTag(s.state)),
    cell("owner", s.owner ?? "", "owner"), cell("fence", s.fence), cell("attempts", s.attempts),
    cell("lease", lease(s.lease_expires_in), "lease"), cell("checkpoints", s.checkpoints.count),
    cell("age", age(s.age_s), "age"), cell("actions", actions(s, readOnly), "actions"))));
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

// The charts: inline SVG bars, one per minute of the last hour, drawn here (no library).
const SVG = "http://www.w3.org/2000/svg";
const COLORS = { claimed: "#1e88e5", orphaned: "#fb8c00", released: "#8e24aa",
  pending: "#90a4ae", dead_lettered: "#e53935", cancelled: "#546e7a", completed: "#43a047" };
const W = 300, H = 110, PAD = 22;
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  node.append(...children);
  return node;
}
const clock = (t) => new Date(t * 1000).toTimeString().slice(0, 5);
const fmt = (v) => v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : +v.toFixed(2);
// stacks: per minute, a list of [value, color, label, keep]; draws the axes and the bars
// (a zero is drawn as a sliver when `keep`: a takeover of 0 s happened).
function bars(node, minutes, stacks, unit = "") {
  const top = Math.max(1e-9, ...stacks.map((s) => s.reduce((a, [v]) => a + v, 0)));
  const step = (W - PAD) / minutes.length, scale = (H - 16) / top;
  const shapes = [];
  stacks.forEach((stack, i) => {
    let y = H - 12;
    for (const [v, color, label, keep] of stack) {
      if (!v && !keep) continue;
      const h = Math.max(keep ? 2 : 1, v * scale);
      y -= h;
      shapes.push(svg("rect", { x: PAD + i * step, y, width: Math.max(1, step - 1), height: h,
        fill: color }, svg("title", {}, `${clock(minutes[i].t)} ${label}: ${fmt(v)}`)));
    }
  });
  const empty = !shapes.length;
  node.setAttribute("viewBox", `0 0 ${W} ${H}`);
  node.classList.toggle("empty", empty);
  node.replaceChildren(
    svg("line", { x1: PAD, y1: H - 12, x2: W, y2: H - 12, class: "axis" }),
    svg("text", { x: PAD - 3, y: 10, "text-anchor": "end" }, `${empty ? 0 : fmt(top)}${unit}`),
    svg("text", { x: PAD - 3, y: H - 12, "text-anchor": "end" }, "0"),
    svg("text", { x: PAD, y: H - 1 }, clock(minutes[0].t)),
    svg("text", { x: W, y: H - 1, "text-anchor": "end" }, "now"),
    ...(empty ? [svg("text", { x: (W + PAD) / 2, y: H / 2, "text-anchor": "middle",
      class: "none" }, "nothing yet")] : []),
    ...shapes);
}
function drawCharts(series) {
  const m = series.minutes;
  const shown = Object.keys(COLORS);
  bars($("#chart-states"), m, m.map((b) => b.states
    ? shown.map((s) => [b.states[s] || 0, COLORS[s], s]) : []));
  $("#legend-states").replaceChildren(...shown.map((s) =>
    el("span", {}, el("i", { style: `background:${COLORS[s]}` }), s)));
  bars($("#chart-throughput"), m, m.map((b) => [[b.completed, COLORS.completed, "completed"]]));
  bars($("#chart-takeover"), m, m.map((b) => b.takeovers ? [[b.delay_max, COLORS.orphaned,
    `longest of ${b.takeovers} takeover(s), s`, true]] : []), " s");
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
      const q = new URLSearchParams({ state: $("#state").value, kind: $("#kind").value,
        sort: $("#sort").value });
      drawList(await getJSON(`/api/handoffs?${q}`), o.read_only);
      drawCharts(await getJSON("/api/series?minutes=60"));
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
$("#sort").addEventListener("change", refresh);
refresh();
setInterval(refresh, 1000);
