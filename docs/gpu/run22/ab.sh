#!/bin/bash
# Twenty-second session, call 2: the MLA decode attention a block for eight
# query heads (each compressed row read once for them, not once a head),
# the indexer's top-k byte search on a warp and its scores on 64 positions
# a block, against call 1's binary (moestream_old), same call.
#  t  gpu_kernels_test and runtime_gpu_test (all);
#  l  llama.cpp built in the background, then llama-bench -ngl 99 -fa 1
#     with the same tests;
#  b  glm-5 cut (6 layers, 32 experts, Q4_K_M), resident: bench model
#     -p 0 -n 64 -d 0,4096,16384 -r 3, new then old; one --gpu-profile run
#     at depth 4096.
D=.gpuwork/h34
P=/tmp/r22/${NAME:-c2}
rm -rf $P
STEPS=${STEPS:-tlb}
source docs/gpu/call.sh
gpu_setup
M=/tmp/g5.gguf
[[ $STEPS == *b* ]] && { synth glm-5 $M --layers 6 --experts 32 --type Q4_K_M & syn=$!; }
[[ $STEPS == *t* ]] && gpu_tests_all
bm() {  # name binary
  local t0=$SECONDS
  timeout $(( $(left) - 60 )) $BIN/moestream bench model --binary $PWD/$BIN/$2 -m $M -p 0 -n 64 -d 0,4096,16384 -r 3 \
    -t 16 --gpu auto --run-args "--io buffered" --json $P/$1.json > $P/$1.md 2> $P/$1.err
  echo "== $1 ($2): exit $? after $((SECONDS - t0)) s"; grep "tg64" $P/$1.md
}
if [[ $STEPS == *b* ]]; then
  wait $syn
  bm ms_new moestream
  bm ms_old moestream_old
  t0=$SECONDS
  timeout 60 $BIN/moestream run -m $M --random-prompt 4096 -n 64 -c 4300 --temp 0 --draft off --ignore-eos -t 16 \
    --io buffered --gpu auto --gpu-profile --report $P/profile_d4096.json > $P/profile_d4096.txt 2> $P/profile_d4096.err
  echo "== profile run: exit $? after $((SECONDS - t0)) s"; grep -i -A16 "stage" $P/profile_d4096.err | head -40
fi
if [[ $STEPS == *l* && $STEPS == *b* ]]; then
  llama_wait
  t0=$SECONDS
  timeout $(( $(left) - 10 )) $LCB/bin/llama-bench -m $M -ngl 99 -fa 1 -t 16 -p 0 -n 64 -d 0,4096,16384 -r 3 \
    -o json > $P/llama_bench.json 2> $P/llama_bench.err
  echo "== llama-bench: exit $? after $((SECONDS - t0)) s"
  grep -E '"(n_prompt|n_gen|n_depth|avg_ts)"' $P/llama_bench.json | paste - - - - ; tail -3 $P/llama_bench.err
fi
echo "end at $SECONDS s"
