#!/bin/bash
# Twenty-sixth session: main's bundle after --gpu-prefill-mla tiles became
# the default. The GPU suites, then deepseek-v3 --layers 6 Q4_K_M resident
# with no --gpu-prefill-mla flag (the default form), as run24's d step ran
# each form by name.
D=.gpuwork/h24
P=/tmp/r26/${NAME:-v1}
rm -rf $P
STEPS=
source docs/gpu/call.sh
gpu_setup
synth deepseek-v3 /tmp/dsv3.gguf --layers 6 --type Q4_K_M & syn=$!
gpu_tests_all
grep -E "MLA prompts in tiles|FAILED" $P/runtime_gpu_test.log | head -12
wait $syn
t0=$SECONDS
timeout $(( $(left) - 10 )) $BIN/moestream bench model -m /tmp/dsv3.gguf -p 512,4096 -n 0 -r 3 -t 16 --gpu auto \
  --run-args "--io buffered --mem 80G" --json $P/dsv3_default.json > $P/dsv3_default.md 2> $P/dsv3_default.err
echo "== dsv3 default: exit $? after $((SECONDS - t0)) s"; cat $P/dsv3_default.md
echo "end at $SECONDS s"
