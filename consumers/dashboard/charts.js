// The dashboard's charts, drawn by uPlot (vendored: /vendor/uPlot.iife.min.js, scripts/vendor-charts.sh).
// Each chart has its axes labelled with units, x in steps or in time (UTC), and the values under the
// cursor in its legend. A chart is rebuilt only when its series change (a new task, the x axis switched);
// otherwise new data is set in place, so the cursor and the page stay where they are.
"use strict";

const PALETTE = ["#4f7cff", "#e0673c", "#2a9d5c", "#9b59b6", "#c9a227", "#1aa3b8", "#d6457a", "#6b7385"];
const STEP_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000];
const CHART_HEIGHT = 190;

// A record's number as the chart takes it: a finite number, else a gap (the tables show "NaN" as it is).
const point = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);

function number(v, digits = 4) {
  if (v === null || v === undefined) return "–";
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(Math.min(2, digits - 1));
  return String(+v.toPrecision(digits));
}

const newest = (values) => values.findLast((v) => v !== null && v !== undefined) ?? null;

// The x range: a lone point gets ``lone`` on either side (uPlot gives a lone time point 1000 days when
// the time is in seconds); bars get ``edge`` at each end so the outer ones are not cut in half.
const xRange = (lone, edge) => (self, min, max) => {
  const xs = self.data[0];
  return xs.length === 1 ? [xs[0] - lone, xs[0] + lone] : [min - edge, max + edge];
};
const X_RANGES = { step: xRange(1, 0), time: xRange(60, 0), minute: xRange(300, 30) };

// The y axis as wide as its longest tick label (an exponent like 3.0e-6 ran into the axis title).
const ySize = (self, values) => 30 + 7 * Math.max(3, ...(values || []).map((v) => v.length));

const utc = (seconds) => new Date(seconds * 1000).toISOString().slice(11, 19);

// A time tick in UTC, 24-hour, as fine as the ticks are apart: seconds, minutes, or the date.
function clock(seconds, incr) {
  const iso = new Date(seconds * 1000).toISOString();
  return incr >= 86400 ? iso.slice(0, 10) : incr >= 60 ? iso.slice(11, 16) : iso.slice(11, 19);
}

// Every chart on the page by its container's id: kept for the resize observer (and for inspection).
const charts = (window.cuaCharts = {});

const resizer = new ResizeObserver((entries) => {
  for (const entry of entries) {
    const u = charts[entry.target.id];
    const width = Math.floor(entry.contentRect.width);
    if (u && width > 0 && width !== u.width) u.setSize({ width, height: CHART_HEIGHT });
  }
});

// spec: { x: "step" | "time" | "minute", xs: numbers, xLabel(idx) -> text, yLabel: the unit,
//         series: [{ label, values }], bars: boolean }
function drawChart(id, spec) {
  const box = document.getElementById(id);
  const time = spec.x !== "step";
  const shape = JSON.stringify([spec.x, spec.yLabel, spec.series.map((s) => s.label)]);
  const data = [spec.xs, ...spec.series.map((s) => s.values.map(point))];
  let u = charts[id];
  if (u && u.shape === shape) {
    u.xLabel = spec.xLabel;
    u.setData(data);
    if (u.cursor.left < 0) u.setLegend({ idx: null }); // not hovered: the legend shows the newest point
    return u;
  }
  if (u) u.destroy();
  box.replaceChildren();
  const bars = spec.bars ? uPlot.paths.bars({ size: [0.6, 40] }) : undefined;
  const xAxis = time
    ? { label: "time (UTC)", values: (self, splits, axis, space, incr) => splits.map((v) => clock(v, incr)) }
    : { label: "step", incrs: STEP_INCRS, values: (self, splits) => splits.map(String) };
  u = new uPlot({
    width: Math.max(200, Math.floor(box.clientWidth)),
    height: CHART_HEIGHT,
    tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"),
    scales: { x: { time, range: X_RANGES[spec.x] } },
    cursor: { drag: { x: false, y: false } },
    legend: { live: true },
    axes: [
      { ...xAxis, labelSize: 18, stroke: "#5b6475", grid: { stroke: "#eef0f5" } },
      { label: spec.yLabel, labelSize: 18, size: ySize, stroke: "#5b6475", grid: { stroke: "#eef0f5" },
        values: (self, splits) => splits.map((v) => number(v, 2)) },
    ],
    series: [
      { label: spec.x === "step" ? "step" : "time",
        value: (self, v, s, idx) => {
          const at = idx ?? self.data[0].length - 1; // not hovered: the newest point
          return at < 0 || !self.xLabel ? "–" : (idx == null ? "newest: " : "") + self.xLabel(at);
        } },
      ...spec.series.map((s, i) => ({
        label: s.label,
        stroke: PALETTE[i % PALETTE.length],
        fill: spec.bars ? PALETTE[i % PALETTE.length] + "99" : undefined,
        width: 2,
        paths: bars,
        points: { show: !spec.bars, size: 5 },
        spanGaps: false,
        value: (self, v, sidx, idx) => number(idx == null ? newest(self.data[sidx]) : v),
      })),
    ],
  }, data, box);
  u.shape = shape;
  u.xLabel = spec.xLabel;
  u.setLegend({ idx: null });
  charts[id] = u;
  resizer.observe(box);
  return u;
}

// The training charts of a summary's steps, with x in steps or in the time each step finished.
function drawTrainingCharts(steps, xMode) {
  const byTime = xMode === "time";
  const rows = byTime ? steps.filter((r) => point(r.finished_at) !== null).sort((a, b) => a.finished_at - b.finished_at) : steps;
  const xs = rows.map((r) => (byTime ? r.finished_at : r.step));
  const xLabel = (idx) => `step ${rows[idx].step} · v${rows[idx].policy_version} · ${utc(rows[idx].finished_at)} UTC`;
  const common = { x: byTime ? "time" : "step", xs, xLabel };
  const tasks = [...new Set(rows.flatMap((r) => Object.keys(r.by_task)))].sort();
  drawChart("reward-chart", { ...common, yLabel: "reward",
    series: [{ label: "mean reward", values: rows.map((r) => r.mean_reward) }] });
  drawChart("task-chart", { ...common, yLabel: "reward",
    series: tasks.map((t) => ({ label: t, values: rows.map((r) => (t in r.by_task ? r.by_task[t] : null)) })) });
  drawChart("gap-chart", { ...common, yLabel: "nats/token",
    series: [{ label: "logprob gap", values: rows.map((r) => r.logprob_gap) }] });
  drawChart("grad-chart", { ...common, yLabel: "L2 norm",
    series: [{ label: "grad norm", values: rows.map((r) => r.grad_norm) }] });
}

function drawThroughputChart(throughput) {
  drawChart("throughput-chart", {
    x: "minute", xs: throughput.map((t) => t.minute * 60), bars: true,
    xLabel: (idx) => `${utc(throughput[idx].minute * 60).slice(0, 5)} UTC`,
    yLabel: "episodes/min",
    series: [{ label: "episodes finished", values: throughput.map((t) => t.episodes) }],
  });
}
