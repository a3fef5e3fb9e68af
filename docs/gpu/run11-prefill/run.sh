#!/bin/bash
# Issue 34's device check (docs/gpu.md, "Prefill on tensor cores"): one call
# of the device tool from the repository root with .gpuwork/p34 carried:
# bin.txz (moestream, gpu_kernels_test, runtime_gpu_test built here with
# nvcc, Release, sm_90, and lib/: liburing, pcre2, xxhash from this
# machine's Debian 12) and golden.txz (the golden files named in README.md). Kernel tests of the tensor-core GEMM and the batched ones,
# then the GPU golden, prefill-pass and streaming tests, then pp512 of the
# qwen3-30b-a3b Q4_K_M synth with --gpu-prefill pass (decode's kernels, the
# base) and tensor (the new default) in the same call, a --gpu-profile run
# of the tensor-core pass, then pp4096 by -ub,
# then pp512 of the gpt-oss-120b (12 layers, MXFP4) and deepseek-v3 (6
# layers, Q4_K_M) cuts, each synth deleted after its runs (64 GB disk).
# STEPS picks what runs (default: all), LIMIT is the call's seconds (later
# steps start only with time left). Logs go straight to $OUT.
set -u -o pipefail
D=.gpuwork/p34
P=$OUT
STEPS=${STEPS:-kernels,golden,q30,q30long,gptoss,dsv3}
LIMIT=${LIMIT:-600}  # the call's limit: later steps start only with time left
exec > >(tee -a $P/run.log) 2>&1
BIN=$D/bin
export LD_LIBRARY_PATH=$BIN/lib:${LD_LIBRARY_PATH:-}
date -u; nproc
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv
(cd $D && mkdir -p bin golden && tar xJf bin.txz -C bin && tar xJf golden.txz -C golden)
mkdir -p /work/shared && ln -sfn "$PWD/$D/golden" /work/shared/golden
has() { [[ ",$STEPS," == *",$1,"* ]]; }
if has kernels; then
  echo "== kernel tests"
  $BIN/gpu_kernels_test --gtest_filter='*TensorCore*:Types/Prefill.*:Types/Matvec8.*' > $P/kernels.log 2>&1
  echo "exit $? at $SECONDS s"
  grep -E "^tensor-core|^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is|rel err" $P/kernels.log | head -60
fi
if has golden; then
  echo "== golden, prefill-pass and streaming tests"
  timeout $((LIMIT * 3 / 10)) $BIN/runtime_gpu_test --gtest_filter='GpuGolden.*:GpuStreaming.FewVram*' > $P/golden.log 2>&1
  echo "exit $? at $SECONDS s"
  grep -E "relative L2|^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|Failure" $P/golden.log | head -90
fi
M=$D/q30.gguf
bench() {  # name, bench model flags... (the model: $M)
  local name=$1; shift; local t0=$SECONDS
  timeout $((LIMIT - SECONDS - 5)) $BIN/moestream bench model -m $M -n 0 --gpu auto --run-args "--mem 24G --io buffered -c 8192" \
    --json $P/$name.json "$@" > $P/$name.md 2> $P/$name.err
  echo "== bench $name: exit $? after $((SECONDS - t0)) s: $*"; cat $P/$name.md
}
if has q30 && [ $SECONDS -lt $((LIMIT - 200)) ]; then
  t0=$SECONDS; $BIN/moestream synth --preset qwen3-30b-a3b --type Q4_K_M -o $M 2>&1 | tail -1; echo "synth $((SECONDS-t0)) s"
  bench pp512 -p 512 -r 2 --gpu-prefill pass,tensor
  # where a tensor-core pass's time goes, stage by stage (printed at exit)
  timeout 60 $BIN/moestream run -m $M --random-prompt 512 -n 1 --temp 0 --draft off --mem 24G --io buffered \
    --gpu auto --gpu-profile > $P/profile.txt 2> $P/profile.err
  echo "== profile: exit $?"; grep -v "^gpu: VRAM" $P/profile.err | tail -25
fi
if has q30long && [ $SECONDS -lt $((LIMIT - 90)) ]; then
  bench pp4096 -p 4096 -r 1 --gpu-prefill tensor -ub 512,1024,2048
fi
rm -f $M
# preset, synth flags: pp512 with --gpu-prefill pass and tensor
other() {
  local name=$1; shift
  M=$D/$name.gguf
  t0=$SECONDS; $BIN/moestream synth --preset "$@" -o $M 2>&1 | tail -1; echo "synth $name $((SECONDS-t0)) s"
  bench pp512-$name -p 512 -r 2 --gpu-prefill pass,tensor
  rm -f $M
}
has gptoss && [ $SECONDS -lt $((LIMIT - 150)) ] && other gptoss gpt-oss-120b --layers 12
has dsv3 && [ $SECONDS -lt $((LIMIT - 150)) ] && other dsv3 deepseek-v3 --layers 6 --type Q4_K_M
echo "end at $SECONDS s"
