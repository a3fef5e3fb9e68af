// Two `moestream serve` instances behind HAProxy from Debian on loopback,
// with the configuration the README shows (docs/haproxy.cfg): every turn of
// a conversation reaches the instance holding its KV cache, conversations
// spread over both, and when one instance stops the health check takes it
// out and the other answers. Skipped where haproxy is not installed (make
// deps installs it).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer } from './server.mjs';

const haproxy = ['/usr/sbin/haproxy', '/usr/bin/haproxy'].find(existsSync);
const config = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../docs/haproxy.cfg');
let servers = [], proxy, base;

async function freePort() {
  const s = net.createServer();
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  const port = s.address().port;
  await new Promise((r) => s.close(r));
  return port;
}

before(async () => {
  if (!haproxy) return;
  servers = await Promise.all([0, 1].map(() => startServer(['-c', '1024', '--parallel', '2'])));
  const port = await freePort();
  const addr = (s) => s.base.replace('http://', '');
  proxy = spawn(haproxy, ['-db', '-f', config], {
    env: { ...process.env, LISTEN: `127.0.0.1:${port}`, SERVE1: addr(servers[0]), SERVE2: addr(servers[1]) },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 100; i++) {
    try { if ((await fetch(`${base}/health`)).ok) return; } catch { /* not listening yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('haproxy did not answer');
});
after(async () => {
  if (proxy) { const gone = new Promise((r) => proxy.on('exit', r)); proxy.kill('SIGTERM'); await gone; }
  await Promise.all(servers.filter((s) => s.proc.exitCode === null).map((s) => s.stop()));
});

async function chat(conversation, messages) {
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'X-Conversation-Id': conversation },
    body: JSON.stringify({ model: 'golden', messages, max_tokens: 4, temperature: 0 }),
  });
  assert.equal(res.status, 200);
  return res.json();
}

const done = (s) => s.metric('moestream_requests_total{outcome="done"}');

test('conversations keep their instance and its cache; a stopped instance is routed around',
  { skip: !haproxy && 'haproxy is not installed (apt-get install haproxy)', timeout: 120000 }, async () => {
    // Follow-up turns go where the first went, and find its tokens cached.
    for (const id of ['alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta']) {
      const before = await Promise.all(servers.map(done));
      const first = [{ role: 'user', content: `Conversation ${id}: hello` }];
      const one = await chat(id, first);
      const two = await chat(id, [...first, one.choices[0].message, { role: 'user', content: 'and then?' }]);
      assert.ok(two.usage.prompt_tokens_details.cached_tokens >= one.usage.prompt_tokens);
      const gained = (await Promise.all(servers.map(done))).map((n, i) => n - before[i]);
      assert.ok(gained.includes(2) && gained.includes(0), `one instance took both turns: ${gained}`);
    }
    // Six conversations used both instances.
    for (const s of servers) assert.ok((await done(s)) >= 2);

    // One instance stops: after its health checks fail, the other answers everything.
    await servers[0].stop();
    await new Promise((r) => setTimeout(r, 3000));
    for (const id of ['alpha', 'beta', 'gamma', 'delta']) {
      const r = await chat(id, [{ role: 'user', content: 'still there?' }]);
      assert.equal(r.object, 'chat.completion');
    }
  });
