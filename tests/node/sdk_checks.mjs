// Shared by the SDK end-to-end tests: a stream's chunks, a Prometheus counter's sum, /tokenize.
import assert from 'node:assert/strict';

export async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

// The sum of every series of the counter `name` at BASE/metrics.
export async function metric(base, name) {
  const body = await (await fetch(`${base}/metrics`)).text();
  let sum = 0;
  for (const line of body.split('\n')) {
    if (line.startsWith(name + '{') || line.startsWith(name + ' ')) {
      sum += Number(line.slice(line.lastIndexOf(' ') + 1));
    }
  }
  return sum;
}

// POST /tokenize with chat messages; the 200 answer's body.
export async function tokenizeChat(base, model, messages, extra = {}) {
  const r = await fetch(`${base}/tokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model, messages, ...extra }),
  });
  const body = await r.json();
  assert.equal(r.status, 200, JSON.stringify(body));
  return body;
}
