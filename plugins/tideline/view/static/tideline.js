// The Tideline page: every pipeline's tables (api/pipelines), and for the chosen table its charts
// over a window (api/pipelines/<p>/tables/<t>/history). Paths are relative to /tideline/; links
// into Airflow are relative to Airflow's base URL (one level up) and open in the top window.
"use strict";

const REFRESH_MS = 15000;
const view = { window: "1h", selected: null, charts: {}, busy: false };
window.tideline = view;   // the browser test reads the charts from here

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

async function getJSON(path) {
  const r = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (r.status === 401 || r.status === 403) { window.top.location.reload(); throw new Error("signed out"); }
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.detail ? (typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail)) : `HTTP ${r.status}`);
  return body;
}

const fmtInt = (n) => (n === null || n === undefined ? "-" : Number(n).toLocaleString("en-US"));
function fmtSecs(s) {
  if (s === null || s === undefined) return "-";
  const a = Math.abs(s);
  if (a === 0) return "0s";
  if (a < 120) return `${s.toFixed(a < 10 ? 2 : 0)}s`;
  if (a < 7200) return `${(s / 60).toFixed(0)}m`;
  if (a < 172800) return `${(s / 3600).toFixed(1)}h`;
  return `${(s / 86400).toFixed(1)}d`;
}
const airflowLink = (path) => `../${path}`;

function headroomCell(p, t) {
  if (!t.covered) return el("span", { class: "headroom-lost", "data-headroom": "lost" }, t.headroom);
  if (t.headroom_s === null || t.headroom_s === undefined) return el("span", { class: "muted" }, t.headroom);
  const low = p.headroom_alert_s !== null && t.headroom_s < p.headroom_alert_s;
  return el("span", { class: low ? "headroom-low" : "headroom-ok", "data-headroom-s": t.headroom_s,
    title: `alert below ${fmtSecs(p.headroom_alert_s)}` }, t.headroom);
}

// A halted table's event, as its state keeps it: where it sits in Kafka, and for a value the
// target refused, the column, the value and the target's SQLSTATE.
function haltedEvent(ev) {
  const parts = [["topic", ev.topic], ["partition", ev.partition], ["offset", ev.offset], ["key", ev.key],
    ["op", ev.op], ["column", ev.column], ["value", ev.value], ["SQLSTATE", ev.sqlstate], ["constraint", ev.constraint]];
  return el("dl", { class: "event", "data-error-event": ev.offset },
    parts.filter(([, v]) => v !== null && v !== undefined && v !== "").map(([k, v]) =>
      [el("dt", {}, k), el("dd", { "data-field": k }, String(v))]));
}

function renderPipelines(pipelines) {
  const box = document.getElementById("pipelines");
  box.replaceChildren();
  if (!pipelines.length) box.append(el("p", { class: "muted" }, "No pipelines: add one under pipelines/ (see pipelines/README.md)."));
  for (const p of pipelines) {
    const head = el("h2", {}, p.name,
      el("span", { class: `phase ${p.state === "ok" ? "phase-streaming" : "phase-halted"}` }, p.state),
      p.dag_id ? el("a", { href: airflowLink(`dags/${encodeURIComponent(p.dag_id)}`), target: "_top" }, p.dag_id) : null,
      p.target ? el("span", { class: "muted" }, `target ${p.target}`) : null,
      p.took_s !== null ? el("span", { class: "muted" }, `read in ${p.took_s}s`) : null);
    const card = el("div", { class: "pipeline", "data-pipeline": p.name, "data-state": p.state }, head);
    if (p.error) card.append(el("p", { class: "problem" }, p.error));
    // the stream task waits for a part that does not answer (or to start again): it submits by itself
    if (p.waiting) card.append(el("p", { class: "problem", "data-waiting-s": p.waiting_s }, `Stream ${p.waiting}`));
    for (const n of p.notices || []) card.append(el("p", { class: "problem" }, n));
    // what capture holds on the source (a slot's retained WAL): a line, and the alerts it raises
    if (p.source_hold) card.append(el("p", { class: p.source_hold_alerts.length ? "problem" : "muted", "data-source-hold": "" },
      `Source: ${p.source_hold}`));
    for (const a of p.source_hold_alerts || []) card.append(el("p", { class: "problem" }, a));
    if (p.tables.length) {
      const rows = p.tables.map((t) => {
        const sel = view.selected && view.selected.pipeline === p.name && view.selected.table === t.table;
        return el("tr", { class: `table-row${sel ? " selected" : ""}`, "data-table": t.table,
          onclick: () => select(p.name, t.table) },
          el("td", {}, t.table),
          el("td", {}, el("span", { class: `phase phase-${t.phase}` }, t.phase),
            // what the phase alone does not say: a stream that ended, a batch table before its first run
            t.stream_ended || t.batch_line ? el("div", { class: "muted", "data-phase-note": "" }, t.stream_ended || t.batch_line) : null,
            // its state says it holds a load, and the target lacks the table (ops.in_target): whatever the phase says
            t.target_missing ? el("div", { class: "problem", "data-target-missing": "" }, "NOT IN THE TARGET: none of its rows is there") : null,
            // the state keeps the table's phase while a load runs (new, or streaming during a reload)
            t.load_rows !== null ? el("div", { class: "muted", "data-load-rows": t.load_rows },
              el("span", { class: "phase phase-loading" }, "loading"),
              ` ${t.load.line}`,
              // a bar when the load knows its end (a snapshot's count, a chunked load's estimate)
              t.load.fraction !== null ? el("div", { class: "load-bar", role: "progressbar",
                "aria-valuemin": 0, "aria-valuemax": 100, "aria-valuenow": Math.round(t.load.fraction * 100),
                "data-load-fraction": t.load.fraction, "data-load-eta-s": t.load.eta_s },
                el("div", { class: "load-bar-done", style: `width: ${(t.load.fraction * 100).toFixed(1)}%` })) : null,
              // the snapshot's transaction holds the source's vacuum back for as long as it is open
              t.source_oldest_xact_s !== null ? el("div", { "data-oldest-xact-s": t.source_oldest_xact_s },
                `oldest source transaction ${fmtSecs(t.source_oldest_xact_s)}`) : null) : null),
          el("td", { class: "num" }, t.epoch ?? "-"),
          el("td", { class: "num", title: t.rows_estimated ? "from the target's statistics (no count on every refresh)" : null },
            t.rows_estimated && t.target_rows !== null ? `≈ ${fmtInt(t.target_rows)}` : fmtInt(t.target_rows),
            // the target's own facts (a lake table's files grow with every commit until maintenance),
            // in its own words (Target.table_facts): shown beside its rows
            t.target_facts && t.target_facts.short ? el("div", { class: "muted", "data-target-files":
              t.target_facts.files, title: (t.target_facts.title || "") +
              (t.last_maintenance ? `; last maintenance ${t.last_maintenance}` : "; never maintained") },
              t.target_facts.short) : null),
          el("td", { class: "num", title: JSON.stringify(t.lag) }, fmtInt(t.lag_total)),
          el("td", { class: "num" }, fmtSecs(t.lag_s)),
          el("td", {}, t.last_batch, t.last_batch_s !== null ? el("span", { class: "muted" }, ` (${fmtSecs(t.last_batch_s)})`) : null),
          el("td", {}, headroomCell(p, t)),
          el("td", {}, t.last_verify ?? "-",
            t.auto_reloads ? el("div", { class: "muted", "data-auto-reloads": t.auto_reloads },
              `reloaded by itself ${t.auto_reloads}× (last ${t.last_reload})`) : null),
          el("td", { class: "error" }, t.error ? [t.error_at ? el("div", { class: "muted" }, new Date(t.error_at).toLocaleString()) : null, t.error,
            // a halted table: the event it stopped before, where it sits in Kafka
            t.error_event ? haltedEvent(t.error_event) : null] : ""));
      });
      card.append(el("table", { class: "grid" },
        el("thead", {}, el("tr", {}, ["Table", "Phase", "Epoch", "Target rows", "Lag (events)", "Lag", "Last batch",
          "Retention headroom", "Last verify", "Last error / what to do"].map((h) => el("th", {}, h)))),
        el("tbody", {}, rows)));
    }
    box.append(card);
  }
}

function select(pipeline, table) {
  view.selected = { pipeline, table };
  document.querySelectorAll("tr.table-row").forEach((r) => r.classList.toggle("selected",
    r.dataset.table === table && r.closest(".pipeline").dataset.pipeline === pipeline));
  renderDetail();
}

function timeAxis(windowName) {
  const withDate = windowName === "7d";
  return { type: "linear", ticks: { maxTicksLimit: 8, callback: (v) => {
    const d = new Date(v);
    return withDate ? `${d.getMonth() + 1}/${d.getDate()} ${String(d.getHours()).padStart(2, "0")}h`
      : d.toTimeString().slice(0, 5);
  } } };
}

function lineChart(id, datasets, yTitle) {
  if (view.charts[id]) view.charts[id].destroy();
  view.charts[id] = new Chart(document.getElementById(id), {
    type: "line",
    data: { datasets: datasets.map((d) => ({ pointRadius: 2, borderWidth: 1.5, tension: 0.2, spanGaps: false, ...d })) },
    options: { animation: false, maintainAspectRatio: false, parsing: false, normalized: true,
      scales: { x: timeAxis(view.window), y: { beginAtZero: true, title: { display: !!yTitle, text: yTitle } } },
      plugins: { legend: { display: datasets.length > 1 } } },
  });
}

const KIND_COLOR = { full_load: "#1a56db", "re-snapshot": "#7e22ce", incremental: "#1a7f37", batch: "#0e7490",
  verify: "#b35900", repair: "#be185d" };

function runsChart(runs, since) {
  const id = "chart-runs";
  if (view.charts[id]) view.charts[id].destroy();
  const now = Date.now();
  const kinds = [...new Set(runs.map((r) => r.kind))];
  view.charts[id] = new Chart(document.getElementById(id), {
    type: "bar",
    data: { labels: kinds, datasets: [{
      label: "runs",
      data: runs.map((r) => ({ x: [Math.max(Date.parse(r.started_at), Date.parse(since)),
        Math.max(r.ended_at ? Date.parse(r.ended_at) : now, Date.parse(r.started_at) + 1000)], y: r.kind, run: r })),
      backgroundColor: runs.map((r) => r.outcome === "failed" ? "#c62828" : r.outcome === "fenced" ? "#98a2b3" : KIND_COLOR[r.kind] || "#475467"),
      borderSkipped: false, barPercentage: 0.6, minBarLength: 3,
    }] },
    options: { indexAxis: "y", animation: false, maintainAspectRatio: false,
      scales: { x: { ...timeAxis(view.window), min: Date.parse(since), max: now } },
      plugins: { legend: { display: false }, tooltip: { callbacks: {
        label: (ctx) => { const r = ctx.raw.run; return `#${r.run_id} ${r.kind} ${r.outcome}${r.rows !== null ? `, ${fmtInt(r.rows)} rows` : ""}`; },
        afterLabel: (ctx) => ctx.raw.run.detail || "" } } } },
  });
}

function renderRuns(runs) {
  const rows = runs.slice(0, 50).map((r) => el("tr", { "data-run": r.run_id },
    el("td", { class: "num" }, r.run_id), el("td", {}, r.kind), el("td", {}, r.outcome),
    el("td", {}, new Date(r.started_at).toLocaleString()),
    el("td", {}, r.ended_at ? fmtSecs((Date.parse(r.ended_at) - Date.parse(r.started_at)) / 1000) : "running"),
    el("td", { class: "num" }, fmtInt(r.rows)),
    el("td", {}, r.links ? [el("a", { href: airflowLink(r.links.dag_run), target: "_top" }, "DAG run"), " · ",
      r.links.task_log ? el("a", { href: airflowLink(r.links.task_log), target: "_top" }, "task log") : null] : el("span", { class: "muted" }, "outside Airflow")),
    el("td", { class: "error" }, r.outcome === "failed" ? r.detail : el("span", { class: "muted" }, r.detail || ""))));
  document.getElementById("runs").replaceChildren(
    el("thead", {}, el("tr", {}, ["Run", "Kind", "Outcome", "Started", "Took", "Rows", "Airflow", "Detail"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows));
}

// The selected table's actions (api/pipelines: view.actions), each a run of the pipeline's DAG
// triggered as the signed-in user; the answer links to the run in Airflow.
function renderActions(sel) {
  const p = (view.pipelines || []).find((x) => x.name === sel.pipeline);
  const t = p && p.tables.find((x) => x.table === sel.table);
  const box = document.getElementById("actions");
  box.replaceChildren(...((t && t.actions) || []).map((a) => el("button", { class: "action", "data-action": a.action,
    title: a.why, onclick: () => act(sel, a) }, a.label)));
}

async function act(sel, a) {
  if (a.confirm && !window.confirm(a.confirm)) return;
  let params = {};
  if (a.asks === "key_range") {   // a repair: a key range (from..to), or nothing for what the last validate found
    const range = window.prompt("Repair which keys? A range as from..to (one-column key), or leave empty to re-read " +
      "what the last validate found different.", "");
    if (range === null) return;
    if (range.trim()) {
      const [from, to] = range.split("..").map((x) => (x || "").trim());
      params = { repair_key_from: from, repair_key_to: to };
    }
  }
  const out = document.getElementById("action-result");
  out.className = "notice"; out.replaceChildren(`${a.label}: triggering…`); out.hidden = false;
  const path = `api/pipelines/${encodeURIComponent(sel.pipeline)}/tables/${encodeURIComponent(sel.table)}/actions/${encodeURIComponent(a.action)}`;
  try {
    const r = await fetch(path, { method: "POST", credentials: "same-origin", body: JSON.stringify(params),
      headers: { Accept: "application/json", "Content-Type": "application/json" } });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(typeof body.detail === "string" ? body.detail : `HTTP ${r.status}`);
    out.className = body.paused ? "problem" : "notice";
    out.replaceChildren(body.message, " · ", el("a", { href: airflowLink(body.link), target: "_top", "data-run": body.dag_run_id }, "open the run in Airflow"));
    out.dataset.dagRunId = body.dag_run_id;
  } catch (e) {
    out.className = "problem"; out.replaceChildren(`${a.label} was not done: ${e.message}`);
  }
}

async function renderDetail() {
  const sel = view.selected;
  if (!sel) return;
  const box = document.getElementById("detail");
  box.hidden = false;
  document.getElementById("detail-title").textContent = `${sel.pipeline}.${sel.table}`;
  renderActions(sel);
  document.querySelectorAll(".windows button").forEach((b) => b.classList.toggle("active", b.dataset.window === view.window));
  const problem = document.getElementById("detail-problem");
  let h;
  try {
    h = await getJSON(`api/pipelines/${encodeURIComponent(sel.pipeline)}/tables/${encodeURIComponent(sel.table)}/history?window=${view.window}`);
    problem.hidden = true;
  } catch (e) {
    problem.textContent = e.message; problem.hidden = false; return;
  }
  const pts = (key) => h.series.filter((s) => s[key] !== null).map((s) => ({ x: Date.parse(s.at), y: s[key] }));
  lineChart("chart-events", [{ label: "events/s", data: pts("events_per_s"), borderColor: "#1a7f37", backgroundColor: "#1a7f37" }], "events/s");
  lineChart("chart-lag", [{ label: "lag s", data: pts("lag_s"), borderColor: "#b35900", backgroundColor: "#b35900" }], "seconds");
  lineChart("chart-duration", [
    { label: "mean", data: pts("batch_s"), borderColor: "#1a56db", backgroundColor: "#1a56db" },
    { label: "worst", data: pts("batch_max_s"), borderColor: "#98a2b3", backgroundColor: "#98a2b3" }], "seconds");
  // one line of rows stored per load run; rows/s of the newest load on the right axis
  const loads = [...new Set(h.progress.map((p) => p.run_id))];
  const newest = loads[loads.length - 1];
  const palette = ["#1a56db", "#0e7490", "#4338ca", "#0369a1", "#1e40af"];
  lineChart("chart-load", [
    ...loads.map((id, i) => ({ label: `load #${id} rows`, data: h.progress.filter((p) => p.run_id === id).map((p) => ({ x: Date.parse(p.at), y: p.rows })),
      borderColor: palette[i % palette.length], backgroundColor: palette[i % palette.length], yAxisID: "y" })),
    ...(newest === undefined ? [] : [{ label: `load #${newest} rows/s`, data: h.progress.filter((p) => p.run_id === newest && p.rows_per_s !== null).map((p) => ({ x: Date.parse(p.at), y: p.rows_per_s })),
      borderColor: "#7e22ce", backgroundColor: "#7e22ce", borderDash: [4, 3], yAxisID: "y1" }])], "rows");
  view.charts["chart-load"].options.plugins.legend.display = loads.length > 0 && loads.length <= 4;
  view.charts["chart-load"].update();
  runsChart(h.runs, h.since);
  renderRuns(h.runs);
  view.history = h;
}

async function refresh() {
  if (view.busy) return;
  view.busy = true;
  const problem = document.getElementById("problem");
  try {
    const pipelines = await getJSON("api/pipelines");
    view.pipelines = pipelines;
    if (!view.selected) {
      const p = pipelines.find((x) => x.tables.length);
      if (p) view.selected = { pipeline: p.name, table: p.tables[0].table };
    }
    renderPipelines(pipelines);
    await renderDetail();
    problem.hidden = true;
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    problem.textContent = `The view could not be refreshed: ${e.message}`;
    problem.hidden = false;
  } finally {
    view.busy = false;
    view.refreshed = (view.refreshed || 0) + 1;
  }
}

document.querySelectorAll(".windows button").forEach((b) => b.addEventListener("click", () => {
  view.window = b.dataset.window; renderDetail();
}));
refresh();
setInterval(refresh, REFRESH_MS);
