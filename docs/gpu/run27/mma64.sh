#!/bin/bash
# For the next device start (prepared in the twenty-seventh session, not yet
# run): 64 pairs a tensor-core block (kMmaTile 64, a one-constant change on
# top of main 7d82319) against main's 32, on the prompts issue 34 measures.
# Carry .gpuwork/h28: bin.txz is the kMmaTile-64 build (moestream,
# gpu_kernels_test, runtime_gpu_test, libs), moestream-32.xz main's
# binary of the same commit, golden.txz the Q8_0 golden files of qwen3moe,
# gpt-oss, llama4, glm4moe and exact/, lc.txz llama.cpp's source where
# STEPS has l. STEPS:
#  t  the 64 build's gpu_kernels_test and runtime_gpu_test (the TensorCore
#     tests cover partial tiles of inputs; the golden files the prefill);
#  q  qwen3-30b-a3b Q4_K_M synth resident: random prompts of 512 and 4,096
#     tokens at the default -ub, 64 against 32 interleaved, twice, and a
#     --gpu-profile run of each at both lengths;
#  g  gpt-oss-120b --layers 12 and d deepseek-v3 --layers 6: the same, once;
#  l  llama.cpp built, llama-bench -p 512,4096 -n 0 on qwen3's file.
D=${D:-.gpuwork/h28}
P=/tmp/r28/${NAME:-m64}
rm -rf $P
STEPS=${STEPS:-tq}
source docs/gpu/call.sh
gpu_setup
[[ $STEPS == *[ql]* ]] && { synth qwen3-30b-a3b /tmp/q30.gguf --type Q4_K_M & syn=$!; }
if [[ $STEPS == *t* ]]; then
  gpu_tests_all
  grep -E "tensor-core|FAILED" $P/gpu_kernels_test.log | head -20
fi
[[ $STEPS == *[ql]* ]] && wait $syn
xz -dc $D/moestream-32.xz > /tmp/moestream-32 && chmod +x /tmp/moestream-32
ab() {  # label model reps: the two builds interleaved
  local label=$1 reps=$3; M=$2
  for r in $(seq 1 $reps); do
    for N in 512 4096; do
      prompt_run ${label}_64_${N}_$r $BIN/moestream $N
      prompt_run ${label}_32_${N}_$r /tmp/moestream-32 $N
    done
  done
}
if [[ $STEPS == *q* ]]; then
  ab q30 /tmp/q30.gguf 2
  for N in 512 4096; do
    prompt_run q30_64_${N}_prof $BIN/moestream $N --gpu-profile
    prompt_run q30_32_${N}_prof /tmp/moestream-32 $N --gpu-profile
  done
fi
if [[ $STEPS == *g* ]]; then synth gpt-oss-120b /tmp/gptoss.gguf --layers 12; ab gptoss /tmp/gptoss.gguf 1; fi
if [[ $STEPS == *d* ]]; then synth deepseek-v3 /tmp/dsv3.gguf --layers 6 --type Q4_K_M; ab dsv3 /tmp/dsv3.gguf 1; fi
if [[ $STEPS == *l* ]]; then M=/tmp/q30.gguf; LBARGS="-p 512,4096 -n 0" lb llama_q30_pp; fi
echo "end at $SECONDS s"
