#!/bin/bash
# Batched decode after the held-weights change (rows_dot_tokens decodes a
# lane's share of each weight block once for all its inputs, not once an
# input) and plain greedy sampling without the vocabulary copy: the kernel
# and GPU tests, then run.sh's `run --parallel` cases and run2.sh's
# profiles. .gpuwork/b32 carried (bin.txz: moestream, runtime_gpu_test,
# gpu_kernels_test; golden.txz as in run.sh).
set -u -o pipefail
D=.gpuwork/b32
P=$OUT
exec > >(tee -a $P/run.log) 2>&1
export LD_LIBRARY_PATH=$PWD/$D/bin/lib:${LD_LIBRARY_PATH:-}
(cd $D && tar xJf bin.txz && mkdir -p golden && tar xJf golden.txz -C golden)
mkdir -p /work/shared && ln -sfn "$PWD/$D/golden" /work/shared/golden
BIN=$D/bin
(cd $D && ./bin/moestream synth --preset qwen3-30b-a3b --type Q4_K_M -o q30.gguf > synth.log 2>&1; echo "synth exit $? at $SECONDS s") &
syn=$!
(cd $D/bin && ./gpu_kernels_test > $P/kernels_test.log 2>&1; echo "gpu_kernels_test exit $?"; ./runtime_gpu_test > $P/gpu_test.log 2>&1; echo "runtime_gpu_test exit $? at $SECONDS s")
grep -hE "^\[==========\]|^\[  PASSED|^\[  FAILED" $P/kernels_test.log $P/gpu_test.log
wait $syn
par() {  # name, N, flags...
  local name=$1 n=$2; shift 2; local t0=$SECONDS
  timeout 150 $BIN/moestream run -m $D/q30.gguf --random-prompt 100 -n 128 --ignore-eos --seed 3 --temp 0 --draft off \
    --mem 100G -c 256 --io buffered -t 16 --gpu auto --parallel $n --report $D/$name.json "$@" > $D/$name.txt 2> $D/$name.err
  echo "== $name: exit $? after $((SECONDS - t0)) s: --parallel $n $*"; grep -E "decode:|parallel:|^gpu: VRAM" $D/$name.err
}
par res1 1
par res8 8
par res32 32

par g8_8 8 --gpu-mem 8G
par g8_32 32 --gpu-mem 8G

par prof32 32 --gpu-profile -n 32
echo "== first sequence's text equal across N and VRAM (cmp prints nothing when equal)"
for f in res8 res32 g8_8 g8_32; do cmp $D/res1.txt $D/$f.txt; done
for f in prof32; do echo "== $f"; sed -n '/gpu batched decode profile/,/norm + output head/p' $D/$f.err; done
tar cJf $P/reports.txz -C $D $(cd $D && ls *.json *.err)
echo "end at $SECONDS s"
