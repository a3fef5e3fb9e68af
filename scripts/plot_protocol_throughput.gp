# Read throughput over time, per benchmark case: the device's (every
# process, as iostat counts) and the run's own (/proc/PID/io), with the CPU
# idle share, from the samples.tsv that `moestream bench protocol` writes
# (one index block per case: t_s, mb_per_s, iops, cpu_idle_pct, rss_mib,
# process_mb_per_s).
#   gnuplot -e "datafile='samples.tsv'; outfile='throughput.png'; titles='short medium long'" plot_protocol_throughput.gp
if (!exists("datafile")) datafile = 'samples.tsv'
if (!exists("outfile")) outfile = 'throughput.png'
if (!exists("titles")) titles = 'short medium long'

set terminal pngcairo size 1100,520 font "sans,10"
set output outfile
set title "Reads during each case (1 s samples): the run's own (thick), the whole device (thin)"
set xlabel "seconds since the case's process started"
set ylabel "MB/s read from storage"
set y2label "CPU idle %"
set ytics nomirror
set y2tics
set y2range [0:100]
set yrange [0:*]
set grid ytics
set key outside right top
n = words(titles)
plot for [i=1:n] datafile index (i-1) using 1:6 with lines lw 2.5 lc i title word(titles, i)." run MB/s", \
     for [i=1:n] datafile index (i-1) using 1:2 with lines lw 0.7 lc i title word(titles, i)." device MB/s", \
     for [i=1:n] datafile index (i-1) using 1:4 axes x1y2 with lines dt 3 lw 1 lc i title word(titles, i)." idle %"
