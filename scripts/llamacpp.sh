#!/bin/sh
# Builds llama.cpp's llama-bench for comparisons with moestream, offline: the
# npm package node-llama-cpp ships the llama.cpp source it was built from as
# a git bundle (llama/gitRelease.bundle), and npm is the only registry besides
# Debian's that this project may use. Nothing of it enters moestream's tree.
#
#   scripts/llamacpp.sh [DIR]   -> DIR/llama.cpp/build/bin/llama-bench
#
# DIR defaults to ./out/llamacpp. CPU build with -march=native (GGML_NATIVE),
# as a user building it on the machine would. Set NODE_LLAMA_CPP_VERSION to
# pin another release of the package (its llama.cpp commit is printed).
set -eu
dir=${1:-out/llamacpp}
version=${NODE_LLAMA_CPP_VERSION:-3.22.1}
mkdir -p "$dir"
cd "$dir"
if [ ! -f node_modules/node-llama-cpp/llama/gitRelease.bundle ]; then
    [ -f package.json ] || echo '{"private": true}' > package.json
    # Its install script would fetch prebuilt binaries: not needed here.
    NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --no-audit --no-fund --ignore-scripts "node-llama-cpp@$version"
fi
if [ ! -d llama.cpp ]; then
    git clone -q node_modules/node-llama-cpp/llama/gitRelease.bundle llama.cpp
fi
echo "llama.cpp commit: $(git -C llama.cpp log -1 --format='%H (%cd)')"
cmake -S llama.cpp -B llama.cpp/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >/dev/null
cmake --build llama.cpp/build -j "$(nproc)" --target llama-bench
echo "built $(pwd)/llama.cpp/build/bin/llama-bench"
