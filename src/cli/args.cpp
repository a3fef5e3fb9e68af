#include "cli/args.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

namespace ms {

Args::Args(std::string usage, std::string about) : usage_(std::move(usage)), about_(std::move(about)) {
    opts_.reserve(64);
}

static std::vector<std::string> split_names(const char* names) {
    std::vector<std::string> out;
    std::stringstream ss(names);
    std::string n;
    while (std::getline(ss, n, ',')) out.push_back(n);
    return out;
}

void Args::flag(const char* names, bool* out, const char* help) {
    opts_.push_back({split_names(names), Kind::Flag, out, "", help, ""});
}
void Args::option(const char* names, std::string* out, const char* metavar, const char* help) {
    opts_.push_back({split_names(names), Kind::Str, out, metavar, help, *out});
}
void Args::option(const char* names, int64_t* out, const char* metavar, const char* help) {
    opts_.push_back({split_names(names), Kind::I64, out, metavar, help, std::to_string(*out)});
}
void Args::option(const char* names, int* out, const char* metavar, const char* help) {
    opts_.push_back({split_names(names), Kind::Int, out, metavar, help, std::to_string(*out)});
}
void Args::option(const char* names, double* out, const char* metavar, const char* help) {
    char buf[32];
    snprintf(buf, sizeof buf, "%g", *out);
    opts_.push_back({split_names(names), Kind::Dbl, out, metavar, help, buf});
}
void Args::size_option(const char* names, uint64_t* out, const char* metavar, const char* help) {
    opts_.push_back({split_names(names), Kind::Size, out, metavar, help, *out ? format_bytes(double(*out)) : ""});
}
void Args::positional(std::vector<std::string>* out, const char* metavar, size_t min, size_t max) {
    pos_ = out;
    pos_metavar_ = metavar;
    pos_min_ = min;
    pos_max_ = max;
}

Args::Opt* Args::lookup(const std::string& name) {
    for (auto& o : opts_)
        for (auto& n : o.names)
            if (n == name) return &o;
    return nullptr;
}

bool Args::given(const char* long_name) const {
    for (auto& o : opts_)
        for (auto& n : o.names)
            if (n == long_name) return o.seen;
    return false;
}

void Args::show_default(const char* long_name, const std::string& text) {
    for (auto& o : opts_)
        for (auto& n : o.names)
            if (n == long_name) o.def = text;
}

static int64_t parse_int(const std::string& flag, const std::string& v) {
    char* end = nullptr;
    errno = 0;
    long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end || errno) throw std::runtime_error(flag + ": expected an integer, got '" + v + "'");
    return x;
}

bool Args::parse(int argc, char** argv, int first) {
    for (int i = first; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            fputs(help().c_str(), stdout);
            return false;
        }
        if (a.size() > 1 && a[0] == '-' && !(a.size() > 1 && (isdigit(static_cast<unsigned char>(a[1])) || a[1] == '.'))) {
            std::string value;
            bool has_value = false;
            size_t eq = a.find('=');
            if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
                value = a.substr(eq + 1);
                a = a.substr(0, eq);
                has_value = true;
            }
            Opt* o = lookup(a);
            if (!o) throw std::runtime_error("unknown option '" + a + "' (see --help)");
            o->seen = true;
            if (o->kind == Kind::Flag) {
                if (has_value) throw std::runtime_error(a + " takes no value");
                *static_cast<bool*>(o->out) = true;
                continue;
            }
            if (!has_value) {
                if (i + 1 >= argc) throw std::runtime_error(a + " needs a value (" + o->metavar + ")");
                value = argv[++i];
            }
            switch (o->kind) {
                case Kind::Str: *static_cast<std::string*>(o->out) = value; break;
                case Kind::I64: *static_cast<int64_t*>(o->out) = parse_int(a, value); break;
                case Kind::Int: {
                    int64_t x = parse_int(a, value);
                    if (x < INT32_MIN || x > INT32_MAX) throw std::runtime_error(a + ": value out of range");
                    *static_cast<int*>(o->out) = int(x);
                    break;
                }
                case Kind::Dbl: {
                    char* end = nullptr;
                    double x = std::strtod(value.c_str(), &end);
                    if (value.empty() || *end || !std::isfinite(x))
                        throw std::runtime_error(a + ": expected a number, got '" + value + "'");
                    *static_cast<double*>(o->out) = x;
                    break;
                }
                case Kind::Size: *static_cast<uint64_t*>(o->out) = parse_size(value); break;
                case Kind::Flag: break;
            }
            continue;
        }
        if (!pos_ || pos_->size() >= pos_max_) throw std::runtime_error("unexpected argument '" + a + "' (see --help)");
        pos_->push_back(a);
    }
    if (pos_ && pos_->size() < pos_min_) throw std::runtime_error("missing " + pos_metavar_ + " (see --help)");
    return true;
}

std::string Args::help() const {
    std::string out = "usage: " + usage_ + "\n\n" + about_ + "\n";
    if (!opts_.empty()) out += "\noptions:\n";
    for (auto& o : opts_) {
        std::string left = "  ";
        for (size_t k = 0; k < o.names.size(); ++k) left += (k ? ", " : "") + o.names[k];
        if (o.kind != Kind::Flag) left += " " + o.metavar;
        std::string h = o.help;
        if (!o.def.empty() && o.kind != Kind::Flag) h += " [default: " + o.def + "]";
        if (left.size() < 28) left.resize(28, ' ');
        else left += "\n" + std::string(28, ' ');
        out += left + h + "\n";
    }
    out += "  -h, --help                  show this help\n";
    return out;
}

uint64_t parse_size(const std::string& s) {
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (end == s.c_str() || !std::isfinite(v) || v < 0) throw std::runtime_error("bad size '" + s + "' (try 4G, 512M)");
    std::string unit(end);
    double mult = 1;
    if (!unit.empty()) {
        char u = char(toupper(static_cast<unsigned char>(unit[0])));
        std::string rest = unit.substr(1);
        if (u == 'K') mult = 1024.0;
        else if (u == 'M') mult = 1024.0 * 1024;
        else if (u == 'G') mult = 1024.0 * 1024 * 1024;
        else if (u == 'T') mult = 1024.0 * 1024 * 1024 * 1024;
        else if (u == 'B' && rest.empty()) mult = 1;
        else throw std::runtime_error("bad size unit in '" + s + "' (use K, M, G or T)");
        if (u != 'B' && !(rest.empty() || rest == "B" || rest == "iB" || rest == "ib" || rest == "b"))
            throw std::runtime_error("bad size unit in '" + s + "'");
    }
    return uint64_t(std::llround(v * mult));
}

std::string format_bytes(double b) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) { b /= 1024; ++u; }
    char buf[32];
    snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", b, units[u]);
    return buf;
}

}  // namespace ms
