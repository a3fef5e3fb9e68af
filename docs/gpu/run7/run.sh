#!/bin/bash
# The sixth session's H200 device calls (docs/gpu.md, "Sixth session"):
# beside this script (copied to .gpuwork/s6/ with its inputs), bin.txz
# (bin/: moestream, gpu_kernels_test, runtime_gpu_test, lib/ with the shared
# libraries the device lacks), golden.txz (the covered families' golden
# files and their exact/ logits, gpt-oss's F32 too), tok.txz
# (tokenizer/qwen3-vocab.gguf, for synth) and prompt.txt (English text: the
# first part of README.md). STEPS picks the parts; output: $OUT/s6.tgz,
# unpacked into callN/.
set -u -o pipefail
W=$(cd "$(dirname "$0")" && pwd)
STEPS=${STEPS:-tests oss}
step() { [[ " $STEPS " == *" $1 "* ]]; }
O=/tmp/s6out; rm -rf $O; mkdir -p $O
pack() { tar czf "$OUT/s6.tgz" -C /tmp s6out; }
trap pack EXIT
T0=$SECONDS
cd /tmp && rm -rf bin && tar xJf "$W/bin.txz" && BIN=/tmp/bin
export LD_LIBRARY_PATH=$BIN/lib:${LD_LIBRARY_PATH:-}
ms=$BIN/moestream
G=$(strings $BIN/runtime_gpu_test | grep -m1 '/shared/golden$' || true)
echo "golden dir compiled in: $G"
if [ -n "$G" ]; then mkdir -p "$G" && for t in "$W"/golden.txz "$W"/tok.txz; do [ -f "$t" ] && tar xJf "$t" -C "$G"; done; fi
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,pcie.link.gen.current,pcie.link.width.current,driver_version --format=csv | tee $O/smi.txt
nproc; free -g | head -2; df -h /tmp | tail -1
if step tests; then
  echo "== kernel tests"; $BIN/gpu_kernels_test > $O/kernels_test.log 2>&1; echo "exit $?"; grep -E "PASSED|FAILED|Failure" $O/kernels_test.log | head -30
  echo "== golden tests (copied RAM tier, the default)"; $BIN/runtime_gpu_test > $O/runtime_test.log 2>&1; echo "exit $?"; grep -E "PASSED|FAILED|Failure" $O/runtime_test.log | head -40
  grep -E "relative L2|refused" $O/runtime_test.log > $O/golden_errors.txt; grep gpt-oss $O/golden_errors.txt
  echo "== golden tests (RAM tier mapped)"; MOESTREAM_GPU_MAPPED=1 $BIN/runtime_gpu_test > $O/runtime_test_mapped.log 2>&1; echo "exit $?"; grep -E "PASSED|FAILED|Failure" $O/runtime_test_mapped.log | head
  echo "tests done at $((SECONDS - T0)) s"
  pack
fi
run() {  # name, flags...
  local name=$1; shift
  local t0=$SECONDS
  timeout 240 $ms run -m $M --draft off --report "$O/$name.json" "$@" > "$O/$name.txt" 2> "$O/$name.err"
  echo "== $name ($*): exit $? after $((SECONDS - t0)) s"; grep -E "^(prefill|decode|gpu|error)" "$O/$name.err" | head -8
}
if step oss; then
  # gpt-oss-120b's layer shape (MXFP4 experts, Q8_0 rest), cut to 12 of 36 layers.
  M=/tmp/oss.gguf
  t0=$SECONDS; $ms synth --preset gpt-oss-120b --layers 12 -o $M 2>&1 | tail -1; echo "synth $((SECONDS-t0)) s"; ls -la $M
  A="-f $W/prompt.txt --ignore-eos --seed 3 --temp 0.8 --mem 32G --io buffered"
  run oss_res $A -n 256 --gpu auto
  run oss_pp512 --ignore-eos --seed 3 --temp 0 --mem 32G --io buffered -c 4096 --random-prompt 512 -n 16 --gpu auto
  run oss_gm8 $A -n 256 --gpu auto --gpu-mem 8G
  run oss_gm2 $A -n 128 --gpu auto --gpu-mem 2G
  run oss_cpu $A -n 32 --gpu off -t 16
  cmp $O/oss_res.txt $O/oss_gm8.txt && echo "oss: --gpu-mem 8G gives the resident text"
  echo "oss done at $((SECONDS - T0)) s"
  pack
  rm -f $M
fi
if step osslogits; then
  # GPU against CPU logits on gpt-oss-120b's shapes cut to 3 layers.
  L=/tmp/l_oss.gguf
  $ms synth --preset gpt-oss-120b --layers 3 -o $L 2>&1 | tail -1
  P="Machines that stream experts from a drive are judged by what they read."
  $ms logits -m $L -p "$P" -o /tmp/l_cpu --gpu off -n 8 > $O/logits_cpu_oss.txt 2>&1
  $ms logits -m $L -p "$P" -o /tmp/l_gpu --gpu auto -n 8 --compare /tmp/l_cpu > $O/logits_gpu_oss.txt 2>&1
  echo "== gpt-oss (3 layers): GPU vs CPU"; tail -3 $O/logits_gpu_oss.txt
  rm -f $L
fi
if step bounds; then
  # The device's bounds in this call: HBM (device copy), PCIe (host to device, pinned).
  $ms bench gpu --json $O/bench_gpu.json > $O/bench_gpu.txt 2>&1; echo "bench gpu exit $?"; head -12 $O/bench_gpu.txt
fi
if step hybrid; then
  # Qwen3.5-35B-A3B's shape (Gated DeltaNet with gated attention every 4th layer).
  M=/tmp/q35.gguf
  t0=$SECONDS; $ms synth --preset qwen3.5-35b-a3b -o $M 2>&1 | tail -1; echo "synth $((SECONDS-t0)) s"; ls -la $M
  A="-f $W/prompt.txt --ignore-eos --seed 3 --temp 0.8 --mem 32G --io buffered"
  run q35_res $A -n 256 --gpu auto
  run q35_pp512 --ignore-eos --seed 3 --temp 0 --mem 32G --io buffered -c 4096 --random-prompt 512 -n 16 --gpu auto
  MOESTREAM_GPU_BATCH=0 run q35_pp512_tokens --ignore-eos --seed 3 --temp 0 --mem 32G --io buffered -c 4096 --random-prompt 512 -n 16 --gpu auto
  cmp $O/q35_pp512.txt $O/q35_pp512_tokens.txt && echo "q35 pp512: one pass and token by token give the same text"
  run q35_gm8 $A -n 256 --gpu auto --gpu-mem 8G
  run q35_cpu $A -n 32 --gpu off -t 16
  cmp $O/q35_res.txt $O/q35_gm8.txt && echo "q35: --gpu-mem 8G gives the resident text"
  rm -f $M
  L=/tmp/l_q35.gguf
  $ms synth --preset qwen3.5-35b-a3b --layers 4 -o $L 2>&1 | tail -1
  P="Machines that stream experts from a drive are judged by what they read."
  $ms logits -m $L -p "$P" -o /tmp/l_cpu --gpu off -n 8 > $O/logits_cpu_q35.txt 2>&1
  $ms logits -m $L -p "$P" -o /tmp/l_gpu --gpu auto -n 8 --compare /tmp/l_cpu > $O/logits_gpu_q35.txt 2>&1
  echo "== qwen3.5-35b-a3b (4 layers): GPU vs CPU"; tail -2 $O/logits_gpu_q35.txt
  rm -f $L
  echo "hybrid done at $((SECONDS - T0)) s"
  pack
fi
if step mla; then
  # DeepSeek V3's shape (MLA, group-limited sigmoid routing, 3 dense layers), cut to 6 of 61 layers.
  M=/tmp/ds3.gguf
  t0=$SECONDS; $ms synth --preset deepseek-v3 --layers 6 -o $M 2>&1 | tail -1; echo "synth $((SECONDS-t0)) s"; ls -la $M
  A="-f $W/prompt.txt --ignore-eos --seed 3 --temp 0.8 --mem 48G --io buffered"
  run ds3_res $A -n 128 --gpu auto
  run ds3_pp512 --ignore-eos --seed 3 --temp 0 --mem 48G --io buffered -c 4096 --random-prompt 512 -n 16 --gpu auto
  MOESTREAM_GPU_BATCH=0 run ds3_pp512_tokens --ignore-eos --seed 3 --temp 0 --mem 48G --io buffered -c 4096 --random-prompt 512 -n 16 --gpu auto
  cmp $O/ds3_pp512.txt $O/ds3_pp512_tokens.txt && echo "ds3 pp512: one pass and token by token give the same text"
  run ds3_gm8 $A -n 64 --gpu auto --gpu-mem 8G
  run ds3_cpu $A -n 16 --gpu off -t 16
  cmp <(head -c 300 $O/ds3_res.txt) <(head -c 300 $O/ds3_gm8.txt) && echo "ds3: --gpu-mem 8G gives the resident text (first 300 bytes; -n differs)"
  rm -f $M
  L=/tmp/l_ds3.gguf
  $ms synth --preset deepseek-v3 --layers 4 -o $L 2>&1 | tail -1
  P="Machines that stream experts from a drive are judged by what they read."
  $ms logits -m $L -p "$P" -o /tmp/l_cpu --gpu off -n 8 > $O/logits_cpu_ds3.txt 2>&1
  $ms logits -m $L -p "$P" -o /tmp/l_gpu --gpu auto -n 8 --compare /tmp/l_cpu > $O/logits_gpu_ds3.txt 2>&1
  echo "== deepseek-v3 (4 layers): GPU vs CPU"; tail -2 $O/logits_gpu_ds3.txt
  rm -f $L
  echo "mla done at $((SECONDS - T0)) s"
  pack
fi
if step mla2; then
  # call 7: the MLA prefill passes (and the decode graph captured after a pass), on the deepseek-v3 cut.
  M=/tmp/ds3.gguf
  t0=$SECONDS; $ms synth --preset deepseek-v3 --layers 6 -o $M 2>&1 | tail -1; echo "synth $((SECONDS-t0)) s"
  A="-f $W/prompt.txt --ignore-eos --seed 3 --temp 0.8 --mem 48G --io buffered"
  run ds3_res $A -n 128 --gpu auto
  run ds3_pp512 --ignore-eos --seed 3 --temp 0 --mem 48G --io buffered -c 4096 --random-prompt 512 -n 16 --gpu auto
  MOESTREAM_GPU_BATCH=0 run ds3_pp512_tokens --ignore-eos --seed 3 --temp 0 --mem 48G --io buffered -c 4096 --random-prompt 512 -n 16 --gpu auto
  cmp $O/ds3_pp512.txt $O/ds3_pp512_tokens.txt && echo "ds3 pp512: one pass and token by token give the same text"
  run ds3_gm8 $A -n 64 --gpu auto --gpu-mem 8G
  cmp <(head -c 300 $O/ds3_res.txt) <(head -c 300 $O/ds3_gm8.txt) && echo "ds3: --gpu-mem 8G gives the resident text (first 300 bytes)"
  rm -f $M
  pack
fi
if step l4; then
  # Llama 4 Scout's shape (chunked / unroped attention, 16 experts top-1 on weighted inputs, a shared expert), cut to 12 of 48 layers.
  M=/tmp/l4.gguf
  t0=$SECONDS; $ms synth --preset llama4-scout --layers 12 -o $M 2>&1 | tail -1; echo "synth $((SECONDS-t0)) s"; ls -la $M
  A="-f $W/prompt.txt --ignore-eos --seed 3 --temp 0.8 --mem 32G --io buffered"
  run l4_res $A -n 128 --gpu auto
  run l4_pp512 --ignore-eos --seed 3 --temp 0 --mem 32G --io buffered -c 4096 --random-prompt 512 -n 16 --gpu auto
  MOESTREAM_GPU_BATCH=0 run l4_pp512_tokens --ignore-eos --seed 3 --temp 0 --mem 32G --io buffered -c 4096 --random-prompt 512 -n 16 --gpu auto
  cmp $O/l4_pp512.txt $O/l4_pp512_tokens.txt && echo "l4 pp512: one pass and token by token give the same text"
  run l4_gm8 $A -n 128 --gpu auto --gpu-mem 4G
  run l4_cpu $A -n 16 --gpu off -t 16
  cmp $O/l4_res.txt $O/l4_gm8.txt && echo "l4: --gpu-mem 4G gives the resident text"
  rm -f $M
  L=/tmp/l_l4.gguf
  $ms synth --preset llama4-scout --layers 4 -o $L 2>&1 | tail -1
  P="Machines that stream experts from a drive are judged by what they read."
  $ms logits -m $L -p "$P" -o /tmp/l_cpu --gpu off -n 8 > $O/logits_cpu_l4.txt 2>&1
  $ms logits -m $L -p "$P" -o /tmp/l_gpu --gpu auto -n 8 --compare /tmp/l_cpu > $O/logits_gpu_l4.txt 2>&1
  echo "== llama4-scout (4 layers): GPU vs CPU"; tail -2 $O/logits_gpu_l4.txt
  rm -f $L
  echo "l4 done at $((SECONDS - T0)) s"
  pack
fi
if step q30prof; then
  # Where a resident decode token's time goes: the stage profile (kernels
  # launched one by one), graphs off, and graphs with launches not overlapped.
  M=/tmp/q30.gguf
  $ms synth --preset qwen3-30b-a3b --type Q4_K_M -o $M 2>&1 | tail -1
  A="-f $W/prompt.txt -n 128 --ignore-eos --seed 3 --temp 0.8 --gpu auto --mem 24G --io buffered"
  run q30_res $A
  MOESTREAM_GPU_PROFILE=1 run q30_res_prof $A
  grep -A14 "decode profile" $O/q30_res_prof.err
  MOESTREAM_GPU_GRAPHS=0 run q30_res_nograph $A
  MOESTREAM_GPU_PDL=0 run q30_res_nopdl $A
  rm -f $M
fi
if step q30; then
  # The qwen3-30b-a3b synth: resident decode and prefill with this call's binary.
  M=/tmp/q30.gguf
  t0=$SECONDS; $ms synth --preset qwen3-30b-a3b --type Q4_K_M -o $M 2>&1 | tail -1; echo "synth $((SECONDS-t0)) s"
  run q30_pp512 --ignore-eos --seed 3 --temp 0 --gpu auto --mem 24G --io buffered -c 4096 --random-prompt 512 -n 16
  run q30_en_res -f $W/prompt.txt -n 256 --ignore-eos --seed 3 --temp 0.8 --gpu auto --mem 24G --io buffered
  rm -f $M
fi
echo "all done at $((SECONDS - T0)) s"
