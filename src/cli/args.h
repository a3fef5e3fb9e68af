// Command-line flags for one subcommand: each flag is declared once with its
// help text, so --help always lists every flag, and an unknown flag or a bad
// value is a one-line error.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ms {

class Args {
public:
    // usage: "moestream inspect MODEL.gguf [--json]"; about: a paragraph.
    Args(std::string usage, std::string about);

    // names: "-m,--model". Default shown in --help is the variable's value at
    // declaration time.
    void flag(const char* names, bool* out, const char* help);
    void option(const char* names, std::string* out, const char* metavar, const char* help);
    void option(const char* names, int64_t* out, const char* metavar, const char* help);
    void option(const char* names, int* out, const char* metavar, const char* help);
    void option(const char* names, double* out, const char* metavar, const char* help);
    // Sizes like 4G, 512M, 1.5GiB, 4096 (bytes).
    void size_option(const char* names, uint64_t* out, const char* metavar, const char* help);
    // Positional arguments collected in order; min/max enforced.
    void positional(std::vector<std::string>* out, const char* metavar, size_t min, size_t max);

    // Parses argv[first..]. Returns false if --help was printed (caller
    // returns 0). Throws std::runtime_error on bad input.
    bool parse(int argc, char** argv, int first = 2);
    std::string help() const;
    // True when the user gave this flag explicitly.
    bool given(const char* long_name) const;
    // The default --help shows for a flag whose default is decided later
    // (e.g. from the model), instead of the variable's value.
    void show_default(const char* long_name, const std::string& text);

private:
    enum class Kind { Flag, Str, I64, Int, Dbl, Size };
    struct Opt {
        std::vector<std::string> names;
        Kind kind;
        void* out;
        std::string metavar, help, def;
        bool seen = false;
    };
    Opt* lookup(const std::string& name);
    std::string usage_, about_;
    std::vector<Opt> opts_;
    std::vector<std::string>* pos_ = nullptr;
    std::string pos_metavar_;
    size_t pos_min_ = 0, pos_max_ = 0;
};

// "4G" -> 4*2^30; accepts K/M/G/T with optional "iB"/"B"; throws on garbage.
uint64_t parse_size(const std::string& s);
// 1536 -> "1.50 KiB"
std::string format_bytes(double bytes);

}  // namespace ms
