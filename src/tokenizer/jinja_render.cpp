#include "tokenizer/jinja_render.h"

#include <algorithm>
#include <cmath>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_text.h"

namespace ms::jinja {

const Value* Scope::find(std::string_view name) const {
    for (const Scope* s = this; s; s = s->parent.get())
        for (const auto& [k, v] : s->vars)
            if (k == name) return &v;
    return nullptr;
}

void Scope::set(std::string_view name, Value v) {
    for (auto& [k, old] : vars)
        if (k == name) { old = std::move(v); return; }
    vars.emplace_back(std::string(name), std::move(v));
}

Interp::~Interp() {
    // A namespace is the one mutable container, so the only way to build a
    // reference cycle ({% set ns.self = ns %}); emptying the live ones
    // breaks them all.
    for (auto& w : namespaces_)
        if (auto d = w.lock()) d->entries.clear();
}

void Interp::step(uint64_t n) {
    steps_ += n;
    if (steps_ > limits_.max_steps)
        throw RenderError("template exceeded " + std::to_string(limits_.max_steps) + " evaluation steps");
}

void Interp::check_size(size_t bytes) const {
    if (bytes > limits_.max_output)
        throw RenderError("value larger than the " + std::to_string(limits_.max_output) + "-byte output limit");
}

Value Interp::make_namespace(std::vector<std::pair<Value, Value>> attrs) {
    // Allocated apart from its control block so that a dead namespace's
    // memory is freed although the registry still holds a weak reference.
    std::shared_ptr<Dict> d(new Dict{std::move(attrs)});
    if (namespaces_.size() >= 2 * namespaces_compacted_) {
        std::erase_if(namespaces_, [](const std::weak_ptr<Dict>& w) { return w.expired(); });
        namespaces_compacted_ = std::max<size_t>(64, namespaces_.size());
    }
    namespaces_.push_back(d);
    return Value::make_dict(std::move(d), Kind::Namespace);
}

void Interp::append(std::string& out, std::string_view text) {
    if (out.size() + text.size() > limits_.max_output)
        throw RenderError("rendered output exceeds " + std::to_string(limits_.max_output) + " bytes");
    out.append(text);
}

// Statement and expression nesting, multiplied by macro recursion, decides
// how deep the C++ stack goes, and frames differ by build (sanitizers make
// them several times larger), so the stack itself is measured.
void Interp::check_stack() const {
    auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    if (stack_base_ > here && stack_base_ - here > limits_.max_stack)
        throw RenderError("template nested too deeply (over " + std::to_string(limits_.max_stack >> 10) + " KiB of stack)");
}

std::string Interp::render(const ScopePtr& root) {
    stack_base_ = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    std::string out;
    exec(prog_.body, root, out);
    return out;
}

Value Interp::call(const Value& fn, CallArgs& args) {
    if (fn.is_undefined()) throw RenderError(fn.s);
    if (!fn.fn) throw RenderError(std::string("'") + type_name(fn) + "' object is not callable");
    return fn.fn->fn(*this, args);
}

// ---------------------------------------------------------------- statements

Interp::Flow Interp::exec(const std::vector<Stmt*>& body, const ScopePtr& scope, std::string& out) {
    for (const Stmt* s : body) {
        Flow f = exec_stmt(*s, scope, out);
        if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
}

Value Interp::render_block(const std::vector<Stmt*>& body, const ScopePtr& scope) {
    std::string text;
    exec(body, std::make_shared<Scope>(scope), text);
    return Value::string(std::move(text));
}

Interp::Flow Interp::exec_stmt(const Stmt& s, const ScopePtr& scope, std::string& out) {
    step();
    check_stack();
    try {
        switch (s.kind) {
            case StmtKind::Text: append(out, s.text); break;
            case StmtKind::Print: {
                Value v = eval(s.expr, scope);
                if (v.kind == Kind::String) append(out, v.s);
                else append(out, to_str(v));
                break;
            }
            case StmtKind::If:
                for (size_t k = 0; k < s.conds.size(); k++)
                    if (truthy(eval(s.conds[k], scope))) return exec(s.branches[k], scope, out);
                return exec(s.else_body, scope, out);
            case StmtKind::For: return exec_for(s, scope, out);
            case StmtKind::Set: assign(s.target, eval(s.expr, scope), scope, s.line); break;
            case StmtKind::SetBlock: {
                Value text = render_block(s.body, scope);
                if (s.filter) text = eval_filter(s.filter, scope, &text);
                assign(s.target, text, scope, s.line);
                break;
            }
            case StmtKind::Macro: scope->set(s.text, macro_value(s, scope)); break;
            case StmtKind::CallBlock: {
                Value caller = macro_value(s, scope);
                Value v = eval_call(s.expr, scope, &caller);
                append(out, to_str(v));
                break;
            }
            case StmtKind::FilterBlock: {
                Value text = render_block(s.body, scope);
                append(out, to_str(eval_filter(s.filter, scope, &text)));
                break;
            }
            case StmtKind::With: {
                auto inner = std::make_shared<Scope>(scope);
                for (const auto& [target, expr] : s.assigns) assign(target, eval(expr, scope), inner, s.line);
                return exec(s.body, inner, out);
            }
            case StmtKind::Break: return Flow::Break;
            case StmtKind::Continue: return Flow::Continue;
            case StmtKind::Scope: return exec(s.body, scope, out);
        }
    } catch (RenderError& e) {
        if (!e.line) e.line = s.line;
        throw;
    }
    return Flow::Normal;
}

void Interp::assign(const Target& t, const Value& v, const ScopePtr& scope, int line) {
    if (!t.attr.empty()) {
        const Value* ns = scope->find(t.names[0]);
        if (!ns || ns->kind != Kind::Namespace) throw RenderError("cannot assign attribute on non-namespace object", line);
        ns->dict->set(Value::string(t.attr), v);
        return;
    }
    if (!t.unpack) {
        scope->set(t.names[0], v);
        return;
    }
    List items = iterate(v);
    if (items.size() > t.names.size())
        throw RenderError("too many values to unpack (expected " + std::to_string(t.names.size()) + ")", line);
    if (items.size() < t.names.size())
        throw RenderError("not enough values to unpack (expected " + std::to_string(t.names.size()) + ", got " +
                              std::to_string(items.size()) + ")",
                          line);
    for (size_t k = 0; k < items.size(); k++) scope->set(t.names[k], items[k]);
}

Interp::Flow Interp::exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
    run_loop(s, scope, eval(s.expr, scope), 0, out);
    return Flow::Normal;
}

// One level of a for loop; `loop(children)` inside a recursive loop comes
// back here one level deeper.
//
// The `loop` variable is an Object whose list is the items and whose i is the
// current index; index, first, previtem and the like are computed from those
// on access (builtins' loop_attr), so an iteration allocates nothing for it.
// Its dict holds what is the same for every iteration: length, depth and
// changed().
void Interp::run_loop(const Stmt& s, const ScopePtr& scope, const Value& iterable, int depth, std::string& out) {
    std::shared_ptr<const List> items =
        iterable.is_seq() ? iterable.list : std::make_shared<const List>(iterate(iterable));
    if (s.filter) {
        List kept;
        for (const Value& item : *items) {
            step();
            auto probe = std::make_shared<Scope>(scope);
            assign(s.target, item, probe, s.line);
            if (truthy(eval(s.filter, probe))) kept.push_back(item);
        }
        items = std::make_shared<const List>(std::move(kept));
    }
    if (items->empty()) {
        exec(s.else_body, std::make_shared<Scope>(scope), out);
        return;
    }
    Value loop;
    loop.kind = Kind::Object;
    loop.list = items;
    loop.depth = 1;
    if (s.recursive) {
        auto fn = std::make_shared<Callable>();
        fn->name = "loop";
        const Stmt* stmt = &s;
        ScopePtr where = scope;
        fn->fn = [stmt, where, depth](Interp& in, CallArgs& a) -> Value {
            if (a.pos.size() != 1) throw RenderError("loop() takes exactly one argument");
            if (++in.depth_ > in.limits_.max_depth) {
                in.depth_--;
                throw RenderError("recursive loop nested deeper than " + std::to_string(in.limits_.max_depth));
            }
            std::string text;
            try {
                in.run_loop(*stmt, where, a.pos[0], depth + 1, text);
            } catch (...) {
                in.depth_--;
                throw;
            }
            in.depth_--;
            return Value::string(std::move(text));
        };
        loop.fn = std::move(fn);
    }
    // loop.changed() remembers its last arguments; held weakly by the
    // callable so that loop.changed(loop) cannot form a cycle.
    auto last = std::make_shared<std::pair<bool, List>>(false, List{});
    std::weak_ptr<std::pair<bool, List>> last_ref = last;
    Value changed = Value::callable(std::make_shared<Callable>(Callable{
        "changed", [last_ref](Interp&, CallArgs& a) -> Value {
            auto state = last_ref.lock();
            if (!state) return Value::boolean(true);
            bool differs = !state->first || !equals(Value::make_list(state->second), Value::make_list(a.pos));
            state->first = true;
            state->second = a.pos;
            return Value::boolean(differs);
        }}));
    loop.dict = std::make_shared<Dict>();
    loop.dict->entries.emplace_back(Value::string("length"), Value::integer(int64_t(items->size())));
    loop.dict->entries.emplace_back(Value::string("depth"), Value::integer(depth + 1));
    loop.dict->entries.emplace_back(Value::string("depth0"), Value::integer(depth));
    loop.dict->entries.emplace_back(Value::string("changed"), std::move(changed));
    for (size_t k = 0; k < items->size(); k++) {
        step();
        auto iter = std::make_shared<Scope>(scope);
        iter->vars.reserve(2 + s.target.names.size());
        assign(s.target, (*items)[k], iter, s.line);
        loop.i = int64_t(k);
        iter->set("loop", loop);
        Flow f = exec(s.body, iter, out);
        if (f == Flow::Break) break;
    }
}

// A macro sees its defining scope's variables as they are when it is called.
// It holds that scope weakly (the scope holds the macro); a macro that
// outlives its scope, e.g. stored in a namespace from inside a loop, can no
// longer be called.
Value Interp::macro_value(const Stmt& m, const ScopePtr& def_scope) {
    auto fn = std::make_shared<Callable>();
    fn->name = m.kind == StmtKind::Macro ? "Macro '" + m.text + "'" : "Macro 'caller'";
    const Stmt* stmt = &m;
    std::weak_ptr<Scope> where = def_scope;
    fn->fn = [stmt, where](Interp& in, CallArgs& a) -> Value {
        ScopePtr scope = where.lock();
        if (!scope) throw RenderError("macro called after its scope ended");
        return in.call_macro(*stmt, scope, a);
    };
    return Value::callable(std::move(fn));
}

Value Interp::call_macro(const Stmt& m, const ScopePtr& def_scope, CallArgs& a) {
    std::string name = m.kind == StmtKind::Macro ? m.text : "caller";
    if (depth_ >= limits_.max_depth)
        throw RenderError("macro calls nested deeper than " + std::to_string(limits_.max_depth) + " (runaway recursion?)");
    auto scope = std::make_shared<Scope>(def_scope);
    size_t np = m.params.size();
    if (a.pos.size() > np && !m.uses_varargs)
        throw RenderError("macro '" + name + "' takes not more than " + std::to_string(np) + " argument(s)");
    std::vector<bool> bound(np, false);
    for (size_t k = 0; k < a.pos.size() && k < np; k++) {
        scope->set(m.params[k], a.pos[k]);
        bound[k] = true;
    }
    auto extra_kw = std::make_shared<Dict>();
    bool have_caller = false;
    for (auto& [key, val] : a.kw) {
        size_t k = 0;
        while (k < np && m.params[k] != key) k++;
        if (k < np) {
            if (bound[k]) throw RenderError("macro '" + name + "' got multiple values for argument '" + key + "'");
            scope->set(key, val);
            bound[k] = true;
        } else if (key == "caller" && m.uses_caller) {
            scope->set("caller", val);
            have_caller = true;
        } else if (key == "caller") {
            throw RenderError("macro '" + name + "' was invoked with two values for the special caller argument. This is most likely a bug.");
        } else if (m.uses_kwargs) {
            extra_kw->set(Value::string(key), val);
        } else {
            throw RenderError("macro '" + name + "' takes no keyword argument '" + key + "'");
        }
    }
    for (size_t k = 0; k < np; k++) {
        if (bound[k]) continue;
        if (m.defaults[k]) scope->set(m.params[k], eval(m.defaults[k], scope));
        else scope->set(m.params[k], Value::undefined("parameter '" + m.params[k] + "' was not provided"));
    }
    if (m.uses_varargs) {
        List extra;
        for (size_t k = np; k < a.pos.size(); k++) extra.push_back(a.pos[k]);
        scope->set("varargs", Value::make_list(std::move(extra), Kind::Tuple));
    }
    if (m.uses_kwargs) scope->set("kwargs", Value::make_dict(extra_kw));
    if (m.uses_caller && !have_caller && m.kind == StmtKind::Macro)
        scope->set("caller", Value::undefined("No caller defined"));
    depth_++;
    std::string text;
    try {
        exec(m.body, scope, text);
    } catch (...) {
        depth_--;
        throw;
    }
    depth_--;
    return Value::string(std::move(text));
}

// ---------------------------------------------------------------- expressions

Value Interp::eval(const Expr* e, const ScopePtr& scope) {
    step();
    check_stack();
    try {
        return eval_inner(e, scope);
    } catch (RenderError& err) {
        if (!err.line) err.line = e->line;
        throw;
    }
}

void Interp::eval_args(const Expr* e, size_t first, const ScopePtr& scope, CallArgs& out) {
    for (size_t k = first; k < e->args.size(); k++) out.pos.push_back(eval(e->args[k], scope));
    for (const auto& [key, val] : e->kwargs) out.kw.emplace_back(key, eval(val, scope));
    if (e->star) {
        for (Value& v : iterate(eval(e->star, scope))) out.pos.push_back(std::move(v));
    }
    if (e->starstar) {
        Value d = eval(e->starstar, scope);
        if (d.kind != Kind::Dict) throw RenderError("argument after ** must be a mapping, not " + std::string(type_name(d)));
        for (const auto& [k, v] : d.dict->entries) {
            if (k.kind != Kind::String) throw RenderError("keywords must be strings");
            out.kw.emplace_back(k.s, v);
        }
    }
}

Value Interp::eval_call(const Expr* e, const ScopePtr& scope, const Value* caller) {
    Value fn = eval(e->args[0], scope);
    CallArgs args;
    eval_args(e, 1, scope, args);
    if (caller) args.kw.emplace_back("caller", *caller);
    return call(fn, args);
}

Value Interp::eval_filter(const Expr* e, const ScopePtr& scope, const Value* block_text) {
    Value subject;
    const Expr* inner = e->args[0];
    if (!inner) subject = *block_text;
    else if (inner->kind == ExprKind::Filter && block_text) subject = eval_filter(inner, scope, block_text);
    else subject = eval(inner, scope);
    CallArgs args;
    eval_args(e, 1, scope, args);
    return apply_filter(*this, e->builtin, subject, args);
}

Value Interp::eval_inner(const Expr* e, const ScopePtr& scope) {
    switch (e->kind) {
        case ExprKind::Const: return e->value;
        case ExprKind::Name: {
            const Value* v = scope->find(e->name);
            return v ? *v : Value::undefined("'" + e->name + "' is undefined");
        }
        case ExprKind::List:
        case ExprKind::Tuple: {
            List items;
            items.reserve(e->args.size());
            for (const Expr* a : e->args) items.push_back(eval(a, scope));
            return Value::make_list(std::move(items), e->kind == ExprKind::List ? Kind::List : Kind::Tuple);
        }
        case ExprKind::Dict: {
            auto d = std::make_shared<Dict>();
            for (size_t k = 0; k + 1 < e->args.size(); k += 2) {
                Value key = eval(e->args[k], scope);
                if (key.kind == Kind::List || key.kind == Kind::Dict || key.kind == Kind::Namespace ||
                    key.kind == Kind::Undefined)
                    throw RenderError(std::string("unhashable type: '") + type_name(key) + "'");
                d->set(std::move(key), eval(e->args[k + 1], scope));
            }
            return Value::make_dict(std::move(d));
        }
        case ExprKind::Attr: return get_attr(*this, eval(e->args[0], scope), e->name);
        case ExprKind::Item: {
            Value obj = eval(e->args[0], scope);
            const Expr* key = e->args[1];
            if (key->kind == ExprKind::Slice) {
                if (obj.is_undefined()) throw RenderError(obj.s);
                Value parts[3];
                for (int k = 0; k < 3; k++)
                    parts[k] = key->args[size_t(k)] ? eval(key->args[size_t(k)], scope) : Value::none();
                return slice_value(obj, parts[0], parts[1], parts[2]);
            }
            return get_item(*this, obj, eval(key, scope));
        }
        case ExprKind::Slice: throw RenderError("slice outside of a subscript");
        case ExprKind::Call: return eval_call(e, scope, nullptr);
        case ExprKind::Filter: return eval_filter(e, scope, nullptr);
        case ExprKind::Test: {
            Value subject = eval(e->args[0], scope);
            CallArgs args;
            eval_args(e, 1, scope, args);
            return Value::boolean(apply_test(*this, e->builtin, subject, args));
        }
        case ExprKind::Neg:
        case ExprKind::Pos: {
            Value v = eval(e->args[0], scope);
            if (v.is_undefined()) throw RenderError(v.s);
            bool neg = e->kind == ExprKind::Neg;
            if (v.kind == Kind::Float) return Value::number(neg ? -v.f : v.f);
            if (v.is_integral()) {
                int64_t x = v.as_int();
                if (neg && x == INT64_MIN) throw RenderError("integer overflow");
                return Value::integer(neg ? -x : x);
            }
            throw RenderError(std::string("bad operand type for unary ") + (neg ? "-" : "+") + ": '" + type_name(v) + "'");
        }
        case ExprKind::Not: return Value::boolean(!truthy(eval(e->args[0], scope)));
        case ExprKind::And: {
            Value a = eval(e->args[0], scope);
            return truthy(a) ? eval(e->args[1], scope) : a;
        }
        case ExprKind::Or: {
            Value a = eval(e->args[0], scope);
            return truthy(a) ? a : eval(e->args[1], scope);
        }
        case ExprKind::Binary: {
            Value a = eval(e->args[0], scope);
            Value b = eval(e->args[1], scope);
            return binary_op(*this, e->op, a, b);
        }
        case ExprKind::Compare: {
            Value left = eval(e->args[0], scope);
            for (size_t k = 0; k < e->ops.size(); k++) {
                Value right = eval(e->args[k + 1], scope);
                if (!compare_op(e->ops[k], left, right)) return Value::boolean(false);
                left = std::move(right);
            }
            return Value::boolean(true);
        }
        case ExprKind::Concat: {
            std::string s;
            for (const Expr* a : e->args) {
                Value v = eval(a, scope);
                s += v.kind == Kind::String ? v.s : to_str(v);
                check_size(s.size());
            }
            return Value::string(std::move(s));
        }
        case ExprKind::Cond: {
            if (truthy(eval(e->args[1], scope))) return eval(e->args[0], scope);
            if (e->args[2]) return eval(e->args[2], scope);
            return Value::undefined("the inline if-expression on line " + std::to_string(e->line) +
                                    " evaluated to false and no else section was defined.");
        }
    }
    return Value();
}

// ---------------------------------------------------------------- operators

static const char* op_symbol(Op op) {
    switch (op) {
        case Op::Add: return "+";
        case Op::Sub: return "-";
        case Op::Mul: return "*";
        case Op::Div: return "/";
        case Op::FloorDiv: return "//";
        case Op::Mod: return "%";
        case Op::Pow: return "** or pow()";
        default: return "?";
    }
}

[[noreturn]] static void unsupported(Op op, const Value& a, const Value& b) {
    throw RenderError(std::string("unsupported operand type(s) for ") + op_symbol(op) + ": '" + type_name(a) + "' and '" +
                      type_name(b) + "'");
}

static Value repeat(Interp& in, const Value& seq, int64_t times) {
    if (times <= 0) return seq.kind == Kind::String ? Value::string("") : Value::make_list({}, seq.kind);
    if (seq.kind == Kind::String) {
        in.check_size(seq.s.size() * size_t(std::min<int64_t>(times, int64_t(1) << 40)));
        std::string out;
        out.reserve(seq.s.size() * size_t(times));
        for (int64_t k = 0; k < times; k++) out += seq.s;
        in.step(out.size() / 64);
        return Value::string(std::move(out));
    }
    size_t n = seq.items().size() * size_t(std::min<int64_t>(times, int64_t(1) << 40));
    in.check_size(n * 16);
    List out;
    out.reserve(n);
    for (int64_t k = 0; k < times; k++) out.insert(out.end(), seq.items().begin(), seq.items().end());
    in.step(n / 8);
    return Value::make_list(std::move(out), seq.kind);
}

Value binary_op(Interp& in, Op op, const Value& a, const Value& b) {
    if (a.is_undefined()) throw RenderError(a.s);
    if (b.is_undefined()) throw RenderError(b.s);
    bool nums = a.is_number() && b.is_number();
    bool ints = a.is_integral() && b.is_integral();
    int64_t x = a.as_int(), y = b.as_int(), r = 0;
    switch (op) {
        case Op::Add:
            if (ints) {
                if (__builtin_add_overflow(x, y, &r)) throw RenderError("integer overflow");
                return Value::integer(r);
            }
            if (nums) return Value::number(a.as_double() + b.as_double());
            if (a.kind == Kind::String && b.kind == Kind::String) {
                in.check_size(a.s.size() + b.s.size());
                in.step((a.s.size() + b.s.size()) / 256);
                // Markup + str escapes the plain side, as markupsafe does.
                if (a.markup != b.markup)
                    return Value::string((a.markup ? a.s : html_escape(a.s)) + (b.markup ? b.s : html_escape(b.s)), true);
                return Value::string(a.s + b.s, a.markup);
            }
            if (a.is_seq() && a.kind == b.kind) {
                in.check_size((a.items().size() + b.items().size()) * 16);
                in.step((a.items().size() + b.items().size()) / 16);
                List l = a.items();
                l.insert(l.end(), b.items().begin(), b.items().end());
                return Value::make_list(std::move(l), a.kind);
            }
            if (a.kind == Kind::String || a.is_seq())
                throw RenderError(std::string("can only concatenate ") + type_name(a) + " (not \"" + type_name(b) +
                                  "\") to " + type_name(a));
            unsupported(op, a, b);
        case Op::Sub:
            if (ints) {
                if (__builtin_sub_overflow(x, y, &r)) throw RenderError("integer overflow");
                return Value::integer(r);
            }
            if (nums) return Value::number(a.as_double() - b.as_double());
            unsupported(op, a, b);
        case Op::Mul:
            if (ints) {
                if (__builtin_mul_overflow(x, y, &r)) throw RenderError("integer overflow");
                return Value::integer(r);
            }
            if (nums) return Value::number(a.as_double() * b.as_double());
            if ((a.kind == Kind::String || a.is_seq()) && b.is_integral()) return repeat(in, a, y);
            if (a.is_integral() && (b.kind == Kind::String || b.is_seq())) return repeat(in, b, x);
            if (a.kind == Kind::String || b.kind == Kind::String || a.is_seq() || b.is_seq())
                throw RenderError(std::string("can't multiply sequence by non-int of type '") +
                                  type_name(a.is_number() ? a : b) + "'");
            unsupported(op, a, b);
        case Op::Div:
            if (!nums) unsupported(op, a, b);
            if (b.as_double() == 0) throw RenderError("division by zero");
            return Value::number(a.as_double() / b.as_double());
        case Op::FloorDiv:
            if (ints) {
                if (y == 0) throw RenderError("integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) throw RenderError("integer overflow");
                int64_t q = x / y;
                if ((x % y != 0) && ((x < 0) != (y < 0))) q--;
                return Value::integer(q);
            }
            if (!nums) unsupported(op, a, b);
            if (b.as_double() == 0) throw RenderError("float floor division by zero");
            return Value::number(std::floor(a.as_double() / b.as_double()));
        case Op::Mod:
            if (a.kind == Kind::String) {
                std::string s = percent_format(a.s, b);
                in.check_size(s.size());
                return Value::string(std::move(s));
            }
            if (ints) {
                if (y == 0) throw RenderError("integer modulo by zero");
                if (y == -1) return Value::integer(0);
                int64_t m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) m += y;
                return Value::integer(m);
            }
            if (!nums) unsupported(op, a, b);
            if (b.as_double() == 0) throw RenderError("float modulo");
            {
                double m = std::fmod(a.as_double(), b.as_double());
                if (m != 0 && ((m < 0) != (b.as_double() < 0))) m += b.as_double();
                return Value::number(m);
            }
        case Op::Pow:
            if (ints && y >= 0) {
                int64_t result = 1, base = x;
                for (int64_t e = y; e > 0; e >>= 1) {
                    if ((e & 1) && __builtin_mul_overflow(result, base, &result)) throw RenderError("integer overflow");
                    if (e > 1 && __builtin_mul_overflow(base, base, &base)) throw RenderError("integer overflow");
                }
                return Value::integer(result);
            }
            if (!nums) unsupported(op, a, b);
            if (a.as_double() == 0 && b.as_double() < 0) throw RenderError("0.0 cannot be raised to a negative power");
            return Value::number(std::pow(a.as_double(), b.as_double()));
        default: break;
    }
    unsupported(op, a, b);
}

bool contains(const Value& container, const Value& item) {
    switch (container.kind) {
        case Kind::Undefined: return false;
        case Kind::String:
            if (item.kind != Kind::String)
                throw RenderError(std::string("'in <string>' requires string as left operand, not ") + type_name(item));
            return container.s.find(item.s) != std::string::npos;
        case Kind::List:
        case Kind::Tuple:
            for (const Value& v : container.items())
                if (equals(v, item)) return true;
            return false;
        case Kind::Dict: return container.dict->find(item) != nullptr;
        default:
            throw RenderError(std::string("argument of type '") + type_name(container) + "' is not iterable");
    }
}

bool compare_op(Op op, const Value& a, const Value& b) {
    switch (op) {
        case Op::Eq: return equals(a, b);
        case Op::Ne: return !equals(a, b);
        case Op::Lt: return compare(a, b, "<") == -1;
        case Op::Le: { int c = compare(a, b, "<="); return c == -1 || c == 0; }
        case Op::Gt: return compare(a, b, ">") == 1;
        case Op::Ge: { int c = compare(a, b, ">="); return c == 1 || c == 0; }
        case Op::In: return contains(b, a);
        case Op::NotIn: return !contains(b, a);
        default: return false;
    }
}

}  // namespace ms::jinja
