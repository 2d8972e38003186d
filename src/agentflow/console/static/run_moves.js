// A workflow's parked runs (created, waiting or suspended) moved to its latest version: first a
// preview of what would move and why some cannot, then the move itself
// (POST /api/ai/workflows/{id}/runs/migrate).

import { ApiError, api } from "./api.js";
import { h } from "./dom.js";

export function runMovesSection(workflow, { problems, toast }) {
  const path = "/api/ai/workflows/" + workflow.id + "/runs/migrate";
  const result = h("div", { id: "migrate-result" });

  function shown(done) {
    const verb = done.dry_run ? "would move" : "moved";
    const lines = [h("p", { id: "migrate-summary" },
      done.moved.length + " run(s) " + verb + " to v" + done.to_version + ", " + done.refused.length + " cannot")];
    if (done.refused.length) {
      lines.push(h("ul", {}, done.refused.map((r) =>
        h("li", {}, "run " + r.run_id.slice(0, 8) + " (v" + r.from_version + "): " + r.problems.join("; ")))));
    }
    return lines;
  }

  async function migrate(dryRun) {
    result.replaceChildren();
    try {
      const done = await api("POST", path, { dry_run: dryRun });
      result.replaceChildren(...shown(done));
      if (!dryRun) toast("Moved " + done.moved.length + " run(s) to v" + done.to_version);
      if (dryRun && done.moved.length) {
        result.append(h("button", { class: "primary", id: "migrate", onclick: () => migrate(false) }, "Move them"));
      }
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      result.replaceChildren(problems(e));
    }
  }

  return h("section", { "aria-label": "Parked runs" },
    h("h3", {}, "Parked runs"),
    h("p", { class: "muted" }, "Runs that wait (for a person, a timer, an event) keep the version they started on."),
    h("button", { id: "migrate-preview", onclick: () => migrate(true) }, "Move parked runs to v" + workflow.latest_version + "…"),
    result);
}
