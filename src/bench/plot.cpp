#include "bench/plot.h"

#include <cstdio>
#include <filesystem>
#include <vector>

#include "bench/child.h"

namespace ms {

std::string run_gnuplot(const std::string& prelude, const std::string& script, const std::string& err_path) {
    namespace fs = std::filesystem;
    if (!script.empty() && !fs::exists(script)) return script + " not found";
    ChildOptions co;
    co.argv = {"/usr/bin/gnuplot", "-e", prelude};
    if (!script.empty()) co.argv.push_back(script);
    if (!fs::exists(co.argv[0])) co.argv[0] = "/usr/local/bin/gnuplot";
    if (!fs::exists(co.argv[0])) return "gnuplot not installed (Debian: apt-get install gnuplot-nox)";
    co.stderr_path = err_path;
    co.timeout_s = 60;
    ChildResult r = run_child(co);
    if (!r.ok()) return "gnuplot " + r.describe() + ": " + tail_lines(err_path, 2);
    return "";
}

std::string plot_png(const std::string& program, const std::string& png_path) {
    std::string err = run_gnuplot(program, "", png_path + ".err");
    if (err.find("pngcairo") != std::string::npos && program.find("pngcairo") != std::string::npos) {
        std::string plain = program;
        plain.replace(plain.find("pngcairo"), 8, "png");
        err = run_gnuplot(plain, "", png_path + ".err");
    }
    if (err.empty()) std::remove((png_path + ".err").c_str());
    return err;
}

}  // namespace ms
