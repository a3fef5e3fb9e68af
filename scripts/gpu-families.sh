#!/bin/bash
# The spec-driven GPU forward's device checks (docs/gpu.md, "Families on
# the GPU"), run by the device tool from the repository root with
# .gpuwork/gpu-spec carried: bin.txz (moestream, runtime_gpu_test,
# gpu_kernels_test built here with nvcc, moestream-base the binary to
# compare with, and where present runtime_gpu_test-base and
# gpu_kernels_test-base, lib/), golden/ or golden.txz (some or all of the
# covered families' files and exact/; the device tool carries 64 MiB a
# call, so the files may come in parts, one a call). Kernel tests, golden
# files of every covered family present (8-bit and float32 activations),
# each test binary beside its base, and the 30B synth's decode, resident
# and --gpu-mem 8G (with and without the prefetch), against moestream-base.
# Everything kept is packed into $OUT/families.tgz (the tool returns few
# files). SKIP_Q30=1 skips the 30B part.
set -u -o pipefail
D=${GPUWORK:-.gpuwork/gpu-spec}
P=/tmp/families
mkdir -p $P
exec > >(tee $P/run.log) 2>&1
(cd $D && tar xJf bin.txz && if [ -f golden.txz ]; then mkdir -p golden && tar xJif golden.txz -C golden; fi)
mkdir -p /work/shared && ln -sfn "$PWD/$D/golden" /work/shared/golden
BIN=$D/bin
export LD_LIBRARY_PATH=$BIN/lib:${LD_LIBRARY_PATH:-}
pack() { tar czf "$OUT/families.tgz" -C $P . ; cp $P/run.log "$OUT/run.log"; }
trap pack EXIT
date -u
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv
for t in gpu_kernels_test runtime_gpu_test; do
  for v in "" -base; do
    [ -x $BIN/$t$v ] || continue
    echo "== $t$v"; $BIN/$t$v > $P/$t$v.log 2>&1; echo "exit $?"
    grep -E "^\[  (PASSED|SKIPPED|FAILED) |relative L2|refused" $P/$t$v.log
  done
done
[ "${SKIP_Q30:-0}" = 1 ] && exit 0
echo "== synth"
t0=$SECONDS; $BIN/moestream synth --preset qwen3-30b-a3b --type Q4_K_M -o /tmp/q30.gguf 2>&1 | tail -1; echo "synth $((SECONDS-t0)) s"
run() {  # name, binary, flags...
  local name=$1 bin=$2; shift 2; local t0=$SECONDS
  timeout 150 $bin run -m /tmp/q30.gguf --random-prompt 32 -n 64 --ignore-eos --seed 3 --temp 0 --draft off --mem 24G --io buffered --report $P/$name.json "$@" > $P/$name.txt 2> $P/$name.err
  echo "== $name: exit $? after $((SECONDS - t0)) s: $*"; grep -E "backend|prefill:|decode:|^gpu" $P/$name.err
}
run warm $BIN/moestream --gpu auto -n 8  # the synth's writeback settles (docs/gpu.md, "Noticed")
# Base and new interleaved, REPS times each (medians from the reports);
# CONFIGS picks resident and/or gpumem8g.
for i in $(seq ${REPS:-3}); do
  for c in ${CONFIGS:-resident gpumem8g}; do
    flags="--gpu auto"; [ $c = gpumem8g ] && flags="--gpu auto --gpu-mem 8G"
    if [ "${NEW_FIRST:-0}" = 1 ]; then  # the other order, for order effects
      run ${c}_$i $BIN/moestream $flags; run base_${c}_$i $BIN/moestream-base $flags
    else
      run base_${c}_$i $BIN/moestream-base $flags; run ${c}_$i $BIN/moestream $flags
    fi
  done
done
run gpumem8g_noprefetch $BIN/moestream --gpu auto --gpu-mem 8G --gpu-prefetch off
echo "== greedy text equal (cmp prints nothing when equal)"
ref=$(ls $P/*_1.txt | head -1)
for r in $P/*_[0-9].txt $P/gpumem8g_noprefetch.txt; do
  cmp $ref $r && echo "$(basename $ref .txt) == $(basename $r .txt)"; done
date -u
