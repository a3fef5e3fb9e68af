#!/bin/sh
# Makes tests/data/gemma4-dims (README.md there): the F32 model, its Q8_0
# quantization by llama-quantize, and llama.cpp's logits for both.
#
#   scripts/gemma4_dims/make_data.sh BIN LLAMA OUTDIR
#
# BIN: where build.sh put make_model and reference; LLAMA: the llama.cpp
# checkout (llama-quantize in LLAMA/build/bin). Run from the repository root.
set -eu
bin=$1 llama=$2 out=$3
prompt="Everyone is permitted to copy and distribute verbatim copies of this license document."
mkdir -p "$out"
"$bin/make_model" --vocab ../shared/golden/models/gemma4-F32.gguf --out "$out/gemma4-dims-F32.gguf" --seed 3
"$llama/build/bin/llama-quantize" "$out/gemma4-dims-F32.gguf" "$out/gemma4-dims-Q8_0.gguf" Q8_0 2 >"$out/quantize.log" 2>&1
for type in F32 Q8_0; do
    "$bin/reference" "$out/gemma4-dims-$type.gguf" "$out/gemma4-dims-$type" "$type" "$prompt"
done
sha256sum "$out"/gemma4-dims-*.gguf
