#!/bin/bash
# The fourth session's H200 device calls (docs/gpu.md, "Fourth session"):
# beside this script, bin.txz (bin/: moestream, gpu_kernels_test,
# runtime_gpu_test, lib/ with the shared libraries the device lacks),
# golden.txz (the covered families' golden files and their exact/ logits)
# and tok.txz (tokenizer/qwen3-vocab.gguf, for synth); unpacked where the
# tests were compiled to look (../shared/golden of the source tree). Each
# call's STEPS: call 1-2 "tests resident gpumem", 3-4 and 6 the same with
# the steps then in the script, 7 "stest big", 8 "tests benchmodel", 9
# "tests final" ("last" never ran: no device time was left). Output:
# $OUT/s4.tgz, unpacked here as callN/.
# Device call of session 4: unpack binaries + golden subset, run tests, A/B runs, 235B drive-bound run.
# STEPS: tests resident gpumem big ; OUTDIR packed into $OUT/s4.tgz at the end.
set -u -o pipefail
W=$(cd "$(dirname "$0")" && pwd)
R=$(cd "$W/../.." && pwd)
STEPS=${STEPS:-tests resident gpumem big}
step() { [[ " $STEPS " == *" $1 "* ]]; }
O=/tmp/s4out; rm -rf $O; mkdir -p $O
pack() { tar czf "$OUT/s4.tgz" -C /tmp s4out; }
trap pack EXIT
cd /tmp && rm -rf bin && tar xJf "$W/bin.txz" && BIN=/tmp/bin
export LD_LIBRARY_PATH=$BIN/lib:${LD_LIBRARY_PATH:-}
ms=$BIN/moestream
# golden subset at the path the tests were compiled with
G=$(strings $BIN/runtime_gpu_test | grep -m1 '/shared/golden$' || true)
echo "golden dir compiled in: $G"
if [ -n "$G" ]; then mkdir -p "$G" && for t in "$W"/golden.txz "$W"/tok.txz; do [ -f "$t" ] && tar xJf "$t" -C "$G"; done; fi
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,pcie.link.gen.current,pcie.link.width.current,driver_version --format=csv | tee $O/smi.txt
df -h /tmp | tail -1; nproc; free -g | head -2
if step tests; then
  echo "== kernel tests"; $BIN/gpu_kernels_test > $O/kernels_test.log 2>&1; echo "exit $?"; grep -E "PASSED|FAILED|SKIPPED" $O/kernels_test.log | head -20
  echo "== golden tests"; $BIN/runtime_gpu_test > $O/runtime_test.log 2>&1; echo "exit $?"; grep -E "rel|PASSED|FAILED|SKIPPED|Failure" $O/runtime_test.log | head -60
  echo "== golden tests (RAM tier not mapped)"; MOESTREAM_GPU_MAPPED=0 $BIN/runtime_gpu_test > $O/runtime_test_nomap.log 2>&1; echo "exit $?"; grep -E "PASSED|FAILED|Failure" $O/runtime_test_nomap.log | head
fi
M=/tmp/q30.gguf
run() {  # name, flags...
  local name=$1; shift
  local t0=$SECONDS
  timeout 300 $ms run -m "$MODEL" --draft off --report "$O/$name.json" "$@" > "$O/$name.txt" 2> "$O/$name.err"
  echo "== $name ($*): exit $? after $((SECONDS - t0)) s"; grep -E "^(prefill|decode|gpu|backend)" "$O/$name.err" | head -8
}
if step resident || step gpumem; then
  t0=$SECONDS; $ms synth --preset qwen3-30b-a3b --type Q4_K_M -o $M 2>&1 | tail -1; echo "synth $((SECONDS-t0)) s"
  MODEL=$M
fi
if step resident; then
  A="--random-prompt 32 --ignore-eos --seed 3 --temp 0 --gpu auto --mem 24G --io buffered"
  run res_256 $A -n 256
  run res_512 $A -n 512
  run res_1024 $A -n 1024 -c 2048
  MOESTREAM_GPU_PROFILE=1 run res_profile $A -n 16
  grep -A12 "gpu profile" $O/res_profile.err
  cmp $O/res_512.txt <(head -c $(stat -c%s $O/res_512.txt) $O/res_1024.txt) && echo "res 1024 starts as res 512"
fi
if step gpumem; then
  A="--random-prompt 32 -n 512 --ignore-eos --seed 3 --temp 0 --gpu auto --mem 24G --io buffered"
  run gm8_mapped $A --gpu-mem 8G
  MOESTREAM_GPU_MAPPED=0 run gm8_copied $A --gpu-mem 8G
  run gm2_mapped $A --gpu-mem 2G
  MOESTREAM_GPU_MAPPED=0 run gm2_copied $A --gpu-mem 2G
  for r in gm8_copied gm2_mapped gm2_copied; do cmp $O/gm8_mapped.txt $O/$r.txt && echo "$r: same text as gm8_mapped"; done
  cmp $O/gm8_mapped.txt $O/res_512.txt && echo "gm8 mapped text == resident"
fi
if step last; then
  $ms synth --preset qwen3-30b-a3b --type Q4_K_M -o $M 2>&1 | tail -1
  MODEL=$M
  A="--random-prompt 32 --ignore-eos --seed 3 --temp 0 --gpu auto --mem 24G --io buffered -n 512"
  run l_gm8 $A --gpu-mem 8G; pack
  run l_gm2 $A --gpu-mem 2G; pack
  echo "== streaming tests"; $BIN/runtime_gpu_test --gtest_filter='*Streaming*' > $O/stest.log 2>&1; echo "exit $?"; grep -E "PASSED|FAILED" $O/stest.log
fi
if step final; then
  [ -f $M ] || $ms synth --preset qwen3-30b-a3b --type Q4_K_M -o $M 2>&1 | tail -1
  MODEL=$M
  A="--random-prompt 32 --ignore-eos --seed 3 --temp 0 --gpu auto --mem 24G --io buffered"
  run f_res_256 $A -n 256
  run f_res_512 $A -n 512
  run f_res_1024 $A -n 1024 -c 2048
  run f_gm8 $A -n 512 --gpu-mem 8G
  run f_gm2 $A -n 512 --gpu-mem 2G
  cmp $O/f_res_512.txt $O/f_gm8.txt && echo "gm8 text == resident"
  cmp $O/f_res_512.txt $O/f_gm2.txt && echo "gm2 text == resident"
  timeout 120 $ms bench model -m $M -p 0 -n 128 -r 2 --gpu auto --gpu-mem 0,8G --mem 24G --io buffered --run-args "--draft off" --json $O/bench-model.json 2>&1 | grep -v "^\s*$" | tail -5
fi
if step benchmodel; then
  [ -f $M ] || $ms synth --preset qwen3-30b-a3b --type Q4_K_M -o $M 2>&1 | tail -1
  echo "== bench model"
  timeout 300 $ms bench model -m $M -p 0 -n 128 -r 2 --gpu off,auto --mem 24G --io buffered --run-args "--draft off" --json $O/bench-model.json 2>&1 | grep -v "^\s*$" | tail -12
  timeout 200 $ms bench model -m $M -p 0 -n 128 -r 2 --gpu auto --gpu-mem 8G,2G --mem 24G --io buffered --run-args "--draft off" --json $O/bench-model-gpumem.json 2>&1 | grep -v "^\s*$" | tail -6
fi
if step stest; then
  echo "== streaming tests"; $BIN/runtime_gpu_test --gtest_filter='*Streaming*' > $O/stest.log 2>&1; echo "exit $?"; grep -E "^gpu|PASSED|FAILED|Failure|Which is" $O/stest.log | head -40
fi
if step big; then
  rm -f $M
  B=/tmp/q235.gguf
  t0=$SECONDS; $ms synth --preset qwen3-235b-a22b --type Q4_K_M --layers ${BIG_LAYERS:-28} -o $B 2>&1 | tail -2; echo "synth $((SECONDS-t0)) s"; ls -la $B; df -h /tmp | tail -1; sync
  echo "== bench ssd"; timeout 150 $ms bench ssd -m $B --file /tmp/bench.dat --size 6G --patterns sequential,gguf_expert --seconds 1 --remove --json $O/ssd.json > $O/ssd.txt 2>&1; echo "exit $?"; tail -25 $O/ssd.txt
  MODEL=$B
  A="--random-prompt 16 -n 32 --ignore-eos --seed 3 --temp 0"
  run big_gpu $A --gpu auto --gpu-mem 8G --mem 16G
  run big_gpu2 $A --gpu auto --gpu-mem 8G --mem 16G
  run big_cpu $A --gpu off --mem 16G -t 16
  cmp $O/big_gpu.txt $O/big_cpu.txt && echo "big: gpu text == cpu text"
fi
ls -la $O
