#!/bin/sh
# Builds the two programs of scripts/gemma4_dims (README.md there):
#   make_model  - against moestream's GGUF writer (needs BUILD, a moestream
#                 build directory with libms_gguf.a and libms_quant.a)
#   reference   - against llama.cpp's llama.h and libllama (LLAMA, a llama.cpp
#                 checkout built with targets llama and llama-quantize, e.g. by
#                 scripts/llamacpp.sh's steps)
#
#   scripts/gemma4_dims/build.sh BUILD LLAMA OUTDIR
set -eu
build=$1 llama=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)/src
mkdir -p "$out"
g++ -std=c++20 -O2 -Wall -Wextra -Werror -I"$src" -I"$src/../tests/model" "$here/make_model.cpp" "$build/libms_gguf.a" "$build/libms_quant.a" \
    -o "$out/make_model"
g++ -std=c++17 -O2 -Wall -Wextra -I"$llama/include" -I"$llama/ggml/include" "$here/reference.cpp" \
    -L"$llama/build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$llama/build/bin" -o "$out/reference"
echo "built $out/make_model $out/reference"
