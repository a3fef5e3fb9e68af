// Output formats of `bench model`, the ones llama-bench has: a Markdown
// table for people, and CSV, a JSON array and JSON lines for tools. A record
// is a JSON object whose keys keep their order; every record of one output
// has the same keys.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "json/json.h"

namespace ms {

// One column of the Markdown table: its header, and how to show a record.
struct MdColumn {
    std::string header;
    std::function<std::string(const Json& record)> cell;
    bool label = false;  // left-aligned (text) rather than right-aligned (numbers)
};

std::string records_markdown(const std::vector<Json>& records, const std::vector<MdColumn>& columns);
// Header of the first record's keys; strings quoted when they hold a comma,
// quote or newline; arrays as a quoted JSON array; null as an empty cell.
std::string records_csv(const std::vector<Json>& records);
std::string records_json(const std::vector<Json>& records);   // one indented array
std::string records_jsonl(const std::vector<Json>& records);  // one compact object per line

// "md", "csv", "json", "jsonl" -> the text; throws on another name.
std::string format_records(const std::string& format, const std::vector<Json>& records,
                           const std::vector<MdColumn>& columns);

}  // namespace ms
