// The run list, live: GET /api/runs/stream sends the list (`list`), then each run that appears
// on it or changes (`run`) and each that leaves it (`removed`); the list is redrawn from them,
// newest first. When the stream ends or fails, `again` reloads the page's view.

import { readEvents } from "./sse.js";

const newestFirst = (a, b) => (a.created_at < b.created_at ? 1 : a.created_at > b.created_at ? -1 : 0);

export async function followList(path, draw, isCurrent, again) {
  let runs = [];
  try {
    await readEvents(path, (name, data) => {
      if (name === "list") runs = data.runs;
      else if (name === "run") runs = [data.run, ...runs.filter((r) => r.id !== data.run.id)].sort(newestFirst);
      else if (name === "removed") runs = runs.filter((r) => r.id !== data.run_id);
      else return;
      draw(runs);
    }, isCurrent);
  } catch {
    // the server went away or the stream broke: look again below
  }
  if (isCurrent()) again();
}
