#!/bin/bash
# Twenty-second session, call 3: the shared-rows MLA attention without its
# register spills (no break in its unrolled loops) and the indexer's
# scores in four chains; against call 1's binary (moestream_old), same
# call, glm-5 cut resident at depth 0 and 4096. idxbench: a throwaway
# timing of indexer_select and the MLA attention alone (not in the repo).
D=.gpuwork/h22
P=/tmp/r22/${NAME:-c3}
rm -rf $P
STEPS=t
source docs/gpu/call.sh
gpu_setup
M=/tmp/g5.gguf
synth glm-5 $M --layers 6 --experts 32 --type Q4_K_M & syn=$!
gpu_tests_all
$BIN/idxbench | tee $P/idxbench.txt
wait $syn
for b in moestream moestream_old; do
  t0=$SECONDS
  timeout 80 $BIN/moestream bench model --binary $PWD/$BIN/$b -m $M -p 0 -n 64 -d 0,4096 -r 3 -t 16 --gpu auto \
    --run-args "--io buffered" --json $P/$b.json > $P/$b.md 2> $P/$b.err
  echo "== $b: exit $? after $((SECONDS - t0)) s"; grep "tg64" $P/$b.md
done
echo "end at $SECONDS s"
