#!/bin/bash
# Thirtieth session: MLA prompts in the expanded form (every head's keys
# [k_b c | k_pe] and values v_b c built for the pass's positions, attention
# over heads of 192/128 instead of the latent rows' 576/512) and Q5_K's
# prompt products from raw blocks. Carry .gpuwork/h39: bin.txz holds the
# change's moestream, gpu_kernels_test and runtime_gpu_test, and kbench_mma
# (docs/gpu/run28/kbench_mma.cpp) built on main 98a9aa2 (kbm-main) and with
# the Q5_K kernel (kbm-Q5); golden.txz the MLA golden files and
# qwen3moe-Q5_K_M with exact/; lc.txz llama.cpp's source. The latent form
# is the same binary's --gpu-prefill-mla tiles. STEPS:
#  t  gpu_kernels_test and runtime_gpu_test;
#  k  kbench, main's kernels against the Q5_K one, ROUNDS times (2);
#  d  deepseek-v3 --layers 6 Q4_K_M resident: prompts of 512 and 4,096
#     random tokens, expand against tiles interleaved, REPS times (2), then
#     a --gpu-profile of each (PROF=0: none);
#  q  qwen3-30b-a3b Q4_K_M resident: the same prompts, REPS times;
#  c  qwen3-30b-a3b at --gpu-mem 8G, 4,096 tokens (the copy bound's line),
#     the next layer's experts copied ahead of its routing and not
#     (--gpu-prefetch off), REPS times;
#  l  llama.cpp built, llama-bench -p 512,4096 -n 0 on both files, and on
#     qwen3's with -ncmoe 26 at 4,096 (about 8 GB of its experts in VRAM).
D=${D:-.gpuwork/h39}
STEPS=${STEPS:-tkdqcl}
source docs/gpu/call.sh
call_start /tmp/r30 run
[[ $STEPS == *[dl]* ]] && { synth deepseek-v3 /tmp/dsv3.gguf --layers 6 --type Q4_K_M & sd=$!; }
[[ $STEPS == *[qcl]* ]] && { synth qwen3-30b-a3b /tmp/q30.gguf --type Q4_K_M & sq=$!; }
if [[ $STEPS == *t* ]]; then
  gpu_tests_all
  grep -hE "expanded|MLA|tensor-core Q5_K" $P/gpu_kernels_test.log $P/runtime_gpu_test.log | head -40
fi
if [[ $STEPS == *k* ]]; then
  for r in $(seq 1 ${ROUNDS:-2}); do
    for v in main Q5; do
      echo "== kbench $v, round $r"
      timeout 60 $BIN/kbm-$v > $P/kbench-$v-$r.txt 2>&1; echo "exit $?"
      grep -i "q5_k" $P/kbench-$v-$r.txt
    done
  done
fi
[[ $STEPS == *[dl]* ]] && wait $sd
if [[ $STEPS == *d* ]]; then
  M=/tmp/dsv3.gguf
  for r in $(seq 1 ${REPS:-2}); do
    for N in 512 4096; do
      prompt_run dsv3_expand_${N}_$r $BIN/moestream $N
      prompt_run dsv3_tiles_${N}_$r $BIN/moestream $N --gpu-prefill-mla tiles
    done
  done
  if [ "${PROF:-1}" = 1 ]; then
    for N in 512 4096; do
      prompt_run dsv3_expand_${N}_prof $BIN/moestream $N --gpu-profile
      prompt_run dsv3_tiles_${N}_prof $BIN/moestream $N --gpu-prefill-mla tiles --gpu-profile
    done
  fi
fi
[[ $STEPS == *[qcl]* ]] && wait $sq
if [[ $STEPS == *q* ]]; then
  M=/tmp/q30.gguf
  for r in $(seq 1 ${REPS:-2}); do
    for N in 512 4096; do prompt_run q30_${N}_$r $BIN/moestream $N; done
  done
fi
if [[ $STEPS == *c* ]]; then
  # Copies ahead of the routing (the default) against --gpu-prefetch off,
  # alternated, REPS times.
  M=/tmp/q30.gguf
  for r in $(seq 1 ${REPS:-2}); do
    for pf in on off; do
      prompt_run q30_4096_gpumem8G_ahead${pf}_$r $BIN/moestream 4096 --gpu-mem 8G --gpu-prefetch $pf
      grep -E "^gpu: (prompt passes|VRAM)" $P/q30_4096_gpumem8G_ahead${pf}_$r.err
    done
  done
fi
if [[ $STEPS == *l* ]]; then
  M=/tmp/dsv3.gguf; LBARGS="-p 512,4096 -n 0" lb llama_dsv3_pp
  M=/tmp/q30.gguf; LBARGS="-p 512,4096 -n 0" lb llama_q30_pp
  M=/tmp/q30.gguf; LBARGS="-p 4096 -n 0" lb llama_q30_pp4096_ncmoe26 -ncmoe 26
fi
echo "end at $SECONDS s"
