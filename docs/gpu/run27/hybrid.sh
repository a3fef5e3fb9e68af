#!/bin/bash
# Twenty-seventh session: issue 33's whole target table in one device start,
# llama.cpp (de3ff81, CUDA, built in the first call, kept by the warm machine
# for the second) beside moestream, medians of three on both sides. Run from
# the repository root with .gpuwork/h24 carried (docs/gpu/call.sh says what is
# in it); NAME names the reports folder, STEPS picks the parts:
#  l  llama.cpp built (or kept from a warm call) and its runs beside q, g, d;
#  q  qwen3-30b-a3b Q4_K_M synth (realistic routing, docs/routing.md): decode
#     after the 508-token English prompt at --gpu-mem 4G, 64M and 8G (auto),
#     three each interleaved; llama -ncmoe 48 (every expert on the CPU) and 26;
#  g  gpt-oss-120b --layers 12 MXFP4 (fitted routing): 4G and 64M x3;
#     llama -ncmoe 12;
#  d  deepseek-v3 --layers 6 Q4_K_M (MLA routing refitted, route37g): 4G and
#     64M x3, cpu and copy at 4G once; llama -ncmoe 6.
# llama-bench runs -p 512 -n 128: its pp512 is set beside our 508-token
# prompt pass at 4G (issue 33's prompt target), its tg128 beside our decode.
D=.gpuwork/h24
P=/tmp/r27/${NAME:-hybrid}
rm -rf $P
STEPS=${STEPS:-lq}
source docs/gpu/call.sh
gpu_setup
([[ $STEPS == *q* ]] && synth qwen3-30b-a3b /tmp/q30.gguf --type Q4_K_M
 [[ $STEPS == *g* ]] && synth gpt-oss-120b /tmp/gptoss.gguf --layers 12
 [[ $STEPS == *d* ]] && synth deepseek-v3 /tmp/dsv3.gguf --layers 6 --type Q4_K_M; true) &
syn=$!
wait $syn
llama_wait
english_prompt
if [[ $STEPS == *q* ]]; then
  M=/tmp/q30.gguf
  [[ $STEPS == *l* ]] && lb llama_q30_ncmoe48 -ncmoe 48
  for r in 1 2 3; do
    for g in 4G 64M 8G; do run q30_auto_${g,,}_$r --gpu-mem $g; done
  done
  [[ $STEPS == *l* ]] && lb llama_q30_ncmoe26 -ncmoe 26
fi
if [[ $STEPS == *g* ]]; then
  M=/tmp/gptoss.gguf
  [[ $STEPS == *l* ]] && lb llama_gptoss_ncmoe12 -ncmoe 12
  for r in 1 2 3; do
    run gptoss_auto_4g_$r --gpu-mem 4G
    run gptoss_auto_64m_$r --gpu-mem 64M
  done
fi
if [[ $STEPS == *d* ]]; then
  M=/tmp/dsv3.gguf
  [[ $STEPS == *l* ]] && lb llama_dsv3_ncmoe6 -ncmoe 6
  for r in 1 2 3; do
    MEM=80G run dsv3_auto_4g_$r --gpu-mem 4G
    MEM=80G run dsv3_auto_64m_$r --gpu-mem 64M
  done
  MEM=80G run dsv3_cpu_4g --gpu-mem 4G --gpu-ram-tier cpu
  MEM=80G run dsv3_copy_4g --gpu-mem 4G --gpu-ram-tier copy
fi
echo "end at $SECONDS s"
