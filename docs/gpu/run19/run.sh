#!/bin/bash
# Nineteenth session's device calls (issue 33), from the repository root with
# .gpuwork/h34 carried (docs/gpu/call.sh). bin.txz holds this session's
# moestream and, as moestream-old, the binary of run18 (b716978, the code
# before 44a1330), so the change is measured against it in the same call;
# llama.cpp de3ff81 CUDA is built in the call. Speeds x3, interleaved, medians.
# STEPS (letters; the order of running is fixed):
#  t  gpu_kernels_test and runtime_gpu_test (all);
#  l  llama.cpp built, and its runs beside d (and q at 8G with m);
#  d  deepseek-v3 --layers 6 Q4_K_M at --gpu-mem 4G: auto, new and old, x3;
#     cpu once, copy twice (new), copy once (old); llama -ncmoe 6
#     (NOOLD=1: the new binary alone, call 3);
#  p  the same with --gpu-profile, cpu mode, new and old;
#  s  (call 2) deepseek-v3 at 4G, cpu mode: auto x2 and fixed host shares
#     0, 0.5, 0.75, 1 (new binary: the host's wait and queue timers);
#  o  (call 2) gpt-oss-120b 12L at 64M, auto, new and old x3, interleaved
#     (call 1's one old run split differently: its start-up measurement);
#  q  qwen3-30b-a3b Q4_K_M at 4G, auto, new x3 and old x2 (no regression);
#  g  gpt-oss-120b --layers 12 at 4G and 64M, auto, new x3, old x1;
#  m  qwen3-30b-a3b, bench serve at 1, 8 and 32 streams with --gpu-mem 8G,
#     and llama-batched-bench -ngl 99 -ncmoe 26 -npp 100 -ntg 128 -npl 1,8,32;
#  b  qwen3-235b-a22b Q4_K_M cut to 28 layers (40 GiB > --gpu-mem 8G + --mem
#     16G: misses from the drive, io_uring), copy and auto x2, bench ssd.
D=.gpuwork/h34
P=/tmp/r19/r
rm -rf /tmp/r19
STEPS=${STEPS:-tldpqg}
source docs/gpu/call.sh
gpu_setup
OLD=$BIN/moestream-old
$OLD version | head -1
synth() {  # preset file flags...
  local preset=$1 f=$2; shift 2; local t0=$SECONDS
  [ -f $f ] || { $BIN/moestream synth --preset $preset -o $f "$@" > $P/synth-$preset.log 2>&1
                 echo "synth $preset exit $? after $((SECONDS - t0)) s"; }
}
([[ $STEPS == *[dps]* ]] && synth deepseek-v3 /tmp/dsv3.gguf --layers 6 --type Q4_K_M
 [[ $STEPS == *[qm]* ]] && synth qwen3-30b-a3b /tmp/q30.gguf --type Q4_K_M
 [[ $STEPS == *[go]* ]] && synth gpt-oss-120b /tmp/gptoss.gguf --layers 12; true) &
syn=$!
[[ $STEPS == *t* ]] && gpu_tests_all
wait $syn
llama_wait
PROMPT=$D/prompt.txt
head -c 2200 bench/prompts/long.txt > $PROMPT  # 508 tokens with the synth vocabulary
if [[ $STEPS == *d* ]]; then
  M=/tmp/dsv3.gguf
  [[ $STEPS == *l* ]] && lb llama_dsv3_ncmoe6 -ncmoe 6
  for r in 1 2 3; do
    MEM=80G run dsv3_new_auto_4g_$r --gpu-mem 4G
    [ -z "${NOOLD:-}" ] && MEM=80G MS=$OLD run dsv3_old_auto_4g_$r --gpu-mem 4G
  done
  MEM=80G run dsv3_new_cpu_4g --gpu-mem 4G --gpu-ram-tier cpu
  MEM=80G run dsv3_new_copy_4g --gpu-mem 4G --gpu-ram-tier copy
  [ -z "${NOOLD:-}" ] && MEM=80G MS=$OLD run dsv3_old_copy_4g --gpu-mem 4G --gpu-ram-tier copy
  MEM=80G run dsv3_new_copy_4g_2 --gpu-mem 4G --gpu-ram-tier copy
fi
if [[ $STEPS == *p* ]]; then
  M=/tmp/dsv3.gguf
  MEM=80G run dsv3_profile_new_cpu_4g --gpu-mem 4G --gpu-ram-tier cpu --gpu-profile
  MEM=80G MS=$OLD run dsv3_profile_old_cpu_4g --gpu-mem 4G --gpu-ram-tier cpu --gpu-profile
  grep -A30 -iE "profile|stage" $P/dsv3_profile_new_cpu_4g.err | head -40
fi
if [[ $STEPS == *s* ]]; then
  M=/tmp/dsv3.gguf
  MEM=80G run dsv3_share_auto_1 --gpu-mem 4G --gpu-ram-tier cpu
  for hs in 0 0.5 0.75 1; do MEM=80G run dsv3_share_${hs}_4g --gpu-mem 4G --gpu-ram-tier cpu --gpu-host-share $hs; done
  MEM=80G run dsv3_share_auto_2 --gpu-mem 4G --gpu-ram-tier cpu
  for f in $P/dsv3_share_*.json; do python3 -c "
import json,sys; j=json.load(open('$f')); v=j['gpu']['vram_tier']; d=v['decode']
print('%-28s %7.2f tok/s  wait %.3f s  queue %.3f s  host %.3f s  copied %.1f MB/t  host %.2f experts/t' % ('$(basename $f .json)',
  128/j['decode']['seconds'], v.get('host_wait_routing_seconds',0), v.get('host_queue_copies_seconds',0),
  v['host_compute_seconds'], d['copied_bytes_per_token']/1e6, d['host_computed_per_token']))"; done
fi
if [[ $STEPS == *o* ]]; then
  M=/tmp/gptoss.gguf
  for r in 1 2 3; do
    run gptoss_new_auto_64m_$r --gpu-mem 64M
    MS=$OLD run gptoss_old_auto_64m_$r --gpu-mem 64M
  done
fi
if [[ $STEPS == *q* ]]; then
  M=/tmp/q30.gguf
  for r in 1 2 3; do
    run q30_new_auto_4g_$r --gpu-mem 4G
    [ $r -le 2 ] && MS=$OLD run q30_old_auto_4g_$r --gpu-mem 4G
  done
fi
if [[ $STEPS == *g* ]]; then
  M=/tmp/gptoss.gguf
  for r in 1 2 3; do
    run gptoss_new_auto_4g_$r --gpu-mem 4G
    run gptoss_new_auto_64m_$r --gpu-mem 64M
  done
  MS=$OLD run gptoss_old_auto_4g --gpu-mem 4G
  MS=$OLD run gptoss_old_auto_64m --gpu-mem 64M
fi
if [[ $STEPS == *m* && $(left) -gt 120 ]]; then
  M=/tmp/q30.gguf
  echo "== many streams at --gpu-mem 8G"
  timeout $(( $(left) - 60 )) $BIN/moestream bench serve -m $M --streams 1,8,32 --prompt-tokens 100 --tokens 128 \
    --mem 40G -c 8192 --io buffered -t 16 --gpu auto --gpu-mem 8G --json $P/serve_8g.json > $P/serve_8g.txt 2>&1
  echo "exit $?"; grep -vE "^gpu:" $P/serve_8g.txt | tail -6
  if [[ $STEPS == *l* && $(left) -gt 50 ]]; then
    llama_wait
    timeout $(( $(left) - 8 )) $LCB/bin/llama-batched-bench -m $M -ngl 99 -ncmoe 26 -fa 1 -t 16 -c 32768 \
      -npp 100 -ntg 128 -npl 1,8,32 --output-format jsonl > $P/llama_batched_ncmoe26.jsonl 2> $P/llama_batched_ncmoe26.err
    echo "== llama-batched-bench -ncmoe 26: exit $?"; tail -5 $P/llama_batched_ncmoe26.err
    cat $P/llama_batched_ncmoe26.jsonl
  fi
fi
if [[ $STEPS == *b* ]]; then
  rm -f /tmp/q30.gguf /tmp/gptoss.gguf /tmp/dsv3.gguf
  M=/tmp/q235.gguf
  synth qwen3-235b-a22b $M --type Q4_K_M --layers 28; sync
  echo "== bench ssd"
  timeout 100 $BIN/moestream bench ssd -m $M --file /tmp/bench.dat --size 4G --patterns sequential,gguf_expert \
    --seconds 1 --remove --json $P/ssd.json > $P/ssd.txt 2>&1; echo "exit $?"; tail -6 $P/ssd.txt
  head -c 600 bench/prompts/long.txt > $PROMPT
  for r in 1 2; do
    IO=uring NGEN=48 CTX=2048 MEM=16G run q235_copy_$r --gpu-mem 8G --gpu-ram-tier copy
    IO=uring NGEN=48 CTX=2048 MEM=16G run q235_auto_$r --gpu-mem 8G
  done
fi
echo "end at $SECONDS s"
