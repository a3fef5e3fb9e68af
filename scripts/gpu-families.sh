#!/bin/bash
# The spec-driven GPU forward's device checks (docs/gpu.md, "Families on
# the GPU"), run by the device tool from the repository root with
# .gpuwork/gpu-spec carried: bin.txz (moestream, runtime_gpu_test,
# gpu_kernels_test built here with nvcc, moestream-base the binary to
# compare with, lib/), golden/ (the covered families' files, exact/ and
# the tokenizer). Kernel tests, golden files of every covered family (8-bit
# and float32 activations), and the 30B synth's decode, resident and
# --gpu-mem 8G (with and without the prefetch), against moestream-base.
# Everything kept is packed into $OUT/families.tgz (the tool returns few
# files). SKIP_Q30=1 skips the 30B part.
set -u -o pipefail
D=.gpuwork/gpu-spec
P=/tmp/families
mkdir -p $P
exec > >(tee $P/run.log) 2>&1
(cd $D && tar xJf bin.txz)
mkdir -p /work/shared && ln -sfn "$PWD/$D/golden" /work/shared/golden
BIN=$D/bin
export LD_LIBRARY_PATH=$BIN/lib:${LD_LIBRARY_PATH:-}
pack() { tar czf "$OUT/families.tgz" -C $P . ; cp $P/run.log "$OUT/run.log"; }
trap pack EXIT
date -u
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv
echo "== kernel tests"
$BIN/gpu_kernels_test 2>&1 | grep -vE "^\[ RUN|^\[----|^$" | grep -vE "^\[       OK" | tail -30
echo "== golden + streaming tests"
$BIN/runtime_gpu_test 2>&1 | grep -vE "^\[ RUN|^\[----|^$|^\[       OK|^gpu: every expert"
[ "${SKIP_Q30:-0}" = 1 ] && exit 0
echo "== synth"
t0=$SECONDS; $BIN/moestream synth --preset qwen3-30b-a3b --type Q4_K_M -o /tmp/q30.gguf 2>&1 | tail -1; echo "synth $((SECONDS-t0)) s"
run() {  # name, binary, flags...
  local name=$1 bin=$2; shift 2; local t0=$SECONDS
  timeout 150 $bin run -m /tmp/q30.gguf --random-prompt 32 -n 64 --ignore-eos --seed 3 --temp 0 --draft off --mem 24G --io buffered --report $P/$name.json "$@" > $P/$name.txt 2> $P/$name.err
  echo "== $name: exit $? after $((SECONDS - t0)) s: $*"; grep -E "backend|prefill:|decode:|^gpu" $P/$name.err
}
run warm $BIN/moestream --gpu auto -n 8  # the synth's writeback settles (docs/gpu.md, "Noticed")
run base_resident $BIN/moestream-base --gpu auto
run resident $BIN/moestream --gpu auto
run base_gpumem8g $BIN/moestream-base --gpu auto --gpu-mem 8G
run gpumem8g $BIN/moestream --gpu auto --gpu-mem 8G
MOESTREAM_GPU_PREFETCH=0 run gpumem8g_noprefetch $BIN/moestream --gpu auto --gpu-mem 8G
run resident_again $BIN/moestream --gpu auto
echo "== greedy text equal (cmp prints nothing when equal)"
for r in base_resident base_gpumem8g gpumem8g gpumem8g_noprefetch resident_again; do
  cmp $P/resident.txt $P/$r.txt && echo "resident == $r"; done
date -u
