// Tandem's dashboard: polls /api/history (the run dir's metrics.jsonl and eval.jsonl, read from
// byte offsets, so a reload rebuilds every curve from the files) and /api/state (the live control
// block), and draws with uPlot. When the launcher is gone the page keeps what it last had.
// Each chart carries data-points (its points over all series) and each process one table row with
// data-process, so that a test (or a script) can read the page.
"use strict";

const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4d7c0f", "#be185d"];

// M, the metric names of metrics.jsonl's rows and /api/state's processes, from metric_fields.js
// (generated from shm/metric_fields.hpp, their one list): M.loss is "loss", and a name the table lacks
// throws as the page loads.
const M = new Proxy(Object.fromEntries(METRIC_NAMES.map((n) => [n, n])), {
  get(names, name) {
    if (!(name in names)) throw new Error(`no metric ${String(name)} in shm/metric_fields.hpp`);
    return names[name];
  },
});

// What each chart draws: series of [source, field]. A process name ("learner.0", "actor.0") is that
// process's metrics rows, "learners" one series per rank, "eval" the rows of eval.jsonl; a chart
// without points stays hidden.
const CHARTS = [
  { id: "loss", title: "Loss", series: [["learner.0", M.loss, "train loss"], ["eval", M.loss, "eval loss"]] },
  { id: "accuracy", title: "Accuracy", series: [["learner.0", M.accuracy, "train accuracy"], ["eval", M.accuracy, "eval accuracy"]] },
  { id: "return", title: "Episode return", series: [["learner.0", M.episode_return, "rollouts"], ["eval", M.episode_return, "evaluation"]] },
  { id: "length", title: "Episode length", series: [["learner.0", M.episode_length, "rollouts"], ["eval", M.episode_length, "evaluation"]] },
  { id: "throughput", title: "Throughput (per second)", series: [["learners", M.samples_per_s, "samples/s"], ["learner.0", M.env_steps_per_s, "env steps/s"]] },
  { id: "lag", title: "Policy lag (versions)", series: [["learner.0", M.policy_lag_min, "min"], ["learner.0", M.policy_lag_avg, "avg"], ["learner.0", M.policy_lag_max, "max"]] },
  { id: "ranks", title: "Per rank: step / all-reduce / exposed comm (s)", series: [["ranks", M.seconds, "step"], ["ranks", M.allreduce_s, "all-reduce"], ["ranks", M.exposed_comm_s, "exposed"]] },
  { id: "time", title: "Where the time goes (share of wall time)", series: [["learner.0", M.compute_share, "learner: updates"], ["learner.0", M.wait_share, "learner: waiting for slots"], ["actor.0", M.env_share, "actor 0: envs"], ["actor.0", M.compute_share, "actor 0: policy"], ["actor.0", M.wait_share, "actor 0: full ring"]] },
];

const run = {
  offsets: { metrics: 0, eval: 0 },
  rows: [],            // metrics.jsonl sample rows, each with t (time over jobs in this run dir)
  evals: [],           // eval.jsonl rows
  processes: new Map(),
  jobOffset: new Map(),  // job id -> seconds added to its time_s (a resumed run continues the time axis)
  lastTime: 0,
  outcome: null,
  live: null,
  state: null,
  failures: 0,
};
const charts = new Map();

function timeOf(row) {
  if (!run.jobOffset.has(row.job)) run.jobOffset.set(row.job, run.lastTime);
  const t = run.jobOffset.get(row.job) + row.time_s;
  run.lastTime = Math.max(run.lastTime, t);
  return t;
}

function processRow(name) {
  if (!run.processes.has(name)) {
    const [role, index] = name.split(".");
    run.processes.set(name, { name, role, index, pid: "-", state: "-", restarts: 0, heartbeat: "-", version: "-", step: "-" });
  }
  return run.processes.get(name);
}

function takeMetricsLine(r) {
  if (r.time_s === undefined) return;
  r.t = timeOf(r);
  if (r.event === "spawn") Object.assign(processRow(r.process), { pid: r.pid, state: "running", restarts: r.restarts });
  else if (r.event === "exit") processRow(r.process).state = r.status === 0 && !r.hung ? "exited" : `failed(${r.status})`;
  else if (r.event === "end") run.outcome = r.outcome;
  else if (r.process && !r.event) {
    run.rows.push(r);
    Object.assign(processRow(r.process), { version: r[M.version], step: r[M.step], restarts: r.restarts });
  }
}

function parseLines(text, take) {
  for (const line of text.split("\n")) {
    if (!line) continue;
    try { take(JSON.parse(line)); } catch (e) { /* a torn or foreign line: skipped */ }
  }
}

async function getJson(path) {
  const response = await fetch(path, { cache: "no-store" });
  if (!response.ok) throw new Error(`${path}: ${response.status}`);
  return response.json();
}

async function pollHistory() {
  for (;;) {
    const h = await getJson(`/api/history?metrics=${run.offsets.metrics}&eval=${run.offsets.eval}`);
    run.live = h.live;
    document.getElementById("source").textContent = `run dir ${h.run_dir}`;
    parseLines(h.metrics.text, takeMetricsLine);
    parseLines(h.eval.text, (r) => run.evals.push(r));
    const progressed = h.metrics.next > run.offsets.metrics || h.eval.next > run.offsets.eval;
    run.offsets.metrics = h.metrics.next;
    run.offsets.eval = h.eval.next;
    if (!progressed || (h.metrics.next >= h.metrics.size && h.eval.next >= h.eval.size)) return;
  }
}

// Where each evaluation sits on the time axis: at the first learner.0 row at or past its version
// (rows come in time order, so their versions ascend; a binary search keeps long runs fast).
function versionClock() {
  const rank0 = run.rows.filter((r) => r.process === "learner.0" && typeof r[M.version] === "number");
  return (version) => {
    let lo = 0, hi = rank0.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (rank0[mid][M.version] >= version) hi = mid; else lo = mid + 1;
    }
    return lo < rank0.length ? rank0[lo].t : null;
  };
}

function seriesPoints(source, field, xAxis) {
  const x = (r) => (xAxis === "step" ? r[M.step] : r.t);
  const collect = (rows, xOf) => rows.filter((r) => typeof r[field] === "number" && xOf(r) !== null && xOf(r) !== undefined)
    .map((r) => [xOf(r), r[field]]);
  if (source === "eval") {
    const clock = xAxis === "step" ? null : versionClock();
    return [["", collect(run.evals, clock ? (r) => clock(r.version) : (r) => r.step)]];
  }
  const learners = [...run.processes.keys()].filter((n) => n.startsWith("learner.")).sort();
  if (/^[a-z]+\.\d+$/.test(source)) return [["", collect(run.rows.filter((r) => r.process === source), x)]];
  const ranks = learners.map((n) => [n.replace("learner.", "rank "), collect(run.rows.filter((r) => r.process === n), x)]);
  if (source === "ranks") return learners.length > 1 ? ranks : [];
  return ranks.length === 1 ? [["", ranks[0][1]]] : ranks;  // "learners": one series per rank
}

// 41000 -> "41k": tick labels that fit the axis.
function compact(v) {
  if (v === null || v === undefined) return "";
  const a = Math.abs(v);
  if (a >= 1e6) return `${+(v / 1e6).toPrecision(3)}M`;
  if (a >= 1e4) return `${+(v / 1e3).toPrecision(3)}k`;
  return String(+v.toPrecision(4));
}

// A build made without tools/dashboard/node_modules (a pip install from a plain clone) embeds no uPlot.
const NO_CHARTS = "This build of Tandem has no chart library: run `npm ci` in tools/dashboard of the source tree " +
  "(./tools/dev/setup does) and rebuild or reinstall. The processes below are live.";

function drawChart(spec, xAxis) {
  if (typeof uPlot === "undefined") {
    const section = document.getElementById("charts");
    if (!section.dataset.missing) {
      section.dataset.missing = "uPlot";
      section.textContent = NO_CHARTS;
    }
    return;
  }
  const labels = [];
  const tables = [];
  for (const [source, field, label] of spec.series)
    for (const [suffix, points] of seriesPoints(source, field, xAxis)) {
      if (points.length === 0) continue;
      points.sort((a, b) => a[0] - b[0]);
      labels.push(suffix ? `${label} ${suffix}` : label);
      tables.push([points.map((p) => p[0]), points.map((p) => p[1])]);
    }
  const box = document.querySelector(`[data-chart="${spec.id}"]`);
  const points = tables.reduce((n, t) => n + t[0].length, 0);
  box.dataset.points = String(points);
  if (points === 0) return;
  const data = uPlot.join(tables);
  const key = labels.join("|") + xAxis;
  const width = Math.max(400, box.clientWidth - 12);
  const old = charts.get(spec.id);
  if (old && old.key === key) {
    old.plot.setData(data);
    if (Math.abs(old.plot.width - width) > 4) old.plot.setSize({ width, height: 260 });
    return;
  }
  if (old) old.plot.destroy();
  const plot = new uPlot({
    width, height: 260,
    scales: { x: { time: false } },
    axes: [{ label: xAxis === "step" ? "step" : "wall time (s)" }, { size: 60, values: (u, splits) => splits.map(compact) }],
    series: [{ label: xAxis }, ...labels.map((label, i) => ({ label, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true }))],
  }, data, box.querySelector(".plot"));
  charts.set(spec.id, { key, plot });
}

function drawProcesses() {
  const live = new Map((run.state && run.state.processes ? run.state.processes : []).map((p) => [p.process, p]));
  for (const [name, p] of live) {
    Object.assign(processRow(name), {
      pid: p.pid > 0 ? p.pid : "-", state: p.state + (p.exit_status !== null && p.state === "failed" ? `(${p.exit_status})` : ""),
      restarts: p.restarts, version: p[M.version], step: p[M.step] === undefined ? "-" : p[M.step],
      heartbeat: p.heartbeat_age_s === null ? "-" : `${p.heartbeat_age_s.toFixed(1)} s ago`,
    });
  }
  const body = document.querySelector("#processes tbody");
  const names = [...run.processes.keys()].sort((a, b) => (a.startsWith("learner") === b.startsWith("learner")
    ? a.localeCompare(b, undefined, { numeric: true }) : a.startsWith("learner") ? -1 : 1));
  body.replaceChildren(...names.map((name) => {
    const p = run.processes.get(name);
    const tr = document.createElement("tr");
    tr.dataset.process = name;
    tr.dataset.role = p.role;
    tr.dataset.state = p.state.replace(/\(.*/, "");
    for (const v of [p.name, p.role, p.index, p.pid, p.state, p.restarts, p.heartbeat, p.version, p.step]) {
      const td = document.createElement("td");
      td.textContent = String(v);
      tr.appendChild(td);
    }
    return tr;
  }));
  document.getElementById("processes").dataset.rows = String(names.length);
}

function drawHeader() {
  const jobs = [...run.jobOffset.keys()];
  document.getElementById("job").textContent = run.state && run.state.job ? run.state.job : jobs[jobs.length - 1] || "-";
  const badge = document.getElementById("run-state");
  badge.dataset.live = String(run.live === true && run.failures === 0);
  if (run.failures > 0) badge.textContent = `launcher gone: final state${run.outcome ? ", " + run.outcome : ""}`;
  else if (run.live) badge.textContent = "live";
  else badge.textContent = `finished run${run.outcome ? ": " + run.outcome : ""}`;
  document.getElementById("status-line").textContent = run.state && run.state.status ? run.state.status : "";
}

function draw() {
  const xAxis = document.getElementById("x-axis").value;
  for (const spec of CHARTS) drawChart(spec, xAxis);
  drawProcesses();
  drawHeader();
  document.body.dataset.updated = String(Date.now());
}

async function poll() {
  try {
    await pollHistory();
    run.state = run.live ? await getJson("/api/state") : null;
    run.failures = 0;
  } catch (e) {
    if (run.live !== null) run.failures += 1;  // the launcher exited: keep the last state
  }
  draw();
  setTimeout(poll, run.failures > 0 || run.live === false ? 5000 : 1000);
}

function build() {
  const section = document.getElementById("charts");
  for (const spec of CHARTS) {
    const box = document.createElement("div");
    box.className = "chart";
    box.dataset.chart = spec.id;
    box.dataset.points = "0";
    const title = document.createElement("h3");
    title.textContent = spec.title;
    const plot = document.createElement("div");
    plot.className = "plot";
    box.append(title, plot);
    section.appendChild(box);
  }
  const axis = document.getElementById("x-axis");
  if (new URLSearchParams(location.search).get("x") === "time") axis.value = "time";  // a link can pick it
  axis.addEventListener("change", draw);
  poll();
}

build();
