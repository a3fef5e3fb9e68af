#!/bin/bash
# Depth 0 (resident) and bench_ops decode attention: main 333b08d (before) against huge pages (after), alternated.
cd /work/main
O=docs/attention-depth
for i in 1 2; do
  for b in after before; do
    uptime >> $O/s25-d0-load.txt
    /work/probe/ms-$b bench model -m /work/q30.gguf -p 0 -n 32 -r 3 -t 2 --mem 21G --json $O/s25-d0-$b-$i.json > $O/s25-d0-$b-$i.md 2>$O/s25-d0-$b-$i.err
  done
done
for i in 1 2; do
  for b in after before; do
    uptime >> $O/s25-ops-load.txt
    /work/probe/bench_ops-$b --benchmark_filter='(mem/read|attention(-g4full)?/F16/ctx:(4096|16384)/(avx2|avx512))/threads:2' --benchmark_repetitions=5 --benchmark_report_aggregates_only=true > $O/s25-ops-$b-$i.txt 2>&1
  done
done
uptime >> $O/s25-ops-load.txt
echo done
