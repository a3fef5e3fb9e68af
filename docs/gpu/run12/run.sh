#!/bin/bash
# Eleventh session's one device call (issues 32 and 34), from the repository
# root with .gpuwork/fin carried: bin.txz (moestream, gpu_kernels_test and
# runtime_gpu_test of main after the merge of tensor-core prefill with
# batched decode, built on the development machine with nvcc 13.0, Release,
# sm_90, and lib/: Debian 12's liburing, pcre2 and xxhash) and golden.txz
# (docs/gpu/run11-prefill/README.md lists its files).
# 1. every GPU kernel test and every GPU runtime test (golden through the
#    tensor-core prefill, batched decode bit for bit against alone);
# 2. qwen3-30b-a3b Q4_K_M synth: pp512 with --gpu-prefill pass and tensor;
#    `run --parallel 1, 8, 32` (128 tokens after 100), resident and at
#    --gpu-mem 8G; pp4096 by -ub;
# 3. pp512 of the gpt-oss-120b (12 layers) and deepseek-v3 (6 layers) cuts.
# Later steps start only with time left (LIMIT, the call's seconds).
set -u -o pipefail
D=.gpuwork/fin
P=$OUT
LIMIT=${LIMIT:-540}
exec > >(tee -a $P/run.log) 2>&1
BIN=$D/bin
export LD_LIBRARY_PATH=$PWD/$BIN/lib:${LD_LIBRARY_PATH:-}
date -u; nproc
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,pcie.link.gen.current,pcie.link.width.current --format=csv
(cd $D && mkdir -p bin golden && tar xJf bin.txz -C bin && tar xJf golden.txz -C golden)
mkdir -p /work/shared && ln -sfn "$PWD/$D/golden" /work/shared/golden
M=$D/q30.gguf
(t0=$SECONDS; $BIN/moestream synth --preset qwen3-30b-a3b --type Q4_K_M -o $M > $D/synth.log 2>&1; echo "synth q30 exit $? after $((SECONDS - t0)) s") &
syn=$!
echo "== kernel tests"
(cd $BIN && timeout 120 ./gpu_kernels_test > $P/kernels.log 2>&1; echo "gpu_kernels_test exit $? at $SECONDS s")
grep -E "^\[==========\]|^\[  PASSED|^\[  FAILED" $P/kernels.log
echo "== runtime GPU tests"
(cd $BIN && timeout 240 ./runtime_gpu_test > $P/gpu_test.log 2>&1; echo "runtime_gpu_test exit $? at $SECONDS s")
grep -E "^\[==========\]|^\[  PASSED|^\[  FAILED|Failure" $P/gpu_test.log | head -40
echo "skipped: $(grep -c '^\[  SKIPPED \]' $P/gpu_test.log)"
wait $syn
left() { echo $((LIMIT - SECONDS)); }
bench() {  # name, bench model flags... (the model: $M)
  local name=$1; shift; local t0=$SECONDS
  timeout $(( $(left) - 5 )) $BIN/moestream bench model -m $M -n 0 --gpu auto --run-args "--mem 24G --io buffered -c 8192" \
    --json $P/$name.json "$@" > $P/$name.md 2> $P/$name.err
  echo "== bench $name: exit $? after $((SECONDS - t0)) s: $*"; cat $P/$name.md
}
par() {  # name, N, flags...
  local name=$1 n=$2; shift 2; local t0=$SECONDS
  timeout 120 $BIN/moestream run -m $M --random-prompt 100 -n 128 --ignore-eos --seed 3 --temp 0 --draft off \
    --mem 100G -c 256 --io buffered -t 16 --gpu auto --parallel $n --report $P/$name.json "$@" > $D/$name.txt 2> $P/$name.err
  echo "== $name: exit $? after $((SECONDS - t0)) s: --parallel $n $*"; grep -E "decode:|parallel:|^gpu: VRAM" $P/$name.err
}
[ $(left) -gt 60 ] && bench pp512 -p 512 -r 3 --gpu-prefill pass,tensor
for n in 1 8 32; do [ $(left) -gt 40 ] && par res$n $n; done
for n in 8 32; do [ $(left) -gt 50 ] && par g8_$n $n --gpu-mem 8G; done
echo "== first sequence's text equal across N and VRAM (cmp prints nothing when equal)"
for f in res8 res32 g8_8 g8_32; do [ -f $D/$f.txt ] && cmp $D/res1.txt $D/$f.txt; done
[ $(left) -gt 60 ] && bench pp4096 -p 4096 -r 1 --gpu-prefill tensor -ub 512,2048
rm -f $M
other() {  # name, synth flags...
  local name=$1; shift
  M=$D/$name.gguf
  t0=$SECONDS; timeout $(( $(left) - 30 )) $BIN/moestream synth --preset "$@" -o $M 2>&1 | tail -1; echo "synth $name $((SECONDS-t0)) s"
  [ $(left) -gt 25 ] && bench pp512-$name -p 512 -r 2 --gpu-prefill pass,tensor
  rm -f $M
}
[ $(left) -gt 120 ] && other gptoss gpt-oss-120b --layers 12
[ $(left) -gt 120 ] && other dsv3 deepseek-v3 --layers 6 --type Q4_K_M
echo "end at $SECONDS s"
