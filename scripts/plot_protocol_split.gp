# Time per processed token by kind of work, one stacked bar per case, from
# the split.tsv that `moestream bench protocol` writes (case, attention,
# routing, io_wait, expert_compute, other; milliseconds per token).
#   gnuplot -e "datafile='split.tsv'; outfile='time_split.png'; split_known=1" plot_protocol_split.gp
if (!exists("datafile")) datafile = 'split.tsv'
if (!exists("outfile")) outfile = 'time_split.png'
if (!exists("split_known")) split_known = 1

set terminal pngcairo size 800,520 font "sans,10"
set output outfile
set title split_known ? "Time per processed token (prompt + generated)" \
                      : "Time per processed token: I/O wait vs the rest (this run reports no finer split)"
set ylabel "ms per token"
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.6
set xrange [-0.6:*]
set yrange [0:*]
set grid ytics
set key outside right top
set datafile separator "\t"
if (split_known) {
    plot datafile using 2:xtic(1) title "attention", '' using 3 title "routing", \
         '' using 4 title "I/O wait", '' using 5 title "expert compute", '' using 6 title "other"
} else {
    plot datafile using 4:xtic(1) title "I/O wait", '' using 6 title "compute and the rest"
}
