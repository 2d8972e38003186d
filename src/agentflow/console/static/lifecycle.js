// A workflow's life on its page: enable or disable it, archive or unarchive it, delete it, and
// see which workflows start it. A refusal because others use it (409 resource_in_use) lists
// them and offers to do it anyway (force=true).

import { ApiError, api } from "./api.js";
import { h } from "./dom.js";

export async function lifecycleSection(workflow, { problems, toast, changed, deleted }) {
  const base = "/api/ai/workflows/" + workflow.id;
  const { references } = await api("GET", "/api/resources/workflow/" + encodeURIComponent(workflow.name) + "/references");
  const users = references.filter((r) => r.workflow_id !== workflow.id);
  const result = h("div", { id: "lifecycle-result" });

  async function act(label, method, path, body, force) {
    result.replaceChildren();
    try {
      await api(method, path + (force ? "?force=true" : ""), body);
      toast(label + ": " + workflow.name);
      return true;
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      result.append(problems(e));
      if (e.code === "resource_in_use") {
        result.append(h("button", { class: "danger", id: "force", onclick: () => run(label, method, path, body, true) },
          label + " anyway"));
      }
      return false;
    }
  }
  async function run(label, method, path, body, force) {
    if (await act(label, method, path, body, force)) (method === "DELETE" ? deleted : changed)();
  }
  function remove() {
    if (confirm("Delete " + workflow.name + " with its versions and finished runs?")) run("Deleted", "DELETE", base);
  }

  const archived = Boolean(workflow.archived_at);
  const state = archived ? "archived" : workflow.draft ? "draft" : workflow.enabled ? "enabled" : "disabled";
  const buttons = archived
    ? [h("button", { id: "unarchive", onclick: () => run("Unarchived", "PATCH", base, { archived: false }) }, "Unarchive")]
    : [
        workflow.enabled
          ? h("button", { id: "disable", onclick: () => run("Disabled", "PATCH", base, { enabled: false }) }, "Disable")
          : h("button", { id: "enable", onclick: () => run("Enabled", "PATCH", base, { enabled: true }) }, "Enable"),
        h("button", { id: "archive", onclick: () => run("Archived", "PATCH", base, { archived: true }) }, "Archive"),
      ];
  return h("section", { "aria-label": "Lifecycle" },
    h("h2", {}, "Lifecycle"),
    h("p", {}, "State: ", h("strong", { id: "workflow-state" }, state)),
    h("div", { class: "row" }, ...buttons, h("button", { class: "danger", id: "delete", onclick: remove }, "Delete")),
    h("h3", {}, "Used by"),
    users.length
      ? h("ul", { id: "used-by" }, users.map((r) =>
          h("li", {}, h("a", { href: "#/workflows/" + encodeURIComponent(r.workflow) }, r.workflow),
            " v" + r.version + (r.latest ? "" : " (older)") + (r.active_runs ? ", " + r.active_runs + " active run(s)" : ""))))
      : h("p", { class: "muted", id: "used-by" }, "No other workflow starts this one."),
    result);
}
