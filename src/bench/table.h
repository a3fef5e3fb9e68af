// Text output shared by the benchmarks: aligned plain-text tables for the
// terminal, the same tables as Markdown for reports, and short labels for
// sizes and numbers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ms {

struct Table {
    std::vector<std::string> header;
    std::vector<std::vector<std::string>> rows;
    size_t left_columns = 1;  // the first columns are labels (left-aligned); the rest numbers

    void add(std::vector<std::string> row) { rows.push_back(std::move(row)); }
    std::string text() const;      // columns padded, two spaces apart
    std::string markdown() const;  // GitHub table, numbers right-aligned
};

// printf into a std::string.
std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// The time now through strftime: UTC ("%Y-%m-%dT%H:%M:%SZ" for ISO 8601)
// or local time.
std::string time_now(const char* format, bool utc);

// 4194304 -> "4 MiB", 1572864 -> "1.5 MiB", 905216 -> "884 KiB", 100 -> "100 B".
std::string size_label(uint64_t bytes);

}  // namespace ms
