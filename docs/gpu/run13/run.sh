#!/bin/bash
# Thirteenth session's device call (issue 33: the host computes part of each
# layer's VRAM misses while the link copies the rest), from the repository
# root with .gpuwork/h33 carried: bin.txz (moestream, runtime_gpu_test and
# gpu_kernels_test built on the development machine with nvcc 13.0, Release,
# sm_90, and lib/: Debian 12's liburing, pcre2 and xxhash), golden.txz (the
# six files of the GpuStreaming tests with their exact/ runs), lc.txz
# (llama.cpp de3ff81's source from the node-llama-cpp 3.22.1 npm package,
# pruned), built here into /tmp/lcb (kept on a warm machine for the next
# call) in the background while the tests run.
# 1. the streaming GPU tests (the split at 8/8, 4/8 and measured, each twice);
# 2. qwen3-30b-a3b Q4_K_M synth (realistic routing, docs/routing.md):
#    decode after a 512-token prompt of real text at --gpu-mem 64M (21 slots:
#    every expert but a layer's worth in RAM), 4G and 8G, copy and cpu
#    (measured share, then a sweep of shares at 64M), beside llama-bench
#    -ngl 99 -ncmoe 48 / 26 -fa 1 -t 16 -p 512 -n 128;
# 3. gpt-oss-120b --layers 12 and deepseek-v3 --layers 6 at 4G and 64M
#    beside -ncmoe all, with time left.
# Every report goes into one archive in $OUT (the tool returns 8 files).
set -u -o pipefail
D=.gpuwork/h33
P=$OUT/r
mkdir -p $P
LIMIT=${LIMIT:-570}
exec > >(tee -a $OUT/run.log) 2>&1
pack() { tar cJf $OUT/reports.txz -C $OUT r; }
trap pack EXIT
BIN=$D/bin
export LD_LIBRARY_PATH=$PWD/$BIN/lib:${LD_LIBRARY_PATH:-}
date -u; nproc; grep -m1 "model name" /proc/cpuinfo; free -g | head -2
nvidia-smi --query-gpu=name,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
(cd $D && mkdir -p bin golden && tar xJf bin.txz -C bin && tar xJf golden.txz -C golden)
LCB=/tmp/lcb
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
syn=
if [ ! -f $M ]; then
  (t0=$SECONDS; $BIN/moestream synth --preset qwen3-30b-a3b --type Q4_K_M -o $M > $P/synth.log 2>&1; echo "synth q30 exit $? after $((SECONDS - t0)) s") &
  syn=$!
fi
if [[ ${STEPS:-a} == *a* ]]; then
echo "== streaming GPU tests"
(cd $BIN && timeout 150 ./runtime_gpu_test --gtest_filter='*Streaming*' > $P/streaming.log 2>&1; echo "exit $? at $SECONDS s")
grep -E "^\[==========\]|^\[  PASSED|^\[  FAILED|host share|hits .* misses|Failure" $P/streaming.log | head -80
fi
[ -n "$syn" ] && wait $syn
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
STEPS=${STEPS:-a}
if [[ $STEPS == *a* ]]; then
  # Resident (every expert in VRAM): the GPU alone, while llama.cpp builds.
  run resident
  [ -n "$lcb" ] && { wait $lcb; lcb=; echo "build waited for at $SECONDS s"; }
  run copy_64m --gpu-mem 64M
  run cpu_64m --gpu-mem 64M --gpu-ram-tier cpu
  lb llama_ncmoe48 -ncmoe 48
  run copy_4g --gpu-mem 4G
  run cpu_4g --gpu-mem 4G --gpu-ram-tier cpu
  run copy_8g --gpu-mem 8G
  run cpu_8g --gpu-mem 8G --gpu-ram-tier cpu
  lb llama_ncmoe26 -ncmoe 26
fi
if [[ $STEPS == *b* ]]; then
  for f in 0 0.5 1; do run cpu_64m_$f --gpu-mem 64M --gpu-ram-tier cpu --gpu-host-share $f; done
  # Resident prompt speed beside llama.cpp's (issue 34); batched decode at
  # --gpu-mem 8G beside llama-batched-bench -ncmoe 26 (issue 36).
  LBARGS="-p 512,4096 -n 0 -r 2" lb llama_resident
  for n in 8 32; do
    [ $(left) -lt 60 ] && break
    t0=$SECONDS
    timeout 100 $BIN/moestream run -m $M --random-prompt 100 -n 128 --ignore-eos --seed 3 --temp 0 --draft off \
      --mem 40G -c 256 --io buffered -t 16 --gpu auto --gpu-mem 8G --parallel $n --report $P/par8g_$n.json \
      > /dev/null 2> $P/par8g_$n.err
    echo "== par8g_$n: exit $? after $((SECONDS - t0)) s"; grep -E "decode:|^gpu: VRAM" $P/par8g_$n.err
  done
  [ $(left) -gt 90 ] && { t0=$SECONDS; timeout $(( $(left) - 10 )) $LCB/bin/llama-batched-bench -m $M -ngl 99 -ncmoe 26 -fa 1 \
      -t 16 -c 20000 -npp 100 -ntg 128 -npl 1,8,32 > $P/llama_batched.txt 2>&1; echo "== llama-batched-bench: exit $? after $((SECONDS - t0)) s"; grep -E "^\|" $P/llama_batched.txt; }
fi
[[ $STEPS == *[cd]* ]] && rm -f $M
other() {  # name, layers, synth flags...
  local name=$1 layers=$2; shift 2
  [ $(left) -lt 150 ] && { echo "== $name: skipped, $(left) s left"; return; }
  M=/tmp/$name.gguf
  t0=$SECONDS; $BIN/moestream synth --preset "$@" -o $M 2>&1 | tail -1; echo "synth $name $((SECONDS-t0)) s"
  run ${name}_cpu_4g --gpu-mem 4G --gpu-ram-tier cpu
  run ${name}_copy_4g --gpu-mem 4G
  lb llama_${name}_ncmoe$layers -ncmoe $layers
  run ${name}_cpu_64m --gpu-mem 64M --gpu-ram-tier cpu
  rm -f $M
}
[[ $STEPS == *c* ]] && other gptoss 12 gpt-oss-120b --layers 12
[[ $STEPS == *d* ]] && MEM=80G other dsv3 6 deepseek-v3 --layers 6 --type Q4_K_M
echo "end at $SECONDS s"
