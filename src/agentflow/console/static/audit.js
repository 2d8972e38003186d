// The audit log: who changed what, when, and how it ended (GET /api/audit), for the workspace
// (#/audit, filters in the URL) and on a workflow's page (its own entries).

import { api } from "./api.js";
import { h } from "./dom.js";

const FILTERS = ["action", "actor", "workflow"];
const when = (t) => (t ? new Date(t).toLocaleString() : "");

function outcome(status) {
  if (status === null) return h("span", { class: "status status-unknown", title: "No answer was recorded: the change may or may not have happened" }, "unknown");
  return h("span", { class: "status " + (status < 400 ? "status-completed" : "status-failed") }, String(status));
}

function target(entry) {
  return Object.entries(entry.target).map(([k, v]) => k + "=" + v).join(" ");
}

export function auditTable(entries) {
  if (!entries.length) return h("p", { class: "muted" }, "Nothing recorded.");
  return h("table", { id: "audit" },
    h("thead", {}, h("tr", {}, ["When", "Who", "Role", "Action", "Target", "Outcome"].map((t) => h("th", {}, t)))),
    h("tbody", {}, entries.map((e) =>
      h("tr", { "data-entry": e.id, "data-action": e.action },
        h("td", {}, when(e.at)),
        h("td", {}, e.actor_name ? e.actor_name + " (" + e.actor + ")" : e.actor),
        h("td", {}, e.role), h("td", {}, e.action), h("td", {}, target(e)), h("td", {}, outcome(e.status))))));
}

export async function auditView(query) {
  const params = new URLSearchParams(query);
  const form = h("form", { class: "row", id: "audit-filters", role: "search" });
  for (const name of FILTERS) {
    const id = "audit-" + name;
    form.append(h("label", { for: id }, name), h("input", { id, name, value: params.get(name) || "", size: 18 }));
  }
  form.append(h("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const wanted = new URLSearchParams();
    for (const name of FILTERS) {
      const value = form.elements[name].value.trim();
      if (value) wanted.set(name, value);
    }
    location.hash = "#/audit?" + wanted.toString();
  });
  const page = await api("GET", "/api/audit?" + params.toString());
  const older = new URLSearchParams(params);
  if (page.next_before) older.set("before", String(page.next_before));
  return [h("h1", {}, "Audit log"), form, auditTable(page.entries),
    page.next_before ? h("p", {}, h("a", { href: "#/audit?" + older.toString(), id: "audit-older" }, "Older entries")) : null];
}

export async function auditSection(workflow) {
  const page = await api("GET", "/api/audit?limit=20&workflow=" + encodeURIComponent(workflow.id));
  return h("section", { "aria-label": "Audit log" },
    h("h2", {}, "Audit log"), auditTable(page.entries),
    h("p", {}, h("a", { href: "#/audit?workflow=" + encodeURIComponent(workflow.name) }, "All of this workflow's entries")));
}
