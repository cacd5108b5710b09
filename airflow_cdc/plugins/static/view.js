// The CDC view: reads /cdc/api (same origin, the UI's session cookie) and draws the tables.
// Plain DOM, text set through textContent only: ids and reasons come from sources.
"use strict";

const STEPS = ["plan", "extract", "commit", "apply", "gate"];
const STATE_ORDER = { failed: 0, waiting: 1, running: 2, new: 3, ok: 4 };
const STATE_LABEL = { ok: "OK", running: "RUNNING", waiting: "WAITING", failed: "FAILED", new: "NEW" };
let selected = null;
let olderThan = null;
let timer = null;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function ts(text) {
  // "2024-05-01T10:00:00.000000Z" -> "2024-05-01 10:00:00"
  return text ? text.slice(0, 19).replace("T", " ") : "–";
}

function shortTs(start, end) {
  const a = ts(start), b = ts(end);
  return a.slice(0, 10) === b.slice(0, 10) ? `${a.slice(0, 16)} → ${b.slice(11, 16)}` : `${a.slice(0, 16)} → ${b.slice(0, 16)}`;
}

function seconds(value) {
  if (value === null || value === undefined) return "–";
  if (value < 10) return `${value.toFixed(1)}s`;
  if (value < 120) return `${Math.round(value)}s`;
  if (value < 7200) return `${Math.floor(value / 60)}m${String(Math.round(value % 60)).padStart(2, "0")}s`;
  return `${Math.floor(value / 3600)}h${String(Math.floor((value % 3600) / 60)).padStart(2, "0")}m`;
}

async function getJson(path) {
  const response = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).detail || detail; } catch (e) { /* not JSON */ }
    throw new Error(`${path}: ${response.status} ${detail}`);
  }
  return response.json();
}

function showError(error) {
  const box = document.getElementById("error");
  box.hidden = !error;
  box.textContent = error ? String(error.message || error) : "";
}

function airflowRoot() {
  // The page is served at <airflow>/cdc/: DAG run pages are at <airflow>/dags/...
  return new URL("../", window.location.href);
}

function runLink(run) {
  if (!run) return el("span", { class: "dim", text: "–" });
  const href = new URL(`dags/${encodeURIComponent(run.dag_id)}/runs/${encodeURIComponent(run.run_id)}`, airflowRoot());
  return el("a", { href: href.toString(), target: "_top", title: `${run.dag_id} / ${run.run_id}`, text: run.run_id });
}

function leaseText(lease) {
  // Who holds an open window: while live, no other run may plan it and the next window waits.
  if (!lease) return null;
  const holder = lease.run ? `${lease.run.dag_id} / ${lease.run.run_id}` : lease.owner;
  return lease.live
    ? `leased to ${holder} until ${ts(lease.expires_at)} UTC (in ${seconds(lease.expires_in_seconds)})`
    : `lease of ${holder} expired at ${ts(lease.expires_at)} UTC: the window's next plan takes it over`;
}

function streamRow(stream) {
  const complete = stream.last_complete_window;
  const byState = Object.entries(stream.windows_by_state)
    .map(([state, n]) => `${n} ${state.toLowerCase()}`).join(", ");
  const lagging = stream.lagging_partitions;
  const row = el("tr", { "data-stream": stream.stream_id, class: stream.stream_id === selected ? "selected" : null },
    el("td", {}, el("strong", { text: stream.stream_id })),
    el("td", { text: stream.source_kind }),
    el("td", {}, el("span", { class: `pill ${stream.state}`, text: STATE_LABEL[stream.state] || stream.state })),
    el("td", { class: "ts", text: complete ? ts(complete.end) : "nothing yet" }),
    el("td", { class: stream.freshness_seconds > 3600 ? "warn" : null, text: stream.freshness }),
    el("td", { class: stream.lag_seconds > 0 ? "warn" : null, text: stream.lag }),
    el("td", {}, `${stream.windows} `, el("span", { class: "dim", text: byState ? `(${byState})` : "" })),
    el("td", {}, `${stream.live_partitions} live`,
      lagging ? el("span", { class: "warn", text: `, ${lagging} lagging` }) : null),
  );
  row.addEventListener("click", () => select(stream.stream_id));
  return row;
}

function stepsCell(stepSeconds) {
  const total = STEPS.reduce((sum, step) => sum + (stepSeconds[step] || 0), 0);
  if (!total) return el("span", { class: "dim", text: "–" });
  const bar = el("span", { class: "stepbar" });
  for (const step of STEPS) {
    if (!stepSeconds[step]) continue;
    bar.append(el("span", { class: step, style: `width:${(100 * stepSeconds[step]) / total}%`,
      title: `${step} ${seconds(stepSeconds[step])}` }));
  }
  const text = STEPS.filter((s) => stepSeconds[s] !== undefined).map((s) => `${s} ${seconds(stepSeconds[s])}`).join(" · ");
  return el("span", { class: "steps", title: text }, bar, el("span", { class: "dim", text: seconds(total) }));
}

// A catch-up window read the intervals of later DAG runs: how many recorded it, each listed
// in the tooltip with the instant its run recorded it.
function coveredNote(covered) {
  if (!covered || !covered.length) return null;
  const list = covered.map((c) => `${shortTs(c.start, c.end)} recorded ${ts(c.recorded_at)}`).join("\n");
  return el("div", { class: "dim covered", title: list,
    text: `catch-up: covers ${covered.length} interval${covered.length === 1 ? "" : "s"}` });
}

function windowRow(w) {
  const reason = w.state === "FAILED" ? w.failure_reason : w.gate_reason;
  return el("tr", { "data-window": w.start },
    el("td", { class: "ts" }, shortTs(w.start, w.end), coveredNote(w.covered_intervals)),
    el("td", {}, el("span", { class: `pill ${w.state}`, text: w.state }),
      w.attempt > 1 ? el("span", { class: "dim", text: ` try ${w.attempt}` }) : null),
    el("td", { class: "num", text: w.changes ?? "–" }),
    el("td", { class: w.dead_letters ? "num bad" : "num dim", text: w.dead_letters }),
    el("td", { class: w.lag_seconds > 0 ? "num warn" : "num", text: w.lag }),
    el("td", { class: "num", text: w.delay }),
    el("td", {}, stepsCell(w.step_seconds)),
    el("td", { class: w.state === "FAILED" ? "reason failed" : "reason", text: reason || "" }),
    el("td", {}, runLink(w.run),
      w.lease ? el("div", { class: w.lease.live ? "lease" : "lease dim", text: leaseText(w.lease) }) : null),
  );
}

function partitionRow(p) {
  const status = p.stalled ? ["bad", "stalled"] : p.lagging ? ["warn", "lagging"] : ["dim", "ok"];
  return el("tr", { "data-partition": p.partition_id },
    el("td", {}, el("code", { text: p.partition_id })),
    el("td", { text: p.state }),
    el("td", { class: "ts", text: ts(p.watermark) }),
    el("td", { class: "ts", text: ts(p.since) }),
    el("td", { class: "num", text: p.lag }),
    el("td", { class: status[0], text: status[1] }),
  );
}

function summaryItem(label, value, cls) {
  return el("div", {}, el("span", { class: "label", text: label }), el("span", { class: `value ${cls || ""}`, text: value }));
}

async function loadStreams() {
  const data = await getJson("api/streams");
  document.getElementById("state-store").textContent = data.state_store;
  document.getElementById("as-of").textContent = `as of ${ts(data.now)} UTC`;
  const streams = data.streams.slice().sort((a, b) =>
    (STATE_ORDER[a.state] ?? 9) - (STATE_ORDER[b.state] ?? 9) || a.stream_id.localeCompare(b.stream_id));
  document.getElementById("stream-count").textContent = `(${streams.length})`;
  document.getElementById("no-streams").hidden = streams.length > 0;
  const body = document.querySelector("#streams tbody");
  body.replaceChildren(...streams.map(streamRow));
  if (!selected && streams.length) {
    const wanted = new URLSearchParams(window.location.hash.slice(1)).get("stream");
    selected = streams.some((s) => s.stream_id === wanted) ? wanted : streams[0].stream_id;
  }
  return streams;
}

async function loadStream(streamId, append) {
  const query = new URLSearchParams({ windows: "50", partitions: "100" });
  if (append && olderThan) query.set("before", olderThan);
  const data = await getJson(`api/streams/${encodeURIComponent(streamId)}?${query}`);
  const s = data.stream;
  document.getElementById("stream-detail").hidden = false;
  document.getElementById("detail-title").textContent = s.stream_id;
  document.getElementById("detail-kind").textContent = s.source_kind;
  const complete = s.last_complete_window;
  document.getElementById("detail-summary").replaceChildren(
    summaryItem("state", STATE_LABEL[s.state] || s.state, s.state === "failed" ? "bad" : s.state === "waiting" ? "warn" : ""),
    summaryItem("complete up to", complete ? ts(complete.end) : "nothing yet"),
    summaryItem("freshness", s.freshness),
    summaryItem("lag", s.lag, s.lag_seconds > 0 ? "warn" : ""),
    summaryItem("backlog", s.intervals_behind == null ? s.backlog
      : `${s.backlog} (${s.intervals_behind} interval${s.intervals_behind === 1 ? "" : "s"} behind)`,
      s.intervals_behind > 1 ? "warn" : ""),
    ...(s.newest_covers ? [summaryItem("catch-up", `newest window read ${s.newest_covers} later interval${s.newest_covers === 1 ? "" : "s"}`)] : []),
    summaryItem("windows", String(s.windows)),
    summaryItem("live partitions", String(s.live_partitions)),
    summaryItem("lagging", String(s.lagging_partitions), s.lagging_partitions ? "warn" : ""),
    ...(s.lease ? [summaryItem("newest window", leaseText(s.lease), s.lease.live ? "" : "warn")] : []),
  );
  const chartBase = `api/streams/${encodeURIComponent(streamId)}/chart`;
  const stamp = Date.now();
  document.getElementById("chart").src = `${chartBase}.svg?last=48&t=${stamp}`;
  document.getElementById("chart-png").href = `${chartBase}.png?last=48`;
  document.getElementById("chart-svg").href = `${chartBase}.svg?last=48`;
  const body = document.querySelector("#windows tbody");
  const rows = data.windows.map(windowRow);
  if (append) body.append(...rows); else body.replaceChildren(...rows);
  const shown = body.children.length;
  document.getElementById("window-count").textContent = `(${shown} of ${s.windows}, open ones first)`;
  olderThan = data.windows.length ? data.windows[data.windows.length - 1].start : olderThan;
  document.getElementById("more-windows").hidden = !data.more_windows;
  document.querySelector("#partitions tbody").replaceChildren(...data.partitions.map(partitionRow));
  document.getElementById("partition-count").textContent =
    `(${data.partitions.length} of ${s.live_partitions}, lagging first)`;
  const more = document.getElementById("more-partitions");
  more.hidden = !data.more_partitions;
  more.textContent = data.more_partitions ? `… and ${data.more_partitions} more live partitions` : "";
  document.body.dataset.loaded = streamId;
}

async function select(streamId) {
  selected = streamId;
  olderThan = null;
  window.location.hash = `stream=${encodeURIComponent(streamId)}`;
  for (const row of document.querySelectorAll("#streams tbody tr")) {
    row.classList.toggle("selected", row.dataset.stream === streamId);
  }
  try { await loadStream(streamId, false); showError(null); } catch (error) { showError(error); }
}

async function refresh() {
  try {
    const streams = await loadStreams();
    if (selected && streams.some((s) => s.stream_id === selected)) await loadStream(selected, false);
    showError(null);
  } catch (error) {
    showError(error);
  }
}

function schedule() {
  if (timer) clearInterval(timer);
  timer = document.getElementById("auto-refresh").checked ? setInterval(refresh, 30000) : null;
}

document.getElementById("refresh-now").addEventListener("click", refresh);
document.getElementById("auto-refresh").addEventListener("change", schedule);
document.getElementById("older").addEventListener("click", () => loadStream(selected, true).catch(showError));
refresh().then(schedule);
