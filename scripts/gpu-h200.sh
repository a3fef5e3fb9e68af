#!/bin/bash
# The GPU checks and figures of docs/gpu.md, on a machine with a CUDA device,
# from binaries built elsewhere: BIN holds moestream, gpu_kernels_test,
# runtime_gpu_test (and lib/ with the shared libraries they need where the
# machine lacks them); the golden qwen3moe files are at ../shared/golden
# relative to the source tree the tests were built from. Writes every log
# and JSON report to OUT. STEPS picks what runs (default: all of them):
# bounds tests runs profile exact ncu benchmodel cpu. DRAFT (default off): run's --draft.
# On the device tool, point OUT elsewhere than the tool's $OUT and pack it
# into one file there afterwards: the tool brings back at most 8 files.
set -u -o pipefail
BIN=${BIN:-build}
OUT=${OUT:-gpu-out}
MODEL=${MODEL:-./q30.gguf}
STEPS=${STEPS:-bounds tests runs profile exact ncu benchmodel cpu}
DRAFT=${DRAFT:-off}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$BIN/lib:${LD_LIBRARY_PATH:-}
ms=$BIN/moestream
step() { [[ " $STEPS " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,pcie.link.gen.current,pcie.link.width.current --format=csv
df -h . | tail -1
if step bounds; then
    echo "== bounds"
    $ms bench gpu --size 1G --reps 20 --json "$OUT/bounds.json" || exit 1
fi
if step tests; then
    echo "== kernel tests"
    $BIN/gpu_kernels_test 2>&1 | grep -vE "^\[ RUN|^\[----|^$" | tail -60
    [ "${PIPESTATUS[0]}" = 0 ] || { echo "kernel tests failed: no figures"; exit 1; }
    echo "== golden + streaming tests"
    $BIN/runtime_gpu_test 2>&1 | grep -vE "^\[ RUN|^\[----|^$" | head -60
fi
echo "== synth"
[ -f "$MODEL" ] || $ms synth --preset qwen3-30b-a3b --type Q4_K_M -o "$MODEL" 2>&1 | tail -2
$ms inspect "$MODEL" 2>&1 | head -20 > "$OUT/inspect.txt"
run() {  # name, flags...
    local name=$1; shift
    echo "== $name: $*"
    local t0=$SECONDS
    timeout 240 $ms run -m "$MODEL" --random-prompt 32 -n 64 --ignore-eos --seed 3 --temp 0 --draft $DRAFT --report "$OUT/$name.json" "$@" \
        > "$OUT/$name.txt" 2> "$OUT/$name.err"
    echo "exit $? after $((SECONDS - t0)) s"; grep -vE "loading|^\s*$" "$OUT/$name.err" | tail -16
}
if step runs; then
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,utilization.gpu,power.draw --format=csv -lms 250 > "$OUT/clocks.csv" &
    smi=$!
    run resident --gpu auto --mem 24G --io buffered
    kill $smi
    run gpumem8g --gpu auto --gpu-mem 8G --mem 24G --io buffered
    run gpumem2g --gpu auto --gpu-mem 2G --mem 24G --io buffered
    # without copying the next layer's predicted experts ahead
    run gpumem8g_noprefetch --gpu auto --gpu-mem 8G --gpu-prefetch off --mem 24G --io buffered
    run gpumem2g_noprefetch --gpu auto --gpu-mem 2G --gpu-prefetch off --mem 24G --io buffered
fi
if step profile; then
    run profile_resident --gpu auto --gpu-profile --mem 24G --io buffered -n 16
fi
if step exact; then  # float32 activations (the kernels before 8-bit x), then 8-bit again: A/B/A
    run resident_exact --gpu auto --gpu-activations f32 --mem 24G --io buffered
    run resident_again --gpu auto --mem 24G --io buffered
fi
if step benchmodel; then  # llama-bench's tg rows, CPU beside GPU
    echo "== bench model"
    timeout 200 $ms bench model -m "$MODEL" -p 0 -n 64 -r 2 --no-warmup --gpu off,auto --mem 24G --io buffered \
        --run-args "--draft off" --json "$OUT/bench-model.json" 2>&1 | grep -v "^\s*$" | tail -8
fi
if step ncu; then  # each kernel of one decode token, launched one by one
    echo "== ncu"
    timeout 200 ncu --clock-control none --cache-control none --csv \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,sm__cycles_elapsed.avg.per_second,launch__grid_size,launch__block_size \
        --launch-skip 578 --launch-count 578 $ms run -m "$MODEL" -p "Hi" -n 2 --draft off --gpu auto --gpu-profile --mem 24G --io buffered \
        > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
    echo "exit $?"; tail -3 "$OUT/ncu.err"; wc -l "$OUT/ncu.csv"
fi
if step cpu; then
    run cpu --gpu off --mem 24G --io buffered -n 16
fi
echo "== greedy text, streamed vs resident (cmp: nothing printed when equal)"
for r in gpumem8g gpumem2g gpumem8g_noprefetch gpumem2g_noprefetch resident_again; do
    [ -f "$OUT/$r.txt" ] && cmp "$OUT/resident.txt" "$OUT/$r.txt" && echo "$r: same text as resident"
done
[ -f "$OUT/resident.txt" ] && head -c 300 "$OUT/resident.txt"; echo
ls -la "$OUT"
