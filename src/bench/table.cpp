#include "bench/table.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <ctime>

namespace ms {

std::string strf(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char buf[512];
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < int(sizeof buf)) return std::string(buf, size_t(std::max(n, 0)));
    std::string s(size_t(n) + 1, '\0');
    va_start(ap, fmt);
    vsnprintf(s.data(), s.size(), fmt, ap);
    va_end(ap);
    s.resize(size_t(n));
    return s;
}

std::string time_now(const char* format, bool utc) {
    time_t t = time(nullptr);
    struct tm tm;
    if (utc) gmtime_r(&t, &tm);
    else localtime_r(&t, &tm);
    char buf[64];
    strftime(buf, sizeof buf, format, &tm);
    return buf;
}

std::string size_label(uint64_t bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = double(bytes);
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        ++u;
    }
    if (v == double(uint64_t(v))) return strf("%llu %s", (unsigned long long)v, units[u]);
    return strf(v < 10 ? "%.2g %s" : "%.0f %s", v, units[u]);
}

std::string Table::text() const {
    std::vector<size_t> w(header.size(), 0);
    for (size_t c = 0; c < header.size(); ++c) w[c] = header[c].size();
    for (const auto& r : rows)
        for (size_t c = 0; c < r.size() && c < w.size(); ++c) w[c] = std::max(w[c], r[c].size());
    auto line = [&](const std::vector<std::string>& r) {
        std::string s;
        for (size_t c = 0; c < w.size(); ++c) {
            const std::string& cell = c < r.size() ? r[c] : std::string();
            std::string pad(w[c] - cell.size(), ' ');
            if (c) s += "  ";
            s += c < left_columns ? cell + pad : pad + cell;
        }
        while (!s.empty() && s.back() == ' ') s.pop_back();
        return s + "\n";
    };
    std::string out = line(header);
    size_t total = 0;
    for (size_t c = 0; c < w.size(); ++c) total += w[c] + (c ? 2 : 0);
    out += std::string(total, '-') + "\n";
    for (const auto& r : rows) out += line(r);
    return out;
}

std::string Table::markdown() const {
    std::string out = "|";
    for (const std::string& h : header) out += " " + h + " |";
    out += "\n|";
    for (size_t c = 0; c < header.size(); ++c) out += c < left_columns ? "---|" : "---:|";
    out += "\n";
    for (const auto& r : rows) {
        out += "|";
        for (size_t c = 0; c < header.size(); ++c) out += " " + (c < r.size() ? r[c] : std::string()) + " |";
        out += "\n";
    }
    return out;
}

}  // namespace ms
