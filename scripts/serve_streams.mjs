// Aggregate decode speed of `moestream serve` at several numbers of
// concurrent streams, and the expert bytes read per generated token, from
// the server's /metrics before and after each round; then the time to first
// token of a chat's follow-up turn against its first turn. One JSON line per
// measurement. Needs only node (fetch).
//   node scripts/serve_streams.mjs BASE_URL [STREAMS=1,2,4,8] [TOKENS=32] [WARMUP_TOKENS=16]
// (STREAMS 0: only the chat turns)
// experts_acquired_per_token: the layers' unions of experts (cache hits
// and misses) over the tokens they served, which falls as streams share
// experts; decode_read_bytes_per_token: what the cache could not hold of them.
// Each round starts after a one-stream warm-up of WARMUP_TOKENS, so every
// count of streams meets a cache that has already seen the same warm-up.
const [base, streamsArg = '1,2,4,8', tokensArg = '32', warmArg = '16'] = process.argv.slice(2);
if (!base) {
  console.error('usage: node scripts/serve_streams.mjs BASE_URL [STREAMS] [TOKENS] [WARMUP_TOKENS]');
  process.exit(2);
}
const tokens = Number(tokensArg);

async function metrics() {
  const text = await (await fetch(`${base}/metrics`)).text();
  const m = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    m[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return m;
}

// Streams a chat completion; resolves to {ttft_s, total_s, text}.
async function chat(messages, maxTokens, seed, onFirst = () => {}) {
  const t0 = performance.now();
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages, max_tokens: maxTokens, temperature: 0, ignore_eos: true, seed, stream: true,
      stream_options: { include_usage: true } }),
  });
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  let ttft = null, text = '', buf = '', usage = null;
  const decoder = new TextDecoder();
  for await (const chunk of res.body) {
    buf += decoder.decode(chunk, { stream: true });
    let nl;
    while ((nl = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, nl);
      buf = buf.slice(nl + 2);
      if (!event.startsWith('data: ') || event === 'data: [DONE]') continue;
      const data = JSON.parse(event.slice(6));
      if (data.usage) usage = data.usage;
      const delta = data.choices?.[0]?.delta?.content;
      if (delta) {
        if (ttft === null) { ttft = (performance.now() - t0) / 1000; onFirst(); }
        text += delta;
      }
    }
  }
  return { ttft_s: ttft, total_s: (performance.now() - t0) / 1000, text, usage };
}

const topics = ['the sea', 'a library', 'winter roads', 'the moon', 'old clocks', 'bread', 'rivers', 'bees',
  'glass', 'trains', 'salt', 'maps', 'owls', 'copper', 'rain', 'chess'];
const round = (x, d = 3) => Math.round(x * 10 ** d) / 10 ** d;
const bytes = (m) => m['moestream_bytes_read_total{reason="demand"}'] + m['moestream_bytes_read_total{reason="prefetch"}'];

let r = 0;
for (const n of streamsArg.split(',').map(Number).filter((x) => x > 0)) {
  await chat([{ role: 'user', content: `Warm-up ${r}: say something about ${topics[r % topics.length]}.` }], Number(warmArg), r);
  // Counted from when every stream has its first token (all prompts
  // evaluated) to the end: decode only.
  let started = 0, allStarted;
  const whenStarted = new Promise((resolve) => { allStarted = () => { if (++started === n) resolve(metrics()); }; });
  await Promise.all(Array.from({ length: n }, (_, i) =>
    chat([{ role: 'user', content: `Write about ${topics[(r + i) % topics.length]}, round ${r}.` }], tokens, i,
         allStarted)));
  const after = await metrics();
  const before = await whenStarted;
  const gen = after.moestream_generated_tokens_total - before.moestream_generated_tokens_total;
  const dec = after.moestream_decode_seconds_total - before.moestream_decode_seconds_total;
  const hits = after.moestream_expert_cache_hits_total - before.moestream_expert_cache_hits_total;
  const misses = after.moestream_expert_cache_misses_total - before.moestream_expert_cache_misses_total;
  console.log(JSON.stringify({
    streams: n, generated_tokens: gen, decode_seconds: round(dec), aggregate_decode_tps: round(gen / dec),
    decode_read_bytes_per_token: Math.round((bytes(after) - bytes(before)) / gen),
    experts_acquired_per_token: round((hits + misses) / gen, 1), hit_rate: round(hits / (hits + misses)),
  }));
  r++;
}

// A chat's second turn only evaluates its new tokens (the slot's prompt
// cache): a long first message, a short reply, a short follow-up.
const history = 'Lighthouses stood on rocks and headlands, and their keepers trimmed the wicks, ' +
  'wound the clockwork and logged the weather through every night of the year. ';
const first = [{ role: 'user', content: history.repeat(12) + 'Tell me about them.' }];
const one = await chat(first, 8, 1);
const two = await chat([...first, { role: 'assistant', content: one.text },
  { role: 'user', content: 'And what happened to them later?' }], 8, 1);
console.log(JSON.stringify({
  first_turn_ttft_s: round(one.ttft_s), first_turn_prompt_tokens: one.usage?.prompt_tokens,
  follow_up_ttft_s: round(two.ttft_s), follow_up_prompt_tokens: two.usage?.prompt_tokens,
  follow_up_cached_tokens: two.usage?.prompt_tokens_details?.cached_tokens,
}));
