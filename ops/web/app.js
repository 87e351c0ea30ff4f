// tinybroker's dashboard: no framework, no build step. It listens to api/events (a snapshot
// of every counter each second, as server-sent events), keeps five minutes of history in
// memory for the graphs and rates, and renders the tab on show. On opening it reads the
// broker's own history (api/history: a point every 5 s for an hour), so that the charts, the
// groups' sparklines and their rates show the last five minutes at once.
"use strict";

const HISTORY = 300; // snapshots kept: five minutes at one a second
const RATE_WINDOW = 10000; // a group's rates are over its last 10 s (ms)
const history = []; // snapshots, oldest first
const groupHistory = new Map(); // group id -> [{t, backlog, published, delivered, acked, redelivered}], oldest first
let past = []; // the broker's history points (api/history) from before the first snapshot: charts only
let tab = "overview";
let dlGroup = ""; // the group whose dead letters are shown
let dlSeen = -1; // its dead_lettered count when the list was last loaded
let server = null; // api/server, and when it was read (performance.now()): the header's version and uptime
let connOffset = 0; // the first connection shown
let connLoading = false;
let connLoaded = 0; // when the connections were last read (performance.now())

// ---- helpers ----------------------------------------------------------------------------

function $(id) { return document.getElementById(id); }

// h builds an element: h("td", {class: "num"}, "text", child...). Text is never parsed as HTML.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const SVG = "http://www.w3.org/2000/svg";
function s(tag, attrs) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  return el;
}

// sync makes tbody's rows those of rows (built afresh by h), keyed by the attribute key:
// a row already shown is patched in place rather than replaced, so that a button under the
// pointer survives the update it is clicked during.
function sync(tbody, rows, key) {
  const old = new Map();
  for (const tr of tbody.rows) if (tr.hasAttribute(key)) old.set(tr.getAttribute(key), tr);
  let i = 0;
  for (const row of rows) {
    const was = old.get(row.getAttribute(key));
    let tr = row;
    if (was) {
      old.delete(row.getAttribute(key));
      if (patch(was, row)) tr = was;
    }
    if (tbody.rows[i] !== tr) tbody.insertBefore(tr, tbody.rows[i] || null);
    i++;
  }
  while (tbody.rows.length > i) tbody.rows[i].remove();
}

// patch makes el like want when their shapes match (same tags, same number of children),
// and reports whether it could; event listeners stay el's.
function patch(el, want) {
  if (el.nodeType !== want.nodeType || el.nodeName !== want.nodeName || el.childNodes.length !== want.childNodes.length) return false;
  if (el.nodeType === Node.TEXT_NODE) {
    if (el.nodeValue !== want.nodeValue) el.nodeValue = want.nodeValue;
    return true;
  }
  if (el.namespaceURI === SVG) { // sparklines: redrawn
    el.replaceWith(want);
    return true;
  }
  for (const a of [...el.attributes]) if (!want.hasAttribute(a.name)) el.removeAttribute(a.name);
  for (const a of want.attributes) if (el.getAttribute(a.name) !== a.value) el.setAttribute(a.name, a.value);
  const kids = [...el.childNodes], wants = [...want.childNodes];
  for (let i = 0; i < kids.length; i++) if (!patch(kids[i], wants[i])) kids[i].replaceWith(wants[i]);
  return true;
}

function num(n) {
  if (n === undefined || n === null || Number.isNaN(n)) return "–";
  const a = Math.abs(n);
  if (a >= 1e9) return (n / 1e9).toFixed(a >= 1e10 ? 0 : 1) + "G";
  if (a >= 1e6) return (n / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
  if (a >= 1e4) return (n / 1e3).toFixed(a >= 1e5 ? 0 : 1) + "k";
  if (Number.isInteger(n)) return String(n);
  return n >= 100 ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n.toFixed(2);
}

function bytes(n) {
  if (n === undefined || n === null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(n >= 100 ? 0 : 1)) + " " + units[i];
}

function age(ms) {
  if (!ms) return "–";
  if (ms < 1000) return ms + " ms";
  const sec = ms / 1000;
  if (sec < 60) return sec.toFixed(sec < 10 ? 1 : 0) + " s";
  if (sec < 3600) return Math.floor(sec / 60) + " m " + Math.floor(sec % 60) + " s";
  return Math.floor(sec / 3600) + " h " + Math.floor((sec % 3600) / 60) + " m";
}

function ms(v) { return v ? (v < 1 ? (v * 1000).toFixed(0) + " µs" : v.toFixed(v < 10 ? 2 : 0) + " ms") : "–"; }

function setText(id, text) {
  const el = $(id);
  if (el && el.textContent !== text) el.textContent = text;
}

function toast(text) {
  const t = $("toast");
  t.textContent = text;
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 3000);
}

// rate of field between the last two snapshots (per second), or of an accessor.
function rate(get, a, b) {
  if (!a || !b || b.time <= a.time) return 0;
  return Math.max(0, (get(b) - get(a)) * 1000 / (b.time - a.time));
}

// groupSample is what groupHistory keeps of a group (of a snapshot or a history point) at t;
// counted is false for a point of a broker whose history kept backlogs only.
function groupSample(t, g) {
  return { t, backlog: g.queued + g.in_flight + g.delayed, counted: g.published !== undefined, published: g.published,
    delivered: g.delivered, acked: g.acked, redelivered: g.redelivered };
}

// groupRates is a group's rates per second over its last RATE_WINDOW (or the two samples
// closest to it), from groupHistory: the broker's history and then the page's snapshots.
// Without two samples with counters, null.
function groupRates(id) {
  const gh = (groupHistory.get(id) || []).filter(x => x.counted);
  if (gh.length < 2) return null;
  const b = gh[gh.length - 1];
  let a = gh[gh.length - 2];
  for (let i = gh.length - 2; i >= 0 && gh[i].t >= b.t - RATE_WINDOW; i--) a = gh[i];
  const r = {};
  for (const k of ["published", "delivered", "acked", "redelivered"]) r[k] = rate(x => x[k], { time: a.t, [k]: a[k] }, { time: b.t, [k]: b[k] });
  return r;
}

// uptime is how long the broker has run, as a short text.
function uptime(sec) {
  if (sec < 60) return Math.floor(sec) + " s";
  if (sec < 3600) return Math.floor(sec / 60) + " m";
  if (sec < 86400) return Math.floor(sec / 3600) + " h " + Math.floor((sec % 3600) / 60) + " m";
  return Math.floor(sec / 86400) + " d " + Math.floor((sec % 86400) / 3600) + " h";
}

function last() { return history[history.length - 1]; }
function prev() { return history[history.length - 2]; }

async function api(method, path, body) {
  const opts = { method, headers: {} };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const resp = await fetch(path, opts);
  let data = {};
  try { data = await resp.json(); } catch (e) { /* not JSON */ }
  if (!resp.ok) {
    const err = new Error(data.error || resp.status + " " + resp.statusText);
    err.status = resp.status;
    throw err;
  }
  return data;
}

// ---- charts -----------------------------------------------------------------------------

// chart draws lines (series: [{name, color, values}]) over times (ms) into svg, with a y
// axis from 0 to a round maximum and the last five minutes on the x axis.
function chart(svg, times, series, format) {
  const w = svg.clientWidth || 600, hgt = svg.clientHeight || 220;
  const left = 52, right = 8, top = 8, bottom = 20;
  svg.setAttribute("viewBox", `0 0 ${w} ${hgt}`);
  svg.replaceChildren();
  let max = 0;
  for (const sr of series) for (const v of sr.values) if (v > max) max = v;
  max = niceMax(max);
  const now = times.length ? times[times.length - 1] : Date.now();
  // The x axis spans what history holds: from a minute up to five.
  const span = Math.min(HISTORY * 1000, Math.max(60000, times.length ? now - times[0] : 0));
  const x = t => left + (w - left - right) * (1 - (now - t) / span);
  const y = v => top + (hgt - top - bottom) * (1 - v / max);
  for (let i = 0; i <= 4; i++) {
    const v = max * i / 4;
    svg.append(s("line", { class: "grid", x1: left, x2: w - right, y1: y(v), y2: y(v) }));
    const label = s("text", { x: left - 6, y: y(v) + 4, "text-anchor": "end" });
    label.textContent = format(v);
    svg.append(label);
  }
  const step = span > 120000 ? 60000 : span > 60000 ? 30000 : 15000;
  for (let ago = 0; ago <= span; ago += step) {
    const label = s("text", { x: x(now - ago), y: hgt - 4, "text-anchor": ago === 0 ? "end" : ago + step > span ? "start" : "middle" });
    label.textContent = ago === 0 ? "now" : ago % 60000 ? `-${ago / 1000}s` : `-${ago / 60000}m`;
    svg.append(label);
  }
  for (const sr of series) {
    if (!times.length) continue;
    let d = "";
    sr.values.forEach((v, i) => { d += (i ? "L" : "M") + x(times[i]).toFixed(1) + "," + y(v).toFixed(1); });
    const area = d + `L${x(times[times.length - 1]).toFixed(1)},${y(0)}L${x(times[0]).toFixed(1)},${y(0)}Z`;
    svg.append(s("path", { class: "area", d: area, fill: sr.color }));
    svg.append(s("path", { class: "line", d, stroke: sr.color }));
  }
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function legend(id, series) {
  $(id).replaceChildren(...series.map(sr => h("span", {}, h("i", { style: `background:${sr.color}` }), sr.name)));
}

function spark(values) {
  const svg = s("svg", { class: "spark", viewBox: "0 0 100 24", preserveAspectRatio: "none" });
  if (values.length > 1) {
    const max = Math.max(1, ...values);
    let d = "";
    values.forEach((v, i) => { d += (i ? "L" : "M") + (100 * i / (values.length - 1)).toFixed(1) + "," + (22 - 20 * v / max).toFixed(1); });
    svg.append(s("path", { d }));
  }
  return svg;
}

// ---- rendering --------------------------------------------------------------------------

const colors = { published: "var(--c1)", delivered: "var(--c2)", acked: "var(--c3)", queued: "var(--c1)", inflight: "var(--c4)", delayed: "var(--c3)" };

function renderOverview() {
  const a = prev(), b = last();
  if (!b) return;
  setText("rate-published", num(rate(x => x.published, a, b)));
  setText("rate-delivered", num(rate(x => x.delivered, a, b)));
  setText("rate-acked", num(rate(x => x.acked, a, b)));
  const bl = b.backlog;
  setText("backlog-total", num(bl.queued + bl.in_flight + bl.delayed));
  setText("backlog-detail", `${num(bl.queued)} queued · ${num(bl.in_flight)} in flight · ${num(bl.delayed)} delayed`);
  setText("backlog-oldest", age(bl.oldest_age_ms));
  setText("memory-used", bytes(b.memory_used));
  setText("memory-budget", "of " + bytes(b.memory_budget) + " budget");
  setText("connections", b.server ? num(b.server.connections) : "–");
  setText("groups-count", `${num(b.groups_total)} groups · ${num(b.fanout_total)} fanout`);
  setText("rate-redelivered", num(rate(x => x.redelivered, a, b)) + " · " + num(rate(x => x.dead_lettered, a, b)));
  setText("dead-total", `${num(b.dead_lettered)} dead letters in all`);
  const refused = Object.entries(b.refused || {});
  setText("refused-note", refused.length ? "Publishes refused: " + refused.map(([c, n]) => `${c} ${num(n)}`).join(", ") : "");

  const times = [], pub = [], del = [], ack = [], q = [], inf = [], dly = [];
  const all = past.concat(history);
  for (let i = 1; i < all.length; i++) {
    const p = all[i - 1], c = all[i];
    times.push(c.time);
    pub.push(rate(x => x.published, p, c));
    del.push(rate(x => x.delivered, p, c));
    ack.push(rate(x => x.acked, p, c));
    q.push(c.backlog.queued);
    inf.push(c.backlog.in_flight);
    dly.push(c.backlog.delayed);
  }
  const rates = [{ name: "published", color: colors.published, values: pub }, { name: "delivered", color: colors.delivered, values: del },
    { name: "acked", color: colors.acked, values: ack }];
  const backlog = [{ name: "queued", color: colors.queued, values: q }, { name: "in flight", color: colors.inflight, values: inf },
    { name: "delayed", color: colors.delayed, values: dly }];
  chart($("chart-rates"), times, rates, num);
  chart($("chart-backlog"), times, backlog, num);
  legend("legend-rates", rates);
  legend("legend-backlog", backlog);
}

function renderGroups() {
  const b = last();
  if (!b) return;
  const body = $("groups-table").tBodies[0];
  const rows = b.groups.map(g => {
    const r = groupRates(g.id) || {};
    const hist = (groupHistory.get(g.id) || []).slice(-HISTORY).map(x => x.backlog);
    return h("tr", { "data-group": g.id },
      h("td", {}, h("strong", {}, g.id), g.group !== g.id ? h("div", { class: "note" }, "group " + g.group) : null,
        h("div", { class: "patterns" }, g.patterns.join(" ")),
        g.declared ? h("span", { class: "badge muted", title: "declared in the config file" }, "declared") : null,
        g.paused ? h("span", { class: "badge paused", title: "it hands nothing to its members until resumed" }, "paused") : null,
        g.stuck ? h("span", { class: "badge bad stuck", title: "messages queued, members with room, nothing delivered for a while: look for a key a member holds and does not settle" }, "stuck") : null),
      h("td", { class: "num members" }, g.members),
      h("td", { class: "num queued" + (g.queued > 0 && g.members === 0 ? " hot" : "") }, g.queued),
      h("td", { class: "num in-flight" }, g.in_flight),
      h("td", { class: "num delayed" }, g.delayed),
      h("td", { class: "num oldest" + (g.oldest_age_ms > 60000 ? " hot" : ""), title: g.oldest_unacked_age_ms ? `oldest unacked: ${age(g.oldest_unacked_age_ms)}` : "" }, age(g.oldest_age_ms)),
      h("td", {}, spark(hist)),
      h("td", { class: "num rate-published" }, num(r.published)),
      h("td", { class: "num rate-delivered" }, num(r.delivered)),
      h("td", { class: "num rate-acked" }, num(r.acked)),
      h("td", { class: "num rate-redelivered" }, num(r.redelivered)),
      h("td", { class: "num acked" }, num(g.acked)),
      h("td", { class: "num redelivered", title: `nacked ${g.nacked}, ack deadline ${g.timed_out}, member left ${g.left_behind}` }, num(g.redelivered)),
      h("td", { class: "num dead-lettered" + (g.dead_lettered ? " bad-text" : ""),
        title: `${g.dead_lettered} dead-lettered since the broker started; ${g.dead_letters} kept now (the Dead letters tab lists those)` }, num(g.dead_lettered)),
      h("td", { class: "actions" },
        h("button", { type: "button", onclick: () => showDeadLetters(g.id) }, "Dead letters"),
        // One button, whose listener stays when sync patches the row: it reads the state then.
        h("button", { type: "button", class: g.paused ? "resume" : "pause", onclick: () => togglePause(g.id) }, g.paused ? "Resume" : "Pause"),
        h("button", { type: "button", class: "danger purge", disabled: g.queued + g.delayed === 0, onclick: () => purge(g.id) }, "Purge"),
        h("button", { type: "button", class: "danger", disabled: g.members > 0, title: g.members ? "close its members first" : "", onclick: () => del(g.id) }, "Delete")));
  });
  sync(body, rows, "data-group");
  $("groups-empty").hidden = b.groups_total > 0;
  setText("groups-note", b.groups_total > b.groups.length ? `Showing the first ${b.groups.length} of ${b.groups_total} groups.` : "");
}

async function purge(id) {
  if (!confirm(`Purge group ${id}? What it holds for its members (queued and delayed) is dropped; in-flight messages stay.`)) return;
  try {
    const r = await api("POST", `api/groups/${encodeURIComponent(id)}/purge`);
    toast(`Purged ${r.purged} messages from ${id}`);
  } catch (e) { toast(`Purge failed: ${e.message}`); }
}

function togglePause(id) {
  const g = (last()?.groups || []).find(x => x.id === id);
  if (g) pause(id, !g.paused);
}

async function pause(id, paused) {
  const what = paused ? "pause" : "resume";
  try {
    await api("POST", `api/groups/${encodeURIComponent(id)}/${what}`);
    toast(paused ? `Paused ${id}: it delivers nothing until resumed` : `Resumed ${id}`);
  } catch (e) { toast(`${paused ? "Pause" : "Resume"} failed: ${e.message}`); }
}

async function del(id) {
  if (!confirm(`Delete group ${id} and the messages it holds?`)) return;
  try {
    await api("DELETE", `api/groups/${encodeURIComponent(id)}`);
    toast(`Deleted group ${id}`);
  } catch (e) { toast(`Delete failed: ${e.message}`); }
}

function showDeadLetters(id) {
  dlGroup = id;
  dlSeen = -1;
  location.hash = "#dead-letters";
}

function renderDeadLetters() {
  const b = last();
  if (!b) return;
  const sel = $("dl-group");
  const ids = b.groups.map(g => g.id);
  if (!dlGroup && ids.length) dlGroup = ids[0];
  if (sel.options.length !== ids.length || [...sel.options].some((o, i) => o.value !== ids[i])) {
    sel.replaceChildren(...ids.map(id => h("option", { value: id }, id)));
  }
  sel.value = dlGroup;
  const g = b.groups.find(x => x.id === dlGroup);
  if (g && g.dead_lettered !== dlSeen) {
    dlSeen = g.dead_lettered;
    loadDeadLetters();
  }
}

async function loadDeadLetters() {
  const body = $("dl-table").tBodies[0];
  const msg = $("dl-message");
  if (!dlGroup) {
    body.replaceChildren();
    return;
  }
  try {
    const r = await api("GET", `api/groups/${encodeURIComponent(dlGroup)}/dead-letters?limit=100`);
    msg.hidden = true;
    $("dl-replay-all").disabled = r.dead_letters.length === 0;
    const g = (last() ? last().groups : []).find(x => x.id === dlGroup);
    const n = r.dead_letters.length;
    setText("dl-count", (n === 100 && g ? `the first 100 of ${num(g.dead_letters)} kept now` : `${n} kept now`) +
      (g ? ` · ${num(g.dead_lettered)} dead-lettered (total)` : ""));
    body.replaceChildren(...r.dead_letters.map(d => h("tr", { "data-id": d.id },
      h("td", {}, new Date(d.at).toLocaleString()),
      h("td", { class: "patterns" }, d.topic),
      h("td", { class: "reason", title: d.code }, d.reason),
      h("td", { class: "num" }, d.attempts),
      h("td", { class: "payload", title: preview(d.payload) }, preview(d.payload), d.size > 0 ? h("span", { class: "note" }, ` (${bytes(d.size)})`) : null),
      h("td", { class: "actions" }, h("button", { type: "button", class: "replay", onclick: () => replay([d.id]) }, "Replay")))));
    if (!r.dead_letters.length) body.replaceChildren(h("tr", {}, h("td", { colspan: 6, class: "empty" }, `No dead letters in ${dlGroup}.`)));
  } catch (e) {
    body.replaceChildren();
    $("dl-replay-all").disabled = true;
    setText("dl-count", "");
    msg.textContent = e.message;
    msg.hidden = false;
  }
}

function preview(b64) {
  if (!b64) return "";
  try {
    const raw = atob(b64);
    const printable = /^[\x09\x0a\x0d\x20-\x7e]*$/.test(raw);
    return printable ? raw.slice(0, 200) : `${raw.length} bytes of binary`;
  } catch (e) { return ""; }
}

async function replay(ids) {
  try {
    const r = await api("POST", `api/groups/${encodeURIComponent(dlGroup)}/dead-letters/replay`, { ids });
    toast(`Replayed ${r.replayed} dead letter${r.replayed === 1 ? "" : "s"} from ${dlGroup}`);
  } catch (e) { toast(`Replay failed: ${e.message}`); }
  loadDeadLetters();
}

function renderPlugins() {
  const a = prev(), b = last();
  if (!b) return;
  const before = new Map((a ? a.plugins : []).map(p => [p.name, p]));
  const rows = [];
  for (const p of b.plugins) {
    const pp = before.get(p.name);
    p.hooks.forEach((hk, i) => {
      const ph = pp && pp.hooks.find(x => x.hook === hk.hook);
      const callRate = ph ? rate(x => x.calls, { time: a.time, calls: ph.calls }, { time: b.time, calls: hk.calls }) : 0;
      const failures = Object.entries(hk.failures).filter(([, n]) => n > 0);
      rows.push(h("tr", { "data-plugin": p.name, "data-hook": hk.hook, "data-key": p.name + "/" + hk.hook },
        i === 0 ? h("td", { rowspan: p.hooks.length }, h("strong", {}, p.name)) : null,
        i === 0 ? h("td", { rowspan: p.hooks.length }, p.breaker_open ? h("span", { class: "badge bad" }, `open · ${num(p.skipped)} skipped`) : h("span", { class: "badge" }, "closed")) : null,
        i === 0 ? h("td", { rowspan: p.hooks.length, class: "num" }, p.instances) : null,
        h("td", { class: "patterns" }, hk.hook),
        h("td", { class: "num calls" }, num(hk.calls)),
        h("td", { class: "num" }, num(callRate)),
        h("td", { class: "failures" }, failures.length ? failures.map(([k, n]) => h("span", { class: "bad-text" }, `${k} ${num(n)}`)) : h("span", { class: "note" }, "none")),
        h("td", { class: "num" }, ms(hk.p50_ms)),
        h("td", { class: "num" }, ms(hk.p99_ms))));
    });
  }
  sync($("plugins-table").tBodies[0], rows, "data-key");
  $("plugins-empty").hidden = b.plugins.length > 0;
}

function renderStreams() {
  const a = prev(), b = last();
  if (!b) return;
  const sv = b.server || {};
  setText("s-connections", num(sv.connections));
  setText("s-refused", `${num(sv.connections_refused)} refused`);
  setText("s-publish", num(sv.publish_streams));
  setText("s-pub-bytes", `${bytes(rate(x => (x.server || {}).published_bytes || 0, a, b))}/s published`);
  setText("s-subscribe", num(sv.subscribe_streams));
  setText("s-deliv-bytes", `${bytes(rate(x => (x.server || {}).delivered_bytes || 0, a, b))}/s delivered`);
  setText("s-fanout", num(b.fanout_total));
  setText("s-buffered", `${num(b.buffered)} buffered`);
  setText("s-members", num(b.members));
  const before = new Map((a ? a.fanout : []).map(f => [f.id, f]));
  sync($("fanout-table").tBodies[0], b.fanout.map(f => {
    const p = before.get(f.id);
    const r = p ? rate(x => x.delivered, { time: a.time, delivered: p.delivered }, { time: b.time, delivered: f.delivered }) : 0;
    return h("tr", { "data-fanout": f.id },
      h("td", { class: "patterns" }, f.id),
      h("td", { class: "patterns" }, f.patterns.join(" ")),
      h("td", { class: "num" }, num(f.delivered)),
      h("td", { class: "num" }, num(r)),
      h("td", { class: "num" }, num(f.buffered)),
      h("td", { class: "num" + (f.dropped ? " bad-text" : "") }, num(f.dropped)));
  }), "data-fanout");
  setText("fanout-note", b.fanout_total > b.fanout.length ? `Showing the first ${b.fanout.length} of ${b.fanout_total} fanout subscriptions.` : (b.fanout_total ? "" : "No fanout subscriptions."));
}

// renderConnections reads a page of api/streams when the tab shows, and again every two
// seconds while it does (each snapshot asks; at most one read at a time).
function renderConnections() {
  if (!connLoading && performance.now() - connLoaded > 2000) loadConnections();
}

async function loadConnections() {
  connLoading = true;
  const limit = Number($("conn-size").value);
  try {
    let r = await api("GET", `api/streams?offset=${connOffset}&limit=${limit}`);
    if (r.total > 0 && connOffset >= r.total) { // streams closed under the page: its last page
      connOffset = Math.floor((r.total - 1) / limit) * limit;
      r = await api("GET", `api/streams?offset=${connOffset}&limit=${limit}`);
    }
    $("conn-message").hidden = true;
    setText("conn-range", r.total ? `${connOffset + 1}–${connOffset + r.streams.length} of ${r.total}` : "none open");
    $("conn-prev").disabled = connOffset === 0;
    $("conn-next").disabled = connOffset + r.streams.length >= r.total;
    sync($("conn-table").tBodies[0], r.streams.map(st => h("tr", { "data-stream": st.id },
      h("td", { class: "patterns" }, st.id),
      h("td", { class: "patterns peer" }, st.peer || h("span", { class: "note", title: "opened inside the broker's process, not over gRPC" }, "in-process")),
      h("td", { class: "num" }, num(st.buffered)),
      h("td", { class: "subs" }, st.subscriptions.length ? st.subscriptions.map(sub => h("div", { class: "sub", "data-sub": sub.id },
        h("code", {}, sub.id), " ", h("span", { class: "badge muted" }, sub.mode.toLowerCase()),
        sub.group ? h("span", { class: "note" }, ` group ${sub.group}`) : null,
        sub.member_id ? h("span", { class: "note" }, ` member ${sub.member_id}`) : null,
        " ", h("span", { class: "patterns" }, sub.patterns.join(" ")))) : h("span", { class: "note" }, "none yet")))), "data-stream");
    $("conn-empty").hidden = r.total > 0;
  } catch (e) {
    const msg = $("conn-message");
    msg.textContent = `Could not read the connections: ${e.message}`;
    msg.hidden = false;
  } finally {
    connLoading = false;
    connLoaded = performance.now();
  }
}

function pageConnections(dir) {
  connOffset = Math.max(0, connOffset + dir * Number($("conn-size").value));
  loadConnections();
}

// renderServer shows the broker's version and uptime in the header (from api/server, read
// on opening and after each reconnection).
function renderServer() {
  if (!server) return;
  const up = server.info.uptime_seconds + (performance.now() - server.at) / 1000;
  setText("server-version", server.info.version);
  setText("server-uptime", "up " + uptime(up));
  $("server-info").title = `tinybroker ${server.info.version}, ${server.info.go}; started ${new Date(server.info.started).toLocaleString()}`;
}

async function loadServer() {
  try {
    server = { info: await api("GET", "api/server"), at: performance.now() };
    renderServer();
  } catch (e) { /* shown again on the next reconnection */ }
}

const renderers = { overview: renderOverview, groups: renderGroups, "dead-letters": renderDeadLetters, plugins: renderPlugins, streams: renderStreams,
  connections: renderConnections };

function render() {
  renderServer();
  renderers[tab]();
}

function showTab() {
  const want = location.hash.replace(/^#/, "") || "overview";
  tab = renderers[want] ? want : "overview";
  for (const a of document.querySelectorAll("#tabs a")) a.classList.toggle("active", a.dataset.tab === tab);
  for (const sec of document.querySelectorAll("section.tab")) sec.hidden = sec.id !== "tab-" + tab;
  if (tab === "dead-letters") dlSeen = -1;
  if (tab === "connections") connLoaded = 0;
  render();
}

// ---- live updates -----------------------------------------------------------------------

function onSnapshot(snap) {
  history.push(snap);
  if (history.length > HISTORY + 1) history.shift();
  past = past.filter(p => p.time < history[0].time && p.time >= snap.time - HISTORY * 1000);
  const seen = new Set();
  for (const g of snap.groups) {
    seen.add(g.id);
    if (!groupHistory.has(g.id)) groupHistory.set(g.id, []);
    const gh = groupHistory.get(g.id);
    gh.push(groupSample(snap.time, g));
    while (gh.length > HISTORY || gh[0].t < snap.time - HISTORY * 1000) gh.shift();
  }
  for (const id of groupHistory.keys()) if (!seen.has(id)) groupHistory.delete(id);
  render();
}

// loadHistory reads the broker's history into past and the groups' sparklines; a broker
// without it (or an error) leaves them empty, and the charts fill as snapshots come.
async function loadHistory() {
  try {
    const since = Date.now() - HISTORY * 1000;
    const hist = await api("GET", `api/history?since=${since}`);
    past = (hist.points || []).filter(p => p.time >= since);
    for (const p of past) {
      for (const g of p.groups || []) {
        if (!groupHistory.has(g.id)) groupHistory.set(g.id, []);
        groupHistory.get(g.id).push(groupSample(p.time, g));
      }
    }
  } catch (e) {
    past = [];
  }
}

function connect() {
  const status = $("status");
  const es = new EventSource("api/events");
  es.addEventListener("snapshot", e => {
    if (status.dataset.state === "down") loadServer(); // perhaps restarted
    status.dataset.state = "live";
    status.textContent = "live";
    onSnapshot(JSON.parse(e.data));
  });
  es.onerror = () => {
    status.dataset.state = "down";
    status.textContent = "reconnecting…";
  };
}

$("dl-group").addEventListener("change", e => { dlGroup = e.target.value; dlSeen = -1; render(); });
$("dl-refresh").addEventListener("click", () => loadDeadLetters());
$("conn-prev").addEventListener("click", () => pageConnections(-1));
$("conn-next").addEventListener("click", () => pageConnections(1));
$("conn-size").addEventListener("change", () => { connOffset = 0; loadConnections(); });
$("dl-replay-all").addEventListener("click", () => { if (confirm(`Replay every dead letter of ${dlGroup}?`)) replay([]); });
window.addEventListener("hashchange", showTab);
window.addEventListener("resize", () => render());
showTab();
loadServer();
loadHistory().finally(connect);
