#!/bin/bash
# Twenty-ninth session: MLA's per-head k_b and v_b products of a prompt pass
# on tensor cores (.gpuwork/h32/mla-heads-mma.patch on cd704e4), against
# cd704e4 itself; and the copy bound's fraction that cd704e4 reports with
# VRAM short. Carry .gpuwork/h34: bin.txz holds the patched moestream,
# gpu_kernels_test and runtime_gpu_test; moestream-32.xz cd704e4's
# moestream; golden.txz the MLA golden files (deepseek2-lite, deepseek3,
# glm-dsa) with exact/. STEPS:
#  t  the patched build's gpu_kernels_test and runtime_gpu_test;
#  d  deepseek-v3 --layers 6 Q4_K_M resident: prompts of 512 and 4,096
#     random tokens, patched against cd704e4 interleaved, REPS times (1),
#     and a --gpu-profile of each (PROF=0: none);
#  c  4,096 tokens with VRAM short, each build: qwen3-30b-a3b at --gpu-mem
#     8G (when /tmp/q30.gguf is there) and the DeepSeek V3 cut at 2G; the
#     prompt passes' copy-bound line and the report's vram_tier.prefill.
D=${D:-.gpuwork/h34}
STEPS=${STEPS:-tdc}
source docs/gpu/call.sh
call_start /tmp/r29 mla
[[ $STEPS == *[dc]* ]] && { synth deepseek-v3 /tmp/dsv3.gguf --layers 6 --type Q4_K_M & syn=$!; }
if [[ $STEPS == *t* ]]; then
  gpu_tests_all
  grep -E "Mla|FAILED" $P/runtime_gpu_test.log | grep -E "OK|FAILED|rel|err" | head -30
fi
[[ $STEPS == *[dc]* ]] && wait $syn
main_binary
if [[ $STEPS == *d* ]]; then
  M=/tmp/dsv3.gguf
  prompt_ab dsv3 ${REPS:-1}
fi
if [[ $STEPS == *c* ]]; then
  # qwen3-30b-a3b at --gpu-mem 8G (issue 34's case) where an earlier
  # script in the call made it, and DeepSeek V3's cut at 2G.
  for mg in q30:8G dsv3:2G; do
    M=/tmp/${mg%%:*}.gguf; G=${mg##*:}
    [ -f $M ] || continue
    for b in new main; do
      bin=$BIN/moestream; [ $b = main ] && bin=/tmp/moestream-main
      name=${mg%%:*}_${b}_4096_gpumem$G
      prompt_run $name $bin 4096 --gpu-mem $G
      grep -E "^gpu: (prompt passes|VRAM)" $P/$name.err
      python3 -c "
import json; r = json.load(open('$P/$name.json'))
print('  prefill vram_tier:', json.dumps(r['gpu']['vram_tier']['prefill']))" 2>&1 | head -3
    done
  done
fi
echo "end at $SECONDS s"
