// The impact page (#/impact): what agents did for the workspace (GET /api/reports/impact's
// summary) and charts of its activity over time (GET /api/reports/activity): runs by how
// they stand, tasks created and completed on time or late, and cost per workflow. Each chart
// is an SVG image with a label, and its numbers are in a table under it.

import { api } from "./api.js";
import { h } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const COLORS = { completed: "#1a7f37", failed: "#cf222e", canceled: "#8c959f", active: "#bf8700",
  created: "#0969da", on_time: "#1a7f37", late: "#cf222e", cost: "#8250df" };

function s(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

// Styles set through the DOM (the page's CSP refuses style attributes).
function styled(node, style) {
  Object.assign(node.style, style);
  return node;
}

const day = (iso, interval) => (interval === "hour" ? iso.slice(11, 16) : iso.slice(5, 10));

// Stacked bars: one bar per bucket, one segment per series.
function stacked(id, label, buckets, series, interval) {
  const width = Math.max(360, buckets.length * 28 + 40), height = 160, base = 130;
  const totals = buckets.map((b) => series.reduce((sum, [, get]) => sum + get(b), 0));
  const top = Math.max(1, ...totals);
  const svg = s("svg", { id, role: "img", "aria-label": label, viewBox: `0 0 ${width} ${height}`, width, height });
  buckets.forEach((b, i) => {
    let y = base;
    const x = 30 + i * 28;
    for (const [name, get] of series) {
      const value = get(b);
      if (!value) continue;
      const tall = (value / top) * 110;
      y -= tall;
      svg.append(s("rect", { x, y, width: 20, height: tall, fill: COLORS[name], "data-series": name, "data-value": value },
        s("title", {}, `${day(b.start, interval)}: ${value} ${name.replace("_", " ")}`)));
    }
    if (i % Math.ceil(buckets.length / 12) === 0) {
      svg.append(s("text", { x: x + 10, y: base + 16, "text-anchor": "middle", class: "axis" }, day(b.start, interval)));
    }
  });
  svg.append(s("text", { x: 4, y: 14, class: "axis" }, String(top)));
  svg.append(s("line", { x1: 26, y1: base, x2: width - 6, y2: base, stroke: "#8c959f" }));
  return svg;
}

function legend(series) {
  return h("p", { class: "legend" }, series.map(([name]) =>
    h("span", {}, styled(h("span", { class: "swatch" }), { background: COLORS[name] }), " " + name.replace("_", " ") + " ")));
}

function table(id, headings, rows) {
  return h("details", {}, h("summary", {}, "The numbers"),
    h("table", { id }, h("thead", {}, h("tr", {}, headings.map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c) => h("td", {}, c)))))));
}

export async function impactView(query) {
  const params = new URLSearchParams(query);
  const interval = params.get("interval") === "hour" ? "hour" : "day";
  const since = params.get("from") || (interval === "hour" ? "48h" : "14d");
  const [report, activity] = await Promise.all([
    api("GET", "/api/reports/impact?from=" + encodeURIComponent(since)),
    api("GET", "/api/reports/activity?interval=" + interval + "&from=" + encodeURIComponent(since)),
  ]);
  const b = activity.buckets;
  const runSeries = [["completed", (x) => x.runs.completed], ["failed", (x) => x.runs.failed],
    ["canceled", (x) => x.runs.canceled], ["active", (x) => x.runs.active]];
  const taskSeries = [["on_time", (x) => x.tasks_completed_on_time], ["late", (x) => x.tasks_completed_late]];
  const costs = activity.cost_by_workflow;
  const most = Math.max(0.000001, ...costs.map((c) => Number(c.usd_cost)));
  const periods = h("p", { class: "row" }, ["14d", "30d", "90d"].map((p) =>
    h("a", { href: "#/impact?from=" + p, "aria-current": p === since && interval === "day" ? "page" : null }, "last " + p)),
    h("a", { href: "#/impact?interval=hour&from=48h", "aria-current": interval === "hour" ? "page" : null }, "last 48h by hour"));
  return [
    h("h1", {}, "Impact"), periods,
    h("p", { id: "impact-summary" }, report.summary),
    h("section", { "aria-label": "Runs by status" }, h("h2", {}, "Runs by status"),
      stacked("chart-runs", "Runs started per " + interval + " by how they stand", b, runSeries, interval), legend(runSeries),
      table("table-runs", ["Start", "Completed", "Failed", "Canceled", "Active", "USD"],
        b.map((x) => [x.start, x.runs.completed, x.runs.failed, x.runs.canceled, x.runs.active, x.usd_cost]))),
    h("section", { "aria-label": "Tasks" }, h("h2", {}, "Tasks completed on time"),
      stacked("chart-tasks", "Tasks completed per " + interval + ", on time or late", b, taskSeries, interval), legend(taskSeries),
      table("table-tasks", ["Start", "Created", "On time", "Late"],
        b.map((x) => [x.start, x.tasks_created, x.tasks_completed_on_time, x.tasks_completed_late]))),
    h("section", { "aria-label": "Cost per workflow" }, h("h2", {}, "Cost per workflow"),
      costs.length
        ? h("table", { id: "costs" }, h("thead", {}, h("tr", {}, ["Workflow", "Runs", "Tokens", "USD", ""].map((t) => h("th", {}, t)))),
          h("tbody", {}, costs.map((c) => h("tr", { "data-workflow": c.workflow_name },
            h("td", {}, h("a", { href: "#/workflows/" + encodeURIComponent(c.workflow_name) }, c.workflow_name)),
            h("td", {}, c.runs), h("td", {}, c.tokens), h("td", {}, c.usd_cost),
            h("td", {}, styled(h("span", { class: "bar", "aria-hidden": "true" }), { width: Math.round((Number(c.usd_cost) / most) * 160) + "px" }))))))
        : h("p", { class: "muted" }, "No runs in this period.")),
  ];
}

// On an agent workflow's page: what it did in the last 30 days (its impact report), with a
// link to the workspace's charts. A structured workflow has no impact report: nothing shows.
export async function workflowImpactSection(workflow) {
  if (workflow.kind !== "agent") return null;
  const report = await api("GET", "/api/ai/workflows/" + workflow.id + "/report?from=30d");
  const f = report.figures;
  const rows = [["Runs", f.runs], ["Tasks created", f.tasks_created], ["Completed on time", f.tasks_completed_on_time],
    ["Completed late", f.tasks_completed_late], ["Notifications sent", f.notifications_sent],
    ["Minutes saved", Math.round(report.minutes_saved)], ["Model calls", f.model_calls], ["USD", f.usd_cost]];
  return h("section", { "aria-label": "Impact" },
    h("h2", {}, "Impact, last 30 days"),
    h("p", { id: "workflow-impact-summary" }, report.summary),
    h("table", { id: "workflow-impact" }, h("tbody", {}, rows.map(([name, value]) => h("tr", {}, h("th", { scope: "row" }, name), h("td", {}, value))))),
    h("p", {}, h("a", { href: "#/impact" }, "The workspace's activity over time")));
}
