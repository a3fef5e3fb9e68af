// Lexer and recursive-descent parser for Jinja2 templates. The whitespace
// rules (trim_blocks, lstrip_blocks, "-" and "+" modifiers) and the grammar
// follow Jinja2 3.1's lexer.py and parser.py, so that the same template text
// yields the same output text.
#include <cstring>
#include <stdexcept>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_text.h"

namespace ms::jinja {
namespace {

[[noreturn]] void fail(int line, const std::string& msg) {
    throw std::runtime_error("template: line " + std::to_string(line) + ": " + msg);
}

enum class Tok : uint8_t { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
    Tok type;
    int line;
    std::string text;  // Data, Name, String (unescaped), Op
    int64_t ival = 0;
    double fval = 0;
};

std::string describe(const Token& t) {
    switch (t.type) {
        case Tok::Data: return "template data";
        case Tok::VarBegin: return "begin of print statement";
        case Tok::VarEnd: return "end of print statement";
        case Tok::BlockBegin: return "begin of statement block";
        case Tok::BlockEnd: return "end of statement block";
        case Tok::String: return "string";
        case Tok::Int: return "integer";
        case Tok::Float: return "float";
        case Tok::Eof: return "end of template";
        default: return t.text;
    }
}

// ---------------------------------------------------------------- lexer

constexpr bool kTrimBlocks = true;
constexpr bool kLstripBlocks = true;

class Lexer {
public:
    explicit Lexer(std::string_view source) {
        // Jinja2 normalizes \r\n and \r to \n and drops one trailing newline
        // (keep_trailing_newline=False) before lexing.
        src_.reserve(source.size());
        for (size_t i = 0; i < source.size(); i++) {
            if (source[i] == '\r') {
                src_ += '\n';
                if (i + 1 < source.size() && source[i + 1] == '\n') i++;
            } else {
                src_ += source[i];
            }
        }
        if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    }

    std::vector<Token> run() {
        size_t n = src_.size();
        while (pos_ < n) {
            size_t p = pos_;
            while (p + 1 < n && !(src_[p] == '{' && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#'))) p++;
            if (p + 1 >= n) {
                emit_data(std::string_view(src_).substr(pos_), line_);
                break;
            }
            char kind = src_[p + 1];
            size_t q = p + 2;
            char sign = q < n && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
            size_t body = q + (sign ? 1 : 0);
            size_t raw_body = kind == '%' ? match_raw_begin(body) : 0;

            std::string_view text = std::string_view(src_).substr(pos_, p - pos_);
            int text_line = line_;
            count_lines(pos_, p);
            text = strip_before_tag(text, sign, kind != '{');
            emit_data(text, text_line);
            line_starting_ = false;

            if (raw_body) {
                count_lines(p, raw_body);
                line_starting_ = src_[raw_body - 1] == '\n';
                lex_raw(raw_body);
            } else if (kind == '#') {
                lex_comment(body);
            } else {
                push(kind == '{' ? Tok::VarBegin : Tok::BlockBegin, line_);
                pos_ = body;
                lex_tag(kind == '{');
            }
        }
        push(Tok::Eof, line_);
        return std::move(toks_);
    }

private:
    std::string src_;
    size_t pos_ = 0;
    int line_ = 1;
    bool line_starting_ = true;
    std::vector<Token> toks_;

    void push(Tok t, int line, std::string text = {}) { toks_.push_back(Token{t, line, std::move(text)}); }
    void emit_data(std::string_view text, int line) {
        if (!text.empty()) push(Tok::Data, line, std::string(text));
    }
    void count_lines(size_t a, size_t b) {
        for (size_t k = a; k < b; k++) line_ += src_[k] == '\n';
    }
    // Length of the Python-whitespace run at p.
    size_t ws_at(size_t p) const {
        size_t i = p;
        while (i < src_.size()) {
            size_t j = i;
            if (!py_isspace(utf8_next(src_, j))) break;
            i = j;
        }
        return i - p;
    }
    static bool all_space(std::string_view s) {
        for (size_t i = 0; i < s.size();)
            if (!py_isspace(utf8_next(s, i))) return false;
        return true;
    }
    static std::string_view rstrip_space(std::string_view s) {
        size_t keep = 0;
        for (size_t i = 0; i < s.size();) {
            bool sp = py_isspace(utf8_next(s, i));
            if (!sp) keep = i;
        }
        return s.substr(0, keep);
    }

    // The text before a tag loses its trailing whitespace with "-", or the
    // indentation of the tag's line under lstrip_blocks (not for {{ }}).
    std::string_view strip_before_tag(std::string_view text, char sign, bool lstrip_applies) const {
        if (sign == '-') return rstrip_space(text);
        if (sign != '+' && kLstripBlocks && lstrip_applies) {
            size_t nl = text.rfind('\n');
            size_t l = nl == std::string_view::npos ? 0 : nl + 1;
            if ((l > 0 || line_starting_) && l < text.size() && all_space(text.substr(l))) return text.substr(0, l);
        }
        return text;
    }

    // After a tag end: "-" eats all following whitespace; trim_blocks eats one
    // newline after %} and #}.
    size_t after_tag_end(size_t p, char sign, bool block) {
        if (sign == '-') p += ws_at(p);
        else if (sign != '+' && block && kTrimBlocks && p < src_.size() && src_[p] == '\n') p++;
        return p;
    }

    // {% raw %}: returns the offset after the opening tag, 0 if not raw.
    size_t match_raw_begin(size_t p) const {
        p += ws_at(p);
        if (src_.compare(p, 3, "raw") != 0) return 0;
        p += 3;
        p += ws_at(p);
        if (src_.compare(p, 3, "-%}") == 0) return p + 3 + ws_at(p + 3);
        if (src_.compare(p, 2, "%}") == 0) return p + 2;
        return 0;
    }

    void lex_raw(size_t body) {
        for (size_t k = src_.find("{%", body); k != std::string::npos; k = src_.find("{%", k + 1)) {
            size_t p = k + 2;
            char sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : 0;
            if (sign) p++;
            p += ws_at(p);
            if (src_.compare(p, 6, "endraw") != 0) continue;
            p += 6;
            p += ws_at(p);
            char esign = 0;
            if (src_.compare(p, 3, "+%}") == 0 || src_.compare(p, 3, "-%}") == 0) esign = src_[p++];
            else if (src_.compare(p, 2, "%}") != 0) continue;
            p = after_tag_end(p + 2, esign, true);
            std::string_view text = std::string_view(src_).substr(body, k - body);
            int text_line = line_;
            text = strip_before_tag(text, sign, true);
            emit_data(text, text_line);
            count_lines(body, p);
            line_starting_ = src_[p - 1] == '\n';
            pos_ = p;
            return;
        }
        fail(line_, "missing end of raw directive");
    }

    void lex_comment(size_t body) {
        size_t e = src_.find("#}", body);
        if (e == std::string::npos) fail(line_, "missing end of comment tag");
        char esign = e > body && (src_[e - 1] == '-' || src_[e - 1] == '+') ? src_[e - 1] : 0;
        size_t p = after_tag_end(e + 2, esign, true);
        count_lines(body, p);
        line_starting_ = src_[p - 1] == '\n';
        pos_ = p;
    }

    void lex_tag(bool variable) {
        std::string stack;  // open brackets
        size_t n = src_.size();
        while (true) {
            if (pos_ >= n) fail(line_, variable ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'");
            if (stack.empty()) {
                size_t p = pos_;
                if (variable) {
                    if (src_.compare(p, 3, "-}}") == 0) { end_tag(p + 3, '-', false, Tok::VarEnd); return; }
                    if (src_.compare(p, 2, "}}") == 0) { end_tag(p + 2, 0, false, Tok::VarEnd); return; }
                } else {
                    if (src_.compare(p, 3, "-%}") == 0 || src_.compare(p, 3, "+%}") == 0) {
                        end_tag(p + 3, src_[p], true, Tok::BlockEnd);
                        return;
                    }
                    if (src_.compare(p, 2, "%}") == 0) { end_tag(p + 2, 0, true, Tok::BlockEnd); return; }
                }
            }
            if (size_t w = ws_at(pos_)) {
                count_lines(pos_, pos_ + w);
                pos_ += w;
                continue;
            }
            char c = src_[pos_];
            if (c >= '0' && c <= '9') lex_number();
            else if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) lex_name();
            else if (c == '\'' || c == '"') lex_string();
            else lex_operator(stack);
        }
    }

    void end_tag(size_t p, char sign, bool block, Tok t) {
        size_t e = after_tag_end(p, sign, block);
        push(t, line_);
        count_lines(pos_, e);
        line_starting_ = src_[e - 1] == '\n';
        pos_ = e;
    }

    void lex_name() {
        size_t s = pos_;
        while (pos_ < src_.size() && (isalnum(uint8_t(src_[pos_])) || src_[pos_] == '_')) pos_++;
        push(Tok::Name, line_, src_.substr(s, pos_ - s));
    }

    // Digits with single underscores between them, as Python allows.
    size_t digits(size_t p, std::string& out) const {
        while (p < src_.size()) {
            char c = src_[p];
            if (c >= '0' && c <= '9') out += c;
            else if (c == '_' && p + 1 < src_.size() && isdigit(uint8_t(src_[p + 1])) && !out.empty()) {}
            else break;
            p++;
        }
        return p;
    }

    void lex_number() {
        size_t s = pos_;
        std::string text;
        auto is_digit = [&](size_t p) { return p < src_.size() && isdigit(uint8_t(src_[p])); };
        if (src_[s] == '0' && s + 1 < src_.size() && strchr("xXoObB", src_[s + 1]) && src_[s + 1] != 0) {
            int base = tolower(src_[s + 1]) == 'x' ? 16 : tolower(src_[s + 1]) == 'o' ? 8 : 2;
            size_t p = s + 2;
            uint64_t v = 0;
            bool any = false;
            while (p < src_.size()) {
                char c = char(tolower(src_[p]));
                int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c == '_' ? -2 : -1;
                if (d == -2) { p++; continue; }
                if (d < 0 || d >= base) break;
                if (v > (uint64_t(INT64_MAX) - uint64_t(d)) / uint64_t(base)) fail(line_, "integer literal too large");
                v = v * uint64_t(base) + uint64_t(d);
                any = true;
                p++;
            }
            if (any) {
                Token t{Tok::Int, line_, src_.substr(s, p - s)};
                t.ival = int64_t(v);
                toks_.push_back(std::move(t));
                pos_ = p;
                return;
            }
        }
        size_t p = digits(s, text);
        bool is_float = false;
        bool after_dot = s > 0 && src_[s - 1] == '.';  // x.0.1 is two subscripts
        if (!after_dot && p + 1 < src_.size() && src_[p] == '.' && is_digit(p + 1)) {
            text += '.';
            p = digits(p + 1, text);
            is_float = true;
        }
        if (!after_dot && p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
            size_t e = p + 1;
            std::string exp = "e";
            if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) exp += src_[e++];
            if (is_digit(e)) {
                p = digits(e, exp);
                text += exp;
                is_float = true;
            }
        }
        Token t{is_float ? Tok::Float : Tok::Int, line_, text};
        if (is_float) {
            t.fval = strtod(text.c_str(), nullptr);
        } else {
            errno = 0;
            t.ival = strtoll(text.c_str(), nullptr, 10);
            if (errno == ERANGE) fail(line_, "integer literal too large");
        }
        toks_.push_back(std::move(t));
        pos_ = p;
    }

    static int hexval(char c) {
        if (c >= '0' && c <= '9') return c - '0';
        c = char(tolower(c));
        return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    }

    // Python's unicode-escape decoding, which Jinja2 applies to literals.
    void lex_string() {
        char q = src_[pos_];
        int start_line = line_;
        size_t p = pos_ + 1;
        std::string out;
        while (true) {
            if (p >= src_.size()) fail(start_line, std::string("unexpected char '") + q + "' (unterminated string)");
            char c = src_[p];
            if (c == q) break;
            if (c == '\n') line_++;
            if (c != '\\') { out += c; p++; continue; }
            if (p + 1 >= src_.size()) fail(start_line, std::string("unexpected char '") + q + "' (unterminated string)");
            char e = src_[p + 1];
            p += 2;
            switch (e) {
                case '\n': line_++; break;
                case '\\': out += '\\'; break;
                case '\'': out += '\''; break;
                case '"': out += '"'; break;
                case 'a': out += '\a'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'v': out += '\v'; break;
                case 'x':
                case 'u':
                case 'U': {
                    int len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                    uint32_t cp = 0;
                    for (int k = 0; k < len; k++) {
                        int h = p < src_.size() ? hexval(src_[p]) : -1;
                        if (h < 0) fail(start_line, std::string("truncated \\") + e + " escape in string literal");
                        cp = cp * 16 + uint32_t(h);
                        p++;
                    }
                    if (cp > 0x10FFFF) fail(start_line, "illegal Unicode character in string literal");
                    utf8_append(out, cp);
                    break;
                }
                case 'N': fail(start_line, "named unicode escapes (\\N{...}) are not supported");
                default:
                    if (e >= '0' && e <= '7') {
                        uint32_t cp = uint32_t(e - '0');
                        for (int k = 0; k < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; k++)
                            cp = cp * 8 + uint32_t(src_[p++] - '0');
                        utf8_append(out, cp);
                    } else {
                        out += '\\';
                        out += e;
                    }
            }
        }
        push(Tok::String, start_line, std::move(out));
        pos_ = p + 1;
    }

    void lex_operator(std::string& stack) {
        static const char* const two[] = {"//", "**", "==", "!=", ">=", "<="};
        for (const char* op : two)
            if (src_.compare(pos_, 2, op) == 0) {
                push(Tok::Op, line_, op);
                pos_ += 2;
                return;
            }
        char c = src_[pos_];
        if (!strchr("+-/*%~[](){}><=.:|,;", c) || c == 0) {
            std::string shown;
            size_t i = pos_;
            utf8_append(shown, utf8_next(src_, i));
            fail(line_, "unexpected char '" + shown + "'");
        }
        if (c == '(' || c == '[' || c == '{') {
            if (stack.size() >= 200) fail(line_, "brackets nested too deeply");
            stack += c;
        } else if (c == ')' || c == ']' || c == '}') {
            char open = c == ')' ? '(' : c == ']' ? '[' : '{';
            if (stack.empty()) fail(line_, std::string("unexpected '") + c + "'");
            if (stack.back() != open) {
                char want = stack.back() == '(' ? ')' : stack.back() == '[' ? ']' : '}';
                fail(line_, std::string("unexpected '") + c + "', expected '" + want + "'");
            }
            stack.pop_back();
        }
        push(Tok::Op, line_, std::string(1, c));
        pos_++;
    }
};

// ---------------------------------------------------------------- parser

constexpr int kMaxNesting = 100;

class Parser {
public:
    Parser(std::vector<Token> toks, Program& prog) : toks_(std::move(toks)), prog_(prog) {}

    void run() {
        prog_.body = subparse({});
        if (cur().type != Tok::Eof) fail(cur().line, "unexpected '" + describe(cur()) + "'");
    }

private:
    std::vector<Token> toks_;
    size_t pos_ = 0;
    Program& prog_;
    int depth_ = 0;
    int loop_depth_ = 0;
    std::vector<std::string> tag_stack_;
    std::vector<std::vector<std::string>> end_stack_;
    std::vector<Stmt*> macro_stack_;

    struct Nest {
        Parser& p;
        explicit Nest(Parser& parser) : p(parser) {
            if (++p.depth_ > kMaxNesting) fail(p.cur().line, "template nested too deeply");
        }
        ~Nest() { --p.depth_; }
    };

    const Token& cur() const { return toks_[pos_]; }
    const Token& look(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
    void next() {
        if (pos_ + 1 < toks_.size()) pos_++;
    }
    bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
    bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
    bool skip_op(const char* op) {
        if (!is_op(op)) return false;
        next();
        return true;
    }
    bool skip_name(const char* n) {
        if (!is_name(n)) return false;
        next();
        return true;
    }
    [[noreturn]] void unexpected(const std::string& wanted) const {
        fail(cur().line, "expected " + wanted + ", got '" + describe(cur()) + "'");
    }
    void expect_op(const char* op) {
        if (!skip_op(op)) unexpected(std::string("'") + op + "'");
    }
    void expect(Tok t, const char* what) {
        if (cur().type != t) unexpected(what);
        next();
    }
    std::string expect_name() {
        if (cur().type != Tok::Name) unexpected("a name");
        std::string n = cur().text;
        next();
        return n;
    }

    Expr* node(ExprKind k, int line) {
        Expr& e = prog_.exprs.emplace_back();
        e.kind = k;
        e.line = line;
        return &e;
    }
    Stmt* stmt(StmtKind k, int line) {
        Stmt& s = prog_.stmts.emplace_back();
        s.kind = k;
        s.line = line;
        return &s;
    }

    // ---- statements

    bool at_end_token(const std::vector<std::string>& ends) const {
        if (cur().type != Tok::Name) return false;
        for (const auto& e : ends)
            if (cur().text == e) return true;
        return false;
    }

    std::vector<Stmt*> subparse(const std::vector<std::string>& ends) {
        std::vector<Stmt*> body;
        while (cur().type != Tok::Eof) {
            const Token& t = cur();
            if (t.type == Tok::Data) {
                Stmt* s = stmt(StmtKind::Text, t.line);
                s->text = t.text;
                body.push_back(s);
                next();
            } else if (t.type == Tok::VarBegin) {
                next();
                Stmt* s = stmt(StmtKind::Print, cur().line);
                s->expr = parse_tuple(false, true, {}, false);
                expect(Tok::VarEnd, "'}}'");
                body.push_back(s);
            } else if (t.type == Tok::BlockBegin) {
                next();
                if (!ends.empty() && at_end_token(ends)) return body;
                body.push_back(parse_statement());
                expect(Tok::BlockEnd, "'%}'");
            } else {
                fail(t.line, "unexpected '" + describe(t) + "'");
            }
        }
        return body;
    }

    [[noreturn]] void fail_tag(const std::string* name, int line) const {
        std::string msg = name ? "encountered unknown tag '" + *name + "'." : "unexpected end of template.";
        if (!end_stack_.empty()) {
            std::string looking;
            for (const auto& e : end_stack_.back()) looking += (looking.empty() ? "'" : " or '") + e + "'";
            msg += " Jinja was looking for the following tags: " + looking + ".";
        }
        if (!tag_stack_.empty()) msg += " The innermost block that needs to be closed is '" + tag_stack_.back() + "'.";
        fail(line, msg);
    }

    // Parses the body up to one of `ends`; leaves the end tag's name current
    // (or consumes it with drop).
    std::vector<Stmt*> parse_statements(std::vector<std::string> ends, bool drop) {
        skip_op(":");
        expect(Tok::BlockEnd, "'%}'");
        end_stack_.push_back(ends);
        std::vector<Stmt*> body = subparse(ends);
        if (cur().type == Tok::Eof) fail_tag(nullptr, cur().line);
        end_stack_.pop_back();
        if (drop) next();
        return body;
    }

    Stmt* parse_statement() {
        Nest nest(*this);
        const Token& t = cur();
        if (t.type != Tok::Name) fail(t.line, "tag name expected");
        std::string name = t.text;
        int line = t.line;
        tag_stack_.push_back(name);
        Stmt* s = nullptr;
        if (name == "if") s = parse_if();
        else if (name == "for") s = parse_for();
        else if (name == "set") s = parse_set();
        else if (name == "macro") s = parse_macro();
        else if (name == "call") s = parse_call_block();
        else if (name == "filter") s = parse_filter_block();
        else if (name == "with") s = parse_with();
        else if (name == "print") {
            next();
            s = stmt(StmtKind::Print, line);
            s->expr = parse_tuple(false, true, {}, false);
        } else if (name == "break" || name == "continue") {
            if (loop_depth_ == 0) fail(line, "'" + name + "' outside of a loop");
            next();
            s = stmt(name == "break" ? StmtKind::Break : StmtKind::Continue, line);
        } else if (name == "generation") {
            // transformers' AssistantTracker extension: renders its body as is.
            next();
            s = stmt(StmtKind::Scope, line);
            s->body = parse_statements({"endgeneration"}, true);
        } else if (name == "include" || name == "import" || name == "from" || name == "extends" || name == "block") {
            fail(line, "'" + name + "' is not supported: chat templates are a single file");
        } else {
            tag_stack_.pop_back();
            fail_tag(&name, line);
        }
        tag_stack_.pop_back();
        return s;
    }

    Stmt* parse_if() {
        Stmt* s = stmt(StmtKind::If, cur().line);
        next();
        while (true) {
            s->conds.push_back(parse_tuple(false, false, {}, false));
            s->branches.push_back(parse_statements({"elif", "else", "endif"}, false));
            std::string t = cur().text;
            next();
            if (t == "elif") continue;
            if (t == "else") s->else_body = parse_statements({"endif"}, true);
            break;
        }
        return s;
    }

    Stmt* parse_for() {
        Stmt* s = stmt(StmtKind::For, cur().line);
        next();
        s->target = parse_target(false, {"in"});
        if (!skip_name("in")) unexpected("'in'");
        s->expr = parse_tuple(false, false, {"recursive"}, false);
        if (skip_name("if")) s->filter = parse_expression(true);
        s->recursive = skip_name("recursive");
        loop_depth_++;
        s->body = parse_statements({"endfor", "else"}, false);
        loop_depth_--;
        std::string t = cur().text;
        next();
        if (t == "else") s->else_body = parse_statements({"endfor"}, true);
        return s;
    }

    Stmt* parse_set() {
        int line = cur().line;
        next();
        Target target = parse_target(true, {});
        if (skip_op("=")) {
            Stmt* s = stmt(StmtKind::Set, line);
            s->target = std::move(target);
            s->expr = parse_tuple(false, true, {}, false);
            return s;
        }
        Stmt* s = stmt(StmtKind::SetBlock, line);
        s->target = std::move(target);
        if (is_op("|")) s->filter = parse_filter(nullptr, false);
        s->body = parse_statements({"endset"}, true);
        return s;
    }

    // A name, names separated by commas (optionally parenthesized), or with
    // allow_ns a namespace attribute.
    Target parse_target(bool allow_ns, const std::vector<std::string>& extra_end) {
        Target t;
        int line = cur().line;
        if (allow_ns && cur().type == Tok::Name && look().type == Tok::Op && look().text == ".") {
            t.names.push_back(expect_name());
            next();
            t.attr = expect_name();
            return t;
        }
        bool paren = skip_op("(");
        if (at_end_token(extra_end)) fail(line, "expected an expression, got '" + describe(cur()) + "'");
        while (true) {
            if (cur().type != Tok::Name) {
                if (!t.names.empty() && (paren ? is_op(")") : (cur().type == Tok::BlockEnd || at_end_token(extra_end) || is_op("="))))
                    break;
                fail(line, "can't assign to '" + describe(cur()) + "'");
            }
            t.names.push_back(expect_name());
            if (!skip_op(",")) break;
            t.unpack = true;
        }
        if (paren) {
            expect_op(")");
            if (t.names.size() > 1) t.unpack = true;
        }
        return t;
    }

    void parse_signature(Stmt* s) {
        expect_op("(");
        while (!is_op(")")) {
            if (!s->params.empty()) expect_op(",");
            s->params.push_back(expect_name());
            if (skip_op("=")) s->defaults.push_back(parse_expression(true));
            else if (!s->defaults.empty() && s->defaults.back()) fail(cur().line, "non-default argument follows default argument");
            else s->defaults.push_back(nullptr);
        }
        expect_op(")");
    }

    // The body of a macro or call block: its own function, so break and
    // continue do not reach loops around it, and varargs/kwargs/caller in it
    // mark it.
    void parse_callable_body(Stmt* s, const char* end) {
        macro_stack_.push_back(s);
        int saved_loops = loop_depth_;
        loop_depth_ = 0;
        s->body = parse_statements({end}, true);
        loop_depth_ = saved_loops;
        macro_stack_.pop_back();
    }

    Stmt* parse_macro() {
        Stmt* s = stmt(StmtKind::Macro, cur().line);
        next();
        s->text = expect_name();
        parse_signature(s);
        parse_callable_body(s, "endmacro");
        return s;
    }

    Stmt* parse_call_block() {
        Stmt* s = stmt(StmtKind::CallBlock, cur().line);
        next();
        if (is_op("(")) parse_signature(s);
        s->expr = parse_expression(true);
        if (s->expr->kind != ExprKind::Call) fail(s->line, "expected call");
        parse_callable_body(s, "endcall");
        return s;
    }

    Stmt* parse_filter_block() {
        Stmt* s = stmt(StmtKind::FilterBlock, cur().line);
        next();
        s->filter = parse_filter(nullptr, true);
        s->body = parse_statements({"endfilter"}, true);
        return s;
    }

    Stmt* parse_with() {
        Stmt* s = stmt(StmtKind::With, cur().line);
        next();
        while (cur().type != Tok::BlockEnd) {
            if (!s->assigns.empty()) expect_op(",");
            Target t = parse_target(false, {});
            expect_op("=");
            s->assigns.emplace_back(std::move(t), parse_expression(true));
        }
        s->body = parse_statements({"endwith"}, true);
        return s;
    }

    // ---- expressions

    bool is_tuple_end(const std::vector<std::string>& extra_end) const {
        if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_op(")")) return true;
        return at_end_token(extra_end);
    }

    Expr* parse_tuple(bool simplified, bool with_condexpr, const std::vector<std::string>& extra_end, bool explicit_parens) {
        int line = cur().line;
        std::vector<Expr*> items;
        bool is_tuple = false;
        while (true) {
            if (!items.empty()) expect_op(",");
            if (is_tuple_end(extra_end)) break;
            items.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
            if (is_op(",")) is_tuple = true;
            else break;
        }
        if (!is_tuple) {
            if (!items.empty()) return items[0];
            if (!explicit_parens) fail(cur().line, "expected an expression, got '" + describe(cur()) + "'");
        }
        Expr* e = node(ExprKind::Tuple, line);
        e->args = std::move(items);
        return e;
    }

    // Recursion depth is counted where the grammar recurses: parse_unary
    // (parentheses, brackets, unary minus), `not` chains and `else` chains.
    Expr* parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

    Expr* parse_condexpr() {
        int line = cur().line;
        Expr* e = parse_or();
        while (skip_name("if")) {
            Expr* c = node(ExprKind::Cond, line);
            Expr* test = parse_or();
            Expr* other = nullptr;
            if (skip_name("else")) {
                Nest nest(*this);
                other = parse_condexpr();
            }
            c->args = {e, test, other};
            e = c;
            line = cur().line;
        }
        return e;
    }

    Expr* binary(ExprKind k, int line, Expr* a, Expr* b) {
        Expr* e = node(k, line);
        e->args = {a, b};
        return e;
    }

    Expr* parse_or() {
        int line = cur().line;
        Expr* e = parse_and();
        while (skip_name("or")) e = binary(ExprKind::Or, line, e, parse_and());
        return e;
    }

    Expr* parse_and() {
        int line = cur().line;
        Expr* e = parse_not();
        while (skip_name("and")) e = binary(ExprKind::And, line, e, parse_not());
        return e;
    }

    Expr* parse_not() {
        if (is_name("not")) {
            Nest nest(*this);
            int line = cur().line;
            next();
            Expr* e = node(ExprKind::Not, line);
            e->args = {parse_not()};
            return e;
        }
        return parse_compare();
    }

    Expr* parse_compare() {
        int line = cur().line;
        Expr* first = parse_math1();
        Expr* cmp = nullptr;
        while (true) {
            Op op;
            if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                          cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
                const std::string& t = cur().text;
                op = t == "==" ? Op::Eq : t == "!=" ? Op::Ne : t == "<" ? Op::Lt : t == "<=" ? Op::Le : t == ">" ? Op::Gt : Op::Ge;
                next();
            } else if (is_name("in")) {
                op = Op::In;
                next();
            } else if (is_name("not") && look().type == Tok::Name && look().text == "in") {
                op = Op::NotIn;
                next();
                next();
            } else {
                break;
            }
            if (!cmp) {
                cmp = node(ExprKind::Compare, line);
                cmp->args.push_back(first);
            }
            cmp->ops.push_back(op);
            cmp->args.push_back(parse_math1());
        }
        return cmp ? cmp : first;
    }

    Expr* arith(int line, Op op, Expr* a, Expr* b) {
        Expr* e = binary(ExprKind::Binary, line, a, b);
        e->op = op;
        return e;
    }

    Expr* parse_math1() {
        int line = cur().line;
        Expr* e = parse_concat();
        while (is_op("+") || is_op("-")) {
            Op op = is_op("+") ? Op::Add : Op::Sub;
            next();
            e = arith(line, op, e, parse_concat());
        }
        return e;
    }

    Expr* parse_concat() {
        int line = cur().line;
        Expr* first = parse_math2();
        if (!is_op("~")) return first;
        Expr* e = node(ExprKind::Concat, line);
        e->args.push_back(first);
        while (skip_op("~")) e->args.push_back(parse_math2());
        return e;
    }

    Expr* parse_math2() {
        int line = cur().line;
        Expr* e = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            const std::string& t = cur().text;
            Op op = t == "*" ? Op::Mul : t == "/" ? Op::Div : t == "//" ? Op::FloorDiv : Op::Mod;
            next();
            e = arith(line, op, e, parse_pow());
        }
        return e;
    }

    Expr* parse_pow() {
        int line = cur().line;
        Expr* e = parse_unary(true);
        while (skip_op("**")) e = arith(line, Op::Pow, e, parse_unary(true));
        return e;
    }

    Expr* parse_unary(bool with_filter) {
        Nest nest(*this);
        int line = cur().line;
        Expr* e;
        if (is_op("-") || is_op("+")) {
            ExprKind k = is_op("-") ? ExprKind::Neg : ExprKind::Pos;
            next();
            e = node(k, line);
            e->args = {parse_unary(false)};
        } else {
            e = parse_primary();
        }
        e = parse_postfix(e);
        if (with_filter) e = parse_filter_expr(e);
        return e;
    }

    Expr* parse_primary() {
        const Token& t = cur();
        int line = t.line;
        Expr* e = nullptr;
        if (t.type == Tok::Name) {
            if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
                e = node(ExprKind::Const, line);
                e->value = Value::boolean(t.text[0] == 't' || t.text[0] == 'T');
            } else if (t.text == "none" || t.text == "None") {
                e = node(ExprKind::Const, line);
                e->value = Value::none();
            } else {
                e = node(ExprKind::Name, line);
                e->name = t.text;
                if (e->name == "varargs" || e->name == "kwargs" || e->name == "caller")
                    for (Stmt* m : macro_stack_) {
                        if (e->name == "varargs") m->uses_varargs = true;
                        else if (e->name == "kwargs") m->uses_kwargs = true;
                        else m->uses_caller = true;
                    }
            }
            next();
        } else if (t.type == Tok::String) {
            std::string s;
            while (cur().type == Tok::String) {
                s += cur().text;
                next();
            }
            e = node(ExprKind::Const, line);
            e->value = Value::string(std::move(s));
        } else if (t.type == Tok::Int || t.type == Tok::Float) {
            e = node(ExprKind::Const, line);
            e->value = t.type == Tok::Int ? Value::integer(t.ival) : Value::number(t.fval);
            next();
        } else if (is_op("(")) {
            next();
            e = parse_tuple(false, true, {}, true);
            expect_op(")");
        } else if (is_op("[")) {
            next();
            e = node(ExprKind::List, line);
            while (!is_op("]")) {
                if (!e->args.empty()) expect_op(",");
                if (is_op("]")) break;
                e->args.push_back(parse_expression(true));
            }
            expect_op("]");
        } else if (is_op("{")) {
            next();
            e = node(ExprKind::Dict, line);
            while (!is_op("}")) {
                if (!e->args.empty()) expect_op(",");
                if (is_op("}")) break;
                e->args.push_back(parse_expression(true));
                expect_op(":");
                e->args.push_back(parse_expression(true));
            }
            expect_op("}");
        } else {
            fail(line, "unexpected '" + describe(t) + "'");
        }
        return e;
    }

    Expr* parse_postfix(Expr* e) {
        while (true) {
            if (is_op(".") || is_op("[")) e = parse_subscript(e);
            else if (is_op("(")) e = parse_call(e);
            else return e;
        }
    }

    Expr* parse_filter_expr(Expr* e) {
        while (true) {
            if (is_op("|")) e = parse_filter(e, false);
            else if (is_name("is")) e = parse_test(e);
            else if (is_op("(")) e = parse_call(e);
            else return e;
        }
    }

    Expr* parse_subscript(Expr* obj) {
        int line = cur().line;
        if (skip_op(".")) {
            const Token& t = cur();
            if (t.type == Tok::Name) {
                Expr* e = node(ExprKind::Attr, line);
                e->name = t.text;
                e->args = {obj};
                next();
                return e;
            }
            if (t.type != Tok::Int) fail(t.line, "expected name or number");
            Expr* key = node(ExprKind::Const, t.line);
            key->value = Value::integer(t.ival);
            next();
            Expr* e = node(ExprKind::Item, line);
            e->args = {obj, key};
            return e;
        }
        expect_op("[");
        std::vector<Expr*> keys;
        while (!is_op("]")) {
            if (!keys.empty()) expect_op(",");
            keys.push_back(parse_subscribed());
        }
        expect_op("]");
        if (keys.empty()) fail(line, "expected subscript expression");
        Expr* key = keys[0];
        if (keys.size() > 1) {
            key = node(ExprKind::Tuple, line);
            key->args = std::move(keys);
        }
        Expr* e = node(ExprKind::Item, line);
        e->args = {obj, key};
        return e;
    }

    Expr* parse_subscribed() {
        int line = cur().line;
        Expr* start = nullptr;
        if (!is_op(":")) {
            Expr* e = parse_expression(true);
            if (!is_op(":")) return e;
            start = e;
        }
        next();  // ':'
        Expr* stop = nullptr;
        Expr* step = nullptr;
        if (!is_op(":") && !is_op("]") && !is_op(",")) stop = parse_expression(true);
        if (skip_op(":"))
            if (!is_op("]") && !is_op(",")) step = parse_expression(true);
        Expr* s = node(ExprKind::Slice, line);
        s->args = {start, stop, step};
        return s;
    }

    void parse_call_args(Expr* e) {
        int line = cur().line;
        expect_op("(");
        bool need_comma = false;
        while (!is_op(")")) {
            if (need_comma) {
                expect_op(",");
                if (is_op(")")) break;
            }
            if (skip_op("*")) {
                if (e->star || e->starstar) fail(line, "invalid syntax for function call expression");
                e->star = parse_expression(true);
            } else if (skip_op("**")) {
                if (e->starstar) fail(line, "invalid syntax for function call expression");
                e->starstar = parse_expression(true);
            } else if (cur().type == Tok::Name && look().type == Tok::Op && look().text == "=") {
                if (e->starstar) fail(line, "invalid syntax for function call expression");
                std::string key = cur().text;
                next();
                next();
                e->kwargs.emplace_back(key, parse_expression(true));
            } else {
                if (e->star || e->starstar || !e->kwargs.empty())
                    fail(line, "invalid syntax for function call expression");
                e->args.push_back(parse_expression(true));
            }
            need_comma = true;
        }
        expect_op(")");
    }

    Expr* parse_call(Expr* callee) {
        Expr* e = node(ExprKind::Call, cur().line);
        e->args.push_back(callee);
        parse_call_args(e);
        return e;
    }

    Expr* parse_filter(Expr* subject, bool start_inline) {
        while (is_op("|") || start_inline) {
            if (!start_inline) next();
            start_inline = false;
            int line = cur().line;
            std::string name = expect_name();
            while (skip_op(".")) {
                name += '.';
                name += expect_name();
            }
            Expr* e = node(ExprKind::Filter, line);
            e->name = name;
            e->builtin = find_filter(name);
            if (e->builtin < 0) fail(line, "no filter named '" + name + "'");
            e->args.push_back(subject);
            if (is_op("(")) parse_call_args(e);
            subject = e;
        }
        return subject;
    }

    Expr* parse_test(Expr* subject) {
        int line = cur().line;
        next();  // 'is'
        bool negated = skip_name("not");
        std::string name = expect_name();
        while (skip_op(".")) {
                name += '.';
                name += expect_name();
            }
        Expr* e = node(ExprKind::Test, line);
        e->name = name;
        e->builtin = find_test(name);
        if (e->builtin < 0) fail(line, "no test named '" + name + "'");
        e->args.push_back(subject);
        const Token& t = cur();
        if (is_op("(")) {
            parse_call_args(e);
        } else if ((t.type == Tok::Name || t.type == Tok::String || t.type == Tok::Int || t.type == Tok::Float ||
                    is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
            if (is_name("is")) fail(t.line, "you cannot chain multiple tests with is");
            e->args.push_back(parse_postfix(parse_primary()));
        }
        if (!negated) return e;
        Expr* n = node(ExprKind::Not, line);
        n->args = {e};
        return n;
    }
};

}  // namespace

void parse(std::string_view source, Program& out) {
    Lexer lexer(source);
    Parser parser(lexer.run(), out);
    parser.run();
}

}  // namespace ms::jinja
