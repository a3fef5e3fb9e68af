// Charts for the benchmarks: runs Debian's gnuplot (gnuplot-nox) as a child
// process on a script file or on inline commands.
#pragma once
#include <string>

namespace ms {

// gnuplot -e PRELUDE [SCRIPT]: PRELUDE sets variables (or is the whole
// program when SCRIPT is empty). Returns "" on success, else one line on
// what went wrong (gnuplot missing, its error output).
std::string run_gnuplot(const std::string& prelude, const std::string& script, const std::string& err_path);

// Runs an inline gnuplot program that writes png_path through the pngcairo
// terminal, again through plain png where gnuplot lacks cairo (gnuplot-nox);
// gnuplot's error output goes to png_path + ".err", removed on success.
// Returns "" or what went wrong.
std::string plot_png(const std::string& program, const std::string& png_path);

}  // namespace ms
