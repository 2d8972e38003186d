// Where a config path the API names in an error (nodes[2].type, nodes[id=ask].message,
// trigger.topics[0]) is written in the YAML the person edits: its line number (1-based), or
// the nearest enclosing line found, or null. Block style with "- " items, and flow maps or
// lists on one line, as people write configs; the error keeps its path either way.

const escape = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
const blank = (line) => !line.trim() || line.trim().startsWith("#");

function shape(line) {
  const lead = line.length - line.trimStart().length;
  const text = line.trim();
  const dash = text === "-" || text.startsWith("- ");
  const body = dash ? text.slice(1).trimStart() : text;
  return { lead, dash, body, col: dash ? lead + (text.length - body.length) : lead };
}

// The lines after `line` that hold its value: deeper ones, and a list at the key's own column.
function valueEnd(lines, line, col) {
  let i = line + 1;
  for (; i < lines.length; i++) {
    if (blank(lines[i])) continue;
    const s = shape(lines[i]);
    if (!(s.lead > col || (s.dash && s.lead === col))) break;
  }
  return i;
}

function firstLine(lines, start, end) {
  for (let i = start; i < end; i++) if (!blank(lines[i])) return i;
  return -1;
}

export function lineOf(text, path) {
  const lines = text.split("\n");
  const segments = [...path.matchAll(/([^.[\]]+)|\[([^\]]*)\]/g)].map((m) => (m[1] !== undefined ? { key: m[1] } : { item: m[2] }));
  // The mapping or list being looked in: its lines, and for a mapping the column of its keys.
  let start = 0, end = lines.length, col = null, found = null, flow = false;
  for (const seg of segments) {
    if (flow) return found + 1; // inside a flow collection on one line: that line
    const first = firstLine(lines, start, end);
    if (first < 0) break;
    if (seg.key !== undefined) {
      const keyCol = col ?? shape(lines[first]).col;
      const key = new RegExp("^" + escape(seg.key) + "\\s*:(\\s|$)");
      let hit = -1;
      for (let i = start; i < end && hit < 0; i++) {
        if (blank(lines[i])) continue;
        const s = shape(lines[i]);
        if (s.col === keyCol && key.test(s.body)) hit = i;
      }
      if (hit < 0) break;
      found = hit;
      const value = shape(lines[hit]).body.replace(key, "").trim();
      flow = value.startsWith("{") || value.startsWith("[");
      start = hit + 1;
      end = valueEnd(lines, hit, keyCol);
      col = null;
    } else {
      const itemLead = shape(lines[first]).lead;
      const items = [];
      for (let i = start; i < end; i++) {
        if (!blank(lines[i]) && shape(lines[i]).dash && shape(lines[i]).lead === itemLead) items.push(i);
      }
      const ends = items.map((_, n) => (n + 1 < items.length ? items[n + 1] : end));
      let n = -1;
      if (seg.item.includes("=")) {
        const [name, value] = seg.item.split("=");
        const named = new RegExp("(^|[{,\\s])" + escape(name) + "\\s*:\\s*[\"']?" + escape(value) + "[\"']?\\s*($|[,}])");
        n = items.findIndex((at, k) => lines.slice(at, ends[k]).some((l) => named.test(shape(l).body)));
      } else {
        n = Number(seg.item);
      }
      if (!(n >= 0 && n < items.length)) break;
      found = items[n];
      const s = shape(lines[found]);
      flow = s.body.startsWith("{") || s.body.startsWith("[");
      start = found;
      end = ends[n];
      col = s.col; // the item's keys: after its dash on its first line, then at that column
    }
  }
  return found === null ? null : found + 1;
}
