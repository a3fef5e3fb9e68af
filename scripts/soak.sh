#!/usr/bin/env bash
# The memory contract over time (make soak): a long generation and a server
# answering many requests, each on a model 4x larger than --mem, with the
# process's RSS sampled every 0.2 s. Passes when the peak stays within
# --mem + 5 % and the last quarter's mean RSS is no more than 2 % above the
# second quarter's (the first holds start-up: loading, the cache filling)
# plus what the KV cache may still add (its pages are allocated up front but
# touched as positions fill: kv_bytes_per_token times the tokens between the
# two quarters). Prints one JSON line per phase.
#   scripts/soak.sh [BUILD_DIR] [TOKENS] [REQUESTS]     (defaults: build 20000 1000)
set -euo pipefail
build=${1:-build}; tokens=${2:-20000}; requests=${3:-1000}
bin="$(cd "$build" && pwd)/moestream"
dir=$(mktemp -d /tmp/moestream-soak.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT
mem_mib=${SOAK_MEM_MIB:-200}  # the model's experts are about 430 MB
model="$dir/big.gguf"
# 8 layers x 64 experts of 512x512 Q8_0 matrices: about 430 MB of experts.
"$bin" synth --preset tiny --layers 8 --experts 64 --n-embd 512 --ffn 512 --type Q8_0 -o "$model" >/dev/null 2>&1

# Samples VmRSS (KiB) of PID into FILE until the process ends.
sample() {
  while kill -0 "$1" 2>/dev/null; do
    awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null >> "$2" || true
    sleep 0.2
  done
}

# Judges the samples of one phase; prints its JSON line, returns 1 on failure.
judge() {
  local phase=$1 file=$2 extra=$3 kv_kib=${4:-0}
  awk -v phase="$phase" -v mem="$mem_mib" -v extra="$extra" -v kv="$kv_kib" '
    { v[NR] = $1; if ($1 > peak) peak = $1 }
    END {
      if (NR < 8) { printf "{\"phase\": \"%s\", \"error\": \"only %d RSS samples\"}\n", phase, NR; exit 1 }
      q = int(NR / 4)
      for (i = q + 1; i <= 2 * q; i++) first += v[i]
      for (i = NR - q + 1; i <= NR; i++) last += v[i]
      first /= q; last /= q
      limit = mem * 1024 * 1.05
      ok = (peak <= limit && last <= first * 1.02 + kv)
      printf "{\"phase\": \"%s\", %s\"samples\": %d, \"peak_rss_mib\": %.1f, \"budget_mib\": %d, ", phase, extra, NR, peak / 1024, mem
      printf "\"second_quarter_mean_mib\": %.2f, \"last_quarter_mean_mib\": %.2f, \"growth\": %.4f, ", first / 1024, last / 1024, last / first - 1
      printf "\"kv_allowance_mib\": %.2f, \"pass\": %s}\n", kv / 1024, ok ? "true" : "false"
      exit ok ? 0 : 1
    }' "$file"
}

status=0
# 1. One long generation: the KV cache of every token is allocated up front
#    (-c), so any growth is a leak.
ctx=$((tokens + 64))
"$bin" run -m "$model" -c "$ctx" -t 2 --mem ${mem_mib}M --seed 1 --random-prompt 16 -n "$tokens" --ignore-eos \
  --report "$dir/run.json" > /dev/null 2> "$dir/run.err" &
pid=$!
sample $pid "$dir/run.rss"
wait $pid || { echo "soak: run failed:"; cat "$dir/run.err"; exit 1; }
kv_per_token=$(grep -o '"kv_bytes_per_token": [0-9]*' "$dir/run.json" | grep -o '[0-9]*$')
judge generation "$dir/run.rss" "\"tokens\": $tokens, " $((kv_per_token * tokens / 2 / 1024)) || status=1

# 2. A server answering requests one after another.
if [ "$requests" -gt 0 ]; then
  "$bin" serve -m "$model" -c 512 -t 2 --mem ${mem_mib}M --port 0 > "$dir/serve.out" 2> "$dir/serve.err" &
  pid=$!
  port=""
  for _ in $(seq 1 300); do
    port=$(grep -o 'http://127.0.0.1:[0-9]*' "$dir/serve.out" 2>/dev/null | head -1 | sed 's/.*://') || true
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { echo "soak: server did not start:"; cat "$dir/serve.err"; exit 1; }
  sample $pid "$dir/serve.rss" &
  sampler=$!
  fails=0
  for i in $(seq 1 "$requests"); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/completions" \
      -H 'Content-Type: application/json' \
      -d "{\"prompt\": \"request $i: the quick brown fox\", \"max_tokens\": 16, \"seed\": $i}") || code=000
    [ "$code" = 200 ] || fails=$((fails + 1))
  done
  kill $pid; wait $pid 2>/dev/null || true; wait $sampler 2>/dev/null || true
  judge server "$dir/serve.rss" "\"requests\": $requests, \"failed_requests\": $fails, " || status=1
  [ "$fails" -eq 0 ] || status=1
fi
exit $status
