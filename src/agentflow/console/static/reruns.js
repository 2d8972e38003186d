// Rerun an ended run from one of its steps (POST /api/ai/workflows/{id}/runs/{run_id}/rerun):
// a new run starts where this one stood when the step began, the steps done by then copied;
// the page then shows the new run.

import { ApiError, api } from "./api.js";
import { h } from "./dom.js";

// The timeline's last cell for a step: a button on the first row of each step after the start.
export function rerunCell(run, step, seen, toast) {
  if (step.seq < 1 || seen.has(step.seq)) return h("td", {});
  seen.add(step.seq);
  async function rerun() {
    try {
      const chosen = Number((document.getElementById("rerun-version") || {}).value) || run.workflow_version;
      const body = chosen === run.workflow_version ? { from_step: step.seq } : { from_step: step.seq, version: chosen };
      const made = await api("POST", "/api/ai/workflows/" + run.workflow_id + "/runs/" + run.id + "/rerun", body);
      location.hash = "#/runs/" + made.workflow_id + "/" + made.id;
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      toast(e.code + ": " + e.message);
    }
  }
  return h("td", {}, h("button", {
    class: "rerun", "data-seq": String(step.seq), onclick: rerun,
    title: "A new run from where this one stood when step " + step.seq + " began",
  }, "Rerun from here"));
}

// On a rerun's page: which run it was made from, and from which step.
export function rerunOf(run) {
  if (!run.rerun_of) return null;
  const old = run.rerun_of.run_id;
  return h("p", { id: "rerun-of", class: "muted" }, "A rerun of ",
    h("a", { href: "#/runs/" + run.workflow_id + "/" + old }, "run " + old.slice(0, 8)),
    " from step " + run.rerun_of.step + "; the steps before it are copies of that run's.");
}

// Beside the timeline of an ended run: the version a rerun from a step runs on (the run's own
// by default; another where its state fits, else the rerun is refused with why).
export function rerunVersion(run) {
  return h("p", { class: "field" }, h("label", { for: "rerun-version" }, "Rerun on version"),
    h("input", { id: "rerun-version", type: "number", min: "1", step: "1", value: String(run.workflow_version) }));
}
