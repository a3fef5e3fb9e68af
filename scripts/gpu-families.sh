#!/bin/bash
# The spec-driven GPU forward's device checks (docs/gpu.md, "Families on
# the GPU"), run by the device tool from the repository root with
# .gpuwork/gpu-spec carried: bin.txz (moestream, runtime_gpu_test,
# gpu_kernels_test built here with nvcc, moestream-base the last session's
# binary, lib/), golden/ (the covered families' files and the tokenizer).
# Kernel tests, golden files of every covered family, and the 30B synth's
# resident decode against moestream-base (fusion off, as main's default).
# DEMO=0 skips the two `run` demos; SKIP_Q30=1 the 30B part.
set -u -o pipefail
D=.gpuwork/gpu-spec
LOG=$OUT/run.log
exec > >(tee "$LOG") 2>&1
(cd $D && tar xJf bin.txz)
mkdir -p /work/shared && ln -sfn "$PWD/$D/golden" /work/shared/golden
BIN=$D/bin
export LD_LIBRARY_PATH=$BIN/lib:${LD_LIBRARY_PATH:-}
date -u
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv
echo "== kernel tests"
[ -x $BIN/gpu_kernels_test ] && $BIN/gpu_kernels_test 2>&1 | grep -vE "^\[ RUN|^\[----|^$" | tail -45
echo "== golden + streaming tests"
$BIN/runtime_gpu_test 2>&1 | grep -vE "^\[ RUN|^\[----|^$|Skipped|^no usable" | head -70
[ "${DEMO:-1}" = 1 ] && for f in olmoe-Q8_0 glm4moe-F32; do
  echo "== run $f"; $BIN/moestream run -m $D/golden/models/$f.gguf -p "The GNU General Public License is" -n 8 --temp 0 --draft off --gpu auto 2>&1 | grep -E "backend|decode:" ; done
[ "${SKIP_Q30:-0}" = 1 ] && exit 0
echo "== synth"
t0=$SECONDS; $BIN/moestream synth --preset qwen3-30b-a3b --type Q4_K_M -o /tmp/q30.gguf 2>&1 | tail -1; echo "synth $((SECONDS-t0)) s"
run() {  # name, binary, flags...
  local name=$1 bin=$2; shift 2; local t0=$SECONDS
  timeout 150 $bin run -m /tmp/q30.gguf --random-prompt 32 -n 64 --ignore-eos --seed 3 --temp 0 --draft off --mem 24G --io buffered --report /tmp/$name.json "$@" > /tmp/$name.txt 2> /tmp/$name.err
  echo "== $name: exit $? after $((SECONDS - t0)) s: $*"; grep -E "backend|prefill:|decode:|^gpu" /tmp/$name.err
}
MOESTREAM_GPU_FUSE=0 run base1 $BIN/moestream-base --gpu auto
run new1 $BIN/moestream --gpu auto
run new_gpumem8g $BIN/moestream --gpu auto --gpu-mem 8G
echo "== greedy text equal (cmp prints nothing when equal)"
for r in base1 new_gpumem8g; do cmp /tmp/new1.txt /tmp/$r.txt && echo "new1 == $r"; done
cp /tmp/base1.json /tmp/new1.json /tmp/new_gpumem8g.json $OUT/ 2>/dev/null
date -u
