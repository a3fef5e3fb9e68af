#!/bin/bash
# The fifth session's H200 device calls (docs/gpu.md, "Fifth session"):
# beside this script, bin.txz (bin/: moestream, gpu_kernels_test,
# runtime_gpu_test, lib/ with the shared libraries the device lacks),
# golden.txz (the covered families' golden files and their exact/ logits),
# tok.txz (tokenizer/qwen3-vocab.gguf, for synth) and prompt.txt (English
# text: the first part of README.md); golden files unpacked where the tests
# were compiled to look. STEPS picks the parts; output: $OUT/s5.tgz,
# unpacked here as callN/. Calls 1-4 ran binaries that mapped the RAM tier
# by default (runs without MOESTREAM_GPU_MAPPED=0 are the mapped ones);
# since then the copied tier is the default, so to repeat them export
# MOESTREAM_GPU_MAPPED=1 for those runs.
set -u -o pipefail
W=$(cd "$(dirname "$0")" && pwd)
STEPS=${STEPS:-tests prefill gpumem big logits}
step() { [[ " $STEPS " == *" $1 "* ]]; }
O=/tmp/s5out; rm -rf $O; mkdir -p $O
pack() { tar czf "$OUT/s5.tgz" -C /tmp s5out; }
trap pack EXIT
cd /tmp && rm -rf bin && tar xJf "$W/bin.txz" && BIN=/tmp/bin
export LD_LIBRARY_PATH=$BIN/lib:${LD_LIBRARY_PATH:-}
ms=$BIN/moestream
G=$(strings $BIN/runtime_gpu_test | grep -m1 '/shared/golden$' || true)
echo "golden dir compiled in: $G"
if [ -n "$G" ]; then mkdir -p "$G" && for t in "$W"/golden.txz "$W"/tok.txz; do [ -f "$t" ] && tar xJf "$t" -C "$G"; done; fi
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,pcie.link.gen.current,pcie.link.width.current,driver_version --format=csv | tee $O/smi.txt
nproc; free -g | head -2
if step tests; then
  echo "== kernel tests"; $BIN/gpu_kernels_test > $O/kernels_test.log 2>&1; echo "exit $?"; grep -E "PASSED|FAILED|SKIPPED|Failure" $O/kernels_test.log | head -30
  echo "== golden tests"; $BIN/runtime_gpu_test > $O/runtime_test.log 2>&1; echo "exit $?"; grep -E "PASSED|FAILED|SKIPPED|Failure" $O/runtime_test.log | head -40
  grep -E "relative L2" $O/runtime_test.log | head -40 > $O/golden_errors.txt
  echo "== golden tests (RAM tier not mapped)"; MOESTREAM_GPU_MAPPED=0 $BIN/runtime_gpu_test > $O/runtime_test_nomap.log 2>&1; echo "exit $?"; grep -E "PASSED|FAILED|Failure" $O/runtime_test_nomap.log | head
  pack
fi
M=/tmp/q30.gguf
run() {  # name, flags...
  local name=$1; shift
  local t0=$SECONDS
  timeout 300 $ms run -m $M --draft off --report "$O/$name.json" "$@" > "$O/$name.txt" 2> "$O/$name.err"
  echo "== $name ($*): exit $? after $((SECONDS - t0)) s"; grep -E "^(prefill|decode|gpu)" "$O/$name.err" | head -8
}
if step prefill || step gpumem; then
  t0=$SECONDS; $ms synth --preset qwen3-30b-a3b --type Q4_K_M -o $M 2>&1 | tail -1; echo "synth $((SECONDS-t0)) s"
fi
if step prefill; then
  A="--ignore-eos --seed 3 --temp 0 --gpu auto --mem 24G --io buffered -c 4096"
  run pp512 $A --random-prompt 512 -n 16
  MOESTREAM_GPU_PROFILE=1 run pp512_profile $A --random-prompt 512 -n 16
  grep -A12 "prefill profile" $O/pp512_profile.err
  MOESTREAM_GPU_BATCH=0 run pp512_tokens $A --random-prompt 512 -n 16
  cmp $O/pp512.txt $O/pp512_tokens.txt && echo "pp512: one pass and token by token give the same text"
  run pp2048 $A --random-prompt 2048 -n 16
  run pp2048_8g $A --random-prompt 2048 -n 16 --gpu-mem 8G
  $ms bench model -m $M -p 512 -n 0 -r 3 --gpu auto --run-args "--mem 24G --io buffered" --json $O/bench_pp.json > $O/bench_pp.md 2> $O/bench_pp.err
  echo "bench model exit $?"; cat $O/bench_pp.md
  pack
fi
if step gpumem; then
  # Routing like text: an English prompt, sampled (temperature 0.8, seed 3).
  A="-f $W/prompt.txt -n 512 --ignore-eos --seed 3 --temp 0.8 --gpu auto --mem 24G --io buffered"
  run en_res $A
  run en_gm8 $A --gpu-mem 8G
  MOESTREAM_GPU_ADMIT=lru run en_gm8_lru $A --gpu-mem 8G
  run en_gm2 $A --gpu-mem 2G
  MOESTREAM_GPU_ADMIT=lru run en_gm2_lru $A --gpu-mem 2G
  MOESTREAM_GPU_MAPPED=0 run en_gm8_copied $A --gpu-mem 8G
  MOESTREAM_GPU_MAPPED=0 run en_gm2_copied $A --gpu-mem 2G
  for r in en_gm8 en_gm8_lru en_gm2 en_gm2_lru en_gm8_copied en_gm2_copied; do
    cmp $O/en_res.txt $O/$r.txt && echo "$r: same text as resident"; done
  pack
  echo "distinct words in en_res: $(tr -s ' \n' '\n\n' < $O/en_res.txt | sort -u | wc -l) of $(wc -w < $O/en_res.txt)"
fi
if step final; then
  # The copied tier's eviction by use counts against plain LRU, on the
  # sampled English text; the resident prefill again.
  $ms synth --preset qwen3-30b-a3b --type Q4_K_M -o $M 2>&1 | tail -1
  run f_pp512 --ignore-eos --seed 3 --temp 0 --gpu auto --mem 24G --io buffered -c 4096 --random-prompt 512 -n 16
  A="-f $W/prompt.txt -n 512 --ignore-eos --seed 3 --temp 0.8 --gpu auto --mem 24G --io buffered"
  run f_en_gm8 $A --gpu-mem 8G
  MOESTREAM_GPU_MAPPED=0 run f_en_gm8_copied $A --gpu-mem 8G
  MOESTREAM_GPU_MAPPED=0 MOESTREAM_GPU_ADMIT=lru run f_en_gm8_copied_lru $A --gpu-mem 8G
  MOESTREAM_GPU_MAPPED=0 run f_en_gm2_copied $A --gpu-mem 2G
  MOESTREAM_GPU_MAPPED=0 MOESTREAM_GPU_ADMIT=lru run f_en_gm2_copied_lru $A --gpu-mem 2G
  for r in f_en_gm8_copied f_en_gm8_copied_lru f_en_gm2_copied f_en_gm2_copied_lru; do
    cmp $O/f_en_gm8.txt $O/$r.txt && echo "$r: same text as f_en_gm8"; done
  pack
fi
if step big; then
  # The 235B-A22B preset cut to 28 layers (40 GiB: more than --gpu-mem 8G
  # plus --mem 16G), on the first 600 bytes of the English text, sampled.
  rm -f $M; B=/tmp/q235.gguf
  t0=$SECONDS; $ms synth --preset qwen3-235b-a22b --type Q4_K_M --layers 28 -o $B 2>&1 | tail -1; echo "synth $((SECONDS-t0)) s"; sync
  echo "== bench ssd"; timeout 150 $ms bench ssd -m $B --file /tmp/bench.dat --size 6G --patterns sequential,gguf_expert --seconds 1 --remove --json $O/ssd.json > $O/ssd.txt 2>&1; echo "exit $?"; tail -8 $O/ssd.txt
  M=$B
  head -c 600 $W/prompt.txt > /tmp/prompt_short.txt
  A="-f /tmp/prompt_short.txt -n 64 --ignore-eos --seed 3 --temp 0.8"
  run big_gpu $A --gpu auto --gpu-mem 8G --mem 16G
  if [ -n "${BIG_LRU:-}" ]; then MOESTREAM_GPU_ADMIT=lru run big_gpu_lru $A --gpu auto --gpu-mem 8G --mem 16G
  else run big_gpu_next $A --gpu auto --gpu-mem 8G --mem 16G --prefetch next; fi
  run big_cpu $A --gpu off --mem 16G -t 16
  cmp $O/big_gpu.txt $O/big_cpu.txt && echo "big: GPU text == CPU text"
fi
if step logits; then
  # GPU against CPU logits on the presets' shapes, cut to a few layers.
  echo "Machines that stream experts from a drive are judged by what they read." > /tmp/p.txt
  for preset in qwen3-235b-a22b qwen3-30b-a3b; do
    L=/tmp/l_$preset.gguf
    $ms synth --preset $preset --type Q4_K_M --layers 3 -o $L 2>&1 | tail -1
    $ms logits -m $L -p "$(cat /tmp/p.txt)" -o /tmp/l_cpu --gpu off -n 8 > $O/logits_cpu_$preset.txt 2>&1
    $ms logits -m $L -p "$(cat /tmp/p.txt)" -o /tmp/l_gpu --gpu auto -n 8 --compare /tmp/l_cpu > $O/logits_gpu_$preset.txt 2>&1
    echo "== $preset (3 layers): GPU vs CPU"; tail -3 $O/logits_gpu_$preset.txt
    python3 -c "import json; a=json.load(open('/tmp/l_cpu.json'))['greedy_tokens']; b=json.load(open('/tmp/l_gpu.json'))['greedy_tokens']; print('greedy', a, b, a == b)" 2>&1 | tee -a $O/logits_gpu_$preset.txt
    rm -f $L
  done
fi
