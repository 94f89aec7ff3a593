// The page uroce-dissect --ladder writes: HTML, CSS and the script that draws the ladder as
// SVG from the JSON rows ladder.cc puts between kLadderPageHead and kLadderPageTail. Self-
// contained: no fetch, no CDN, opens from a file on an offline machine.
//
// The URL fragment sets the view (and lets tests drive it): #conn=K (one request stream and
// its responses; -1 = all), #collapse=0 (every packet, no "... N x ..." rows), #from=US&to=US
// (a time window, microseconds since the first frame), #page=P, and #hover=FRAME (after
// drawing, hover that packet's arrow and copy the detail panel's text into #selftest).
namespace uroce::dissect {

extern const char* const kLadderPageHead = R"PAGE(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>uroce-dissect ladder</title>
<style>
body { font: 13px/1.35 system-ui, sans-serif; margin: 0; color: #222; }
header { padding: 8px 14px; border-bottom: 1px solid #ccc; background: #f7f7f7; }
header h1 { font-size: 16px; margin: 0 0 4px 0; }
#controls label { margin-right: 14px; }
#legend span { display: inline-block; margin: 4px 14px 0 0; }
#legend i { display: inline-block; width: 22px; height: 4px; vertical-align: middle; margin-right: 5px; }
main { display: flex; align-items: flex-start; }
#ladder { flex: 1 1 auto; overflow: auto; padding: 6px 0 30px 8px; }
#detail { flex: 0 0 520px; position: sticky; top: 0; max-height: 100vh; overflow: auto;
  margin: 0; padding: 10px; border-left: 1px solid #ccc; background: #fbfbfb;
  font: 11.5px/1.35 ui-monospace, monospace; white-space: pre-wrap; }
svg text { font: 11px ui-monospace, monospace; }
svg .lane { stroke: #999; stroke-width: 1.5; }
svg .lanehead { font: bold 12px system-ui, sans-serif; }
svg .time { fill: #777; }
svg .pkt:hover line, svg .pkt.pinned line, svg .pkt.shown line { stroke-width: 4; }
svg .pkt:hover text.lab, svg .pkt.pinned text.lab, svg .pkt.shown text.lab { font-weight: bold; }
svg .tag { fill: #a00; }
svg .bracket { fill: none; stroke: #0e7490; stroke-width: 1.5; }
.req { --c: #2b6cb0; } .retx { --c: #d97706; } .gap { --c: #7c3aed; } .ack { --c: #15803d; }
.dupack { --c: #86a88f; } .nak { --c: #dc2626; } .rnr { --c: #db2777; } .rresp { --c: #0e7490; }
.aack { --c: #4d7c0f; } .cm { --c: #555; } .cnp { --c: #a16207; } .bad { --c: #000; }
.malformed { --c: #000; } .unmatched { --c: #999; } .group { --c: #2b6cb0; }
svg .pkt line { stroke: var(--c); stroke-width: 2; }
svg .pkt text.lab { fill: var(--c); }
svg .bad line, svg .malformed line { stroke-dasharray: 5 3; }
svg .group line { stroke-dasharray: 2 3; }
#legend i { background: var(--c); }
#selftest { display: none; }
svg .verb text { font-style: italic; fill: var(--c); } svg .verb circle { fill: var(--c); }
.verb.post { --c: #6b21a8; } .verb.comp { --c: #047857; } .verb.err { --c: #b91c1c; }
.verb.state { --c: #374151; } .verb.timer { --c: #c2410c; }
svg .verb.shown text { font-weight: bold; }
</style></head><body>
<header><h1>RoCEv2 ladder: <span id="capture"></span></h1>
<div id="summary"></div>
<div id="controls">
<label>connection <select id="conn"></select></label>
<label><input type="checkbox" id="collapse" checked> collapse long runs</label>
<label>from <input id="from" size="9"> to <input id="to" size="9"> us</label>
<button id="prev">&lt; earlier</button> <span id="range"></span> <button id="next">later &gt;</button>
</div>
<div id="legend">
<span class="req"><i></i>request (in order)</span>
<span class="retx"><i></i>retransmission (PSN sent before)</span>
<span class="gap"><i></i>request after missing PSNs</span>
<span class="ack"><i></i>ACK</span>
<span class="dupack"><i></i>duplicate ACK</span>
<span class="nak"><i></i>NAK (sequence error, access or operation error)</span>
<span class="rnr"><i></i>RNR NAK (receiver not ready)</span>
<span class="rresp"><i></i>READ response</span>
<span class="aack"><i></i>ATOMIC ACK</span>
<span class="cm"><i></i>connection manager (QP1)</span>
<span class="cnp"><i></i>CNP (congestion)</span>
<span class="bad"><i></i>bad ICRC / malformed: dropped by the receiver</span>
<span class="unmatched"><i></i>response matching no request</span>
<span class="verb post" id="verblegend"><i></i>the local side's verbs (post, completion, QP state, timer), when CAPTURE.verbs is there</span>
</div>
<div>Time runs down. Each arrow is one packet from the sender's lane to the receiver's; hover
for every header field explained (click to pin), as <code>uroce-dissect --explain</code> prints it.</div>
</header>
<main><div id="ladder"></div><pre id="detail">Hover over an arrow.</pre></main>
<pre id="selftest"></pre>
)PAGE";

extern const char* const kLadderPageTail = R"PAGE(<script>
"use strict";
const t0 = performance.now();
const meta = JSON.parse(document.getElementById("meta").textContent);
const rows = JSON.parse(document.getElementById("rows").textContent);
const PAGE = 2000, ROW_H = 22, LANE_W = 420, LEFT = 90, TOP = 40, MIN_RUN = 5;
const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.hash.slice(1));
let state = {
  conn: params.has("conn") ? Number(params.get("conn")) : -1,
  collapse: params.get("collapse") !== "0",
  from: params.get("from") ? Number(params.get("from")) : null,
  to: params.get("to") ? Number(params.get("to")) : null,
  page: Number(params.get("page") || 0),
};
let pinned = null;
$("capture").textContent = meta.capture;
$("summary").textContent = meta.summary + (meta.other ? "; " + meta.other + " other frames (ARP, TCP, ...) not drawn" : "") +
  (meta.verbs ? "; " + meta.verbs + " verbs events from " + meta.capture + ".verbs" : "");
if (!meta.verbs) $("verblegend").style.display = "none";
const sel = $("conn");
sel.add(new Option("all", -1));
meta.conns.forEach((c, k) => sel.add(new Option(c, k)));
sel.value = state.conn;
$("collapse").checked = state.collapse;
if (state.from !== null) $("from").value = state.from;
if (state.to !== null) $("to").value = state.to;

function visible() {
  return rows.filter((r) => (state.conn < 0 || r.c === state.conn) &&
    (state.from === null || r.t >= state.from) && (state.to === null || r.t <= state.to));
}
// Runs of in-order requests of one stream (e.g. 60 WRITE_MIDDLE between a FIRST and a LAST)
// shrink to first, "... N requests ...", last; ACKs, NAKs and everything unusual stay.
function collapse(list) {
  if (!state.collapse) return list.map((r) => ({ r }));
  const out = [];
  let i = 0;
  // What may run together: in-order requests of one stream, or one kind of verbs event of one
  // QP (ibv_rc_pingpong posts 500 receives before anything else).
  const key = (r) => r.k === "req" ? "req|" + r.s + "|" + r.d + "|" + r.c :
    r.k === "verb" ? "verb|" + r.v + "|" + r.p + "|" + r.l.split(" ")[0] : null;
  while (i < list.length) {
    const a = list[i], ka = key(a);
    let j = i + 1;
    while (ka !== null && j < list.length && key(list[j]) === ka) j++;
    if (j - i >= MIN_RUN) {
      out.push({ r: list[i] });
      out.push({ group: list.slice(i + 1, j - 1) });
      out.push({ r: list[j - 1] });
    } else {
      for (let k = i; k < j; k++) out.push({ r: list[k] });
    }
    i = j;
  }
  return out;
}
// "... 37 more in order, psn a-b ..."; the opcodes they were in the row's tooltip.
function group_label(rs) {
  if (rs[0].k === "verb")
    return "... " + rs.length + " more " + rs[0].l.split(" ")[0] + " on QP 0x" + rs[0].p.toString(16).padStart(6, "0") + " ...";
  const psn = (r) => (r.l.match(/psn=(\d+)/) || ["", "?"])[1];
  return "... " + rs.length + " more in order, psn " + psn(rs[0]) + "-" + psn(rs[rs.length - 1]) + " ...";
}
function group_ops(rs) {
  const ops = new Map();
  for (const r of rs) { const op = r.l.split(" ")[0]; ops.set(op, (ops.get(op) || 0) + 1); }
  return [...ops].map(([op, n]) => op + " x " + n).join(", ") + " (collapsed: untick 'collapse long runs' to see each)";
}
const NS = "http://www.w3.org/2000/svg";
function el(name, attrs, parent) {
  const e = document.createElementNS(NS, name);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}
let shown = null;
const VERB_TEXT = {
  post: "The application posted a work request (ibv_post_send / ibv_post_recv): the queue pair takes it now; the packets it causes follow.",
  comp: "A completion was queued on the CQ: the application sees it at its next ibv_poll_cq. For a send, the ACK (or READ response) just above made it complete.",
  err: "A completion with an error status: the work request failed, and an RC QP is in the error state from here on.",
  state: "The QP changed state (ibv_modify_qp, or the transport moved it to ERR).",
  timer: "A transport timer fired: no ACK came in time (retransmit) or an RNR NAK's wait is over; the requester goes back to the PSN shown.",
};
function show(r, g) {
  if (shown) shown.classList.remove("shown");
  shown = g;
  if (g) g.classList.add("shown");
  if (r.k === "verb") {
    $("detail").textContent = (r.t / 1e6).toFixed(6) + " s  " + meta.lanes[r.s] + " (local, from the .verbs file)  QP 0x" +
      r.p.toString(16).padStart(6, "0") + "\n  " + r.l + "\n\n" + VERB_TEXT[r.v];
    return;
  }
  $("detail").textContent = r.x ? r.x :
    "#" + r.i + "  " + (r.t / 1e6).toFixed(6) + " s  " + meta.lanes[r.s] + " → " +
    meta.lanes[r.d] + "  " + r.l + (r.g ? "  " + r.g : "") +
    "\n\n(the page keeps the field-by-field text for the first " + meta.explain_cap +
    " packets only: run uroce-dissect --explain on the capture for the rest)";
}
function draw() {
  const list = collapse(visible());
  const pages = Math.max(1, Math.ceil(list.length / PAGE));
  state.page = Math.min(Math.max(state.page, 0), pages - 1);
  const part = list.slice(state.page * PAGE, (state.page + 1) * PAGE);
  $("range").textContent = "rows " + (list.length ? state.page * PAGE + 1 : 0) + "-" +
    (state.page * PAGE + part.length) + " of " + list.length;
  // Lanes: the endpoints this view shows.
  const used = [];
  for (const it of part) for (const r of it.r ? [it.r] : it.group.slice(0, 1))
    for (const l of [r.s, r.d]) if (!used.includes(l)) used.push(l);
  used.sort((p, q) => p - q);  // the capture's order (who sent first), the same in every view
  const x = (l) => LEFT + 80 + used.indexOf(l) * LANE_W;
  const width = LEFT + 160 + Math.max(1, used.length - 1) * LANE_W + 260;
  const height = TOP + part.length * ROW_H + 30;
  const svg = el("svg", { width, height, viewBox: "0 0 " + width + " " + height,
                          "data-rows": part.length });
  used.forEach((l) => {
    el("line", { class: "lane", x1: x(l), y1: TOP - 10, x2: x(l), y2: height - 10 }, svg);
    el("text", { class: "lanehead", x: x(l), y: 18, "text-anchor": "middle" }, svg).textContent = meta.lanes[l];
  });
  part.forEach((it, n) => {
    const y = TOP + n * ROW_H + 12;
    const r = it.r || it.group[0];
    const g = el("g", { class: "pkt " + (it.r ? r.k : "group"), "data-conn": r.c }, svg);
    if (it.r) g.setAttribute("data-frame", r.i);
    else g.setAttribute("data-frames", it.group.length);
    el("text", { class: "time", x: 4, y: y + 3 }, g).textContent = (r.t / 1000).toFixed(3) + " ms";
    if (r.k === "verb") {  // the local side's verbs: a dot on its lane, the text beside
      g.setAttribute("class", "verb " + r.v + (it.r ? "" : " group"));
      if (it.r) el("circle", { cx: x(r.s), cy: y, r: 4 }, g);
      el("text", { class: "lab", x: x(r.s) + 10, y: y + 4 }, g).textContent = it.r ? r.l : group_label(it.group);
      if (it.r) g.addEventListener("mouseover", () => { if (!pinned) show(r, g); });
      return;
    }
    const x1 = x(r.s), x2 = x(r.d), dir = x2 > x1 ? 1 : -1;
    el("line", { x1, y1: y, x2: x2 - dir * 7, y2: y }, g);
    el("path", { d: "M" + x2 + " " + y + " l" + (-dir * 9) + " -5 v10 z", fill: "var(--c)" }, g);
    // Long labels (CM messages) end in "..." before the next lane: the panel has them whole.
    const full = it.r ? r.l : group_label(it.group);
    const room = Math.floor((Math.abs(x2 - x1) - 24) / 6.7);
    const lab = full.length > room ? full.slice(0, Math.max(room - 3, 8)) + "..." : full;
    el("text", { class: "lab", x: Math.min(x1, x2) + 12, y: y - 4 }, g).textContent = lab;
    if (!it.r) el("title", {}, g).textContent = group_ops(it.group);
    // Tags right of the lanes, past where READ brackets may stand.
    if (it.r && r.g) el("text", { class: "tag", x: Math.max(x1, x2) + 64, y: y + 4 }, g).textContent = r.g;
    if (it.r) {
      g.addEventListener("mouseover", () => { if (!pinned) show(r, g); });
      g.addEventListener("click", () => {
        if (pinned) pinned.classList.remove("pinned");
        pinned = pinned === g ? null : g;
        if (pinned) { g.classList.add("pinned"); show(r, g); }
      });
    }
  });
  // READ responses bracketed with their request, on the requester's side of its lane.
  const rowOf = new Map(), span = new Map();
  part.forEach((it, n) => { if (it.r) rowOf.set(it.r.i, n); });
  part.forEach((it, n) => {
    if (!it.r || it.r.q === undefined || !rowOf.has(it.r.q)) return;
    const s = span.get(it.r.q) || { a: rowOf.get(it.r.q), b: n, lane: it.r.d };
    s.b = Math.max(s.b, n);
    span.set(it.r.q, s);
  });
  // Overlapping READs (several outstanding) get brackets side by side, the earliest innermost.
  const ends = [];
  [...span.entries()].sort((p, q) => p[1].a - q[1].a).forEach(([q, s]) => {
    let col = ends.findIndex((e) => e < s.a);
    if (col < 0) { col = ends.length; ends.push(s.b); } else ends[col] = s.b;
    s.col = Math.min(col, 8);
  });
  span.forEach((s, q) => {
    // Outside the lanes: left of the leftmost, right of the others.
    const side = used.indexOf(s.lane) === 0 ? -1 : 1, bx = x(s.lane) + side * (8 + 6 * s.col);
    const y1 = TOP + s.a * ROW_H + 12, y2 = TOP + s.b * ROW_H + 12;
    el("path", { class: "bracket", "data-request": q,
                 d: "M" + x(s.lane) + " " + y1 + " H" + bx + " V" + y2 + " H" + x(s.lane) }, svg);
  });
  $("ladder").replaceChildren(svg);
  document.body.setAttribute("data-render-ms", (performance.now() - t0).toFixed(0));
}
function update() {
  state.conn = Number(sel.value);
  state.collapse = $("collapse").checked;
  state.from = $("from").value === "" ? null : Number($("from").value);
  state.to = $("to").value === "" ? null : Number($("to").value);
  draw();
}
sel.onchange = () => { state.page = 0; update(); };
$("collapse").onchange = () => { state.page = 0; update(); };
$("from").onchange = $("to").onchange = () => { state.page = 0; update(); };
$("prev").onclick = () => { state.page--; update(); };
$("next").onclick = () => { state.page++; update(); };
draw();
if (params.has("hover")) {
  const g = document.querySelector('g[data-frame="' + params.get("hover") + '"]');
  if (g) g.dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
  $("selftest").textContent = g ? $("detail").textContent : "no arrow for frame " + params.get("hover");
}
</script></body></html>
)PAGE";

}  // namespace uroce::dissect
