#!/bin/bash
# Full qwen3-30b-a3b resident, decode at depth 4096: moestream with huge pages (after),
# llama-bench, and main 333b08d's binary (before), alternated twice.
cd /work/main
O=docs/attention-depth
LB=/work/lcsrc/llama.cpp/build-cpu/bin/llama-bench
for i in 1 2; do
  for b in after before; do
    uptime >> $O/s25-full-load.txt
    /work/probe/ms-$b bench model -m /work/q30.gguf -p 0 -n 32 -d 4096 -r 2 -t 2 --mem 21G --json $O/s25-full-$b-$i.json > $O/s25-full-$b-$i.md 2>$O/s25-full-$b-$i.err
    if [ $b = after ]; then
      uptime >> $O/s25-full-load.txt
      $LB -m /work/q30.gguf -p 0 -n 32 -d 4096 -lm none -t 2 -r 2 -o json > $O/s25-full-llama-$i.json 2>$O/s25-full-llama-$i.err
    fi
  done
done
uptime >> $O/s25-full-load.txt
echo done
