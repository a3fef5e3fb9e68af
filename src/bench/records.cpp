#include "bench/records.h"

#include <stdexcept>

#include "bench/table.h"

namespace ms {

namespace {

std::string csv_cell(const Json& v) {
    std::string s;
    if (v.is_null()) return "";
    if (v.is_string()) s = v.as_string();
    else if (v.is_bool()) return v.as_bool() ? "true" : "false";
    else if (v.is_number()) return v.dump();
    else s = v.dump();  // arrays and objects as JSON text
    if (s.find_first_of(",\"\n\r") == std::string::npos && !v.is_array() && !v.is_object()) return s;
    std::string q = "\"";
    for (char c : s) {
        if (c == '"') q += '"';
        q += c;
    }
    return q + "\"";
}

}  // namespace

std::string records_markdown(const std::vector<Json>& records, const std::vector<MdColumn>& columns) {
    Table t;
    t.left_columns = 0;
    for (const MdColumn& c : columns) t.header.push_back(c.header);
    for (const Json& r : records) {
        std::vector<std::string> row;
        for (const MdColumn& c : columns) row.push_back(c.cell(r));
        t.add(row);
    }
    // Table::markdown aligns by position; label columns must come first.
    for (const MdColumn& c : columns) {
        if (!c.label) break;
        ++t.left_columns;
    }
    return t.markdown();
}

std::string records_csv(const std::vector<Json>& records) {
    if (records.empty()) return "";
    std::string out;
    bool first = true;
    for (const auto& [k, v] : records[0].as_object()) {
        if (!first) out += ',';
        out += csv_cell(Json(k));
        first = false;
    }
    out += '\n';
    for (const Json& r : records) {
        first = true;
        for (const auto& [k, v] : records[0].as_object()) {
            if (!first) out += ',';
            const Json* x = r.find(k);
            out += x ? csv_cell(*x) : "";
            first = false;
        }
        out += '\n';
    }
    return out;
}

std::string records_json(const std::vector<Json>& records) { return Json(Json::Array(records)).dump(2) + "\n"; }

std::string records_jsonl(const std::vector<Json>& records) {
    std::string out;
    for (const Json& r : records) out += r.dump() + "\n";
    return out;
}

std::string format_records(const std::string& format, const std::vector<Json>& records,
                           const std::vector<MdColumn>& columns) {
    if (format == "md") return records_markdown(records, columns);
    if (format == "csv") return records_csv(records);
    if (format == "json") return records_json(records);
    if (format == "jsonl") return records_jsonl(records);
    throw std::runtime_error("-o: unknown output format '" + format + "' (md, csv, json, jsonl)");
}

}  // namespace ms
