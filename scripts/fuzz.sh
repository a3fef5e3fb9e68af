#!/usr/bin/env bash
# Runs every fuzz_* harness in BUILD_DIR, splitting SECONDS between them, each
# seeded from its corpus folder fuzz/seeds/<name> plus the golden files.
set -euo pipefail
build=${1:-build-fuzz}; total=${2:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
harnesses=("$build"/fuzz_*)
n=${#harnesses[@]}
[ -x "${harnesses[0]}" ] || { echo "fuzz.sh: no harnesses in $build"; exit 1; }
per=$(( (total + n - 1) / n )); [ $per -lt 20 ] && per=20
for h in "${harnesses[@]}"; do
  name=$(basename "$h")
  corpus="$root/fuzz/corpus-$name"; mkdir -p "$corpus"
  seeds=()
  [ -d "$root/fuzz/seeds/$name" ] && seeds+=("$root/fuzz/seeds/$name")
  echo "fuzz: $name for ${per}s"
  "$h" -max_total_time="$per" -max_len=1048576 -rss_limit_mb=4096 -print_final_stats=1 \
       "$corpus" "${seeds[@]}" 2>&1 | tail -n 12
done
