// A structured workflow's graph, drawn (SVG) from what the API resolved (GET /api/ai/workflows/{id}
// answers `graph`: nodes with their kinds and ports, links with their ports, the entry node).
// Nodes stand in columns by their longest distance from the entry (links that close a loop
// are drawn but do not push a node right); nodes attached to an agent hang under it.

const SVG = "http://www.w3.org/2000/svg";
const W = 150, H = 44, GAP_X = 64, GAP_Y = 22, PAD = 12;

function el(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

function backLinks(graph) {
  // Links into a node still being explored from it (a loop's way back), found depth first.
  const out = new Map(graph.nodes.map((n) => [n.id, []]));
  for (const link of graph.links) if (out.has(link.from)) out.get(link.from).push(link);
  const state = new Map(); // 1: on the path, 2: done
  const back = new Set();
  const starts = [graph.entry, ...graph.nodes.map((n) => n.id)].filter(Boolean);
  for (const start of starts) {
    if (state.has(start)) continue;
    const stack = [[start, 0]];
    state.set(start, 1);
    while (stack.length) {
      const top = stack[stack.length - 1];
      const links = out.get(top[0]) || [];
      if (top[1] >= links.length) {
        state.set(top[0], 2);
        stack.pop();
        continue;
      }
      const link = links[top[1]++];
      if (state.get(link.to) === 1) back.add(link);
      else if (!state.has(link.to) && out.has(link.to)) {
        state.set(link.to, 1);
        stack.push([link.to, 0]);
      }
    }
  }
  return back;
}

export function layout(graph) {
  const main = graph.nodes.filter((n) => !n.attached_to);
  const back = backLinks(graph);
  const forward = graph.links.filter((l) => !back.has(l));
  const depth = new Map(main.map((n) => [n.id, 0]));
  for (let round = 0; round < main.length; round++) {
    let moved = false;
    for (const link of forward) {
      if (!depth.has(link.from) || !depth.has(link.to)) continue;
      if (depth.get(link.to) < depth.get(link.from) + 1) {
        depth.set(link.to, depth.get(link.from) + 1);
        moved = true;
      }
    }
    if (!moved) break;
  }
  const rows = new Map();
  const place = new Map();
  for (const n of main) {
    const column = depth.get(n.id);
    const row = rows.get(column) || 0;
    rows.set(column, row + 1);
    place.set(n.id, { x: PAD + column * (W + GAP_X), y: PAD + row * (H + GAP_Y) });
  }
  // Attached nodes (an agent's tools and memory) in a band under the graph, in config order.
  const bottom = Math.max(PAD, ...[...place.values()].map((p) => p.y));
  graph.nodes.filter((n) => n.attached_to && place.has(n.attached_to)).forEach((n, i) => {
    place.set(n.id, { x: PAD + i * (W + 16), y: bottom + H + 2 * GAP_Y });
  });
  return { place, back };
}

export function graphSection(graph) {
  if (!graph) return null;
  const { place, back } = layout(graph);
  const width = Math.max(...[...place.values()].map((p) => p.x)) + W + PAD;
  const height = Math.max(...[...place.values()].map((p) => p.y)) + H + PAD;
  const kinds = new Map(graph.nodes.map((n) => [n.id, n]));
  const svg = el("svg", { id: "graph", viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
    "aria-label": `Graph of ${graph.nodes.length} nodes and ${graph.links.length} links` });
  svg.append(el("defs", {}, el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
    el("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "currentColor" }))));
  for (const link of graph.links) {
    const a = place.get(link.from), b = place.get(link.to);
    if (!a || !b) continue;
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
    const looped = back.has(link);
    const d = looped
      ? `M ${a.x + W / 2} ${a.y + H} C ${a.x + W / 2} ${a.y + H + 40}, ${b.x + W / 2} ${b.y + H + 40}, ${b.x + W / 2} ${b.y + H}`
      : `M ${x1} ${y1} C ${x1 + GAP_X / 2} ${y1}, ${x2 - GAP_X / 2} ${y2}, ${x2} ${y2}`;
    const group = el("g", { class: "link" + (looped ? " loop" : ""), "data-link": `${link.from}.${link.port}->${link.to}` },
      el("path", { d, fill: "none", stroke: "currentColor", "marker-end": "url(#arrow)" }));
    if (link.port !== "result") {
      const mx = looped ? (a.x + b.x + W) / 2 : (x1 + x2) / 2, my = looped ? Math.max(a.y, b.y) + H + 30 : (y1 + y2) / 2 - 4;
      group.append(el("text", { x: mx, y: my, "text-anchor": "middle", class: "port" }, link.port));
    }
    svg.append(group);
  }
  for (const n of graph.nodes.filter((n) => n.attached_to && place.has(n.id) && place.has(n.attached_to))) {
    const owner = place.get(n.attached_to), p = place.get(n.id);
    svg.append(el("path", { class: "attachment", d: `M ${owner.x + W / 2} ${owner.y + H} L ${p.x + W / 2} ${p.y}`,
      fill: "none", stroke: "currentColor", "stroke-dasharray": "4 3", "data-attached": `${n.attached_to}->${n.id}` }));
  }
  for (const [id, p] of place) {
    const node = kinds.get(id);
    const classes = ["node", id === graph.entry ? "entry" : "", node.attached_to ? "attached" : ""].filter(Boolean).join(" ");
    svg.append(el("g", { class: classes, "data-node": id, transform: `translate(${p.x} ${p.y})` },
      el("title", {}, `${id} (${node.type})` + (node.attached_to ? `, attached to ${node.attached_to}` : "")),
      el("rect", { width: W, height: H, rx: 6 }),
      el("text", { x: 10, y: 18, class: "id" }, id.length > 20 ? id.slice(0, 19) + "…" : id),
      el("text", { x: 10, y: 34, class: "kind" }, node.type)));
  }
  const section = document.createElement("section");
  section.setAttribute("aria-label", "Graph");
  const heading = document.createElement("h2");
  heading.textContent = "Graph";
  const scroller = document.createElement("div");
  scroller.className = "graph";
  scroller.append(svg);
  section.append(heading, scroller);
  return section;
}
