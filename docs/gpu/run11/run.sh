#!/bin/bash
# Issue 32 item 3 (batched GPU decode), one call of the device tool from the
# repository root with .gpuwork/b32 carried: bin.txz (moestream and
# runtime_gpu_test built here with nvcc, and the three shared libraries
# they need beside libc), golden.txz (the golden files of the families the
# GPU covers, but the F32 files and qwen3moe's types the kernels do not take and its F16/BF16: the
# working tree travels in 64 MiB).
# The GPU tests (the new batched cases among them), then qwen3-30b-a3b
# Q4_K_M synth: `run --parallel N` at 1, 8, 32 sequences, 128 tokens each
# after a 100-token random prompt, resident and at --gpu-mem 8G.
set -u -o pipefail
D=.gpuwork/b32
P=$OUT
exec > >(tee -a $P/run.log) 2>&1
export LD_LIBRARY_PATH=$PWD/$D/bin/lib:${LD_LIBRARY_PATH:-}
date -u; nproc
nvidia-smi --query-gpu=name,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
(cd $D && tar xJf bin.txz && mkdir -p golden && tar xJf golden.txz -C golden)
mkdir -p /work/shared && ln -sfn "$PWD/$D/golden" /work/shared/golden
BIN=$D/bin
(cd $D && ./bin/moestream synth --preset qwen3-30b-a3b --type Q4_K_M -o q30.gguf > synth.log 2>&1; echo "synth exit $? at $SECONDS s") &
syn=$!
echo "== gpu tests"
(cd $D/bin && ./runtime_gpu_test > $P/gpu_test.log 2>&1; echo "runtime_gpu_test exit $? at $SECONDS s")
grep -E "^\[  (PASSED|SKIPPED|FAILED) |^\[==========\]|Failure" $P/gpu_test.log | grep -v SKIPPED | head -40
grep -c "SKIPPED \]" $P/gpu_test.log
wait $syn
par() {  # name, N, flags...
  local name=$1 n=$2; shift 2; local t0=$SECONDS
  timeout 150 $BIN/moestream run -m $D/q30.gguf --random-prompt 100 -n 128 --ignore-eos --seed 3 --temp 0 --draft off \
    --mem 100G -c 256 --io buffered -t 16 --gpu auto --parallel $n --report $P/$name.json "$@" > $D/$name.txt 2> $D/$name.err
  echo "== $name: exit $? after $((SECONDS - t0)) s: --parallel $n $*"; grep -E "decode:|prefill:|^gpu: (VRAM|every)" $D/$name.err
}
par res1 1
par res8 8
par res32 32
par g8_1 1 --gpu-mem 8G
par g8_8 8 --gpu-mem 8G
par g8_32 32 --gpu-mem 8G
echo "== first sequence's text equal across N (cmp prints nothing when equal)"
cmp $D/res1.txt $D/res8.txt; cmp $D/res1.txt $D/res32.txt; cmp $D/res1.txt $D/g8_32.txt
python3 - <<'PY'
import json, os
P = os.environ['OUT']
for n in ['res1', 'res8', 'res32', 'g8_1', 'g8_8', 'g8_32']:
    try:
        j = json.load(open(f'{P}/{n}.json'))
    except Exception as e:
        print(n, 'no report', e); continue
    g = j.get('gpu', {}); v = g.get('vram_tier', {}); b = g.get('batched_decode', {})
    d = v.get('decode', {})
    print(f"{n}: decode {j['decode']['tokens']} tok {j['decode']['tokens_per_second']:.1f} tok/s; batched passes {b.get('passes')} rows/pass {b.get('rows_per_pass')}; decode hit {d.get('hit_rate')} copied MB/token {d.get('copied_bytes_per_token', 0)/1e6:.2f}")
PY
echo "end at $SECONDS s"
