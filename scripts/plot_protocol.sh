#!/bin/sh
# Redraws the charts of a `moestream bench protocol` output directory:
#   scripts/plot_protocol.sh OUT_DIR [CASE_NAMES]
# (bench protocol draws them itself; this is for editing the .gp files.)
set -e
dir=${1:?usage: plot_protocol.sh OUT_DIR [\"short medium long\"]}
titles=${2:-short medium long}
here=$(cd "$(dirname "$0")" && pwd)
split_known=$(awk -F'\t' '!/^#/ && ($2 + $3 + $5) > 0 { k = 1 } END { print k + 0 }' "$dir/split.tsv")
gnuplot -e "datafile='$dir/samples.tsv'; outfile='$dir/throughput.png'; titles='$titles'" "$here/plot_protocol_throughput.gp"
gnuplot -e "datafile='$dir/split.tsv'; outfile='$dir/time_split.png'; split_known=$split_known" "$here/plot_protocol_split.gp"
echo "wrote $dir/throughput.png $dir/time_split.png"
