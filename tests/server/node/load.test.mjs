// A bounded load test: 300 requests from 16 concurrent clients against 2
// slots and a queue of 4. Every request gets a complete answer or a clean 503
// (OpenAI JSON error), none hangs (each has a deadline, the whole run too),
// the server still answers afterwards, and its peak RSS stays inside --mem.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer } from './server.mjs';

const TOTAL = 300, CONCURRENCY = 16, MEM = 96 * 1024 * 1024;
let server;

before(async () => {
  server = await startServer(['-c', '512', '--parallel', '2', '--queue', '4', '--mem', '96M', '--timeout', '120']);
});
after(async () => { await server.stop(); });

test(`${TOTAL} requests, ${CONCURRENCY} at a time: each completes or gets a clean 503`, { timeout: 600000 }, async () => {
  const client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  let next = 0, ok = 0, busy = 0;
  const other = [];
  const t0 = Date.now();
  async function worker(w) {
    while (next < TOTAL) {
      const i = next++;
      const stream = i % 2 === 0;
      try {
        const body = { model: 'golden', max_tokens: 16, temperature: 0.8, seed: i,
                       messages: [{ role: 'user', content: `request ${i} from client ${w}` }] };
        if (stream) {
          let finish = null;
          for await (const c of await client.chat.completions.create({ ...body, stream: true })) {
            if (c.choices.length && c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
          }
          assert.ok(finish === 'stop' || finish === 'length', `stream ${i} ended without a finish_reason`);
        } else {
          const r = await client.chat.completions.create(body);
          assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
        }
        ok++;
      } catch (e) {
        if (e instanceof OpenAI.APIError && e.status === 503 && e.code === 'overloaded') busy++;
        else other.push(`${i}: ${e}`);
      }
    }
  }
  await Promise.all(Array.from({ length: CONCURRENCY }, (_, w) => worker(w)));
  const seconds = (Date.now() - t0) / 1000;
  console.log(`load: ${ok} answered, ${busy} got 503, ${other.length} other, in ${seconds.toFixed(1)} s; ` +
              `${(await server.metric('moestream_generated_tokens_total'))} tokens generated, ` +
              `peak RSS ${((await server.metric('moestream_peak_rss_bytes')) / 2 ** 20).toFixed(1)} MiB`);
  assert.deepEqual(other, []);
  assert.equal(ok + busy, TOTAL);
  assert.ok(ok > 0);
  assert.equal(await server.metric('moestream_slots_busy'), 0);
  assert.equal(await server.metric('moestream_queue_depth'), 0);
  assert.ok((await server.metric('moestream_peak_rss_bytes')) <= MEM);
  const h = await fetch(`${server.base}/health`);
  assert.equal(h.status, 200);
});
