// The page an emailed link opens: it shows the request and sends the answer, as the person the
// link was mailed to. The token stays in the URL's fragment (never sent to a server in a URL,
// so never in a log); the page sends it in a header. Nothing is answered by opening the link:
// a mail scanner that follows it changes nothing.

import { h } from "./dom.js";

const main = document.getElementById("main");
const params = new URLSearchParams(location.hash.slice(1));
const requestId = params.get("request") || "";
const token = params.get("token") || "";
const HEADER = "X-Agentflow-Request-Token";



async function call(method, path, body) {
  const init = { method, headers: { Accept: "application/json", [HEADER]: token } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    const error = (data && data.error) || { code: "http_" + response.status, message: "HTTP " + response.status };
    throw Object.assign(new Error(error.message), { code: error.code, details: error.details || {} });
  }
  return data;
}

function show(...nodes) {
  main.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined));
}

function failure(error) {
  return h("div", { class: "errors", role: "alert", id: "answer-error" }, h("strong", {}, error.code), " ", error.message);
}

function done(request) {
  main.replaceChildren(
    h("h1", {}, "Thank you"),
    h("p", { id: "answered", "data-status": request.status }, "Answered (" + request.status + ") as " + request.responded_by + "."));
}

function page(request) {
  const base = "/api/public/requests/" + encodeURIComponent(requestId);
  const result = h("div", {});
  const reason = h("input", { id: "reason", "aria-label": "Reason", placeholder: "reason (optional; shown to the run)" });
  const decide = request.kind === "approval" || request.kind === "review" || request.kind === null;
  const spec = request.spec || {};
  let value = h("textarea", { id: "response", "aria-label": "Your answer (JSON)", rows: 6 });
  if (request.kind === "review") value.value = JSON.stringify(spec.proposed ?? null, null, 2);
  if (request.kind === "selection") {
    value = h("select", { id: "response", "aria-label": "Your choice" },
      (spec.options || []).map((o, i) => h("option", { value: String(i) }, o.label || String(o.value))));
  }
  function answerValue() {
    if (request.kind === "selection") return (spec.options || [])[Number(value.value)].value;
    return JSON.parse(value.value);
  }
  async function send(approved) {
    const body = {};
    if (decide) body.approved = approved;
    if (reason.value) body.reason = reason.value;
    try {
      if (!decide || (approved && request.kind === "review")) body.response = answerValue();
      done(await call("POST", base + "/respond", body));
    } catch (e) {
      result.replaceChildren(failure(e.code ? e : { code: "answer_not_json", message: e.message }));
    }
  }
  const buttons = decide
    ? [h("button", { class: "primary", id: "approve", onclick: () => send(true) }, "Approve"),
       h("button", { id: "reject", onclick: () => send(false) }, "Reject")]
    : [h("button", { class: "primary", id: "answer", onclick: () => send(null) }, "Send answer")];
  show(
    h("h1", {}, request.kind ? "Your " + request.kind + " is needed" : "Your approval is needed"),
    h("p", { id: "message" }, request.message || ""),
    request.kind === "input" ? h("pre", {}, JSON.stringify(spec.form || {}, null, 2)) : null,
    decide && request.kind !== "review" ? null : value,
    h("div", { class: "row" }, reason),
    h("div", { class: "row" }, buttons),
    h("p", { class: "muted" }, "For " + request.given_to + (request.expires_at ? " · until " + new Date(request.expires_at).toLocaleString() : "")),
    result);
}

async function load() {
  try {
    const request = await call("GET", "/api/public/requests/" + encodeURIComponent(requestId));
    if (request.status !== "pending") done(request);
    else page(request);
  } catch (e) {
    main.replaceChildren(h("h1", {}, "This link does not work"), failure(e));
  }
}

load();
