#!/bin/bash
# Seventeenth session's device calls (issue 33), from the repository root
# with .gpuwork/h34 carried: bin.txz (moestream, runtime_gpu_test and
# gpu_kernels_test built on the development machine with nvcc 13.0,
# Release, sm_90, and lib/: Debian 12's liburing, pcre2 and xxhash),
# golden.txz (the six files of the GpuStreaming tests with their exact/
# runs), lc.txz (llama.cpp de3ff81's source from the node-llama-cpp 3.22.1
# npm package, pruned to the CPU and CUDA backends), built into /tmp/lcb in
# the background only where STEPS has l.
# What changed since run15: --gpu-ram-tier cpu's auto split is a rule a
# layer (host_misses: a host part's fixed cost plus its experts against the
# link's copies, measured at start-up) instead of one share, and where the
# VRAM cache holds a token's experts the host's misses are copied into VRAM
# after it computes them (run15's qwen3 4G run lost its hits without it).
# STEPS (letters; the order of running is fixed):
#  a  the streaming GPU tests (the split at 8/8, 4/8 and measured; the
#     admitted copies; bits against resident);
#  t  gpu_kernels_test and the whole runtime_gpu_test (while llama.cpp
#     builds: the timed runs wait for the build);
#  q  qwen3-30b-a3b Q4_K_M synth (realistic routing, docs/routing.md):
#     decode after a 508-token prompt of real text, copy and cpu at 64M, 4G
#     and 8G, and auto;
#  g  gpt-oss-120b --layers 12 (MXFP4) the same at 4G and 64M;
#  u  qwen3-30b-a3b as q with no --gpu-ram-tier (the default, auto) at 4G
#     and 64M: the mode auto picks;
#  d  deepseek-v3 --layers 6 Q4_K_M (routing design on, partly fitted) at
#     4G, copy and cpu;
#  b  qwen3-235b-a22b Q4_K_M cut to 28 layers (40 GiB, more than --gpu-mem
#     8G plus --mem 16G: misses from the drive, io_uring O_DIRECT), copy and
#     cpu, with bench ssd in the same call for the drive bound;
#  l  llama.cpp built (in the background from the start, waited for before
#     its runs) and llama-bench -ncmoe <all> and -ncmoe 26 beside q, -ncmoe
#     12 beside g.
# Every report goes into one archive in $OUT.
set -u -o pipefail
D=.gpuwork/h34
P=/tmp/r17/r  # packed into $OUT/reports.txz (the tool returns a few files a call)
rm -rf /tmp/r17; mkdir -p $P
LIMIT=${LIMIT:-560}
exec > >(tee -a $OUT/run.log) 2>&1
pack() { tar cJf $OUT/reports.txz -C /tmp/r17 r; }
trap pack EXIT
BIN=$D/bin
export LD_LIBRARY_PATH=$PWD/$BIN/lib:${LD_LIBRARY_PATH:-}
date -u; nproc; grep -m1 "model name" /proc/cpuinfo; free -g | head -2
nvidia-smi --query-gpu=name,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
(cd $D && mkdir -p bin golden && tar xJf bin.txz -C bin && tar xJf golden.txz -C golden)
STEPS=${STEPS:-aqg}
LCB=/tmp/lcb
lcb=
# A llama.cpp build brought back by an earlier call (lcbin.txz: its bin/).
if [[ $STEPS == *l* && -f $D/lcbin.txz && ! -x $LCB/bin/llama-bench ]]; then
  mkdir -p $LCB && tar xJf $D/lcbin.txz -C $LCB && echo "llama.cpp from lcbin.txz"
fi
if [[ $STEPS == *l* && ! -x $LCB/bin/llama-bench ]]; then
  mkdir -p /tmp/lc && tar xJf $D/lc.txz -C /tmp/lc
  (t0=$SECONDS; cmake -S /tmp/lc -B $LCB -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF \
     -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
     -DCMAKE_BUILD_TYPE=Release > $P/lc-configure.log 2>&1 && \
   nice -n 5 cmake --build $LCB -j 15 --target llama-bench > $P/lc-build.log 2>&1
   echo "llama.cpp build exit $? after $((SECONDS - t0)) s"
   # Back to the development machine in pieces under the tool's file size,
   # to be carried as lcbin.txz by later calls.
   tar cJf - -C $LCB bin | split -b 15M - $OUT/lcbin.txz.part.) &
  lcb=$!
fi
mkdir -p /work/shared && ln -sfn "$PWD/$D/golden" /work/shared/golden
left() { echo $((LIMIT - SECONDS)); }
M=/tmp/q30.gguf
(if [[ $STEPS == *[qu]* && ! -f $M ]]; then
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
  (cd $BIN && timeout 200 ./runtime_gpu_test --gtest_filter="${FILTER:-*Streaming*}" > $P/streaming.log 2>&1; echo "exit $? at $SECONDS s")
  grep -E "^\[==========\]|^\[  PASSED|^\[  FAILED|host share|hits .* misses|Failure" $P/streaming.log | head -80
fi
if [[ $STEPS == *t* ]]; then
  echo "== kernel tests"
  (cd $BIN && timeout 150 ./gpu_kernels_test > $P/kernels.log 2>&1; echo "exit $? at $SECONDS s")
  grep -E "^\[==========\]|^\[  PASSED|^\[  FAILED|Failure" $P/kernels.log | head -20
  echo "== runtime GPU tests"
  (cd $BIN && timeout 200 ./runtime_gpu_test > $P/runtime_gpu.log 2>&1; echo "exit $? at $SECONDS s")
  grep -E "^\[==========\]|^\[  PASSED|^\[  FAILED|Failure" $P/runtime_gpu.log | head -40
fi
wait $syn
# The timed runs do not share the host's cores with the build.
[ -n "$lcb" ] && { wait $lcb; lcb=; echo "build waited for at $SECONDS s"; }
PROMPT=$D/prompt.txt
$BIN/moestream version | head -3
head -c 2200 bench/prompts/long.txt > $PROMPT  # 508 tokens with the synth vocabulary
run() {  # name, flags...
  local name=$1; shift; local t0=$SECONDS
  [ $(left) -lt 30 ] && { echo "== $name: skipped, $(left) s left"; return; }
  timeout $(( $(left) - 8 )) $BIN/moestream run -m $M -f $PROMPT -n 128 --ignore-eos --temp 0 --draft off \
    --mem ${MEM:-40G} -c 4096 --io buffered -t 16 --gpu auto --report $P/$name.json "$@" > $P/$name.txt 2> $P/$name.err
  echo "== $name: exit $? after $((SECONDS - t0)) s: $*"
  grep -E "^decode:|^gpu: (VRAM|the host|misses split|--gpu-ram-tier)" $P/$name.err
}
lb() {  # name, flags...
  local name=$1; shift; local t0=$SECONDS
  [ -n "$lcb" ] && { wait $lcb; lcb=; echo "build waited for at $SECONDS s"; }
  [ $(left) -lt 50 ] && { echo "== $name: skipped, $(left) s left"; return; }
  timeout $(( $(left) - 8 )) $LCB/bin/llama-bench -m $M -ngl 99 -fa 1 -t 16 -p 512 -n 128 -r 3 -o json "$@" \
    > $P/$name.json 2> $P/$name.err
  echo "== $name: exit $? after $((SECONDS - t0)) s: $*"
  python3 -c "
import json
for r in json.load(open('$P/$name.json')):
    print('  n_prompt %4d n_gen %4d: %8.2f +- %.2f tok/s' % (r['n_prompt'], r['n_gen'], r['avg_ts'], r['stddev_ts']))" || tail -5 $P/$name.err
}
if [[ $STEPS == *q* ]]; then
  run cpu_4g --gpu-mem 4G --gpu-ram-tier cpu
  run copy_4g --gpu-mem 4G
  run cpu_64m --gpu-mem 64M --gpu-ram-tier cpu
  run copy_64m --gpu-mem 64M
  run cpu_8g --gpu-mem 8G --gpu-ram-tier cpu
  run copy_8g --gpu-mem 8G
  [[ $STEPS == *l* ]] && { lb llama_ncmoe48 -ncmoe 48; lb llama_ncmoe26 -ncmoe 26; }
fi
if [[ $STEPS == *u* ]]; then
  run auto_4g --gpu-mem 4G
  run auto_64m --gpu-mem 64M
fi
if [[ $STEPS == *g* ]]; then
  M=/tmp/gptoss.gguf
  run gptoss_cpu_4g --gpu-mem 4G --gpu-ram-tier cpu
  run gptoss_copy_4g --gpu-mem 4G
  run gptoss_cpu_64m --gpu-mem 64M --gpu-ram-tier cpu
  run gptoss_copy_64m --gpu-mem 64M
  [[ $STEPS == *l* ]] && lb llama_gptoss_ncmoe12 -ncmoe 12
fi
if [[ $STEPS == *d* ]]; then
  rm -f /tmp/q30.gguf /tmp/gptoss.gguf
  M=/tmp/dsv3.gguf
  [ -f $M ] || { t0=$SECONDS; $BIN/moestream synth --preset deepseek-v3 --layers 6 --type Q4_K_M -o $M 2>&1 | tail -1; echo "synth dsv3 $((SECONDS-t0)) s"; }
  MEM=80G run dsv3_auto_4g --gpu-mem 4G
  MEM=80G run dsv3_copy_4g --gpu-mem 4G --gpu-ram-tier copy
  [[ $STEPS == *l* ]] && lb llama_dsv3_ncmoe6 -ncmoe 6
fi
if [[ $STEPS == *b* ]]; then
  rm -f /tmp/q30.gguf /tmp/gptoss.gguf /tmp/dsv3.gguf
  M=/tmp/q235.gguf
  [ -f $M ] || { t0=$SECONDS; $BIN/moestream synth --preset qwen3-235b-a22b --type Q4_K_M --layers 28 -o $M 2>&1 | tail -1; echo "synth q235 $((SECONDS-t0)) s"; sync; }
  echo "== bench ssd"
  timeout 100 $BIN/moestream bench ssd -m $M --file /tmp/bench.dat --size 4G --patterns sequential,gguf_expert \
    --seconds 1 --remove --json $P/ssd.json > $P/ssd.txt 2>&1; echo "exit $?"; tail -6 $P/ssd.txt
  big() {  # name, flags...
    local name=$1; shift; local t0=$SECONDS
    [ $(left) -lt 40 ] && { echo "== $name: skipped, $(left) s left"; return; }
    timeout $(( $(left) - 8 )) $BIN/moestream run -m $M -f $PROMPT -n 48 --ignore-eos --temp 0 --draft off \
      --mem 16G -c 2048 -t 16 --report $P/$name.json "$@" > $P/$name.txt 2> $P/$name.err
    echo "== $name: exit $? after $((SECONDS - t0)) s: $*"
    grep -E "^decode:|^gpu: (VRAM|misses split)|drive|read" $P/$name.err | head -6
  }
  head -c 600 bench/prompts/long.txt > $PROMPT
  big q235_copy --gpu auto --gpu-mem 8G
  big q235_cpu --gpu auto --gpu-mem 8G --gpu-ram-tier cpu
fi
echo "end at $SECONDS s"
