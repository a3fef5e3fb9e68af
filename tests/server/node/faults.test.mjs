// A failing drive under `serve`: with the first expert read made to fail
// (--io-faults), that request gets a 500 OpenAI-style JSON error naming the
// file (not its directories), layer and expert, the failure is counted, and the server keeps
// serving: the next request completes.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer } from './server.mjs';

let server;

before(async () => {
  server = await startServer(['-c', '256', '--prefetch', 'off', '--io-faults', 'eio@*:*x1']);
});
after(async () => { await server.stop(); });

async function complete() {
  return fetch(`${server.base}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'golden', prompt: 'Hello there', max_tokens: 4 }),
  });
}

test('a failed read fails its request with a 500 and the server keeps serving', { timeout: 120000 }, async () => {
  const first = await complete();
  assert.equal(first.status, 500);
  const err = (await first.json()).error;
  assert.equal(err.type, 'server_error');
  assert.match(err.message, /^qwen3moe-Q8_0\.gguf: layer \d+ expert \d+: read failed at offset \d+: Input\/output error/);
  assert.ok(!err.message.includes('/shared/'), 'the server\'s path stays out of the message: ' + err.message);
  assert.equal(await server.metric('moestream_requests_total{outcome="failed"}'), 1);

  const second = await complete();
  assert.equal(second.status, 200);
  const body = await second.json();
  assert.equal(body.usage.completion_tokens, 4);
  assert.equal((await (await fetch(`${server.base}/health`)).json()).status, 'ok');
});
