#!/bin/bash
# Twenty-fourth session: issue 34's MLA prompts on tensor cores in the split
# form (gpu::attention_tiled_shared, each operand as two f16 halves, three
# MMAs a product; opt-in: --gpu-prefill-mla tiles), against the decode
# kernel's attention in MLA prompt passes (the same binary with
# --gpu-prefill-mla decode, the default) and llama.cpp CUDA.
# STEPS (letters; the order of running is fixed):
#  k  gpu_kernels_test's attention tests first (a quick verdict);
#  t  gpu_kernels_test and runtime_gpu_test (all);
#  b  kbench: the kernel alone, 512 tokens of 128 heads after 0 and 3,584;
#  l  llama.cpp built in the background;
#  d  deepseek-v3 --layers 6 Q4_K_M resident: bench model -p 512,4096 -n 0
#     -r 3, tiles and decode, then llama-bench -p 512,4096 -n 0 -r 3;
#  g  the glm-5 preset cut to 6 layers and 32 experts (as run22/23) the same;
#  q  where qwen3-30b-a3b's prompt time goes (issue 34: pp512 0.64x
#     llama.cpp, never profiled): resident, random prompts as llama-bench's,
#     512 and 4,096 tokens without (time to first token) and with
#     --gpu-profile (kernels one by one, the prefill stage split), then
#     llama-bench -p 512,4096 -n 0.
D=.gpuwork/h24
P=/tmp/r24/${NAME:-c1}
rm -rf $P
STEPS=${STEPS:-ktbldgq}
source docs/gpu/call.sh
gpu_setup
[[ $STEPS == *d* ]] && { synth deepseek-v3 /tmp/dsv3.gguf --layers 6 --type Q4_K_M & syn1=$!; }
[[ $STEPS == *g* ]] && { synth glm-5 /tmp/g5.gguf --layers 6 --experts 32 --type Q4_K_M & syn2=$!; }
[[ $STEPS == *q* ]] && { synth qwen3-30b-a3b /tmp/q30.gguf --type Q4_K_M & syn3=$!; }
[[ $STEPS == *k* ]] && gpu_tests_attention
[[ $STEPS == *t* ]] && gpu_tests_all
[[ $STEPS == *t* ]] && grep -E "^(deepseek|glm)|FAILED" $P/runtime_gpu_test.log | head -30
[[ $STEPS == *b* ]] && { (cd $BIN && timeout 60 ./kbench > $P/kbench.txt 2>&1; echo "kbench exit $?"); cat $P/kbench.txt; }
bench() {  # name model: tiles and decode, then llama-bench
  local name=$1 M=$2 v
  for v in tiles decode; do
    local t0=$SECONDS
    [ $(left) -lt 60 ] && { echo "== $name $v: skipped, $(left) s left"; continue; }
    timeout $(( $(left) - 30 )) $BIN/moestream bench model -m $M -p 512,4096 -n 0 -r 3 -t 16 --gpu auto \
      --run-args "--io buffered --mem 80G --gpu-prefill-mla $v" --json $P/${name}_$v.json \
      > $P/${name}_$v.md 2> $P/${name}_$v.err
    echo "== $name $v: exit $? after $((SECONDS - t0)) s"; cat $P/${name}_$v.md; tail -2 $P/${name}_$v.err
  done
  [[ $STEPS == *l* ]] && LBARGS="-p 512,4096 -n 0" lb ${name}_llama
}
[[ $STEPS == *d* ]] && { wait $syn1; bench dsv3 /tmp/dsv3.gguf; }
[[ $STEPS == *g* ]] && { wait $syn2; bench glm5 /tmp/g5.gguf; }
prun() {  # name, flags...: one run of qwen3-30b-a3b
  local name=$1; shift; local t0=$SECONDS
  [ $(left) -lt 40 ] && { echo "== $name: skipped"; return; }
  timeout $(( $(left) - 8 )) $BIN/moestream run -m /tmp/q30.gguf -n 1 --ignore-eos --temp 0 --draft off --mem 60G \
    -c 8192 --io buffered -t 16 --gpu auto --seed 3 --report $P/$name.json "$@" > $P/$name.txt 2> $P/$name.err
  echo "== $name: exit $? after $((SECONDS - t0)) s: $*"
  grep -E "^prefill:|profile|^  .* us .*%" $P/$name.err | head -24
}
if [[ $STEPS == *q* ]]; then
  wait $syn3
  prun ttft512 --random-prompt 512
  prun ttft4096 --random-prompt 4096
  prun ttft4096b --random-prompt 4096
  prun prof512 --random-prompt 512 --gpu-profile
  prun prof4096 --random-prompt 4096 --gpu-profile
  M=/tmp/q30.gguf
  [[ $STEPS == *l* ]] && LBARGS="-p 512,4096 -n 0" lb q30_llama_pp
fi
echo "end at $SECONDS s"
