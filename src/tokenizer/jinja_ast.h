// The parsed form of a Jinja template: expression and statement nodes kept in
// one Program (nodes point at each other; the Program owns them all), and
// parse(), which lexes and parses exactly as Jinja2 3.1 does with
// trim_blocks and lstrip_blocks on.
#pragma once
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace ms::jinja {

enum class ExprKind : uint8_t {
    Const, Name, List, Tuple, Dict, Attr, Item, Slice, Call, Filter, Test,
    Neg, Pos, Not, And, Or, Binary, Compare, Concat, Cond,
};
enum class Op : uint8_t { Add, Sub, Mul, Div, FloorDiv, Mod, Pow, Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

// args by kind:
//   List, Tuple: elements          Dict: key0, value0, key1, value1, ...
//   Attr: object (name = attribute) Item: object, key (a Slice node for x[a:b:c])
//   Slice: start, stop, step (each may be null)
//   Call: callee, positional...    Filter: subject (null inside a filter block), positional...
//   Test: subject, positional...   Neg, Pos, Not: operand
//   And, Or, Binary: left, right   Compare: operands (ops[k] joins args[k], args[k+1])
//   Concat: operands               Cond: then-value, condition, else-value (may be null)
struct Expr {
    ExprKind kind = ExprKind::Const;
    int line = 0;
    Value value;                 // Const
    std::string name;            // Name, Attr, Filter, Test
    int builtin = -1;            // Filter, Test: index into the builtin table
    Op op = Op::Add;             // Binary
    std::vector<Op> ops;         // Compare
    std::vector<Expr*> args;
    std::vector<std::pair<std::string, Expr*>> kwargs;  // Call, Filter, Test
    Expr* star = nullptr;        // f(*xs)
    Expr* starstar = nullptr;    // f(**kw)
};

// Left side of set / for / with: one name, several names (unpacking), or
// namespace.attribute.
struct Target {
    std::vector<std::string> names;
    bool unpack = false;
    std::string attr;  // set ns.attr = ...: names[0] is the namespace
};

enum class StmtKind : uint8_t {
    Text, Print, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, With, Break, Continue, Scope,
};

struct Stmt {
    StmtKind kind = StmtKind::Text;
    int line = 0;
    std::string text;                        // Text; Macro name
    Expr* expr = nullptr;                    // Print, Set value, For iterable, CallBlock call
    Expr* filter = nullptr;                  // For `if` condition; SetBlock/FilterBlock filter chain
    Target target;                           // Set, SetBlock, For
    std::vector<Expr*> conds;                // If: one per branch
    std::vector<std::vector<Stmt*>> branches;
    std::vector<Stmt*> body, else_body;      // For, If (else), SetBlock, Macro, CallBlock, FilterBlock, With, Scope
    bool recursive = false;                  // for ... recursive
    // Macro, and the caller signature of a CallBlock
    std::vector<std::string> params;
    std::vector<Expr*> defaults;             // one per param, null when none
    bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
    std::vector<std::pair<Target, Expr*>> assigns;  // With
};

struct Program {
    std::deque<Expr> exprs;
    std::deque<Stmt> stmts;
    std::vector<Stmt*> body;
};

// Throws std::runtime_error "template: line L: problem".
void parse(std::string_view source, Program& out);

// Builtin filters and tests, resolved at parse time (an unknown name is a
// syntax error, as in Jinja2).
int find_filter(std::string_view name);
int find_test(std::string_view name);

}  // namespace ms::jinja
