// The run list's filters (#/runs?...): a field for each exact filter of GET /api/runs that people
// use most, the ranges and a run variable, and every other filter as a query string. Submitting
// puts them in the URL, so a filtered list can be shared.

import { h } from "./dom.js";

const FILTERS = ["status", "workflow_id", "account_id", "trigger", "enrollment_key", "parent_run_id",
  "model", "trigger_id", "conversation_id", "channel"];
// Ranges and a run variable, each with its own field: [query name, label, input type].
const RANGES = [["started[gte]", "started after", "datetime-local"], ["started[lt]", "started before", "datetime-local"],
  ["duration[gte]", "min duration (ms)", "number"], ["tokens[gte]", "min tokens", "number"], ["usd[gte]", "min USD", "number"]];

// A label and its field, kept on one line.
const field = (label, input) => h("span", { class: "field" }, label, input);

// datetime-local shows the browser's local time; the URL and the API hold ISO 8601 in UTC.
const localTime = (iso) => {
  const t = new Date(iso);
  return isNaN(t) ? "" : new Date(t.getTime() - t.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
};

export function runFilterForm(params) {
  const form = h("form", { class: "row", id: "run-filters", role: "search" });
  for (const name of FILTERS) {
    const id = "filter-" + name;
    form.append(field(h("label", { for: id }, name), h("input", { id, name, value: params.get(name) || "", size: name === "status" ? 10 : 20 })));
  }
  RANGES.forEach(([name, label, type], n) => {
    const value = params.get(name) || "";
    form.append(field(h("label", { for: "range-" + n }, label),
      h("input", { id: "range-" + n, "data-param": name, type, step: type === "number" ? "any" : null, value: type === "number" ? value : value && localTime(value) })));
  });
  const variable = [...params].find(([name]) => /^state\[.+\]$/.test(name));
  form.append(field(h("label", { for: "filter-variable" }, "variable"),
    h("input", { id: "filter-variable", name: "variable", placeholder: "tier=gold", size: 16,
      value: variable ? variable[0].slice(6, -1) + "=" + variable[1] : "" })));
  // Every other filter of GET /api/runs as a query string: state[tier]=gold&ended[lt]=...
  const shown = new Set([...FILTERS, ...RANGES.map(([name]) => name), "exclude", variable && variable[0]]);
  const others = new URLSearchParams([...params].filter(([name]) => !shown.has(name)));
  form.append(field(h("label", { for: "filter-more" }, "more"),
    h("input", { id: "filter-more", name: "more", value: others.toString(), size: 36, placeholder: "ended[lt]=2026-11-01T00:00:00Z" })));
  form.append(h("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const wanted = new URLSearchParams(form.elements.more.value.trim());
    for (const name of FILTERS) {
      const value = form.elements[name].value.trim();
      if (value) wanted.set(name, value);
    }
    for (const input of form.querySelectorAll("input[data-param]")) {
      if (!input.value) continue;
      wanted.set(input.dataset.param, input.type === "number" ? input.value : new Date(input.value).toISOString());
    }
    const [key, ...rest] = form.elements.variable.value.split("=");
    if (key.trim() && rest.length) wanted.set("state[" + key.trim() + "]", rest.join("=").trim());
    location.hash = "#/runs?" + wanted.toString(); // shareable: the filters live in the URL
  });
  return form;
}

