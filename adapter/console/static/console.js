// The message browser's live tail (Server-Sent Events from /topics/<topic>/tail); times
// shown as the server shows them: ISO 8601 in UTC, the ms since the epoch on hover.
const utc = (ms) => (ms >= 0 ? new Date(ms).toISOString() : "-");

const toggle = document.getElementById("tail-toggle");
if (toggle) {
  let source = null;
  const body = document.querySelector("#tail tbody");
  const cell = (row, cls, text, title) => {
    const td = row.insertCell();
    td.className = cls;
    td.textContent = text;
    if (title) td.title = title;
    return td;
  };
  toggle.addEventListener("click", () => {
    if (source) {
      source.close();
      source = null;
      toggle.textContent = "Start live tail";
      return;
    }
    source = new EventSource(toggle.dataset.url);
    toggle.textContent = "Stop live tail";
    source.onmessage = (event) => {
      const r = JSON.parse(event.data);
      const row = body.insertRow(0);
      cell(row, "offset", r.offset);
      cell(row, "timestamp", utc(r.timestamp), `${r.timestamp} ms since the epoch`);
      cell(row, "key", r.key);
      cell(row, "value", r.value);
      cell(row, "headers", r.headers.map(([n, v]) => `${n}: ${v}`).join("\n"));
    };
  });
}
