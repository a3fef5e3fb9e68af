D=.gpuwork/h24; P=/tmp/r26/rt; rm -rf $P; STEPS=; LIMIT=200
source docs/gpu/call.sh
gpu_setup
synth qwen3-30b-a3b /tmp/q30.gguf --type Q4_K_M & syn=$!
gpu_tests_all
grep -E "tensor-core prefill|FAILED" $P/runtime_gpu_test.log | head -20
wait $syn
for N in 512 4096; do for f in "" "--gpu-profile"; do
  $BIN/moestream run -m /tmp/q30.gguf -n 1 --ignore-eos --temp 0 --draft off --mem 60G -c 8192 --io buffered -t 16 --gpu auto --seed 3 --random-prompt $N $f --report $P/r$N${f:+_prof}.json > /dev/null 2> $P/r$N${f:+_prof}.err
  echo "== $N $f: exit $?"; grep -E "^prefill:|router|attention \+|gate/up|q,k,v" $P/r$N${f:+_prof}.err | head -6
done; done
echo "end at $SECONDS s"
