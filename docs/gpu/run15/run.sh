#!/bin/bash
# Fifteenth session's device calls (issues 33 and 34), from the repository root with
# .gpuwork/h34 carried: bin.txz (moestream, runtime_gpu_test and
# gpu_kernels_test built on the development machine with nvcc 13.0, Release,
# sm_90, and lib/: Debian 12's liburing, pcre2 and xxhash), golden.txz (the
# six files of the GpuStreaming tests with their exact/ runs), lc.txz
# (llama.cpp de3ff81's source from the node-llama-cpp 3.22.1 npm package,
# pruned), built here into /tmp/lcb (kept on a warm machine for the next
# call) in the background while the tests run and the models are made.
# What changed since run13: with --gpu-ram-tier cpu and a RAM tier that
# holds every expert, the next layer's predicted experts are copied ahead
# only up to the link's share (the host computes every miss left), and the
# copies start before the host computes this layer's part.
# Binaries: moestream, runtime_gpu_test and gpu_kernels_test of main as
# packed (prefill attention in tiles behind --gpu-prefill-attention tiles).
# STEPS (letters; the order of running is fixed):
#  a  the streaming GPU tests (the split at 8/8, 4/8 and measured, each twice;
#     the routing profile);
#  t  kernel tests and all GPU tests on the six files;
#  p  resident prompts of 512 and 4096 tokens, attention decode against
#     tiles, beside llama-bench -p 512,4096;
#  q  qwen3-30b-a3b Q4_K_M synth (realistic routing, docs/routing.md):
#     decode after a 510-token prompt of real text at --gpu-mem 64M and 4G,
#     copy and cpu (measured share, then 1/2 and 1/4 at 64M), beside
#     llama-bench -ngl 99 -ncmoe 48 -fa 1 -t 16 -p 512 -n 128;
#  g  gpt-oss-120b --layers 12 (MXFP4) at 4G and 64M, copy and cpu, beside
#     -ncmoe 12 (every expert on the host);
#  d  deepseek-v3 --layers 6 Q4_K_M the same, beside -ncmoe 6.
# For g and d also resident prompts of 512 and 4096 tokens beside
# llama-bench -p 512,4096. (Calls 2 and 3 also packed llama.cpp's bin/ to
# carry later: 43 MB compressed, over the 16 MiB a returned file may have.)
#  v  qwen3-30b-a3b prompts of 512 and 4096 tokens with --gpu-mem 8G (the
#     copy path, each expert of a pass copied once) beside llama-bench
#     -ncmoe 26 -p 512,4096 (about the same VRAM for experts).
# Every report goes into one archive in $OUT (the tool returns 8 files).
set -u -o pipefail
D=.gpuwork/h34
P=$OUT/r
mkdir -p $P
LIMIT=${LIMIT:-570}
mkdir -p /tmp/moestream-call && date -u >> /tmp/moestream-call/calls  # a warm machine keeps it
exec > >(tee -a $OUT/run.log) 2>&1
pack() { tar cJf $OUT/reports.txz -C $OUT r; }
trap pack EXIT
BIN=$D/bin
export LD_LIBRARY_PATH=$PWD/$BIN/lib:${LD_LIBRARY_PATH:-}
date -u; nproc; grep -m1 "model name" /proc/cpuinfo; free -g | head -2
nvidia-smi --query-gpu=name,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
(cd $D && mkdir -p bin golden && tar xJf bin.txz -C bin && tar xJf golden.txz -C golden)
LCB=/tmp/lcb
[ -f $D/lcb.txz ] && [ ! -x $LCB/bin/llama-bench ] && mkdir -p $LCB && tar xJf $D/lcb.txz -C $LCB
if [ ! -x $LCB/bin/llama-batched-bench ]; then
  mkdir -p /tmp/lc && tar xJf $D/lc.txz -C /tmp/lc
  (t0=$SECONDS; cmake -S /tmp/lc -B $LCB -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF \
     -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
     -DCMAKE_BUILD_TYPE=Release > $P/lc-configure.log 2>&1 && \
   nice -n 5 cmake --build $LCB -j 15 --target llama-bench llama-batched-bench > $P/lc-build.log 2>&1
   echo "llama.cpp build exit $? after $((SECONDS - t0)) s") &
  lcb=$!
else
  lcb=
fi
mkdir -p /work/shared && ln -sfn "$PWD/$D/golden" /work/shared/golden
left() { echo $((LIMIT - SECONDS)); }
M=/tmp/q30.gguf  # outside the repository: kept on a warm machine between calls
STEPS=${STEPS:-atqg}
# The models, one after another, while llama.cpp builds.
(if [[ $STEPS == *[qptv]* && ! -f $M ]]; then
   t0=$SECONDS; $BIN/moestream synth --preset qwen3-30b-a3b --type Q4_K_M -o $M > $P/synth.log 2>&1
   echo "synth q30 exit $? after $((SECONDS - t0)) s"
 fi
 if [[ $STEPS == *g* && ! -f /tmp/gptoss.gguf ]]; then
   t0=$SECONDS; $BIN/moestream synth --preset gpt-oss-120b --layers 12 -o /tmp/gptoss.gguf > $P/synth-gptoss.log 2>&1
   echo "synth gptoss exit $? after $((SECONDS - t0)) s"
 fi) &
syn=$!
if [[ $STEPS == *a* ]]; then
echo "== streaming GPU tests"
(cd $BIN && timeout 150 ./runtime_gpu_test --gtest_filter="${FILTER:-*Streaming*}" > $P/streaming.log 2>&1; echo "exit $? at $SECONDS s")
grep -E "^\[==========\]|^\[  PASSED|^\[  FAILED|host share|hits .* misses|Failure" $P/streaming.log | head -80
fi
wait $syn
PROMPT=$D/prompt.txt
$BIN/moestream version | head -5
# A prompt of real English text (the repo's public-domain text).
head -c 2200 bench/prompts/long.txt > $PROMPT  # 510 tokens with the synth vocabulary
run() {  # name, flags...
  local name=$1; shift; local t0=$SECONDS
  [ $(left) -lt 40 ] && { echo "== $name: skipped, $(left) s left"; return; }
  timeout $(( $(left) - 10 )) $BIN/moestream run -m $M -f $PROMPT -n 128 --ignore-eos --temp 0 --draft off \
    --mem ${MEM:-40G} -c 4096 --io buffered -t 16 --gpu auto --report $P/$name.json "$@" > $P/$name.txt 2> $P/$name.err
  echo "== $name: exit $? after $((SECONDS - t0)) s: $*"
  grep -E "^prefill:|^decode:|decode time|^gpu: (VRAM|host|misses|RAM tier filled|setup)" $P/$name.err
}
LB=$LCB/bin/llama-bench
lb() {  # name, flags...
  local name=$1; shift; local t0=$SECONDS
  [ -n "$lcb" ] && { wait $lcb; lcb=; echo "build waited for at $SECONDS s"; }
  [ $(left) -lt 60 ] && { echo "== $name: skipped, $(left) s left"; return; }
  timeout $(( $(left) - 10 )) $LB -m $M -ngl 99 -fa 1 -t 16 ${LBARGS:--p 512 -n 128 -r 3} -o json "$@" > $P/$name.json 2> $P/$name.err
  echo "== $name: exit $? after $((SECONDS - t0)) s: $*"
  python3 -c "
import json,sys
for r in json.load(open('$P/$name.json')):
    print('  n_prompt %4d n_gen %4d: %8.2f +- %.2f tok/s' % (r['n_prompt'], r['n_gen'], r['avg_ts'], r['stddev_ts']))" || tail -5 $P/$name.err
}
pp() {  # name, prompt length, flags...: resident prefill of a random prompt
  local name=$1 len=$2; shift 2; local t0=$SECONDS
  [ $(left) -lt 40 ] && { echo "== $name: skipped, $(left) s left"; return; }
  timeout 120 $BIN/moestream run -m $M --random-prompt $len -n 8 --seed 3 --temp 0 --draft off --mem ${MEM:-40G} -c 8192 \
    --io buffered -t 16 --gpu auto --report $P/$name.json "$@" > /dev/null 2> $P/$name.err
  echo "== $name: exit $? after $((SECONDS - t0)) s: $*"; grep -E "^prefill:|^gpu: VRAM" $P/$name.err
}
# While llama.cpp builds (the host's cores busy with it, nice 5): the
# kernel and GPU tests, then resident prompts of 512 and 4096 tokens with
# the decode kernel's attention and in tiles, both GPU-bound.
if [[ $STEPS == *t* ]]; then
  echo "== kernel tests"
  (cd $BIN && timeout 120 ./gpu_kernels_test > $P/kernels.log 2>&1; echo "exit $? at $SECONDS s")
  grep -E "^\[==========\]|^\[  PASSED|^\[  FAILED|Failure" $P/kernels.log | head -20
  echo "== runtime GPU tests"
  (cd $BIN && timeout 150 ./runtime_gpu_test > $P/runtime_gpu.log 2>&1; echo "exit $? at $SECONDS s")
  grep -E "^\[==========\]|^\[  PASSED|^\[  FAILED|Failure|prompt's VRAM hits|tensor-core prefill against" $P/runtime_gpu.log | head -60
fi
if [[ $STEPS == *p* ]]; then
  for len in 512 4096; do
    for b in decode tiles; do pp pp${len}_$b $len --gpu-prefill-attention $b; done
  done
fi
if [[ $STEPS == *q* ]]; then
  run resident
  [ -n "$lcb" ] && { wait $lcb; lcb=; echo "build waited for at $SECONDS s"; }
  run copy_64m --gpu-mem 64M
  run cpu_64m --gpu-mem 64M --gpu-ram-tier cpu
  run cpu_64m_h50 --gpu-mem 64M --gpu-ram-tier cpu --gpu-host-share 0.5
  lb llama_ncmoe48 -ncmoe 48
  run copy_4g --gpu-mem 4G
  run cpu_4g --gpu-mem 4G --gpu-ram-tier cpu
  # The mapped RAM tier (misses read over the bus by the kernels, a token
  # one CUDA graph, no wait a layer on the host).
  run map_4g --gpu-mem 4G --gpu-ram-tier map
  run cpu_64m_h25 --gpu-mem 64M --gpu-ram-tier cpu --gpu-host-share 0.25
fi
if [[ $STEPS == *v* ]]; then
  pp v_pp512_8g 512 --gpu-mem 8G; pp v_pp4096_8g 4096 --gpu-mem 8G
  pp v_pp4096_8g_decode 4096 --gpu-mem 8G --gpu-prefill-attention decode
  LBARGS="-p 512,4096 -n 0 -r 2" lb llama_ncmoe26_pp -ncmoe 26
fi
[[ $STEPS == *p* ]] && LBARGS="-p 512,4096 -n 0 -r 2" lb llama_resident_pp
other() {  # name, layers, synth flags...
  local name=$1 layers=$2; shift 2
  [ $(left) -lt 100 ] && { echo "== $name: skipped, $(left) s left"; return; }
  M=/tmp/$name.gguf
  [ -f $M ] || { t0=$SECONDS; $BIN/moestream synth --preset "$@" -o $M 2>&1 | tail -1; echo "synth $name $((SECONDS-t0)) s"; }
  [ -n "$lcb" ] && { wait $lcb; lcb=; echo "build waited for at $SECONDS s"; }
  pp ${name}_pp512 512; pp ${name}_pp4096 4096
  run ${name}_cpu_4g --gpu-mem 4G --gpu-ram-tier cpu
  run ${name}_copy_4g --gpu-mem 4G
  lb llama_${name}_ncmoe$layers -ncmoe $layers
  run ${name}_cpu_64m --gpu-mem 64M --gpu-ram-tier cpu
  run ${name}_copy_64m --gpu-mem 64M
  LBARGS="-p 512,4096 -n 0 -r 2" lb llama_${name}_pp
}
[[ $STEPS == *g* ]] && other gptoss 12 gpt-oss-120b --layers 12
[[ $STEPS == *d* ]] && { rm -f /tmp/q30.gguf; MEM=80G other dsv3 6 deepseek-v3 --layers 6 --type Q4_K_M; }
echo "end at $SECONDS s"
