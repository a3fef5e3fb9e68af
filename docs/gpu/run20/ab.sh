#!/bin/bash
# Twentieth session, call 2: the VRAM tier's eviction by the store's SlotCache
# (WLFU and the step fit, the --cache-policy default) against main's own LRU /
# coldest choice (moestream-old, 9293725), in one call, interleaved. No
# llama.cpp here (run.sh's call 1 has it beside the old binary).
# STEPS: t tests; q qwen3-30b-a3b single stream at 8G and 2G; d deepseek-v3 6L
# at 4G; g gpt-oss-120b 12L at 4G; m bench serve 8 and 32 streams at 8G.
D=.gpuwork/h34
P=/tmp/r20/ab
rm -rf $P
STEPS=${STEPS:-tqdgm}
source docs/gpu/call.sh
gpu_setup
OLD=$BIN/moestream-old
$OLD version | head -1
([[ $STEPS == *d* ]] && synth deepseek-v3 /tmp/dsv3r.gguf --layers 6 --type Q4_K_M
 [[ $STEPS == *[qm]* ]] && synth qwen3-30b-a3b /tmp/q30.gguf --type Q4_K_M
 [[ $STEPS == *g* ]] && synth gpt-oss-120b /tmp/gptoss.gguf --layers 12; true) &
syn=$!
[[ $STEPS == *t* ]] && gpu_tests_all
wait $syn
english_prompt
if [[ $STEPS == *q* ]]; then
  M=/tmp/q30.gguf
  for r in 1 2; do
    run q30_new_8g_$r --gpu-mem 8G; MS=$OLD run q30_old_8g_$r --gpu-mem 8G
    run q30_new_2g_$r --gpu-mem 2G; MS=$OLD run q30_old_2g_$r --gpu-mem 2G
  done
  run q30_newlru_2g --gpu-mem 2G --cache-policy lru
fi
if [[ $STEPS == *d* ]]; then
  M=/tmp/dsv3r.gguf
  for r in 1 2; do MEM=80G run dsv3r_new_4g_$r --gpu-mem 4G; MEM=80G MS=$OLD run dsv3r_old_4g_$r --gpu-mem 4G; done
fi
if [[ $STEPS == *g* ]]; then
  M=/tmp/gptoss.gguf
  run gptoss_new_4g --gpu-mem 4G; MS=$OLD run gptoss_old_4g --gpu-mem 4G
fi
serve() {  # name binary flags...
  local name=$1 bin=$2; shift 2; local t0=$SECONDS
  [ $(left) -lt 60 ] && { echo "== $name: skipped, $(left) s left"; return; }
  timeout $(( $(left) - 10 )) $bin bench serve -m $M --streams 8,32 --prompt-tokens 100 --tokens 64 \
    --mem 40G -c 8192 --io buffered -t 16 --gpu auto --json $P/$name.json "$@" > $P/$name.txt 2>&1
  echo "== $name: exit $? after $((SECONDS - t0)) s: $*"
  grep -E "^gpu: VRAM|^[0-9]+ +[0-9]+ " $P/$name.txt
}
if [[ $STEPS == *m* ]]; then
  M=/tmp/q30.gguf
  serve serve_new_8g $BIN/moestream --gpu-mem 8G
  serve serve_old_8g $OLD --gpu-mem 8G
fi
echo "end at $SECONDS s"
