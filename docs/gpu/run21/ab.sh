#!/bin/bash
# Twenty-first session: issue 36 item 2's host side. In serve's batched
# passes (several sequences' steps as the rows of one pass, experts copied
# into VRAM), the host's cores compute the misses that the fewest rows
# chose while the link copies the others (--gpu-batch-host on, the
# default), against every miss copied (off), same binary, interleaved.
# STEPS (letters; the order of running is fixed):
#  t  gpu_kernels_test and runtime_gpu_test (all);
#  s  qwen3-30b-a3b Q4_K_M bench serve --gpu-mem 8G at 8 and 32 streams of
#     64 tokens, on then off (a first look);
#  l  llama.cpp built in the background, then llama-batched-bench -ngl 99
#     -ncmoe 26 -fa 1 -npp 100 -ntg 128 -npl 1,8,32 (issue 36's peer);
#  m  bench serve at 1, 8 and 32 streams of 128 tokens, 8G: on, off, on
#     (after llama's run where l is set, on a quiet host); REPS="1 2 3":
#     on and off three times, interleaved;
#  g  the same at --gpu-mem 4G, on and off.
D=.gpuwork/h34
P=/tmp/r21/${NAME:-ab}
rm -rf $P
STEPS=${STEPS:-ts}
source docs/gpu/call.sh
gpu_setup
synth qwen3-30b-a3b /tmp/q30.gguf --type Q4_K_M &
syn=$!
[[ $STEPS == *t* ]] && gpu_tests_all
wait $syn
M=/tmp/q30.gguf
serve() {  # name streams tokens flags...
  local name=$1 streams=$2 tokens=$3; shift 3; local t0=$SECONDS
  [ $(left) -lt 60 ] && { echo "== $name: skipped, $(left) s left"; return; }
  timeout $(( $(left) - 10 )) $BIN/moestream bench serve -m $M --streams $streams --prompt-tokens 100 \
    --tokens $tokens --mem 40G -c 8192 --io buffered -t 16 --gpu auto --json $P/$name.json "$@" > $P/$name.txt 2>&1
  echo "== $name: exit $? after $((SECONDS - t0)) s: $*"
  grep -E "^gpu: (VRAM|batched|in batched|the host)|^[0-9]+ +[0-9]+ |gpu tier|vram" $P/$name.txt | head -12
}
if [[ $STEPS == *s* ]]; then
  serve s_on 8,32 64 --gpu-mem 8G
  serve s_off 8,32 64 --gpu-mem 8G --gpu-batch-host off
fi
if [[ $STEPS == *l* ]]; then
  llama_wait
  t0=$SECONDS
  timeout $(( $(left) - 100 )) $LCB/bin/llama-batched-bench -m $M -ngl 99 -ncmoe 26 -fa 1 -t 16 -c 32768 \
    -npp 100 -ntg 128 -npl 1,8,32 --output-format jsonl > $P/llama_batched_ncmoe26.jsonl 2> $P/llama_batched_ncmoe26.err
  echo "== llama-batched-bench -ncmoe 26: exit $? after $((SECONDS - t0)) s"; cat $P/llama_batched_ncmoe26.jsonl
fi
if [[ $STEPS == *m* ]]; then
  for r in ${REPS:-1}; do
    serve m_on_$r 1,8,32 128 --gpu-mem 8G
    serve m_off_$r 1,8,32 128 --gpu-mem 8G --gpu-batch-host off
  done
  [[ ${REPS:-1} == 1 ]] && serve m_on_2 1,8,32 128 --gpu-mem 8G
fi
if [[ $STEPS == *g* ]]; then
  serve g_on 8,32 128 --gpu-mem 4G
  serve g_off 8,32 128 --gpu-mem 4G --gpu-batch-host off
fi
echo "end at $SECONDS s"
