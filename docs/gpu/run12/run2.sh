#!/bin/bash
# The same call's second half (run.sh's reports beyond the first eight files
# did not come back): on the warm machine with run.sh's .gpuwork/fin
# unpacked, pp512 pass/tensor of the three synths and `run --parallel 1, 8,
# 32` resident again, everything packed into one reports.tgz.
set -u -o pipefail
D=.gpuwork/fin
P=$OUT/r
mkdir -p $P
exec > >(tee -a $P/run2.log) 2>&1
BIN=$D/bin
export LD_LIBRARY_PATH=$PWD/$BIN/lib:${LD_LIBRARY_PATH:-}
ls $BIN >/dev/null || { (cd $D && mkdir -p bin golden && tar xJf bin.txz -C bin && tar xJf golden.txz -C golden); }
bench() {  # name, bench model flags... (the model: $M)
  local name=$1; shift; local t0=$SECONDS
  timeout 100 $BIN/moestream bench model -m $M -n 0 --gpu auto --run-args "--mem 24G --io buffered -c 8192" \
    --json $P/$name.json "$@" > $P/$name.md 2> $P/$name.err
  echo "== bench $name: exit $? after $((SECONDS - t0)) s: $*"; cat $P/$name.md
}
par() {  # name, N, flags...
  local name=$1 n=$2; shift 2; local t0=$SECONDS
  timeout 60 $BIN/moestream run -m $M --random-prompt 100 -n 128 --ignore-eos --seed 3 --temp 0 --draft off \
    --mem 100G -c 256 --io buffered -t 16 --gpu auto --parallel $n --report $P/$name.json "$@" > $P/$name.txt 2> $P/$name.err
  echo "== $name: exit $? after $((SECONDS - t0)) s: --parallel $n $*"; grep -E "decode:|parallel:" $P/$name.err
}
M=$D/q30.gguf
$BIN/moestream synth --preset qwen3-30b-a3b --type Q4_K_M -o $M 2>&1 | tail -1
for n in 1 8 32; do par res$n $n; done
bench pp512 -p 512 -r 3 --gpu-prefill pass,tensor
rm -f $M
for m in "gptoss gpt-oss-120b --layers 12" "dsv3 deepseek-v3 --layers 6 --type Q4_K_M"; do
  set -- $m; name=$1; shift; M=$D/$name.gguf
  $BIN/moestream synth --preset "$@" -o $M 2>&1 | tail -1
  bench pp512-$name -p 512 -r 2 --gpu-prefill pass,tensor
  rm -f $M
done
tar czf $OUT/reports.tgz -C $P .
echo "end at $SECONDS s"
