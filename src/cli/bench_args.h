// What the bench subcommands (src/cli/bench*.cpp) share for their flags and
// output: comma lists of integers, and JSON files.
#pragma once
#include <string>
#include <vector>

#include "json/json.h"

namespace ms {

// "1,2,4" -> {1, 2, 4}; every item an integer in [min, 2^20]; throws naming
// the flag otherwise.
std::vector<int> parse_int_list(const std::string& flag, const std::string& s, long min = 1);

// Writes j to path (indented), says so on stderr; throws naming the path.
void write_json(const std::string& path, const Json& j);

// A directory shipped in the repository (bench/prompts, scripts), looked up
// next to the executable's build directory and then under the current one;
// "" when not found.
std::string repo_dir(const std::string& rel);

// moestream bench serve (src/cli/bench_serve.cpp).
int bench_serve(int argc, char** argv);

}  // namespace ms
