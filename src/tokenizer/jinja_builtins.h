// Jinja2's builtin filters, tests and global functions, the str/dict/list
// methods templates call, and attribute/item lookup as the sandboxed
// environment does it (mutating list and dict methods are refused, as in
// transformers' ImmutableSandboxedEnvironment).
#pragma once
#include <string>

#include "tokenizer/jinja_render.h"

namespace ms::jinja {

Value apply_filter(Interp& in, int index, const Value& subject, CallArgs& args);
bool apply_test(Interp& in, int index, const Value& subject, CallArgs& args);

// obj.name: a bound method, a mapping key or a namespace attribute.
Value get_attr(Interp& in, const Value& obj, const std::string& name);
// obj[key]: an item, else an attribute of that name.
Value get_item(Interp& in, const Value& obj, const Value& key);
// obj[start:stop:step] on strings, lists and tuples (null parts are None).
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);

// range, namespace, dict, joiner, cycler.
void install_globals(Scope& globals);

// Python's `fmt % args` (the format filter and the % operator on strings).
std::string percent_format(const std::string& fmt, const Value& args);

}  // namespace ms::jinja
