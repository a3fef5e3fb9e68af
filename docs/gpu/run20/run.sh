#!/bin/bash
# Twentieth session's device calls (issues 33 and 36), from the repository
# root with .gpuwork/h34 carried (docs/gpu/call.sh). bin.txz holds main's
# moestream (9293725 and after) and the GPU test binaries; llama.cpp de3ff81
# CUDA is built in the call (kept by a warm machine for the next call).
# STEPS (letters; the order of running is fixed):
#  t  gpu_kernels_test and runtime_gpu_test (all), while llama.cpp builds;
#  l  llama.cpp built, and its runs beside d and m;
#  d  deepseek-v3 --layers 6 Q4_K_M on the refitted MLA routing (route37g)
#     at --gpu-mem 4G: llama-bench -ncmoe 6, then auto x3, cpu and copy once;
#  m  qwen3-30b-a3b Q4_K_M, bench serve at 1, 8 and 32 streams with
#     --gpu-mem 8G, and llama-batched-bench -ngl 99 -ncmoe 26 -npp 100
#     -ntg 128 -npl 1,8,32 (issue 36's GPU target);
#  r  the same bench serve resident (no --gpu-mem), the batched bound.
D=.gpuwork/h34
P=/tmp/r20/r
rm -rf /tmp/r20
STEPS=${STEPS:-tldm}
source docs/gpu/call.sh
gpu_setup
([[ $STEPS == *d* ]] && synth deepseek-v3 /tmp/dsv3r.gguf --layers 6 --type Q4_K_M
 [[ $STEPS == *[mr]* ]] && synth qwen3-30b-a3b /tmp/q30.gguf --type Q4_K_M; true) &
syn=$!
[[ $STEPS == *t* ]] && gpu_tests_all
wait $syn
llama_wait
english_prompt
if [[ $STEPS == *d* ]]; then
  M=/tmp/dsv3r.gguf
  [[ $STEPS == *l* ]] && lb llama_dsv3r_ncmoe6 -ncmoe 6
  for r in 1 2 3; do MEM=80G run dsv3r_auto_4g_$r --gpu-mem 4G; done
  MEM=80G run dsv3r_cpu_4g --gpu-mem 4G --gpu-ram-tier cpu
  MEM=80G run dsv3r_copy_4g --gpu-mem 4G --gpu-ram-tier copy
fi
serve() {  # name flags...
  local name=$1; shift; local t0=$SECONDS
  [ $(left) -lt 60 ] && { echo "== $name: skipped, $(left) s left"; return; }
  timeout $(( $(left) - 30 )) $BIN/moestream bench serve -m $M --streams 1,8,32 --prompt-tokens 100 --tokens 128 \
    --mem 40G -c 8192 --io buffered -t 16 --gpu auto --json $P/$name.json "$@" > $P/$name.txt 2>&1
  echo "== $name: exit $? after $((SECONDS - t0)) s: $*"; grep -vE "^gpu:" $P/$name.txt | tail -8
}
if [[ $STEPS == *m* ]]; then
  M=/tmp/q30.gguf
  serve serve_8g --gpu-mem 8G
  if [[ $STEPS == *l* && $(left) -gt 50 ]]; then
    t0=$SECONDS
    timeout $(( $(left) - 8 )) $LCB/bin/llama-batched-bench -m $M -ngl 99 -ncmoe 26 -fa 1 -t 16 -c 32768 \
      -npp 100 -ntg 128 -npl 1,8,32 --output-format jsonl > $P/llama_batched_ncmoe26.jsonl 2> $P/llama_batched_ncmoe26.err
    echo "== llama-batched-bench -ncmoe 26: exit $? after $((SECONDS - t0)) s"; tail -3 $P/llama_batched_ncmoe26.err
    cat $P/llama_batched_ncmoe26.jsonl
  fi
fi
if [[ $STEPS == *r* ]]; then
  M=/tmp/q30.gguf
  serve serve_resident
fi
echo "end at $SECONDS s"
