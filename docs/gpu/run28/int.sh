#!/bin/bash
# Twenty-eighth session: the K-quants' prompt products with each 256-column
# chunk's group sums kept as integers (times their 6- or 8-bit scales) and
# scaled once a chunk, against main's float scaling group by group; and 64
# pairs a block against 32 (kMmaTile). Carry .gpuwork/h29: bin.txz holds the
# change's moestream, gpu_kernels_test and runtime_gpu_test, and kbench_mma
# (docs/gpu/run28/kbench_mma.cpp) built seven ways: kbm-old (main's
# kernels_mma.cu), kbm-new (the change, 168 registers a thread), kbm-new4
# (the same held to 128 registers, 4 blocks an SM), kbm-C (the mins' part
# through the MMA too, 202 registers), kbm-C3 (that held to 168), kbm-old64
# and kbm-new64 (kMmaTile 64); moestream-32.xz main's moestream; golden.txz the Q8_0 golden
# files of qwen3moe, gpt-oss, llama4, glm4moe and exact/. STEPS:
#  t  the change's gpu_kernels_test and runtime_gpu_test;
#  k  the kbench builds (VARIANTS, kbm-<name> in bin.txz; the seven above
#     by default), interleaved, ROUNDS times (2);
#  q  qwen3-30b-a3b Q4_K_M synth resident: prompts of 512 and 4,096 random
#     tokens, the change against main interleaved, REPS times (2), and a
#     profile of each (PROF=0: none);
#  d  deepseek-v3 --layers 6 Q4_K_M: the same, once, with a profile;
#  l  llama.cpp built, llama-bench -p 512,4096 -n 0 on qwen3's file (and
#     pp4096 at -ub 4096, its fastest;
#     DeepSeek V3's where a call made it).
D=${D:-.gpuwork/h29}
STEPS=${STEPS:-tkq}
source docs/gpu/call.sh
call_start /tmp/r28 int
[[ $STEPS == *[ql]* ]] && { synth qwen3-30b-a3b /tmp/q30.gguf --type Q4_K_M & syn=$!; }
if [[ $STEPS == *t* ]]; then
  gpu_tests_all
  grep -E "tensor-core|FAILED" $P/gpu_kernels_test.log | head -40
fi
if [[ $STEPS == *k* ]]; then
  for r in $(seq 1 ${ROUNDS:-2}); do
    for v in ${VARIANTS:-old new new4 C C3 old64 new64}; do
      echo "== kbench $v, round $r"
      timeout 60 $BIN/kbm-$v > $P/kbench-$v-$r.txt 2>&1; echo "exit $?"
      cat $P/kbench-$v-$r.txt
    done
  done
fi
[[ $STEPS == *[ql]* ]] && wait $syn
main_binary
[[ $STEPS == *q* ]] && { M=/tmp/q30.gguf; prompt_ab q30 ${REPS:-2}; }
if [[ $STEPS == *d* ]]; then synth deepseek-v3 /tmp/dsv3.gguf --layers 6 --type Q4_K_M; M=/tmp/dsv3.gguf; prompt_ab dsv3 1; fi
if [[ $STEPS == *l* ]]; then
  M=/tmp/q30.gguf; LBARGS="-p 512,4096 -n 0" lb llama_q30_pp
  M=/tmp/q30.gguf; LBARGS="-p 4096 -n 0" lb llama_q30_pp_ub4096 -ub 4096
  [ -f /tmp/dsv3.gguf ] && { M=/tmp/dsv3.gguf; LBARGS="-p 512,4096 -n 0" lb llama_dsv3_pp; }
fi
echo "end at $SECONDS s"
