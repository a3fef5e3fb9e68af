#!/bin/bash
# Second call: the streaming tests after insert_misses (host-computed misses
# then copied into VRAM), and decode on a 12-layer cut of qwen3-30b-a3b at
# --gpu-mem 1G, copy against cpu. .gpuwork/hy2 carried (bin.txz, golden.txz).
set -u -o pipefail
D=.gpuwork/hy2; P=$OUT
exec > >(tee -a $P/run2.log) 2>&1
BIN=$D/bin; export LD_LIBRARY_PATH=$BIN/lib
(cd $D && tar xJf bin.txz && mkdir -p golden && tar xJf golden.txz -C golden)
mkdir -p /work/shared && ln -sfn "$PWD/$D/golden" /work/shared/golden
$BIN/runtime_gpu_test --gtest_filter='*Streaming*' > $P/streaming2.log 2>&1; echo "tests exit $? at $SECONDS s"
grep -E "^\[  (PASSED|SKIPPED|FAILED) |relative L2|hits|Failure" $P/streaming2.log | head -30
$BIN/moestream synth --preset qwen3-30b-a3b --type Q4_K_M --layers 12 -o $D/q12.gguf 2>&1 | tail -1
for m in copy cpu; do
  timeout 40 $BIN/moestream run -m $D/q12.gguf --random-prompt 32 -n 64 --ignore-eos --seed 3 --temp 0 --draft off \
    --mem 24G --io buffered -t 16 --gpu auto --gpu-mem 1G --gpu-ram-tier $m --report $P/q12_$m.json > $P/q12_$m.txt 2> $P/q12_$m.err
  echo "== $m exit $? at $SECONDS s"; grep -E "decode:|^gpu: (VRAM|host)" $P/q12_$m.err
done
