// The chat page at / in a real browser: headless Debian chromium, driven over
// the DevTools protocol on a pipe (no extra packages), types a message, sends
// it, and waits for the streamed reply and its statistics line; and with the
// shipped demo model behind --api-key, the model's name appears once a key is
// typed, and a turn refused for a wrong key is not sent again. Skipped where
// chromium is not installed.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, demoModel } from './server.mjs';

const chromium = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find(existsSync);
let server, demo;

before(async () => {
  if (!chromium) return;
  server = await startServer(['-c', '1024', '--parallel', '1']);
  demo = await startServer(['--parallel', '1', '--api-key', 'sesame'], demoModel, 'demo');
});
after(async () => {
  if (server) await server.stop();
  if (demo) await demo.stop();
});

// Chromium with --remote-debugging-pipe reads protocol messages on fd 3 and
// writes them on fd 4, each terminated by a NUL byte.
function browser(url, profile) {
  const proc = spawn(chromium, ['--headless=new', '--no-sandbox', '--disable-gpu', '--no-first-run',
                                `--user-data-dir=${profile}`, '--remote-debugging-pipe', url],
                     { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  let next = 1, buf = '';
  const waiting = new Map();
  proc.stdio[4].on('data', (d) => {
    buf += d;
    let cut;
    while ((cut = buf.indexOf('\0')) >= 0) {
      const msg = JSON.parse(buf.slice(0, cut));
      buf = buf.slice(cut + 1);
      const w = waiting.get(msg.id);
      if (!w) continue;
      waiting.delete(msg.id);
      if (msg.error) w.reject(new Error(JSON.stringify(msg.error)));
      else w.resolve(msg.result);
    }
  });
  const send = (method, params = {}, sessionId) => new Promise((resolve, reject) => {
    const id = next++;
    waiting.set(id, { resolve, reject });
    proc.stdio[3].write(JSON.stringify({ id, method, params, sessionId }) + '\0');
  });
  return { proc, send, stderr: () => stderr };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Opens url in a fresh headless chromium and runs fn(evaluate), where
// evaluate(expression) returns the expression's value in the page.
async function withPage(url, fn) {
  const profile = mkdtempSync(path.join(os.tmpdir(), 'moestream-page-'));
  const b = browser(url, profile);
  try {
    let page;
    for (let i = 0; i < 300 && !page; i++) {
      page = (await b.send('Target.getTargets')).targetInfos.find((t) => t.type === 'page');
      if (!page) await sleep(100);
    }
    assert.ok(page, 'chromium opened no page: ' + b.stderr());
    const { sessionId } = await b.send('Target.attachToTarget', { targetId: page.targetId, flatten: true });
    const evaluate = async (expression) =>
      (await b.send('Runtime.evaluate', { expression, returnByValue: true }, sessionId)).result.value;
    await fn(evaluate, sessionId, b);
    await b.send('Browser.close').catch(() => {});
  } finally {
    const exited = new Promise((r) => (b.proc.exitCode !== null ? r() : b.proc.on('exit', r)));
    b.proc.kill();
    await exited;
    // Chromium's helper processes outlive the browser by a moment and
    // still write into the profile (rmdir then fails with ENOTEMPTY).
    for (let i = 0; ; i++) {
      try {
        rmSync(profile, { recursive: true, force: true });
        break;
      } catch (e) {
        if (i >= 50) throw e;
        await sleep(100);
      }
    }
  }
}

// Polls the page's state (a JSON string expression) until done(state).
async function until(evaluate, expression, done, tries = 1200) {
  let s;
  for (let i = 0; i < tries; i++) {
    s = JSON.parse(await evaluate(expression));
    if (done(s)) break;
    await sleep(50);
  }
  return s;
}

test('the chat page streams a reply in headless chromium', { skip: !chromium && 'no chromium', timeout: 180000 },
  async () => {
    await withPage(`${server.base}/?max_tokens=24`, async (evaluate, sessionId, b) => {
      const state = `JSON.stringify({
        ready: document.readyState, model: document.getElementById('model')?.textContent,
        user: document.querySelector('.msg.user')?.textContent,
        reply: document.getElementById('reply-1')?.textContent,
        stats: document.getElementById('stats-1')?.textContent })`;
      let s = await until(evaluate, state, (x) => x.ready === 'complete' && x.model, 600);
      assert.match(s.model, /^golden · qwen3moe · context 1024$/);
      await evaluate(`document.getElementById('input').value = 'Hello from the browser';
                      document.getElementById('send').click()`);
      s = await until(evaluate, state, (x) => x.stats);
      assert.equal(s.user, 'Hello from the browser');
      assert.ok(s.reply.length > 0, 'no reply text');
      assert.match(s.stats, /^\d+ tokens · [\d.]+ tok\/s · first token [\d.]+ s · prompt \d+ tokens, \d+ cached/);
      assert.match(s.stats, /expert hit rate [\d.]+%/);
      if (process.env.MOESTREAM_PAGE_SHOT) {
        const shot = await b.send('Page.captureScreenshot', { format: 'png' }, sessionId);
        writeFileSync(process.env.MOESTREAM_PAGE_SHOT, Buffer.from(shot.data, 'base64'));
      }
    });
  });

test('with --api-key the page names the model once a key is typed; a refused turn is not resent',
  { skip: !chromium && 'no chromium', timeout: 180000 }, async () => {
    await withPage(`${demo.base}/?max_tokens=16`, async (evaluate) => {
      const state = `JSON.stringify({
        ready: document.readyState, model: document.getElementById('model')?.textContent,
        errors: document.querySelectorAll('.msg.error').length,
        sent: typeof messages === 'undefined' ? null : messages,
        replies: [...document.querySelectorAll('.msg.assistant')].map((e) => e.textContent),
        stats: document.querySelectorAll('.stats').length,
        busy: document.getElementById('send')?.disabled })`;
      let s = await until(evaluate, state, (x) => x.ready === 'complete', 600);
      await sleep(500);
      s = JSON.parse(await evaluate(state));
      assert.equal(s.model, '', 'no key yet: /v1/models answers 401');
      // A wrong key: the turn fails and leaves no assistant message behind.
      await evaluate(`const k = document.getElementById('key'); k.value = 'wrong';
                      k.dispatchEvent(new Event('change'));
                      document.getElementById('input').value = 'It is my duty to';
                      document.getElementById('send').click()`);
      s = await until(evaluate, state, (x) => x.errors === 1 && !x.busy);
      assert.equal(s.model, '');
      assert.deepEqual(s.sent, [], 'the failed turn is dropped from the conversation');
      // The right key: the name appears without a reload, and the next turn goes through.
      await evaluate(`const k2 = document.getElementById('key'); k2.value = 'sesame';
                      k2.dispatchEvent(new Event('change'))`);
      s = await until(evaluate, state, (x) => x.model);
      assert.match(s.model, /^demo · qwen3moe · context 512$/);
      await evaluate(`document.getElementById('input').value = 'It is my duty to';
                      document.getElementById('send').click()`);
      s = await until(evaluate, state, (x) => x.stats === 2 && !x.busy);
      assert.deepEqual(s.sent.map((m) => m.role), ['user', 'assistant']);
      assert.ok(s.sent[1].content.length > 0, 'the demo model replied: ' + JSON.stringify(s.replies));
      assert.equal(s.errors, 1);
    });
  });
