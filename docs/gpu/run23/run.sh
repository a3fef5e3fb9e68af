#!/bin/bash
# Twenty-third session: issue 34's MLA prompts on tensor cores
# (gpu::attention_tiled_shared), against the binary before (moestream_old,
# the decode kernel's attention in prompt passes) and llama.cpp CUDA.
# The kernel is on branch gpu-mla-prefill (main reverted call 1's form,
# which missed a golden bound; see docs/gpu.md, twenty-third session): this
# script and kbench.cpp build from that branch.
# STEPS (letters; the order of running is fixed):
#  k  gpu_kernels_test's attention tests first (a quick verdict), then
#     kbench (a throwaway timing of the MLA kernels alone);
#  t  gpu_kernels_test and runtime_gpu_test (all);
#  l  llama.cpp built in the background;
#  o  the binary before (moestream_old) beside the new one in each bench;
#  d  deepseek-v3 --layers 6 Q4_K_M resident: bench model -p 512,4096 -n 0
#     -r 3, new and old, then llama-bench -p 512,4096 -n 0 -r 3;
#  g  the glm-5 preset cut to 6 layers and 32 experts (as run22) the same;
#  e  and its decode, tg64 at depths 0 and 4096 (the row-a-warp loads of
#     the shared-rows decode kernel, branch gpu-mla-attn-next, merged).
# Call 1 (c1) ran the first form of the kernel (one f16 MMA a product) with
# STEPS ktlodge; call 2 (c2) the split form with what device time was left
# after refused starts, STEPS ktdg.
D=.gpuwork/h23
P=/tmp/r23/${NAME:-c1}
rm -rf $P
STEPS=${STEPS:-ktlodge}
source docs/gpu/call.sh
gpu_setup
[[ $STEPS == *d* ]] && { synth deepseek-v3 /tmp/dsv3.gguf --layers 6 --type Q4_K_M & syn1=$!; }
[[ $STEPS == *g* ]] && { synth glm-5 /tmp/g5.gguf --layers 6 --experts 32 --type Q4_K_M & syn2=$!; }
if [[ $STEPS == *k* ]]; then
  echo "== attention kernel tests"
  (cd $BIN && timeout 60 ./gpu_kernels_test --gtest_filter='*Attention*' > $P/attention_tests.log 2>&1; echo "exit $?")
  grep -E "^\[  PASSED|^\[  FAILED|^\[       OK|Failure|rel_err|Expected|Which is|heads of" $P/attention_tests.log | head -40
  timeout 60 $BIN/kbench | tee $P/kbench.txt
fi
[[ $STEPS == *t* ]] && gpu_tests_all
[[ $STEPS == *t* ]] && grep -E "^(deepseek|glm)" $P/runtime_gpu_test.log | head -30
bench() {  # name model bench-flags...: new and old moestream, then llama-bench with the same flags
  local name=$1 M=$2 b; shift 2
  for b in moestream $([[ $STEPS == *o* ]] && echo moestream_old); do
    local t0=$SECONDS
    [ $(left) -lt 60 ] && { echo "== $name $b: skipped, $(left) s left"; continue; }
    timeout $(( $(left) - 30 )) $BIN/moestream bench model -m $M "$@" -r 3 -t 16 --gpu auto \
      --binary $BIN/$b --run-args "--io buffered --mem 80G" --json $P/${name}_$b.json > $P/${name}_$b.md 2> $P/${name}_$b.err
    echo "== $name $b: exit $? after $((SECONDS - t0)) s"; cat $P/${name}_$b.md; tail -2 $P/${name}_$b.err
  done
  if [[ $STEPS == *l* ]]; then
    llama_wait
    local t0=$SECONDS
    [ $(left) -lt 40 ] && { echo "== $name llama: skipped"; return; }
    timeout $(( $(left) - 10 )) $LCB/bin/llama-bench -m $M -ngl 99 -fa 1 -t 16 "$@" -r 3 -o json \
      > $P/${name}_llama.json 2> $P/${name}_llama.err
    echo "== $name llama-bench: exit $? after $((SECONDS - t0)) s"
    python3 -c "
import json, statistics
for r in json.load(open('$P/${name}_llama.json')):
    s = r.get('samples_ts') or [r['avg_ts']]
    print('  pp %4d tg %3d depth %5d: median %9.2f tok/s of %s' % (r['n_prompt'], r['n_gen'], r.get('n_depth', 0),
          statistics.median(s), ' '.join('%.2f' % x for x in s)))" \
      || tail -3 $P/${name}_llama.err
  fi
}
[[ $STEPS == *d* ]] && { wait $syn1; bench dsv3 /tmp/dsv3.gguf -p 512,4096 -n 0; }
[[ $STEPS == *g* ]] && { wait $syn2; bench glm5 /tmp/g5.gguf -p 512,4096 -n 0
  [[ $STEPS == *e* ]] && bench glm5tg /tmp/g5.gguf -p 0 -n 64 -d 0,4096; }
echo "end at $SECONDS s"
