#!/usr/bin/env bash
# Runs every fuzz_* harness in BUILD_DIR for SECONDS each, seeded from its
# folder fuzz/seeds/<name>; fuzz_gguf also gets the first 64 KB (metadata and
# tensor table) of every golden GGUF. New corpus entries go to
# fuzz/corpus-<name>, crashes to fuzz/crash-<name>-*. Exits non-zero when
# any harness found a crash.
set -euo pipefail
build=${1:-build-fuzz}; seconds=${2:-60}  # third argument: harnesses at once (default: cores)
root=$(cd "$(dirname "$0")/.." && pwd)
golden="$root/../shared/golden"
harnesses=("$build"/fuzz_*)
[ -x "${harnesses[0]}" ] || { echo "fuzz.sh: no harnesses in $build"; exit 1; }
# One harness per core at a time (each is single-threaded), each logging
# to BUILD_DIR/fuzz-<name>.log; the logs' tails are printed in order.
jobs=${3:-$(nproc)}
run_one() {
  h=$1; name=$(basename "$h")
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
  "$h" -max_total_time="$seconds" -max_len=1048576 -rss_limit_mb=4096 -print_final_stats=1 \
       -artifact_prefix="$root/fuzz/crash-$name-" "$corpus" "${seeds[@]}" > "$build/fuzz-$name.log" 2>&1
}
declare -A pid_of
for h in "${harnesses[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  echo "fuzz: $(basename "$h") for ${seconds}s"
  run_one "$h" &
  pid_of[$h]=$!
done
failed=()
for h in "${harnesses[@]}"; do
  name=$(basename "$h")
  rc=0; wait "${pid_of[$h]}" || rc=$?
  echo "== $name (exit $rc)"; tail -n 14 "$build/fuzz-$name.log"
  [ "$rc" -eq 0 ] || failed+=("$name")
done
# Last, so that a log's tail shows it: what failed, the fuzzer's own report
# of it (the lines from its ERROR on), and the input that did it.
for name in "${failed[@]}"; do
  echo "== FAILED: $name"
  sed -n '/==ERROR\|ERROR: libFuzzer\|deadly signal\|SUMMARY/,$p' "$build/fuzz-$name.log" | grep -v '^#' | head -n 40
  ls -l "$root"/fuzz/crash-"$name"-* 2>/dev/null | tail -n 3
done
[ ${#failed[@]} -eq 0 ] && echo "fuzz: ${#harnesses[@]} harnesses, no crash" && exit 0
echo "fuzz: ${#failed[@]} of ${#harnesses[@]} harnesses failed: ${failed[*]}"
exit 1
