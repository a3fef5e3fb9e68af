// Python str semantics over UTF-8 bytes, for the Jinja interpreter: templates
// index, slice, strip, split and case-map strings by code point exactly as
// Python does, so these helpers decode UTF-8 (invalid bytes round-trip as
// U+DC80..U+DCFF, like Python's surrogateescape).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ms::jinja {

// Decodes the code point at s[i] and advances i.
uint32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(std::string& out, uint32_t cp);
bool is_ascii(std::string_view s);
size_t utf8_length(std::string_view s);
std::vector<uint32_t> utf8_decode(std::string_view s);
// Byte offset of code point index `cp` (clamped to the end).
size_t utf8_offset(std::string_view s, size_t cp);
// Code point index of byte offset `off` (which must start a code point).
size_t utf8_index(std::string_view s, size_t off);

bool py_isspace(uint32_t cp);          // str.isspace() for one character
bool py_islinebreak(uint32_t cp);      // a line boundary of str.splitlines()
bool py_isalpha(uint32_t cp);          // approximate: letters of the scripts we case-map, and CJK
bool py_isdigit(uint32_t cp);
uint32_t py_lower(uint32_t cp);
uint32_t py_upper(uint32_t cp);
bool py_iscased(uint32_t cp);

std::string str_lower(std::string_view s);
std::string str_upper(std::string_view s);
std::string str_title(std::string_view s);       // str.title()
std::string str_capitalize(std::string_view s);  // str.capitalize()
std::string str_swapcase(std::string_view s);
bool str_islower(std::string_view s);
bool str_isupper(std::string_view s);

// str.strip/lstrip/rstrip; chars == nullptr strips whitespace.
std::string str_strip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split / str.rsplit; sep == nullptr splits on whitespace runs.
std::vector<std::string> str_split(std::string_view s, const std::string* sep, int64_t maxsplit);
std::vector<std::string> str_rsplit(std::string_view s, const std::string* sep, int64_t maxsplit);
std::vector<std::string> str_splitlines(std::string_view s, bool keepends);
std::string str_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
// Non-overlapping occurrences of sub in s (Python counts len+1 for an empty sub).
int64_t str_count(std::string_view s, std::string_view sub);

// repr() of a str: quoted, with Python's escapes for non-printable characters.
std::string py_repr_str(std::string_view s);
// markupsafe.escape: & < > " ' as HTML entities.
std::string html_escape(std::string_view s);
// Python json.dumps of a string (quoted).
void json_string(std::string& out, std::string_view s, bool ensure_ascii);
// repr() of a float ("1.0", "1e+16", "inf", "nan").
std::string py_float_repr(double d);

}  // namespace ms::jinja
