# Device read throughput over time, one line per benchmark case, from the
# samples.tsv that `moestream bench protocol` writes (one index block per
# case: t_s, mb_per_s, iops, cpu_idle_pct, rss_mib).
#   gnuplot -e "datafile='samples.tsv'; outfile='throughput.png'; titles='short medium long'" plot_protocol_throughput.gp
if (!exists("datafile")) datafile = 'samples.tsv'
if (!exists("outfile")) outfile = 'throughput.png'
if (!exists("titles")) titles = 'short medium long'

set terminal pngcairo size 1100,520 font "sans,10"
set output outfile
set title "Device reads during each case (1 s samples)"
set xlabel "seconds since the case's process started"
set ylabel "MB/s read from the device"
set y2label "CPU idle %"
set ytics nomirror
set y2tics
set y2range [0:100]
set yrange [0:*]
set grid ytics
set key outside right top
n = words(titles)
plot for [i=1:n] datafile index (i-1) using 1:2 with lines lw 2 title word(titles, i)." MB/s", \
     for [i=1:n] datafile index (i-1) using 1:4 axes x1y2 with lines dt 3 lw 1 title word(titles, i)." idle %"
