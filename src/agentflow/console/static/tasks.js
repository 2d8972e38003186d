// Tasks (GET /api/tasks): what agents and people created, with the run that made each; a
// person completes one here (POST /api/tasks/{id}/complete), which reaches that run's inbox.

import { ApiError, api } from "./api.js";
import { h } from "./dom.js";

const STATUSES = ["open", "in_progress", "completed", "canceled"];
const when = (t) => (t ? new Date(t).toLocaleString() : "");

export async function tasksView(query, { problems, toast, changed }) {
  const params = new URLSearchParams(query);
  const chosen = params.get("status") || "";
  const picker = h("select", { id: "task-status", "aria-label": "Status" },
    h("option", { value: "" }, "any status"), STATUSES.map((s) => h("option", { value: s, selected: s === chosen }, s)));
  picker.addEventListener("change", () => (location.hash = "#/tasks" + (picker.value ? "?status=" + picker.value : "")));
  const result = h("div", {});
  async function complete(task) {
    try {
      await api("POST", "/api/tasks/" + task.id + "/complete");
      toast("Completed: " + task.title);
      changed();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      result.replaceChildren(problems(e));
    }
  }
  const { tasks } = await api("GET", "/api/tasks?limit=200" + (chosen ? "&status=" + encodeURIComponent(chosen) : ""));
  const open = (t) => t.status === "open" || t.status === "in_progress";
  const table = tasks.length
    ? h("table", { id: "tasks" },
      h("thead", {}, h("tr", {}, ["Task", "Status", "Assignee", "Due", "Made by", ""].map((t) => h("th", {}, t)))),
      h("tbody", {}, tasks.map((t) =>
        h("tr", { "data-task": t.id },
          h("td", {}, t.title, t.description ? h("p", { class: "muted" }, t.description) : null),
          h("td", {}, h("span", { class: "status status-" + t.status }, t.status)),
          h("td", {}, t.assignee || ""), h("td", {}, when(t.due_at)),
          h("td", {}, t.run_id ? h("a", { href: "#/runs?run_id=" + t.run_id }, "run " + t.run_id.slice(0, 8)) : "a person"),
          h("td", {}, open(t) ? h("button", { class: "complete", onclick: () => complete(t) }, "Complete") : "")))))
    : h("p", { class: "muted" }, "No tasks.");
  return [h("h1", {}, "Tasks"), h("div", { class: "row" }, h("label", { for: "task-status" }, "Status"), picker), result, table];
}
