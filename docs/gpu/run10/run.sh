#!/bin/bash
# Issue 33's device check (docs/gpu.md, "Host-computed misses"), one call of
# the device tool from the repository root with .gpuwork/hy carried: bin.txz
# (moestream and runtime_gpu_test built here with nvcc, lib/), golden.txz
# (the six golden files of the GpuStreaming tests), lc.txz (llama.cpp's
# source from the node-llama-cpp npm package, pruned to llama-bench).
# llama-bench builds with CUDA in the background while the streaming tests
# run and the qwen3-30b-a3b model is made; then decode at --gpu-mem 4G with
# --gpu-ram-tier copy and cpu, beside llama-bench -ncmoe 48 (every expert on
# the CPU), and 8G against -ncmoe 26 if time is left. Logs go straight to
# $OUT (a call cut short keeps what it wrote).
set -u -o pipefail
D=.gpuwork/hy
P=$OUT
exec > >(tee -a $P/run.log) 2>&1
BIN=$D/bin
export LD_LIBRARY_PATH=$BIN/lib:${LD_LIBRARY_PATH:-}
date -u; nproc
nvidia-smi --query-gpu=name,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
(cd $D && tar xJf bin.txz && mkdir -p golden && tar xJf golden.txz -C golden && mkdir -p lc && tar xJf lc.txz -C lc)
mkdir -p /work/shared && ln -sfn "$PWD/$D/golden" /work/shared/golden
(t0=$SECONDS; cmake -S $D/lc -B $D/lc/build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF \
   -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
   -DCMAKE_BUILD_TYPE=Release > $P/lc-configure.log 2>&1 && \
 cmake --build $D/lc/build -j 14 --target llama-bench > $P/lc-build.log 2>&1; echo "llama-bench build exit $? after $((SECONDS-t0)) s") &
lcb=$!
echo "== streaming tests"
$BIN/runtime_gpu_test --gtest_filter='*Streaming*' > $P/streaming.log 2>&1; echo "exit $? at $SECONDS s"
grep -E "^\[  (PASSED|SKIPPED|FAILED) |relative L2|hits|Failure" $P/streaming.log | head -40
echo "== synth"
$BIN/moestream synth --preset qwen3-30b-a3b --type Q4_K_M -o $D/q30.gguf 2>&1 | tail -1; echo "synth done at $SECONDS s"
wait $lcb; echo "build waited at $SECONDS s"
run() {  # name, flags...
  local name=$1; shift; local t0=$SECONDS
  timeout 120 $BIN/moestream run -m $D/q30.gguf --random-prompt 32 -n 48 --ignore-eos --seed 3 --temp 0 --draft off \
    --mem 24G --io buffered -t 16 --gpu auto --report $P/$name.json "$@" > $P/$name.txt 2> $P/$name.err
  echo "== $name: exit $? after $((SECONDS - t0)) s: $*"; grep -E "decode:|prefill:|^gpu: (VRAM|host)" $P/$name.err
}
LB=$D/lc/build/bin/llama-bench
lb() {  # name, ncmoe
  timeout 120 $LB -m $D/q30.gguf -ngl 99 -ncmoe $2 -fa 1 -t 16 -p 0 -n 48 -r 2 -o json > $P/$1.json 2> $P/$1.err
  echo "== $1 (-ncmoe $2): exit $? at $SECONDS s"; grep -h -E '"avg_ts"|"stddev_ts"' $P/$1.json
}
run copy4g --gpu-mem 4G
run cpu4g --gpu-mem 4G --gpu-ram-tier cpu
lb llama_ncmoe48 48
[ $SECONDS -lt 420 ] && run cpu8g --gpu-mem 8G --gpu-ram-tier cpu
[ $SECONDS -lt 460 ] && run copy8g --gpu-mem 8G
[ $SECONDS -lt 500 ] && lb llama_ncmoe26 26
echo "== text equal (cmp prints nothing when equal)"
for r in $P/*.txt; do cmp $P/copy4g.txt $r && echo "$(basename $r) same"; done
echo "end at $SECONDS s"
