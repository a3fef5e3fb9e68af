#!/usr/bin/env bash
# Runs every fuzz_* harness in BUILD_DIR for SECONDS each, seeded from its
# folder fuzz/seeds/<name>; fuzz_gguf also gets the first 64 KB (metadata and
# tensor table) of every golden GGUF. New corpus entries go to
# fuzz/corpus-<name>, crashes to fuzz/crash-<name>-*. Exits non-zero on the
# first harness that finds a crash.
set -euo pipefail
build=${1:-build-fuzz}; seconds=${2:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
golden="$root/../shared/golden"
harnesses=("$build"/fuzz_*)
[ -x "${harnesses[0]}" ] || { echo "fuzz.sh: no harnesses in $build"; exit 1; }
for h in "${harnesses[@]}"; do
  name=$(basename "$h")
  corpus="$root/fuzz/corpus-$name"; mkdir -p "$corpus"
  seeds=()
  [ -d "$root/fuzz/seeds/$name" ] && seeds+=("$root/fuzz/seeds/$name")
  if [ "$name" = fuzz_gguf ] && [ -d "$golden" ]; then
    heads="$build/golden-heads"; mkdir -p "$heads"
    for g in "$golden"/models/*.gguf "$golden"/tokenizer/*.gguf; do
      [ -f "$heads/$(basename "$g")" ] || head -c 65536 "$g" > "$heads/$(basename "$g")"
    done
    seeds+=("$heads")
  fi
  echo "fuzz: $name for ${seconds}s"
  "$h" -max_total_time="$seconds" -max_len=1048576 -rss_limit_mb=4096 -print_final_stats=1 \
       -artifact_prefix="$root/fuzz/crash-$name-" "$corpus" "${seeds[@]}" 2>&1 | tail -n 14
done
