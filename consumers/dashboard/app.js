// The dashboard page: renders /api/stream's summaries and /api/episodes/ID. Every string that comes from a
// record is put on the page as text (DOM nodes, never HTML strings): a record is written by whoever can
// reach the broker, and the page runs under a Content-Security-Policy that allows only its own scripts
// (this one, charts.js and the vendored uPlot).
"use strict";

const $ = (id) => document.getElementById(id);
const HEX64 = /^[0-9a-f]{64}$/;

// Numbers arrive as JSON numbers, or as the strings "NaN", "Infinity", "-Infinity" (JSON has none).
const fixed = (v, digits) => (typeof v === "number" ? v.toFixed(digits) : String(v));
const expo = (v, digits) => (typeof v === "number" ? v.toExponential(digits) : String(v));

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "class") node.className = v;
    else if (k === "data") Object.assign(node.dataset, v);
    else node.setAttribute(k, String(v));
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

// Children of `parent`, replaced by `nodes` one by one: never spread as arguments (a spread of 200,000 rows
// threw "Maximum call stack size exceeded" and left every panel after it empty).
function fill(parent, nodes) {
  parent.replaceChildren();
  for (const node of nodes) parent.append(node);
}

// The row that says what a bounded list leaves out ("showing 40 of 10000 tasks").
const notice = (text, colspan) => el("tr", { class: "muted notice" }, el("td", { colspan }, text));

function bars(table, counts, bad, hidden) {
  const entries = Object.entries(counts);
  if (!entries.length) {
    fill(table, [el("tr", {}, el("td", { class: "muted" }, "none"))]);
    return;
  }
  const top = entries.reduce((most, [, n]) => Math.max(most, n), 1);
  const rows = entries.map(([k, n]) => {
    const bar = el("span", { class: bad && bad(k) ? "bar bad" : "bar" });
    bar.style.width = `${((100 * n) / top).toFixed(0)}%`;
    return el("tr", {}, el("td", {}, k), el("td", {}, n), el("td", { class: "bar-cell" }, bar));
  });
  if (hidden) rows.push(notice(`and ${hidden.reasons} more (${hidden.records} records)`, 3));
  fill(table, rows);
}

// `cua-stream inspect step` of a run's step, as text: the batch it trained, rebuilt from the topics.
const inspectUrl = (run, step) =>
  `/api/inspect/step?run=${encodeURIComponent(run)}&step=${encodeURIComponent(step)}&format=text`;

function render(s) {
  const src = s.source || {};
  $("source").textContent = `topics ${src.prefix}.* · ${src.mode}${src.complete ? " (complete)" : ""} · ` +
    `${s.records} records · policy v${s.latest_version}`;
  drawCharts(s);
  fill($("steps-table").tBodies[0], s.steps.slice(-12).reverse().map((r) => el("tr", {},
    el("td", {}, r.step), el("td", {}, `v${r.policy_version}`), el("td", {}, r.episodes),
    el("td", {}, fixed(r.mean_reward, 3)), el("td", {}, expo(r.logprob_gap, 2)), el("td", {}, fixed(r.grad_norm, 3)),
    el("td", { class: "by-task" }, byTask(r)),
    el("td", {}, el("a", { href: inspectUrl(r.run_id, r.step), class: "inspect" }, "inspect")))));
  const hidden = s.not_shown || {};
  bars($("verdicts"), s.verdicts, (k) => k.startsWith("discard"), hidden.verdicts);
  bars($("drops"), s.drops, () => true, hidden.drops);
  bars($("dead-letters"), s.dead_letters, () => true, hidden.dead_letters);
  bars($("staleness"), s.staleness, undefined, hidden.staleness);
  const l = s.latency_ms;
  $("latency").textContent = `${l.calls} recent calls · engine p50 ${l.engine_p50} ms, p95 ${l.engine_p95} ms · ` +
    `gateway p50 ${l.gateway_p50} ms, p95 ${l.gateway_p95} ms`;
  fill($("tasks").tBodies[0], Object.entries(s.tasks).map(([t, r]) => el("tr", {},
    el("td", {}, t), el("td", {}, r.scored), el("td", {}, fixed(r.mean_reward, 3)), el("td", {}, r.discarded))));
  fill($("evals").tBodies[0], s.evals.slice().reverse().flatMap(evalRows));
  renderLearn($("learn").tBodies[0], s.learn);
  renderRetrains($("retrains").tBodies[0], s.retrains || [], s.steps);
  fill($("episodes"), s.episodes.map((e) => el("li", { data: { id: e.episode_id } },
    `${e.episode_id} `, el("span", { class: "muted" }, `${e.task} · ${e.calls} calls · ${e.verdict || "running"}`))));
}

function byTask(step) {
  const shown = Object.entries(step.by_task);
  const text = shown.map(([t, v]) => `${t} ${fixed(v, 2)}`).join(" · ");
  return step.tasks_total > shown.length ? `${text} · (${shown.length} of ${step.tasks_total} tasks shown)` : text;
}

// An evaluation's rows: a task each, then overall (with the policy), then what is left out, if anything.
function evalRows(e) {
  const rows = e.tasks.map((t) => el("tr", { class: t.task === "overall" ? "overall" : "" },
    el("td", {}, t.task === "overall" ? e.policy + (e.lag_s === null ? "" : ` (${e.lag_s} s after it)`) : ""),
    el("td", {}, t.task),
    el("td", {}, t.rate === null ? "-" : `${fixed(t.rate, 2)} (${Math.round(t.rate * t.scored)}/${t.scored})`),
    el("td", {}, `[${fixed(t.low, 2)}, ${fixed(t.high, 2)}]`),
    el("td", {}, Object.entries(t.pass_at).map(([k, v]) => `@${k} ${fixed(v, 2)}`).join(" "))));
  const shown = e.tasks.filter((t) => t.task !== "overall").length;
  if (e.tasks_total > shown) rows.push(notice(`${e.policy}: showing ${shown} of ${e.tasks_total} tasks`, 5));
  return rows;
}

// `cua-stream learn`'s closing table, per run: a row per task, a column per stage ("—": no figure). Each cell
// is the text the terminal printed (formatted by the board: rounding the same numbers here could differ).
const STAGES = ["blind", "base", "sft", "grpo"];
const stageCell = (c) => (c === null || c === undefined ? "—" : c.text);

function renderLearn(body, runs) {
  if (!runs.length) {
    fill(body, [el("tr", {}, el("td", { class: "muted", colspan: 2 + STAGES.length }, "no learn run yet"))]);
    return;
  }
  fill(body, runs.flatMap((r) => {
    const rows = r.rows.map((row, i) => {
      const tr = el("tr", { class: row.task === "overall" ? "overall" : "" },
        el("td", {}, i === 0 ? r.run : ""), el("td", {}, row.task));
      for (const stage of STAGES) tr.append(el("td", {}, stageCell(row.cells[stage])));
      return tr;
    });
    const shown = r.rows.filter((row) => row.task !== "overall").length;
    if (r.tasks_total > shown) rows.push(notice(`${r.run}: showing ${shown} of ${r.tasks_total} tasks`, 2 + STAGES.length));
    return rows;
  }));
}

// Each retrain's steps (`cua-stream retrain`), a row each, with the retrained run's own step under it where
// the board holds it (its recent steps): what the changed settings did to the same batch.
const RETRAIN_FIGURES = [["loss", 4, fixed], ["kl", 4, fixed], ["clip_fraction", 3, fixed],
  ["grad_norm", 3, fixed], ["logprob_gap", 2, expo]];
const figure = (v, digits, format) => (v === null || v === undefined ? "—" : format(v, digits));

function renderRetrains(body, retrains, steps) {
  if (!retrains.length) {
    fill(body, [el("tr", {}, el("td", { class: "muted", colspan: 2 + RETRAIN_FIGURES.length }, "no retrain yet"))]);
    return;
  }
  const source = new Map(steps.map((r) => [`${r.run_id} ${r.step}`, r]));
  fill(body, retrains.flatMap((r) => r.steps.flatMap((st, i) => {
    const row = el("tr", {}, el("td", {}, i === 0 ? `${r.run_id} (of ${r.retrain_of})` : ""), el("td", {}, st.step));
    for (const [k, digits, format] of RETRAIN_FIGURES) row.append(el("td", {}, figure(st[k], digits, format)));
    const was = source.get(`${r.retrain_of} ${st.step}`);
    if (!was) return [row];
    const under = el("tr", { class: "muted" }, el("td", {}, ""), el("td", {}, `${r.retrain_of}`));
    for (const [k, digits, format] of RETRAIN_FIGURES) under.append(el("td", {}, figure(was[k], digits, format)));
    return [row, under];
  })));
}

function drawCharts(s) {
  try { // charts.js: a chart that cannot be drawn must not keep the tables from the page
    drawTrainingCharts(s.steps, $("x-axis").value);
    drawThroughputChart(s.throughput);
  } catch (err) {
    $("source").textContent += ` · a chart could not be drawn: ${err}`;
  }
}

async function showEpisode(id) {
  const box = $("episode");
  let reply, body;
  try {
    reply = await fetch(`/api/episodes/${encodeURIComponent(id)}`);
    body = await reply.json();
  } catch (err) {
    box.replaceChildren(el("h2", {}, "Episode"), el("div", { class: "error" }, `cannot load the episode: ${err}`));
    return;
  }
  if (!reply.ok) {
    box.replaceChildren(el("h2", {}, "Episode"), el("div", { class: "muted" }, body.detail ?? reply.status));
    return;
  }
  const e = body, o = e.outcome || {};
  const head = el("div", {}, "task ", el("b", {}, e.task), " · verdict ",
    el("b", { class: "verdict" }, e.verdict || "not scored yet"));
  if (e.outcome) head.append(` · ${o.n_turns} turns in ${o.seconds}s${o.exception ? ` · ${o.exception}` : ""}`);
  const t = e.trained_in;
  head.append(" · ", t ? el("a", { href: inspectUrl(t.run_id, t.step), class: "trained-in" },
    `trained in step ${t.step} of ${t.run_id}`) : "not trained (yet)");
  const calls = e.calls.map((c) => {
    const call = el("div", { class: "call" }, el("div", { class: "muted" },
      `#${c.seq} ${c.kind} · attempt ${c.attempt} · v${c.policy_version} · ${fixed(c.engine_ms, 0)} ms · ${c.finish_reason}`));
    for (const h of c.images) {
      call.append(HEX64.test(h) ? el("img", { alt: `screenshot ${h.slice(0, 12)}`, src: `/blobs/${h}` })
        : el("div", { class: "error" }, `a screenshot with a malformed hash: ${h}`));
    }
    call.append(el("pre", { class: "action" }, c.action));
    return call;
  });
  fill(box, [el("h2", {}, `Episode ${e.episode_id}`), head, ...calls]);
}

function episodeInHash() {
  const m = location.hash.match(/episode=(.+)$/);
  if (!m) return null;
  try {
    return decodeURIComponent(m[1]);
  } catch {
    return m[1]; // a malformed escape: look the text up as it is
  }
}

$("episodes").addEventListener("click", (ev) => {
  const li = ev.target.closest("li");
  if (li) location.hash = `episode=${encodeURIComponent(li.dataset.id)}`;
});
window.addEventListener("hashchange", () => {
  const id = episodeInHash();
  if (id !== null) showEpisode(id);
});
const first = episodeInHash();
if (first !== null) showEpisode(first);

let latest = null; // the last summary: drawn again when the x axis is switched
$("x-axis").addEventListener("change", () => {
  if (latest) drawCharts(latest);
});

const stream = new EventSource("/api/stream");
stream.onmessage = (ev) => {
  try {
    latest = JSON.parse(ev.data);
  } catch (err) {
    $("source").textContent = `an update could not be read: ${err}`;
    return;
  }
  render(latest);
};
stream.onerror = () => {
  $("source").textContent = "disconnected from the dashboard; reconnecting…"; // EventSource retries by itself
};
