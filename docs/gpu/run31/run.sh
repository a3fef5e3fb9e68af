#!/bin/bash
# Thirty-first session: prompt passes with VRAM short copy the next layer's
# first experts ahead of its routing (copy_ahead in model/gpu_decoder.cpp).
# Carry .gpuwork/h42: bin.txz holds moestream (kCopyAhead 32), moestream-64
# and moestream-128 (the same source with 64 and 128 experts ahead), the GPU
# test programs and lib/ (liburing, libxxhash, libpcre2, which the device
# lacks); golden.txz the streaming tests' golden files. STEPS:
#  c  qwen3-30b-a3b Q4_K_M at --gpu-mem 8G, a 4,096-token prompt: 32, 64
#     and 128 experts ahead and --gpu-prefetch off, alternated, REPS times (2);
#  r  the same file resident, 4,096 tokens, REPS times (the compute alone).
D=${D:-.gpuwork/h42}
STEPS=${STEPS:-cr}
source docs/gpu/call.sh
call_start /tmp/r31 run
synth qwen3-30b-a3b /tmp/q30.gguf --type Q4_K_M
M=/tmp/q30.gguf
if [[ $STEPS == *c* ]]; then
  for r in $(seq 1 ${REPS:-2}); do
    for v in 32 64 128 off; do
      bin=$BIN/moestream-$v; args=
      [ $v = 32 ] && bin=$BIN/moestream
      [ $v = off ] && { bin=$BIN/moestream; args="--gpu-prefetch off"; }
      prompt_run q30_4096_gpumem8G_ahead${v}_$r $bin 4096 --gpu-mem 8G $args
      grep -E "^gpu: prompt passes" $P/q30_4096_gpumem8G_ahead${v}_$r.err
    done
  done
fi
if [[ $STEPS == *r* ]]; then
  for r in $(seq 1 ${REPS:-2}); do prompt_run q30_4096_resident_$r $BIN/moestream 4096; done
fi
echo "end at $SECONDS s"
