#!/bin/bash
# Twenty-second session: issue 32 item 2's first family, glm-dsa (GLM-5),
# on the GPU: DeepSeek sparse attention's indexer (keys, scores, top-k) and
# attention over the chosen positions as kernels.
# STEPS (letters; the order of running is fixed):
#  t  gpu_kernels_test and runtime_gpu_test (all);
#  l  llama.cpp built in the background (its glm-dsa has the indexer too);
#  b  the glm-5 preset cut to 6 layers (3 dense, 3 routed) and 32 experts,
#     Q4_K_M, resident: moestream bench model -p 512 -n 64 -d 0,4096 -r 3
#     against llama-bench -ngl 99 -fa 1 with the same tests.
D=.gpuwork/h34
P=/tmp/r22/${NAME:-c1}
rm -rf $P
STEPS=${STEPS:-tlb}
source docs/gpu/call.sh
gpu_setup
M=/tmp/g5.gguf
[[ $STEPS == *b* ]] && { synth glm-5 $M --layers 6 --experts 32 --type Q4_K_M & syn=$!; }
[[ $STEPS == *t* ]] && gpu_tests_all
if [[ $STEPS == *b* ]]; then
  wait $syn; ls -la $M
  t0=$SECONDS
  timeout $(( $(left) - 150 )) $BIN/moestream bench model -m $M -p 512 -n 64 -d 0,4096 -r 3 -t 16 --gpu auto \
    --run-args "--io buffered" --json $P/ms_bench.json > $P/ms_bench.md 2> $P/ms_bench.err
  echo "== moestream bench model: exit $? after $((SECONDS - t0)) s"; cat $P/ms_bench.md; tail -3 $P/ms_bench.err
fi
if [[ $STEPS == *l* && $STEPS == *b* ]]; then
  llama_wait
  t0=$SECONDS
  timeout $(( $(left) - 10 )) $LCB/bin/llama-bench -m $M -ngl 99 -fa 1 -t 16 -p 512 -n 64 -d 0,4096 -r 3 \
    -o json > $P/llama_bench.json 2> $P/llama_bench.err
  echo "== llama-bench: exit $? after $((SECONDS - t0)) s"
  grep -E '"(n_prompt|n_gen|n_depth|avg_ts)"' $P/llama_bench.json | paste - - - - ; tail -3 $P/llama_bench.err
fi
echo "end at $SECONDS s"
