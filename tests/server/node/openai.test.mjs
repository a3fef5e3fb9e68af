// The official openai client against a live `moestream serve` on loopback:
// models, chat (plain and streamed, with usage), completions, a stream the
// client aborts, the client's error classes for refused requests, tools,
// and seeded sampling that batching with other streams does not change.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, qwen3Template } from './server.mjs';

let server, client;

before(async () => {
  server = await startServer(['-c', '4096', '--parallel', '2', '--queue', '4', '--chat-template-file', qwen3Template]);
  client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
});
after(async () => { await server.stop(); });

test('models lists the one model', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids, ['golden']);
});

test('chat completion', async () => {
  const r = await client.chat.completions.create({
    model: 'golden',
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello' }],
    max_tokens: 8,
    temperature: 0,
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 8);
});

test('streamed chat gives the same text as the plain one, then usage', async () => {
  const body = { model: 'golden', messages: [{ role: 'user', content: 'Count with me' }], max_tokens: 12,
                 temperature: 0, ignore_eos: true };
  const plain = await client.chat.completions.create(body);
  const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    if (c.choices.length) {
      text += c.choices[0].delta.content ?? '';
      finish = c.choices[0].finish_reason ?? finish;
    }
  }
  assert.ok(chunks > 2);
  assert.equal(text, plain.choices[0].message.content);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 12);
});

test('completions', async () => {
  const r = await client.completions.create({ model: 'golden', prompt: 'The GNU General Public License', max_tokens: 5,
                                              temperature: 0, ignore_eos: true });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.usage.completion_tokens, 5);
  assert.equal(r.choices[0].finish_reason, 'length');
});

test('an aborted stream stops its sequence and the server goes on', async () => {
  const cancelled = await server.metric('moestream_requests_total{outcome="cancelled"}');
  const ac = new AbortController();
  const stream = await client.completions.create(
    { model: 'golden', prompt: 'Once', max_tokens: 4000, ignore_eos: true, stream: true }, { signal: ac.signal });
  let got = 0;
  for await (const c of stream) {
    assert.equal(typeof c.choices[0].text, 'string');
    if (++got === 3) { ac.abort(); break; }
  }
  assert.equal(got, 3);
  for (let i = 0; i < 600; i++) {
    if ((await server.metric('moestream_requests_total{outcome="cancelled"}')) === cancelled + 1) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(await server.metric('moestream_requests_total{outcome="cancelled"}'), cancelled + 1);
  const r = await client.completions.create({ model: 'golden', prompt: 'x', max_tokens: 2 });
  assert.ok(r.choices[0].text !== undefined);
});

test('refused requests come back as the client\'s error classes', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
  await assert.rejects(
    client.chat.completions.create({ model: 'golden', messages: [{ role: 'user', content: 'x' }], temperature: 7 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature');
  await assert.rejects(
    client.completions.create({ model: 'golden', prompt: 'x '.repeat(5000), max_tokens: 4 }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded');
});

test('tools: offered to the model through its template, with an earlier call and its result', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Get the weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const messages = [
    { role: 'user', content: "What's the weather in Paris?" },
    { role: 'assistant', content: null,
      tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 18}' },
  ];
  const body = { model: 'golden', messages, max_tokens: 6, temperature: 0, ignore_eos: true };
  const without = await client.chat.completions.create(body);
  const plain = await client.chat.completions.create({ ...body, tools, tool_choice: 'auto' });
  // Qwen3's template describes the tools in a system turn.
  assert.ok(plain.usage.prompt_tokens > without.usage.prompt_tokens + 20);
  const stream = await client.chat.completions.create({ ...body, tools, stream: true });
  let text = '', calls = [], finish = null;
  for await (const c of stream) {
    const d = c.choices[0]?.delta ?? {};
    text += d.content ?? '';
    for (const t of d.tool_calls ?? []) calls[t.index] = t;
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  // A random model rarely writes a call; whatever it wrote comes back the
  // same way plain and streamed (the parser is checked against every
  // template's own rendering of a call in tool_calls_test).
  const msg = plain.choices[0].message;
  assert.equal(text, msg.content ?? '');
  assert.deepEqual(calls.map((t) => t.function), (msg.tool_calls ?? []).map((t) => t.function));
  assert.equal(finish, plain.choices[0].finish_reason);
  // tool_choice "none" offers no tools.
  const none = await client.chat.completions.create({ ...body, tools, tool_choice: 'none' });
  assert.equal(none.usage.prompt_tokens, without.usage.prompt_tokens);
  await assert.rejects(client.chat.completions.create({ ...body, tools: [{ type: 'function', function: {} }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'tools[0].function.name');
  await assert.rejects(client.chat.completions.create({ ...body, tools,
    tool_choice: { type: 'function', function: { name: 'nope' } } }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice');
});

test('the same seed gives the same text, alone or beside other streams', async () => {
  const body = { model: 'golden', messages: [{ role: 'user', content: 'Pick words' }], max_tokens: 10,
                 temperature: 0.9, seed: 42, ignore_eos: true };
  const alone = await client.chat.completions.create(body);
  const [a, , b] = await Promise.all([
    client.chat.completions.create(body),
    client.chat.completions.create({ ...body, seed: 7, messages: [{ role: 'user', content: 'Other' }] }),
    client.chat.completions.create({ ...body, stream: false }),
  ]);
  assert.equal(a.choices[0].message.content, alone.choices[0].message.content);
  assert.equal(b.choices[0].message.content, alone.choices[0].message.content);
});
