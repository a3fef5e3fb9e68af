#!/bin/bash
# What every session's device script shares (sourced from docs/gpu/runN/run.sh,
# run from the repository root on the device machine): unpacking the carried
# bundle, llama.cpp built once (in the background) or brought back, and the
# two timed commands: `run` (moestream run, one --report JSON a run) and `lb`
# (llama-bench, JSON with each repetition's samples).
#
# The caller sets D (the carried folder: bin.txz, golden.txz, lc.txz and, from
# an earlier call, lcbin.txz), P (where reports go; packed into
# $OUT/reports.txz at exit) and STEPS; it calls gpu_setup first.
set -u -o pipefail
LIMIT=${LIMIT:-560}
BIN=$D/bin
LCB=/tmp/lcb  # kept by a warm device between calls (.gpuwork/ is replaced by each call's carry)
lcb=
left() { echo $((LIMIT - SECONDS)); }
pack() { tar cJf $OUT/reports.txz -C "$(dirname $P)" "$(basename $P)"; }

gpu_setup() {
  mkdir -p $P
  exec > >(tee -a $OUT/run.log) 2>&1
  trap pack EXIT
  export LD_LIBRARY_PATH=$PWD/$BIN/lib:${LD_LIBRARY_PATH:-}
  date -u; nproc; grep -m1 "model name" /proc/cpuinfo; free -g | head -2
  nvidia-smi --query-gpu=name,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
  (cd $D && mkdir -p bin golden && tar xJf bin.txz -C bin && tar xJf golden.txz -C golden)
  mkdir -p /work/shared && ln -sfn "$PWD/$D/golden" /work/shared/golden
  $BIN/moestream version | head -3
  [[ $STEPS == *l* ]] && llama_start
}

# A synth model made once in the call (kept by a warm device): preset file flags...
synth() {
  local preset=$1 f=$2; shift 2; local t0=$SECONDS
  [ -f $f ] || { $BIN/moestream synth --preset $preset -o $f "$@" > $P/synth-$preset.log 2>&1
                 echo "synth $preset exit $? after $((SECONDS - t0)) s"; }
}

# PROMPT: the 508-token English prompt (with the synth vocabulary) the runs read.
english_prompt() { PROMPT=$D/prompt.txt; head -c 2200 bench/prompts/long.txt > $PROMPT; }

# llama.cpp's llama-bench and llama-batched-bench: kept from a warm call, else from lcbin.txz, else
# built from lc.txz in the background (183-200 s on 16 cores in run18; the
# timed commands wait for it). A build is not sent back: its CUDA library
# packs to 43 MB, which does not fit the 64 MiB a call carries beside the
# repository's 34 MB (run18), so each call builds its own.
llama_start() {
  if [[ ! -x $LCB/bin/llama-bench && -f $D/lcbin.txz ]]; then
    mkdir -p $LCB && tar xJf $D/lcbin.txz -C $LCB && echo "llama.cpp from lcbin.txz"
  fi
  [[ -x $LCB/bin/llama-bench ]] && { echo "llama.cpp: $LCB/bin/llama-bench"; return; }
  mkdir -p /tmp/lc && tar xJf $D/lc.txz -C /tmp/lc
  (t0=$SECONDS; cmake -S /tmp/lc -B $LCB -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF \
     -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
     -DCMAKE_BUILD_TYPE=Release > $P/lc-configure.log 2>&1 && \
   nice -n 5 cmake --build $LCB -j 15 --target llama-bench llama-batched-bench > $P/lc-build.log 2>&1
   echo "llama.cpp build exit $? after $((SECONDS - t0)) s") &
  lcb=$!
}
llama_wait() { [ -n "$lcb" ] && { wait $lcb; lcb=; echo "llama.cpp build waited for at $SECONDS s"; }; return 0; }

# moestream run on $M: name, flags... (PROMPT, MEM, NGEN, CTX from the caller;
# MS: another moestream binary, for a comparison in the same call).
run() {
  local name=$1; shift; local t0=$SECONDS
  [ $(left) -lt 30 ] && { echo "== $name: skipped, $(left) s left"; return; }
  timeout $(( $(left) - 8 )) ${MS:-$BIN/moestream} run -m $M -f $PROMPT -n ${NGEN:-128} --ignore-eos --temp 0 --draft off \
    --mem ${MEM:-40G} -c ${CTX:-4096} --io ${IO:-buffered} -t 16 --gpu auto --report $P/$name.json "$@" > $P/$name.txt 2> $P/$name.err
  echo "== $name: exit $? after $((SECONDS - t0)) s: $*"
  grep -E "^decode:|^prefill:|^gpu: (VRAM|the host|misses split|--gpu-ram-tier)" $P/$name.err | head -6
}

# A prompt pass of N random tokens (then one token) by moestream on $M:
# name binary N flags... (MEM: --mem, 80G unless set). The prefill line and,
# with --gpu-profile, the stages.
prompt_run() {
  local name=$1 bin=$2 N=$3; shift 3
  [ $(left) -lt 25 ] && { echo "== $name: skipped, $(left) s left"; return; }
  timeout $(( $(left) - 8 )) $bin run -m $M -n 1 --ignore-eos --temp 0 --draft off --mem ${MEM:-80G} -c 8192 \
    --io buffered -t 16 --gpu auto --seed 3 --random-prompt $N --report $P/$name.json "$@" > /dev/null 2> $P/$name.err
  echo "== $name: exit $?"; grep -E "^prefill:|router|attention \+|gate/up|q,k,v|output matvec" $P/$name.err | head -8
}

# A call's start: P=$1/$NAME (default $2) emptied, the bundle unpacked
# (gpu_setup). The caller sets D and STEPS before sourcing this file.
call_start() { P=$1/${NAME:-$2}; rm -rf $P; gpu_setup; }

# The bundle's earlier build (moestream-32.xz) as /tmp/moestream-main, for
# prompt_ab's comparisons.
main_binary() { xz -dc $D/moestream-32.xz > /tmp/moestream-main && chmod +x /tmp/moestream-main; }

# Prompts of 512 and 4,096 random tokens on $M, the bundle's build ("new")
# and main_binary's alternated: label reps. Then (PROF=0: not) a
# --gpu-profile run of each.
prompt_ab() {
  local label=$1 reps=$2 r N
  for r in $(seq 1 $reps); do
    for N in 512 4096; do
      prompt_run ${label}_new_${N}_$r $BIN/moestream $N
      prompt_run ${label}_main_${N}_$r /tmp/moestream-main $N
    done
  done
  [ "${PROF:-1}" = 1 ] || return 0
  for N in 512 4096; do
    prompt_run ${label}_new_${N}_prof $BIN/moestream $N --gpu-profile
    prompt_run ${label}_main_${N}_prof /tmp/moestream-main $N --gpu-profile
  done
}

# llama-bench on $M: name, flags... Each repetition's tok/s is in the JSON's
# samples_ts: the median is read from there. LBARGS replaces the tests
# (-p 512 -n 128): llama-bench appends a repeated -p or -n to the list.
lb() {
  local name=$1; shift; local t0=$SECONDS
  llama_wait
  [ $(left) -lt 50 ] && { echo "== $name: skipped, $(left) s left"; return; }
  timeout $(( $(left) - 8 )) $LCB/bin/llama-bench -m $M -ngl 99 -fa 1 -t 16 ${LBARGS:--p 512 -n 128} -r ${LBR:-3} -o json "$@" \
    > $P/$name.json 2> $P/$name.err
  echo "== $name: exit $? after $((SECONDS - t0)) s: $*"
  python3 -c "
import json, statistics
for r in json.load(open('$P/$name.json')):
    s = r.get('samples_ts') or [r['avg_ts']]
    print('  n_prompt %4d n_gen %4d: median %8.2f tok/s of %s' % (r['n_prompt'], r['n_gen'], statistics.median(s),
          ' '.join('%.2f' % x for x in s)))" || tail -5 $P/$name.err
}

# The GPU tests: the streaming ones (FILTER: another gtest filter), or the
# kernel tests and the whole runtime suite. Logs in $P.
gpu_tests_streaming() {
  echo "== streaming GPU tests"
  (cd $BIN && timeout 200 ./runtime_gpu_test --gtest_filter="${FILTER:-*Streaming*}" > $P/streaming.log 2>&1; echo "exit $? at $SECONDS s")
  grep -E "^\[==========\]|^\[  PASSED|^\[  FAILED|host share|slots for|Failure" $P/streaming.log | head -60
}
# gpu_kernels_test's attention tests alone (a quick verdict), log in $P.
gpu_tests_attention() {
  echo "== attention kernel tests"
  (cd $BIN && timeout 60 ./gpu_kernels_test --gtest_filter='*Attention*' > $P/attention_tests.log 2>&1; echo "exit $?")
  grep -E "^\[  PASSED|^\[  FAILED|^\[       OK|Failure|rel_err|Expected|Which is|heads of" $P/attention_tests.log | head -40
}
gpu_tests_all() {
  local t
  for t in gpu_kernels_test runtime_gpu_test; do
    echo "== $t"
    (cd $BIN && timeout 200 ./$t > $P/$t.log 2>&1; echo "exit $? at $SECONDS s")
    grep -E "^\[==========\]|^\[  PASSED|^\[  FAILED|Failure" $P/$t.log | head -40
  done
}
