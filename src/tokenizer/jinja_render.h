// The Jinja interpreter: walks a parsed Program with a chain of variable
// scopes (one per for-iteration, macro call and with-block, as in Jinja2),
// under step, output-size and call-depth limits so that no template can hang
// or exhaust memory.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja_ast.h"

namespace ms::jinja {

struct Scope {
    std::shared_ptr<Scope> parent;
    std::vector<std::pair<std::string, Value>> vars;

    explicit Scope(std::shared_ptr<Scope> p = nullptr) : parent(std::move(p)) {}
    const Value* find(std::string_view name) const;  // this scope, then its parents
    void set(std::string_view name, Value v);        // in this scope
};
using ScopePtr = std::shared_ptr<Scope>;

struct Limits {
    size_t max_output = size_t(64) << 20;
    uint64_t max_steps = 50'000'000;
    int max_depth = 200;
    size_t max_stack = size_t(4) << 20;
};

class Interp {
public:
    Interp(const Program& prog, const Limits& limits) : prog_(prog), limits_(limits) {}
    ~Interp();  // breaks the reference cycles namespaces can form
    Interp(const Interp&) = delete;
    Interp& operator=(const Interp&) = delete;

    // Renders the program with `root` as the template's top-level scope.
    std::string render(const ScopePtr& root);

    // Used by builtins.
    Value call(const Value& fn, CallArgs& args);
    void step(uint64_t n = 1);
    void check_size(size_t bytes) const;  // any one string or list we build
    Value make_namespace(std::vector<std::pair<Value, Value>> attrs);
    const Limits& limits() const { return limits_; }

private:
    enum class Flow { Normal, Break, Continue };

    Flow exec(const std::vector<Stmt*>& body, const ScopePtr& scope, std::string& out);
    Flow exec_stmt(const Stmt& s, const ScopePtr& scope, std::string& out);
    Flow exec_for(const Stmt& s, const ScopePtr& scope, std::string& out);
    void run_loop(const Stmt& s, const ScopePtr& scope, const Value& iterable, int depth, std::string& out);
    void assign(const Target& t, const Value& v, const ScopePtr& scope, int line);
    Value render_block(const std::vector<Stmt*>& body, const ScopePtr& scope);
    Value call_macro(const Stmt& m, const ScopePtr& def_scope, CallArgs& args);
    Value macro_value(const Stmt& m, const ScopePtr& def_scope);
    void append(std::string& out, std::string_view text);
    void check_stack() const;

    Value eval(const Expr* e, const ScopePtr& scope);
    Value eval_inner(const Expr* e, const ScopePtr& scope);
    Value eval_call(const Expr* e, const ScopePtr& scope, const Value* caller);
    void eval_args(const Expr* e, size_t first, const ScopePtr& scope, CallArgs& out);
    Value eval_filter(const Expr* e, const ScopePtr& scope, const Value* block_text);

    const Program& prog_;
    Limits limits_;
    uint64_t steps_ = 0;
    int depth_ = 0;
    uintptr_t stack_base_ = 0;  // frame address where render() began
    std::vector<std::weak_ptr<Dict>> namespaces_;
    size_t namespaces_compacted_ = 64;
};

// Python binary operators and comparisons on Values.
Value binary_op(Interp& in, Op op, const Value& a, const Value& b);
bool compare_op(Op op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);

}  // namespace ms::jinja
