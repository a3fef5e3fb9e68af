#!/bin/bash
# Where a batched decode step's time goes: `run --parallel N --gpu-profile`
# (each stage's kernels timed with events, launched one by one) at 1, 8 and
# 32 sequences on the resident qwen3-30b-a3b Q4_K_M synth, and the same
# without the profile for the host's share (run's "parallel:" line).
# .gpuwork/b32 carried: bin.txz (moestream only this time).
set -u -o pipefail
D=.gpuwork/b32
P=$OUT
exec > >(tee -a $P/run.log) 2>&1
export LD_LIBRARY_PATH=$PWD/$D/bin/lib:${LD_LIBRARY_PATH:-}
(cd $D && tar xJf bin.txz)
BIN=$D/bin
(cd $D && ./bin/moestream synth --preset qwen3-30b-a3b --type Q4_K_M -o q30.gguf > synth.log 2>&1; echo "synth exit $? at $SECONDS s")
par() {  # name, N, flags...
  local name=$1 n=$2; shift 2; local t0=$SECONDS
  timeout 150 $BIN/moestream run -m $D/q30.gguf --random-prompt 100 -n 64 --ignore-eos --seed 3 --temp 0 --draft off \
    --mem 100G -c 256 --io buffered -t 16 --gpu auto --parallel $n --report $P/$name.json "$@" > $D/$name.txt 2> $P/$name.err
  echo "== $name: exit $? after $((SECONDS - t0)) s: --parallel $n $*"; grep -E "decode:|parallel:" $P/$name.err
}
par p8 8
par p32 32
par prof1 1 --gpu-profile
par prof8 8 --gpu-profile
par prof32 32 --gpu-profile
for f in prof1 prof8 prof32; do echo "== $f"; sed -n '/gpu decode profile/,/norm + output head/p;/gpu batched decode profile/,/norm + output head/p' $P/$f.err; done
echo "end at $SECONDS s"
