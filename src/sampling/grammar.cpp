#include "sampling/grammar.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "json/json.h"

namespace ms {

namespace {

// Bounds that keep an untrusted grammar's compile and matching small.
constexpr size_t kMaxElements = 1 << 20;
constexpr size_t kMaxRules = 1 << 16;
constexpr int kMaxNesting = 128;
constexpr uint32_t kMaxRepeat = 4096;
constexpr size_t kMaxStacks = 4096;
constexpr size_t kMaxExpandSteps = size_t(1) << 16;  // per byte: about a millisecond
constexpr size_t kMaxMaskSteps = size_t(1) << 22;    // per mask: well under a second

using Element = Grammar::Element;
using Sequence = std::vector<Element>;
using Alternatives = std::vector<Sequence>;

Element bytes_element(uint8_t lo, uint8_t hi) {
    Element e;
    e.kind = Element::Bytes;
    for (unsigned b = lo; b <= hi; b++) e.bits[b >> 6] |= uint64_t(1) << (b & 63);
    return e;
}

Element rule_element(uint32_t rule) {
    Element e;
    e.kind = Element::Rule;
    e.rule = rule;
    return e;
}

// The code points lo..hi (one encoded length apart from the ASCII case) as
// sequences of byte ranges, each position's range independent of the
// others': the standard split of a code point range at the boundaries where
// a continuation byte's range is partial.
void utf8_ranges(uint32_t lo, uint32_t hi, std::vector<Sequence>* out) {
    if (lo > hi) return;
    static const uint32_t kMaxOfLength[] = {0x7F, 0x7FF, 0xFFFF};
    for (uint32_t m : kMaxOfLength) {
        if (lo <= m && hi > m) {
            utf8_ranges(lo, m, out);
            utf8_ranges(m + 1, hi, out);
            return;
        }
    }
    std::string a, b;
    utf8_append(a, lo);
    utf8_append(b, hi);
    const int n = int(a.size());
    for (int i = 1; i < n; i++) {
        const uint32_t m = (uint32_t(1) << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_ranges(lo, lo | m, out);
                utf8_ranges((lo | m) + 1, hi, out);
                return;
            }
            if ((hi & m) != m) {
                utf8_ranges(lo, (hi & ~m) - 1, out);
                utf8_ranges(hi & ~m, hi, out);
                return;
            }
        }
    }
    Sequence s;
    for (int i = 0; i < n; i++) s.push_back(bytes_element(uint8_t(a[size_t(i)]), uint8_t(b[size_t(i)])));
    out->push_back(std::move(s));
}

class Parser {
public:
    explicit Parser(std::string_view text) : t_(text) {}

    Grammar parse() {
        skip_space();
        while (!eof()) {
            const size_t name_line = line_;
            const std::string name = parse_name();
            skip_space();
            if (t_.substr(p_, 3) != "::=") fail("expected '::=' after rule name '" + name + "'");
            p_ += 3;
            const uint32_t r = rule_index(name);
            if (defined_[r]) fail("rule '" + name + "' is defined twice", name_line);
            defined_[r] = true;
            alts_[r] = parse_alternatives(0);
            skip_space();
            if (!eof() && peek() == ')') fail("unmatched ')'");
        }
        const auto root = index_.find("root");
        if (root == index_.end()) throw GrammarError("grammar: no rule named 'root'");
        for (size_t r = 0; r < names_.size(); r++) {
            if (!defined_[r]) throw GrammarError("grammar: rule '" + names_[r] + "' is used but not defined");
        }
        Grammar g;
        g.root = root->second;
        g.names = names_;
        g.rules.resize(alts_.size());
        for (size_t r = 0; r < alts_.size(); r++) {
            for (const Sequence& s : alts_[r]) {
                g.rules[r].push_back(uint32_t(g.elements.size()));
                g.elements.insert(g.elements.end(), s.begin(), s.end());
                g.elements.push_back(Element());
            }
        }
        if (g.elements.size() > kMaxElements) throw GrammarError("grammar: too large (over 1M elements)");
        check_left_recursion(g);
        return g;
    }

private:
    [[noreturn]] void fail(const std::string& what, size_t line = 0) const {
        throw GrammarError("grammar: line " + std::to_string(line ? line : line_) + ": " + what);
    }
    bool eof() const { return p_ >= t_.size(); }
    char peek() const { return t_[p_]; }
    static bool name_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    }

    void skip_space() {
        while (!eof()) {
            const char c = peek();
            if (c == '#') {
                while (!eof() && peek() != '\n') p_++;
            } else if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
                if (c == '\n') line_++;
                p_++;
            } else {
                break;
            }
        }
    }

    std::string parse_name() {
        const size_t start = p_;
        while (!eof() && name_char(peek())) p_++;
        if (p_ == start) fail(eof() ? "expected a rule name" : std::string("expected a rule name, found '") + peek() + "'");
        return std::string(t_.substr(start, p_ - start));
    }

    // Whether a rule definition (`name ::=`) starts here: a sequence ends there.
    bool at_definition() const {
        size_t q = p_;
        while (q < t_.size() && name_char(t_[q])) q++;
        while (q < t_.size() && (t_[q] == ' ' || t_[q] == '\t' || t_[q] == '\r' || t_[q] == '\n')) q++;
        return t_.substr(q, 3) == "::=";
    }

    uint32_t rule_index(const std::string& name) {
        auto it = index_.find(name);
        if (it != index_.end()) return it->second;
        return new_rule(name);
    }

    uint32_t new_rule(const std::string& name) {
        if (names_.size() >= kMaxRules) fail("too many rules (over 65536)");
        const uint32_t r = uint32_t(names_.size());
        names_.push_back(name);
        alts_.emplace_back();
        defined_.push_back(false);
        index_[name] = r;
        return r;
    }

    // A rule made by the parser (a group, a repetition, a character class).
    uint32_t generated_rule(Alternatives alts) {
        size_t size = 0;
        for (const Sequence& s : alts) size += s.size() + 1;
        elements_ += size;
        if (elements_ > kMaxElements) fail("the grammar is too large (over 1M elements)");
        std::string name = "_";
        name += std::to_string(names_.size());
        const uint32_t r = new_rule(name);
        alts_[r] = std::move(alts);
        defined_[r] = true;
        return r;
    }

    Alternatives parse_alternatives(int depth) {
        if (depth > kMaxNesting) fail("groups nested too deep");
        Alternatives alts;
        alts.push_back(parse_sequence(depth));
        for (;;) {
            skip_space();
            if (eof() || peek() != '|') break;
            p_++;
            alts.push_back(parse_sequence(depth));
        }
        for (const Sequence& s : alts) elements_ += s.size() + 1;
        if (elements_ > kMaxElements) fail("the grammar is too large (over 1M elements)");
        return alts;
    }

    Sequence parse_sequence(int depth) {
        Sequence seq;
        for (;;) {
            skip_space();
            if (eof() || peek() == '|' || peek() == ')') break;
            if (name_char(peek()) && at_definition()) break;
            Sequence item = parse_item(depth);
            skip_space();
            while (!eof() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')) {
                item = repeat(std::move(item));
                skip_space();
            }
            seq.insert(seq.end(), item.begin(), item.end());
            if (seq.size() > kMaxElements) fail("the grammar is too large (over 1M elements)");
        }
        return seq;
    }

    Sequence parse_item(int depth) {
        const char c = peek();
        if (c == '"') {
            p_++;
            Sequence s;
            for (;;) {
                if (eof()) fail("unterminated string");
                if (peek() == '"') break;
                if (peek() == '\n') fail("newline inside a string");
                std::string bytes;
                utf8_append(bytes, read_char());
                for (char c : bytes) s.push_back(bytes_element(uint8_t(c), uint8_t(c)));
            }
            p_++;
            return s;
        }
        if (c == '[') {
            p_++;
            bool negated = false;
            if (!eof() && peek() == '^') {
                negated = true;
                p_++;
            }
            std::vector<std::pair<uint32_t, uint32_t>> ranges;
            for (;;) {
                if (eof()) fail("unterminated character class");
                if (peek() == ']') break;
                const uint32_t lo = read_char();
                uint32_t hi = lo;
                if (p_ + 1 < t_.size() && peek() == '-' && t_[p_ + 1] != ']') {
                    p_++;
                    hi = read_char();
                    if (hi < lo) fail("character range is backwards");
                }
                ranges.emplace_back(lo, hi);
            }
            p_++;
            return char_class(ranges, negated);
        }
        if (c == '.') {
            p_++;
            return char_class({{0, 0x10FFFF}}, false);
        }
        if (c == '(') {
            p_++;
            Alternatives alts = parse_alternatives(depth + 1);
            skip_space();
            if (eof() || peek() != ')') fail("expected ')'");
            p_++;
            return {rule_element(generated_rule(std::move(alts)))};
        }
        if (name_char(c)) return {rule_element(rule_index(parse_name()))};
        fail(std::string("unexpected '") + c + "'");
    }

    uint32_t read_hex(int digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            if (eof()) fail("incomplete escape");
            const char h = peek();
            int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (d < 0) fail("bad hex digit in escape");
            v = v * 16 + uint32_t(d);
            p_++;
        }
        return v;
    }

    // One character of a literal or class: an escape or one UTF-8 character.
    uint32_t read_char() {
        const uint8_t c = uint8_t(peek());
        p_++;
        if (c == '\\') {
            if (eof()) fail("incomplete escape");
            const char e = peek();
            p_++;
            uint32_t cp = 0;
            switch (e) {
                case 'n': return '\n';
                case 'r': return '\r';
                case 't': return '\t';
                case 'x': cp = read_hex(2); break;
                case 'u': cp = read_hex(4); break;
                case 'U': cp = read_hex(8); break;
                case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': return uint32_t(e);
                default: fail(std::string("unknown escape '\\") + e + "'");
            }
            if (cp > 0x10FFFF) fail("escape beyond U+10FFFF");
            return cp;
        }
        if (c < 0x80) return c;
        // UTF-8 as written.
        const int n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 0;
        if (n == 0) fail("invalid UTF-8");
        uint32_t cp = c & (0x7F >> n);
        for (int i = 1; i < n; i++) {
            if (eof() || (uint8_t(peek()) & 0xC0) != 0x80) fail("invalid UTF-8");
            cp = (cp << 6) | (uint8_t(peek()) & 0x3F);
            p_++;
        }
        const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("invalid UTF-8");
        return cp;
    }

    // A set of code points as bytes: one element when it is ASCII only, else
    // a rule of UTF-8 sequences (shared by equal classes).
    Sequence char_class(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) {
        std::sort(ranges.begin(), ranges.end());
        std::vector<std::pair<uint32_t, uint32_t>> merged;
        for (auto r : ranges) {
            if (!merged.empty() && r.first <= merged.back().second + 1) merged.back().second = std::max(merged.back().second, r.second);
            else merged.push_back(r);
        }
        if (negated) {
            std::vector<std::pair<uint32_t, uint32_t>> inv;
            uint32_t next = 0;
            for (auto r : merged) {
                if (r.first > next) inv.emplace_back(next, r.first - 1);
                next = r.second + 1;
            }
            if (next <= 0x10FFFF) inv.emplace_back(next, 0x10FFFF);
            merged = inv;
        }
        std::string key = negated ? "^" : "";
        for (auto r : merged) key += std::to_string(r.first) + "-" + std::to_string(r.second) + ",";
        if (auto it = classes_.find(key); it != classes_.end()) return {it->second};

        Element ascii;
        ascii.kind = Element::Bytes;
        bool any_ascii = false;
        std::vector<Sequence> multi;
        for (auto [lo, hi] : merged) {
            for (uint32_t b = lo; b <= std::min<uint32_t>(hi, 0x7F); b++) {
                ascii.bits[b >> 6] |= uint64_t(1) << (b & 63);
                any_ascii = true;
            }
            lo = std::max<uint32_t>(lo, 0x80);
            // Surrogates are not characters: their encodings are invalid UTF-8.
            if (lo <= hi && lo < 0xD800) utf8_ranges(lo, std::min<uint32_t>(hi, 0xD7FF), &multi);
            if (hi > 0xDFFF) utf8_ranges(std::max<uint32_t>(lo, 0xE000), hi, &multi);
        }
        Element result;
        if (multi.empty()) {
            result = ascii;  // an empty class matches nothing
        } else {
            Alternatives alts;
            if (any_ascii) alts.push_back({ascii});
            for (Sequence& s : multi) alts.push_back(std::move(s));
            result = rule_element(generated_rule(std::move(alts)));
        }
        classes_[key] = result;
        return {result};
    }

    // item*, item+, item?, item{m}, item{m,}, item{m,n}.
    Sequence repeat(Sequence item) {
        const char op = peek();
        p_++;
        uint32_t lo = 0, hi = 0;
        bool unbounded = false;
        if (op == '*') {
            unbounded = true;
        } else if (op == '+') {
            lo = 1;
            unbounded = true;
        } else if (op == '?') {
            hi = 1;
        } else {
            skip_space();
            lo = read_count();
            skip_space();
            hi = lo;
            if (!eof() && peek() == ',') {
                p_++;
                skip_space();
                if (!eof() && peek() == '}') unbounded = true;
                else hi = read_count();
                skip_space();
            }
            if (eof() || peek() != '}') fail("expected '}' after a repetition count");
            p_++;
            if (!unbounded && hi < lo) fail("repetition {m,n} with n < m");
        }
        // One element stands for the item (a rule when it is several).
        const Element e = item.size() == 1 ? item[0] : rule_element(generated_rule({item}));
        Sequence out(lo, e);
        if (unbounded) {
            // star ::= e star | ""  (right recursion: no left recursion)
            const uint32_t star = generated_rule({});
            alts_[star] = {{e, rule_element(star)}, {}};
            out.push_back(rule_element(star));
        } else if (hi > lo) {
            // (e (e (...)?)?)? nested hi - lo deep.
            Element tail = rule_element(generated_rule({{e}, {}}));
            for (uint32_t i = 1; i < hi - lo; i++) tail = rule_element(generated_rule({{e, tail}, {}}));
            out.push_back(tail);
        }
        elements_ += out.size();
        if (elements_ > kMaxElements) fail("the grammar is too large (over 1M elements)");
        return out;
    }

    uint32_t read_count() {
        uint32_t v = 0;
        bool any = false;
        while (!eof() && peek() >= '0' && peek() <= '9') {
            v = v * 10 + uint32_t(peek() - '0');
            if (v > kMaxRepeat) fail("repetition count over " + std::to_string(kMaxRepeat));
            p_++;
            any = true;
        }
        if (!any) fail("expected a repetition count");
        return v;
    }

    // A rule that can reach itself without consuming a byte would make the
    // matcher expand forever.
    void check_left_recursion(const Grammar& g) const {
        const size_t n = g.rules.size();
        std::vector<bool> nullable(n, false);
        for (bool changed = true; changed;) {
            changed = false;
            for (size_t r = 0; r < n; r++) {
                if (nullable[r]) continue;
                for (uint32_t a : g.rules[r]) {
                    bool all = true;
                    for (uint32_t i = a; g.elements[i].kind != Element::End && all; i++) {
                        all = g.elements[i].kind == Element::Rule && nullable[g.elements[i].rule];
                    }
                    if (all) {
                        nullable[r] = changed = true;
                        break;
                    }
                }
            }
        }
        std::vector<std::vector<uint32_t>> first(n);  // rules reachable before any byte
        for (size_t r = 0; r < n; r++) {
            for (uint32_t a : g.rules[r]) {
                for (uint32_t i = a; g.elements[i].kind == Element::Rule; i++) {
                    first[r].push_back(g.elements[i].rule);
                    if (!nullable[g.elements[i].rule]) break;
                }
            }
        }
        // Iterative DFS: 0 unvisited, 1 on the path, 2 done.
        std::vector<uint8_t> state(n, 0);
        for (size_t start = 0; start < n; start++) {
            if (state[start]) continue;
            std::vector<std::pair<uint32_t, size_t>> path{{uint32_t(start), 0}};
            state[start] = 1;
            while (!path.empty()) {
                auto& [r, i] = path.back();
                if (i == first[r].size()) {
                    state[r] = 2;
                    path.pop_back();
                    continue;
                }
                const uint32_t next = first[r][i++];
                if (state[next] == 1) {
                    // Name the first user-written rule on the cycle.
                    std::string name = g.names[next];
                    for (auto& [pr, pi] : path)
                        if (g.names[pr][0] != '_') name = g.names[pr];
                    throw GrammarError("grammar: rule '" + name + "' is left-recursive (it can reach itself before any character)");
                }
                if (state[next] == 0) {
                    state[next] = 1;
                    path.emplace_back(next, 0);
                }
            }
        }
    }

    std::string_view t_;
    size_t p_ = 0, line_ = 1, elements_ = 0;
    std::vector<std::string> names_;
    std::vector<Alternatives> alts_;
    std::vector<bool> defined_;
    std::map<std::string, uint32_t> index_;
    std::map<std::string, Element> classes_;
};

}  // namespace

Grammar parse_gbnf(std::string_view text) { return Parser(text).parse(); }

TokenTrie::TokenTrie(const std::vector<std::string>& tokens) : bytes_(tokens) {
    std::vector<int32_t> order;
    for (size_t i = 0; i < tokens.size(); i++)
        if (!tokens[i].empty()) order.push_back(int32_t(i));
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return tokens[size_t(a)] < tokens[size_t(b)]; });
    // Node for the tokens order[lo, hi), which share their first `depth`
    // bytes: those exactly `depth` long end here (they sort first), the rest
    // are grouped by their next byte into children.
    nodes.emplace_back();
    struct Todo {
        uint32_t node;
        size_t lo, hi, depth;
    };
    std::vector<Todo> todo{{0, 0, order.size(), 0}};
    while (!todo.empty()) {
        const Todo t = todo.back();
        todo.pop_back();
        size_t i = t.lo;
        nodes[t.node].first_token = uint32_t(this->tokens.size());
        while (i < t.hi && tokens[size_t(order[i])].size() == t.depth) this->tokens.push_back(order[i++]);
        nodes[t.node].n_tokens = uint32_t(this->tokens.size()) - nodes[t.node].first_token;
        nodes[t.node].first_child = uint32_t(children.size());
        std::vector<Todo> groups;
        while (i < t.hi) {
            const uint8_t b = uint8_t(tokens[size_t(order[i])][t.depth]);
            size_t j = i;
            while (j < t.hi && uint8_t(tokens[size_t(order[j])][t.depth]) == b) j++;
            const uint32_t child = uint32_t(nodes.size());
            nodes.emplace_back();
            children.push_back(child);
            child_byte.push_back(b);
            groups.push_back({child, i, j, t.depth + 1});
            i = j;
        }
        nodes[t.node].n_children = uint32_t(groups.size());
        todo.insert(todo.end(), groups.begin(), groups.end());
    }
}

size_t Grammar::bytes() const {
    size_t b = sizeof(Grammar) + elements.capacity() * sizeof(Element) + rules.capacity() * sizeof(rules[0]) +
               names.capacity() * sizeof(std::string);
    for (const auto& r : rules) b += r.capacity() * sizeof(uint32_t);
    for (const std::string& n : names) b += n.capacity() > 15 ? n.capacity() + 1 : 0;  // past the string's own buffer
    return b;
}

size_t TokenTrie::memory_bytes() const {
    size_t b = sizeof(TokenTrie) + nodes.capacity() * sizeof(Node) + children.capacity() * sizeof(uint32_t) +
               child_byte.capacity() + tokens.capacity() * sizeof(int32_t) + bytes_.capacity() * sizeof(std::string);
    for (const std::string& t : bytes_) b += t.capacity() > 15 ? t.capacity() + 1 : 0;
    return b;
}

size_t GrammarMatcher::memory_bound(const TokenTrie& trie) {
    const size_t mask = (trie.n_tokens() + 63) / 64 * 8;
    // Each cached mask: its bits, its key (a few stacks of 4-byte positions) and the map's node.
    return kMaxMasks * (mask + 128) + trie.nodes.size() * 64;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie)
    : g_(std::move(grammar)), trie_(std::move(trie)) {
    restart();
}

void GrammarMatcher::restart() {
    nodes_.clear();
    current_.clear();
    begin_expansion();
    for (uint32_t a : g_->rules[g_->root]) {
        if (g_->elements[a].kind == Element::End) add_unique(kBottom, &current_);
        else expand(push(a, kBottom), &current_, 0);
    }
}

uint32_t GrammarMatcher::push(uint32_t pos, uint32_t parent) {
    uint64_t h = (parent == kBottom ? 0x9e3779b97f4a7c15ull : nodes_[parent].hash) * 0x100000001b3ull;
    h ^= pos + 0x632be59bd9b4e019ull + (h << 6) + (h >> 2);
    nodes_.push_back({pos, parent, h});
    return uint32_t(nodes_.size() - 1);
}

bool GrammarMatcher::same_stack(uint32_t a, uint32_t b) const {
    while (a != kBottom && b != kBottom) {
        if (a == b) return true;
        if (nodes_[a].pos != nodes_[b].pos) return false;
        a = nodes_[a].parent;
        b = nodes_[b].parent;
    }
    return a == b;
}

void GrammarMatcher::begin_expansion() {
    added_.clear();
    added_bottom_ = false;
    expand_steps_ = 0;
}

void GrammarMatcher::add_unique(uint32_t s, std::vector<uint32_t>* out) {
    if (s == kBottom) {
        if (added_bottom_) return;
        added_bottom_ = true;
    } else {
        auto [first, last] = added_.equal_range(nodes_[s].hash);
        for (auto it = first; it != last; ++it)
            if (it->second == s || same_stack(it->second, s)) return;
    }
    if (out->size() >= kMaxStacks) throw std::runtime_error("grammar: too ambiguous (over 4096 parses at once)");
    if (s != kBottom) added_.emplace(nodes_[s].hash, s);
    out->push_back(s);
}

// Replaces rule references on top of the stack by each of the rule's
// alternatives until every stack's top is a byte element (or the stack is
// empty). No left recursion (checked when parsing), so this ends.
void GrammarMatcher::expand(uint32_t stack, std::vector<uint32_t>* out, int depth) {
    if (stack == kBottom) {
        add_unique(kBottom, out);
        return;
    }
    const uint32_t pos = nodes_[stack].pos, parent = nodes_[stack].parent;
    const Element& e = g_->elements[pos];
    if (e.kind == Element::Bytes) {
        add_unique(stack, out);
        return;
    }
    if (depth > int(g_->rules.size()) + 1) throw std::runtime_error("grammar: expansion too deep");
    if (++expand_steps_ > kMaxExpandSteps)
        throw std::runtime_error("grammar: too ambiguous (over 65536 expansion steps for one byte)");
    const uint32_t cont = g_->elements[pos + 1].kind == Element::End ? parent : push(pos + 1, parent);
    for (uint32_t a : g_->rules[e.rule]) {
        if (g_->elements[a].kind == Element::End) expand(cont, out, depth + 1);
        else expand(push(a, cont), out, depth + 1);
    }
}

void GrammarMatcher::advance(const std::vector<uint32_t>& from, uint8_t byte, std::vector<uint32_t>* out) {
    begin_expansion();
    for (uint32_t s : from) {
        if (s == kBottom) continue;
        const uint32_t pos = nodes_[s].pos, parent = nodes_[s].parent;
        if (!g_->elements[pos].has(byte)) continue;
        expand(g_->elements[pos + 1].kind == Element::End ? parent : push(pos + 1, parent), out, 0);
    }
}

bool GrammarMatcher::walk(const std::string& bytes, std::vector<uint32_t>* out) {
    std::vector<uint32_t> cur = current_, next;
    for (char c : bytes) {
        next.clear();
        advance(cur, uint8_t(c), &next);
        if (next.empty()) return false;
        cur.swap(next);
    }
    *out = std::move(cur);
    return !bytes.empty();
}

bool GrammarMatcher::allows(int32_t id) {
    if (id < 0 || size_t(id) >= trie_->n_tokens()) return false;
    const size_t mark = nodes_.size();
    std::vector<uint32_t> out;
    const bool ok = walk(trie_->bytes(id), &out);
    nodes_.resize(mark);
    return ok;
}

bool GrammarMatcher::accept(int32_t id) {
    if (id < 0 || size_t(id) >= trie_->n_tokens()) return false;
    const size_t mark = nodes_.size();
    std::vector<uint32_t> out;
    if (!walk(trie_->bytes(id), &out)) {
        nodes_.resize(mark);
        return false;
    }
    current_ = std::move(out);
    compact();
    return true;
}

// Keeps only the nodes the current stacks use.
void GrammarMatcher::compact() {
    std::vector<Node> kept;
    std::unordered_map<uint32_t, uint32_t> moved;
    auto copy = [&](uint32_t s, auto&& self) -> uint32_t {
        if (s == kBottom) return kBottom;
        if (auto it = moved.find(s); it != moved.end()) return it->second;
        const uint32_t parent = self(nodes_[s].parent, self);
        kept.push_back({nodes_[s].pos, parent, nodes_[s].hash});
        return moved[s] = uint32_t(kept.size() - 1);
    };
    // Iterative over each chain's length would be safer for deep stacks;
    // depth is bounded by the rules' nesting, which the parser bounds.
    for (uint32_t& s : current_) s = copy(s, copy);
    nodes_ = std::move(kept);
}

bool GrammarMatcher::can_end() const {
    return std::find(current_.begin(), current_.end(), kBottom) != current_.end();
}

bool GrammarMatcher::must_end() const { return current_.size() == 1 && current_[0] == kBottom; }

std::string GrammarMatcher::state_key() const {
    std::vector<std::string> stacks;
    for (uint32_t s : current_) {
        std::string k;
        for (; s != kBottom; s = nodes_[s].parent) k.append(reinterpret_cast<const char*>(&nodes_[s].pos), 4);
        stacks.push_back(std::move(k));
    }
    std::sort(stacks.begin(), stacks.end());
    std::string key;
    for (const std::string& k : stacks) {
        key += k;
        key.append(4, '\xff');
    }
    return key;
}

const std::vector<uint64_t>& GrammarMatcher::mask() {
    std::string key = state_key();
    if (auto it = masks_.find(key); it != masks_.end()) return it->second;
    if (masks_.size() >= kMaxMasks) masks_.clear();  // bounded: kMaxMasks x n_vocab bits
    std::vector<uint64_t>& m = masks_[key];
    m.assign((trie_->n_tokens() + 63) / 64, 0);
    building_ = &m;
    const size_t mark = nodes_.size();
    sets_.clear();
    set_index_.clear();
    successor_.clear();
    mask_steps_ = 0;
    auto done = [&] {
        nodes_.resize(mark);
        sets_.clear();
        set_index_.clear();
        successor_.clear();
        building_ = nullptr;
    };
    try {
        visit(0, intern(current_));
    } catch (...) {  // a grammar over the bounds: no half-built mask stays cached
        done();
        masks_.erase(key);
        throw;
    }
    done();
    return m;
}

namespace {
constexpr uint32_t kDead = 0xffffffffu;
}

// The id of a set of stacks equal (stack by stack, in any order) to one met
// before, or a new id.
uint32_t GrammarMatcher::intern(std::vector<uint32_t> stacks) {
    auto hash_of = [&](uint32_t s) { return s == kBottom ? uint64_t(1) : nodes_[s].hash; };
    std::sort(stacks.begin(), stacks.end(), [&](uint32_t a, uint32_t b) { return hash_of(a) < hash_of(b); });
    uint64_t h = 0x84222325cbf29ce4ull;
    for (uint32_t s : stacks) h = (h ^ hash_of(s)) * 0x100000001b3ull;
    std::vector<uint32_t>& ids = set_index_[h];
    for (uint32_t id : ids) {
        const std::vector<uint32_t>& other = sets_[id];
        if (other.size() != stacks.size()) continue;
        bool same = true;
        for (size_t i = 0; i < stacks.size() && same; i++) same = same_stack(other[i], stacks[i]);
        if (same) return id;
    }
    sets_.push_back(std::move(stacks));
    ids.push_back(uint32_t(sets_.size() - 1));
    return uint32_t(sets_.size() - 1);
}

uint32_t GrammarMatcher::step(uint32_t set, uint8_t byte) {
    const uint64_t key = uint64_t(set) << 8 | byte;
    if (auto it = successor_.find(key); it != successor_.end()) return it->second;
    scratch_.clear();
    advance(sets_[set], byte, &scratch_);
    mask_steps_ += expand_steps_;
    if (mask_steps_ > kMaxMaskSteps)
        throw std::runtime_error("grammar: too ambiguous (over 4M expansion steps for one token mask)");
    const uint32_t next = scratch_.empty() ? kDead : intern(scratch_);
    successor_[key] = next;
    return next;
}

// Walks the token trie from `trie_node` in stack set `set`; a subtree is
// skipped as soon as no stack survives its byte. Nodes made here live
// until the mask is done (the sets refer to them).
void GrammarMatcher::visit(uint32_t trie_node, uint32_t set) {
    const TokenTrie::Node& node = trie_->nodes[trie_node];
    for (uint32_t i = 0; i < node.n_children; i++) {
        const uint32_t child = trie_->children[node.first_child + i];
        const uint32_t next = step(set, trie_->child_byte[node.first_child + i]);
        if (next == kDead) continue;
        const TokenTrie::Node& c = trie_->nodes[child];
        for (uint32_t t = 0; t < c.n_tokens; t++) {
            const int32_t id = trie_->tokens[c.first_token + t];
            (*building_)[size_t(id) >> 6] |= uint64_t(1) << (id & 63);
        }
        if (c.n_children) visit(child, next);
    }
}

}  // namespace ms
