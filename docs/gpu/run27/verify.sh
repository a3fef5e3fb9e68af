#!/bin/bash
# Twenty-seventh session: grouped-query prompt attention on tensor cores
# (issue 34). Run from the repository root with .gpuwork/h27 carried
# (bin.txz of this change, golden.txz of the GQA families' Q8_0 files and
# exact/, moestream-old.xz: main 8feaa7a's GPU code, the float32 tiles;
# lc.txz where STEPS has l). STEPS:
#  t  gpu_kernels_test and runtime_gpu_test;
#  k  kbench (docs/gpu/run27/kbench.cpp): the kernels alone;
#  q  qwen3-30b-a3b Q4_K_M synth resident, random prompts of 512 and 4,096
#     tokens at -ub 512, 2048 (new only) and 4096, this change against the old binary,
#     interleaved, twice; a --gpu-profile run of each at 4,096 / -ub 4096;
#  l  llama.cpp CUDA (de3ff81) built, llama-bench -p 512,4096 -n 0 on the
#     same file, resident (-ngl 99 -fa 1), and -ub 4096;
#  d  (issue 33) deepseek-v3 --layers 6 Q4_K_M at the least VRAM it takes,
#     --gpu-mem 256M (a layer's 8 experts of 27.9 MB: hybrid.sh's 64M was
#     refused), after the 508-token English prompt, x3; with l, llama-bench
#     -ncmoe 6 -p 512 -n 128 beside it.
D=${D:-.gpuwork/h27}
STEPS=${STEPS:-tkq}
source docs/gpu/call.sh
call_start /tmp/r27 v
[[ $STEPS == *[ql]* ]] && { synth qwen3-30b-a3b /tmp/q30.gguf --type Q4_K_M & syn=$!; }
if [[ $STEPS == *t* ]]; then
  gpu_tests_all
  grep -E "AttentionTiled|FAILED" $P/gpu_kernels_test.log | head -12
  grep -E "^\[  FAILED|GpuGolden.*(OK|FAILED)" $P/runtime_gpu_test.log | head -60
fi
if [[ $STEPS == *k* ]]; then
  echo "== kbench"; timeout 120 $BIN/kbench > $P/kbench.txt 2>&1; echo "exit $?"; cat $P/kbench.txt
fi
[[ $STEPS == *[ql]* ]] && wait $syn
if [[ $STEPS == *q* && -f $D/moestream-old.xz ]]; then
  xz -dc $D/moestream-old.xz > /tmp/moestream-old && chmod +x /tmp/moestream-old
  M=/tmp/q30.gguf
  one() { local name=$1 bin=$2 N=$3 ub=$4; shift 4; MEM=60G prompt_run $name $bin $N -ub $ub "$@"; }
  for r in 1 2; do
    for N in 512 4096; do
      for ub in 512 2048 4096; do
        [[ $N == 512 && $ub != 512 ]] && continue
        one new_${N}_ub${ub}_$r $BIN/moestream $N $ub
        [[ $ub != 2048 ]] && one old_${N}_ub${ub}_$r /tmp/moestream-old $N $ub
      done
    done
  done
  one new_4096_ub4096_prof $BIN/moestream 4096 4096 --gpu-profile
  one old_4096_ub4096_prof /tmp/moestream-old 4096 4096 --gpu-profile
fi
if [[ $STEPS == *l* ]]; then
  M=/tmp/q30.gguf
  LBARGS="-p 512,4096 -n 0" lb llama_q30_pp
  LBARGS="-p 4096 -n 0 -ub 4096" lb llama_q30_pp4096_ub4096
fi
if [[ $STEPS == *d* ]]; then
  synth deepseek-v3 /tmp/dsv3.gguf --layers 6 --type Q4_K_M
  english_prompt
  M=/tmp/dsv3.gguf
  [[ $STEPS == *l* ]] && LBARGS="-p 512 -n 128" lb llama_dsv3_ncmoe6 -ncmoe 6
  for r in 1 2 3; do MEM=80G run dsv3_auto_256m_$r --gpu-mem 256M; done
fi
echo "end at $SECONDS s"
