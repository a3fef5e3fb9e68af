#!/bin/bash
# Twentieth session, call 3: main with the VRAM tier on SlotCache beside
# llama-batched-bench -ncmoe 26 (issue 36's GPU target), qwen3-30b-a3b Q4_K_M
# at --gpu-mem 8G, 1, 8 and 32 streams of 100 prompt and 128 new tokens.
# Ours runs first while llama.cpp builds (labelled: the build shares the
# host's cores), then llama-batched-bench, then ours again on a quiet host.
D=.gpuwork/h34
P=/tmp/r20/final
rm -rf $P
STEPS=l
source docs/gpu/call.sh
gpu_setup
M=/tmp/q30.gguf
[ -f $M ] || { $BIN/moestream synth --preset qwen3-30b-a3b -o $M --type Q4_K_M > $P/synth.log 2>&1; echo "synth exit $?"; }
serve() {  # name
  local name=$1 t0=$SECONDS
  [ $(left) -lt 80 ] && { echo "== $name: skipped, $(left) s left"; return; }
  timeout $(( $(left) - 10 )) $BIN/moestream bench serve -m $M --streams 1,8,32 --prompt-tokens 100 --tokens 128 \
    --mem 40G -c 8192 --io buffered -t 16 --gpu auto --gpu-mem 8G --json $P/$name.json > $P/$name.txt 2>&1
  echo "== $name: exit $? after $((SECONDS - t0)) s"; grep -E "^gpu: VRAM|^[0-9]+ +[0-9]+ " $P/$name.txt
}
serve serve_8g_during_build
llama_wait
t0=$SECONDS
timeout $(( $(left) - 110 )) $LCB/bin/llama-batched-bench -m $M -ngl 99 -ncmoe 26 -fa 1 -t 16 -c 32768 \
  -npp 100 -ntg 128 -npl 1,8,32 --output-format jsonl > $P/llama_batched_ncmoe26.jsonl 2> $P/llama_batched_ncmoe26.err
echo "== llama-batched-bench -ncmoe 26: exit $? after $((SECONDS - t0)) s"; cat $P/llama_batched_ncmoe26.jsonl
serve serve_8g_quiet
echo "end at $SECONDS s"
