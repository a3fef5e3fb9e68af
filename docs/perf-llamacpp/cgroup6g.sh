#!/bin/bash
# llama.cpp (mmap) and moestream (--mem 6G) each inside a fresh 6 GiB memory cgroup (v1), page cache dropped first
base=/sys/fs/cgroup/memory$(grep ':memory:' /proc/self/cgroup | cut -d: -f3)
run_in() { local name=$1; shift; local d=$base/$name; mkdir -p $d; echo $((6<<30)) > $d/memory.limit_in_bytes;
  sync; echo 3 > /proc/sys/vm/drop_caches
  bash -c "echo \$\$ > $d/cgroup.procs; exec \"\$@\"" _ "$@"; echo "$name: max usage $(cat $d/memory.max_usage_in_bytes) failcnt $(cat $d/memory.failcnt)"; }
date
run_in cg-llama /work/tmp/llamacpp/llama.cpp/build/bin/llama-bench -m q30.gguf -lm mmap -p 0 -n 16 -t 2 -r 2 -o json > cg-llama.json 2> cg-llama.err
date
run_in cg-ms /work/main/build/moestream run -m q30.gguf --mem 6G --random-prompt 32 -n 64 --ignore-eos --seed 3 --temp 0 -t 2 --report cg-ms.json > cg-ms.out 2>&1
date
