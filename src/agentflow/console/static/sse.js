// Server-sent events read with fetch (so the API key goes in a header, which EventSource
// cannot send): calls onEvent(name, data) for each event while isCurrent() holds. Once it no
// longer holds (the person went to another page), the request is aborted at once rather than
// at the stream's next heartbeat, so the server stops following for nobody.

export async function readEvents(path, onEvent, isCurrent) {
  const headers = { Accept: "text/event-stream" };
  const key = sessionStorage.getItem("agentflow.key");
  if (key) headers.Authorization = "Bearer " + key;
  const controller = new AbortController();
  const watch = setInterval(() => {
    if (!isCurrent()) controller.abort();
  }, 250);
  try {
    const response = await fetch(path, { headers, signal: controller.signal });
    if (!response.ok || !response.body) throw new Error("HTTP " + response.status);
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done || !isCurrent()) return;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const message = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const lines = message.split("\n");
        const name = (lines.find((l) => l.startsWith("event: ")) || "event: message").slice(7);
        const data = lines.filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
        if (data && isCurrent()) onEvent(name, JSON.parse(data));
      }
    }
  } catch (e) {
    if (!isCurrent()) return; // aborted on purpose
    throw e;
  } finally {
    clearInterval(watch);
    controller.abort();
  }
}
