// The agentflow console: one page, hash routes, the public API only (same origin, JSON bodies).
// Everything the API sends is shown as text (textContent), never parsed as HTML.

import { ApiError, api } from "./api.js";
import { auditSection, auditView } from "./audit.js";
import { h } from "./dom.js";
import { graphSection } from "./graph.js";
import { impactView, workflowImpactSection } from "./impact.js";
import { lifecycleSection } from "./lifecycle.js";
import { heldReplies, repliesBlock } from "./replies.js";
import { runFilterForm } from "./run_filters.js";
import { rerunCell, rerunOf, rerunVersion } from "./reruns.js";
import { runMovesSection } from "./run_moves.js";
import { followList } from "./runs_live.js";
import { readEvents } from "./sse.js";
import { tasksView } from "./tasks.js";
import { lineOf } from "./yaml_lines.js";

const main = document.getElementById("main");
const ACTIVE = new Set(["created", "in_progress", "waiting", "suspended"]);
let timer = null; // the live view's refresh

// ---- DOM ------------------------------------------------------------------------------------

const status = (s) => h("span", { class: "status status-" + s, "data-status": s }, s);
const when = (t) => (t ? new Date(t).toLocaleString() : "");
const json = (v) => h("pre", {}, JSON.stringify(v, null, 2));

function show(...nodes) {
  main.replaceChildren(...nodes);
  main.dataset.view = location.hash; // what is shown (tests wait for it)
}

function toast(text) {
  const el = document.getElementById("toast");
  el.textContent = text;
  setTimeout(() => (el.textContent = ""), 4000);
}

// An error's list; with the editor it came from, each path the API names is a button that
// selects its line there.
function problems(error, area = null) {
  const errors = (error.details && error.details.errors) || [];
  const at = (e) => {
    const line = area && e.path ? lineOf(area.value, e.path) : null;
    return line ? [h("button", { class: "at-line", "data-line": String(line), onclick: () => showLine(area, line) }, "line " + line), " "] : [];
  };
  const items = errors.length
    ? errors.map((e) => h("li", {}, ...at(e), (e.path ? e.path + ": " : "") + e.message))
    : [h("li", {}, error.message)];
  return h("div", { class: "errors", role: "alert" }, h("strong", {}, error.code || "error"), h("ul", {}, items));
}

function showLine(area, line) {
  const lines = area.value.split("\n");
  const from = lines.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0);
  area.focus();
  area.setSelectionRange(from, from + lines[line - 1].length);
  area.scrollTop = Math.max(0, (line - 4) * (parseFloat(getComputedStyle(area).lineHeight) || 18));
}

// ---- Views ----------------------------------------------------------------------------------

async function workflowsView(query) {
  const archived = new URLSearchParams(query).get("archived") === "true";
  const { workflows } = await api("GET", "/api/ai/workflows" + (archived ? "?archived=true" : ""));
  const rows = workflows.map((w) =>
    h("tr", {},
      h("td", {}, h("a", { href: "#/workflows/" + encodeURIComponent(w.name) }, w.name)),
      h("td", {}, w.kind), h("td", {}, "v" + w.latest_version),
      h("td", {}, w.archived_at ? "archived" : w.draft ? "draft" : w.enabled ? "enabled" : "disabled"),
      h("td", { class: "last-run" }, w.last_run
        ? [h("a", { href: "#/runs/" + w.id + "/" + w.last_run.id }, status(w.last_run.status)), " " + when(w.last_run.created_at)]
        : h("span", { class: "muted" }, "none yet")),
      h("td", {}, h("a", { href: "#/runs?workflow_id=" + w.id }, "runs"))));
  return [
    h("h1", {}, archived ? "Archived workflows" : "Workflows"),
    h("div", { class: "row" }, h("a", { href: "#/new" }, "New workflow from YAML"), " ",
      archived ? h("a", { href: "#/workflows" }, "Current workflows") : h("a", { href: "#/workflows?archived=true", id: "show-archived" }, "Archived")),
    workflows.length
      ? h("table", {}, h("thead", {}, h("tr", {}, ["Name", "Kind", "Version", "State", "Last run", ""].map((t) => h("th", {}, t)))), h("tbody", {}, rows))
      : h("p", { class: "muted" }, archived ? "No archived workflows." : "No workflows yet."),
  ];
}

const TEMPLATE = `name: my-workflow
kind: structured
nodes:
  - id: greet
    type: mapping
    output: {greeting: "Hello {{ payload.name }}"}
  - {id: done, type: finish, output: "{{ input }}"}
`;

function editor(text, onPublished) {
  const area = h("textarea", { class: "editor", id: "yaml", "aria-label": "Workflow configuration (YAML)", spellcheck: "false" });
  area.value = text;
  const result = h("div", { id: "publish-result" });
  async function publish() {
    result.replaceChildren();
    let config;
    try {
      config = window.jsyaml.load(area.value);
    } catch (e) {
      result.append(problems({ code: "yaml_invalid", message: e.message }));
      return;
    }
    try {
      const published = await api("POST", "/api/ai/workflows", config);
      toast(published.created ? "Published v" + published.version : "Unchanged (v" + published.version + ")");
      onPublished(published);
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      result.append(problems(e, area));
    }
  }
  return h("section", { "aria-label": "Configuration" },
    h("label", { for: "yaml" }, "Configuration (YAML)"), area,
    h("div", { class: "row" }, h("button", { class: "primary", id: "publish", onclick: publish }, "Publish")),
    result);
}

async function newWorkflowView() {
  return [h("h1", {}, "New workflow"),
    editor(TEMPLATE, (p) => (location.hash = "#/workflows/" + encodeURIComponent(p.workflow.name)))];
}

async function workflowView(name) {
  const workflow = await api("GET", "/api/ai/workflows/" + encodeURIComponent(name));
  const { runs } = await api("GET", "/api/runs?exclude=state&limit=20&workflow_id=" + workflow.id);
  const { versions } = await api("GET", "/api/ai/workflows/" + workflow.id + "/versions");
  const payload = h("textarea", { id: "payload", "aria-label": "Payload (JSON)", rows: 4 });
  payload.value = "{}";
  const startResult = h("div", {});
  async function start() {
    startResult.replaceChildren();
    let body;
    try {
      body = JSON.parse(payload.value || "null");
    } catch (e) {
      startResult.append(problems({ code: "payload_not_json", message: e.message }));
      return;
    }
    try {
      const run = await api("POST", "/api/ai/workflows/" + workflow.id + "/runs", { payload: body });
      location.hash = "#/runs/" + workflow.id + "/" + run.id;
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      startResult.append(problems(e));
    }
  }
  return [
    h("h1", {}, workflow.name, " ", h("span", { class: "muted" }, "v" + workflow.latest_version + " · " + workflow.kind)),
    h("div", { class: "grid" },
      editor(window.jsyaml.dump(workflow.config, { noRefs: true, lineWidth: 110 }), () => route()),
      h("section", { "aria-label": "Start a run" },
        h("label", { for: "payload" }, "Payload (JSON)"), payload,
        h("div", { class: "row" }, h("button", { class: "primary", id: "start", onclick: start }, "Start run")), startResult,
        h("h2", {}, "Recent runs"), runTable(runs))),
    graphSection(workflow.graph),
    await workflowImpactSection(workflow),
    versionsSection(workflow, versions),
    await lifecycleSection(workflow, { problems, toast, changed: route, deleted: () => (location.hash = "#/workflows") }),
    workflow.latest_version > 1 && !workflow.archived_at ? runMovesSection(workflow, { problems, toast }) : null,
    await auditSection(workflow),
  ];
}

function versionsSection(workflow, versions) {
  const base = "/api/ai/workflows/" + workflow.id;
  const shown = h("div", { id: "diff" });
  async function diff(version) {
    const found = await api("GET", base + "/versions/" + version + "/diff/latest");
    shown.replaceChildren(
      h("h3", {}, "v" + found.before + " → v" + found.after + ": " + found.changes.length + " changes"),
      h("ul", {}, found.changes.map((c) => h("li", {}, c.path + ": " + c.change))),
      h("pre", { class: "diff" }, found.unified || "(the same)"));
  }
  async function rollback(version) {
    try {
      const published = await api("POST", base + "/rollback", { version });
      toast(published.created ? "Rolled back: v" + version + " is now v" + published.version : "Unchanged");
      route();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      shown.replaceChildren(problems(e));
    }
  }
  return h("section", { "aria-label": "Versions" },
    h("h2", {}, "Versions"),
    h("table", { id: "versions" },
      h("thead", {}, h("tr", {}, ["Version", "Published", ""].map((t) => h("th", {}, t)))),
      h("tbody", {}, versions.map((v) =>
        h("tr", { "data-version": v.version },
          h("td", {}, "v" + v.version + (v.latest ? " (latest)" : "")), h("td", {}, when(v.created_at)),
          h("td", {}, v.latest ? "" : [
            h("button", { class: "diff", onclick: () => diff(v.version) }, "Diff with latest"), " ",
            h("button", { class: "rollback", onclick: () => rollback(v.version) }, "Roll back to this"),
          ]))))),
    shown);
}

function runTable(runs) {
  if (!runs.length) return h("p", { class: "muted" }, "No runs.");
  return h("table", { id: "runs" },
    h("thead", {}, h("tr", {}, ["Run", "Status", "Reason", "Started", "Duration", "Trigger", "Model", "Tokens", "USD"].map((t) => h("th", {}, t)))),
    h("tbody", {}, runs.map((r) =>
      h("tr", { "data-run": r.id },
        h("td", {}, h("a", { href: "#/runs/" + r.workflow_id + "/" + r.id }, r.id.slice(0, 8))),
        h("td", {}, status(r.status)), h("td", {}, r.status_reason || ""), h("td", {}, when(r.started_at || r.created_at)),
        h("td", {}, r.duration_ms == null ? "" : Math.round(r.duration_ms) + " ms"),
        h("td", {}, (r.trigger && r.trigger.source) || (r.rerun_of ? "rerun" : r.parent_run_id ? "parent run" : "api")),
        h("td", {}, r.model || ""), h("td", {}, r.input_tokens + r.output_tokens), h("td", {}, r.usd_cost)))));
}

async function runsView(query) {
  const params = new URLSearchParams(query);
  params.set("exclude", "state");
  const form = runFilterForm(params);
  const body = h("div", { id: "run-list" });
  try {
    const { runs } = await api("GET", "/api/runs?" + params.toString());
    body.append(runTable(runs));
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    return [h("h1", {}, "Runs"), form, problems(e)];
  }
  const nodes = [h("h1", {}, "Runs"), form, body];
  // Live: the same list from GET /api/runs/stream, redrawn as its runs change.
  nodes.live = (isCurrent) => followList("/api/runs/stream?" + params.toString(), (runs) => body.replaceChildren(runTable(runs)), isCurrent, () => (timer = setTimeout(route, 1000)));
  return nodes;
}

async function runView(workflowId, runId) {
  const run = await api("GET", "/api/ai/workflows/" + workflowId + "/runs/" + runId);
  const nodes = runNodes(run, workflowId, runId);
  // Live: follow the run's stream of changes (polling when a stream cannot be had).
  if (ACTIVE.has(run.status)) {
    nodes.follow = { path: "/api/ai/workflows/" + workflowId + "/runs/" + runId + "/stream", workflowId, runId };
  }
  return nodes;
}

function runNodes(run, workflowId, runId) {
  const actions = h("div", { class: "row" });
  if (ACTIVE.has(run.status)) actions.append(h("button", { id: "cancel", onclick: () => act("cancel") }, "Cancel"));
  if (run.status === "failed") actions.append(h("button", { id: "retry", onclick: () => act("retry") }, "Retry"));
  async function act(what) {
    try {
      await api("POST", "/api/ai/workflows/" + workflowId + "/runs/" + runId + "/" + what, {});
      route();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      toast(e.code + ": " + e.message);
    }
  }
  const waits = run.status === "waiting"
    ? h("p", { id: "waits" }, "Waiting (" + (run.status_reason || "timer") + ")", run.due_at ? "; wakes " + when(run.due_at) : "")
    : null;
  const total = run.total_usage || {};
  const ended = !ACTIVE.has(run.status) && !run.parent_run_id; // an ended run can be rerun from a step
  const seen = new Set();
  const steps = h("table", { id: "timeline" },
    h("thead", {}, h("tr", {}, ["#", "Node", "Kind", "Attempt", "Status", "Duration", "Tokens", "Input", "Output / error", ...(ended ? [""] : [])].map((t) => h("th", {}, t)))),
    h("tbody", {}, run.steps.map((s) =>
      h("tr", { "data-node": s.node_id || "", "data-step-status": s.status },
        h("td", {}, s.seq), h("td", {}, s.node_id || ""), h("td", {}, s.kind + (s.name ? " · " + s.name : "")),
        h("td", {}, s.attempt), h("td", {}, status(s.status)), h("td", {}, Math.round(s.duration_ms) + " ms"),
        h("td", {}, s.input_tokens + s.output_tokens), h("td", {}, json(s.input)), h("td", {}, json(s.error || s.output)),
        ended ? rerunCell(run, s, seen, toast) : null))));
  const nodes = [
    h("h1", {}, "Run ", h("span", { class: "muted" }, run.id)),
    h("p", {}, "Status: ", h("span", { id: "run-status" }, status(run.status)), run.status_reason ? " · " + run.status_reason : "",
      " · v" + run.workflow_version, " · ", h("a", { href: "#/runs?workflow_id=" + run.workflow_id }, "all runs of this workflow")),
    waits, actions, rerunOf(run),
    h("p", { class: "muted" }, "Tokens " + (run.input_tokens + run.output_tokens) + " · USD " + run.usd_cost +
      (total.runs > 1 ? " · with the " + (total.runs - 1) + " runs it started: tokens " + (total.input_tokens + total.output_tokens) + ", USD " + total.usd_cost : "")),
    h("div", { class: "grid" },
      h("section", {}, h("h2", {}, "Input"), json(run.input)),
      h("section", {}, h("h2", {}, run.error ? "Error" : "Output"), h("div", { id: "run-output" }, json(run.error || run.output)))),
    h("h2", {}, "Timeline"), ended ? rerunVersion(run) : null, steps,
  ];
  return nodes;
}

// Read a run's server-sent events and show each change while this page is the one shown;
// when the stream fails, look again in a second.
async function follow(path, mine, workflowId, runId) {
  let status = null; // the badge counts requests to people: recount when the run changes status
  try {
    await readEvents(path, (name, doc) => {
      show(...runNodes(doc, workflowId, runId).filter((n) => n !== null && n !== undefined));
      const now = doc && (doc.status || (doc.run && doc.run.status));
      if (now !== status) {
        status = now;
        countInbox();
      }
    }, () => mine === navigation);
  } catch {
    if (mine === navigation) timer = setTimeout(route, 1000);
  }
}

async function inboxView() {
  const [requests, held] = await Promise.all([api("GET", "/api/requests?status=pending"), heldReplies()]);
  const cards = requests.filter((r) => r.kind !== "callback" && r.kind !== "event").map((r) => requestCard(r, held.get(r.id)));
  return [h("h1", {}, "Inbox"), cards.length ? cards : h("p", { class: "muted", id: "inbox-empty" }, "Nothing waits for you.")];
}

function requestCard(r, replies) {
  const who = h("input", { id: "by-" + r.id, "aria-label": "Your name", placeholder: "your name", value: localStorage.getItem("agentflow.me") || "" });
  const reason = h("input", { id: "reason-" + r.id, "aria-label": "Reason", placeholder: "reason (for a rejection)" });
  const response = h("textarea", { id: "response-" + r.id, "aria-label": "Response (JSON)", rows: 3 });
  const decide = r.kind === "approval" || r.kind === "review" || r.node_id === null;
  if (r.kind === "review") response.value = JSON.stringify((r.spec || {}).proposed ?? null, null, 2);
  const result = h("div", {});
  async function respond(approved) {
    localStorage.setItem("agentflow.me", who.value);
    const body = { responded_by: who.value || null };
    if (decide) body.approved = approved;
    if (reason.value) body.reason = reason.value;
    if (!decide || (approved && r.kind === "review")) {
      try {
        body.response = JSON.parse(response.value);
      } catch (e) {
        result.replaceChildren(problems({ code: "response_not_json", message: e.message }));
        return;
      }
    }
    try {
      await api("POST", "/api/requests/" + r.id + "/respond", body);
      toast("Answered");
      route();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      result.replaceChildren(problems(e));
    }
  }
  const buttons = decide
    ? [h("button", { class: "primary", onclick: () => respond(true) }, "Approve"), h("button", { onclick: () => respond(false) }, "Reject")]
    : [h("button", { class: "primary", onclick: () => respond(null) }, "Answer")];
  return h("article", { class: "card", "data-request": r.id, "aria-label": "Request " + r.id },
    h("p", {}, h("strong", {}, r.kind), " · ", h("a", { href: "#/runs/" + r.workflow_id + "/" + r.run_id }, "run " + r.run_id.slice(0, 8)),
      r.assignees.length ? " · for " + r.assignees.join(", ") : "", r.expires_at ? " · expires " + when(r.expires_at) : ""),
    h("p", {}, r.message || (r.tool ? "Call " + r.tool : "")),
    r.tool ? json(r.arguments) : null, r.spec && !decide ? json(r.spec) : null, repliesBlock(replies),
    h("div", { class: "row" }, who, reason),
    decide && r.kind !== "review" ? null : response,
    h("div", { class: "row" }, buttons), result);
}

async function countInbox() {
  try {
    const pending = await api("GET", "/api/requests?status=pending&limit=500");
    const people = pending.filter((r) => r.kind !== "callback" && r.kind !== "event").length;
    document.getElementById("inbox-count").textContent = people ? String(people) : "";
  } catch {
    document.getElementById("inbox-count").textContent = "";
  }
}

// ---- Routing --------------------------------------------------------------------------------

let navigation = 0; // the latest route(); an older one that ends later shows nothing

async function route() {
  clearTimeout(timer);
  const mine = ++navigation;
  const [path, query] = (location.hash.slice(1) || "/workflows").split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  for (const link of document.querySelectorAll("nav a")) {
    if (link.dataset.section === parts[0]) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  let nodes;
  try {
    if (parts[0] === "new") nodes = await newWorkflowView();
    else if (parts[0] === "workflows" && parts[1]) nodes = await workflowView(parts[1]);
    else if (parts[0] === "runs" && parts[2]) nodes = await runView(parts[1], parts[2]);
    else if (parts[0] === "runs") nodes = await runsView(query || "");
    else if (parts[0] === "inbox") nodes = await inboxView();
    else if (parts[0] === "tasks") nodes = await tasksView(query || "", { problems, toast, changed: route });
    else if (parts[0] === "audit") nodes = await auditView(query || "");
    else if (parts[0] === "impact") nodes = await impactView(query || "");
    else nodes = await workflowsView(query || "");
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    nodes = [h("h1", {}, "Something went wrong"), problems(e),
      e.status === 401 ? h("p", {}, "This server needs an API key: enter one above.") : null];
  }
  if (mine !== navigation) return;
  show(...nodes.flat().filter((n) => n !== null && n !== undefined));
  if (nodes.follow) follow(nodes.follow.path, mine, nodes.follow.workflowId, nodes.follow.runId);
  if (nodes.live) nodes.live(() => mine === navigation);
  countInbox();
}

document.getElementById("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const key = document.getElementById("api-key").value.trim();
  if (key) sessionStorage.setItem("agentflow.key", key);
  else sessionStorage.removeItem("agentflow.key");
  route();
});
window.addEventListener("hashchange", route);
route(); // a module runs once the document is parsed
