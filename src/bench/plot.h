// Charts for the benchmarks: runs Debian's gnuplot (gnuplot-nox) as a child
// process on a script file or on inline commands.
#pragma once
#include <string>

namespace ms {

// gnuplot -e PRELUDE [SCRIPT]: PRELUDE sets variables (or is the whole
// program when SCRIPT is empty). Returns "" on success, else one line on
// what went wrong (gnuplot missing, its error output).
std::string run_gnuplot(const std::string& prelude, const std::string& script, const std::string& err_path);

}  // namespace ms
