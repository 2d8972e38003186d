// Free-text replies the model could not settle (held: uncertain, not fitting the request, or
// from someone else than the person emailed), shown on their request's card in the inbox so a
// person reads them before answering.

import { api } from "./api.js";
import { h } from "./dom.js";

export async function heldReplies() {
  const held = await api("GET", "/api/replies?outcome=held&limit=500");
  const byRequest = new Map();
  for (const reply of held) {
    if (!byRequest.has(reply.request_id)) byRequest.set(reply.request_id, []);
    byRequest.get(reply.request_id).push(reply);
  }
  return byRequest;
}

export function repliesBlock(replies) {
  if (!replies || !replies.length) return null;
  return h("div", { class: "replies", "aria-label": "Replies held for you" },
    h("p", { class: "muted" }, "Replies held for you"),
    replies.map((r) => {
      const verdict = r.verdict || {};
      const why = verdict.held_because || verdict.reason || (verdict.error || {}).message || "";
      const score = r.score === null ? "" : " · score " + r.score.toFixed(2);
      return h("blockquote", { "data-reply": r.id },
        h("p", {}, r.text),
        h("p", { class: "muted" }, "from " + r.sender + " · " + (r.label || "unread") + score + (why ? " · " + why : "")));
    }));
}
