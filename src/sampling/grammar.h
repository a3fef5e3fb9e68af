// Constrained decoding: GBNF grammars (llama.cpp's notation) compiled to
// byte level, and a matcher that says which tokens of a vocabulary can
// extend the text generated so far. Character classes become alternatives of
// UTF-8 byte sequences, so tokens are matched by their raw bytes and a token
// may end in the middle of a character.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ms {

// A grammar the parser refuses: "grammar: line L: problem".
class GrammarError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct Grammar {
    struct Element {
        enum Kind : uint8_t { End, Bytes, Rule } kind = End;
        uint32_t rule = 0;        // Rule: which
        uint64_t bits[4] = {};    // Bytes: the bytes it matches
        bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
    };
    // Each alternative is a run of elements closed by an End.
    std::vector<Element> elements;
    std::vector<std::vector<uint32_t>> rules;  // rule -> first element of each alternative
    std::vector<std::string> names;            // rule -> name (generated ones too)
    uint32_t root = 0;
    // The memory it holds (serve counts a request's grammar in --mem).
    size_t bytes() const;
};

// Parses GBNF: `name ::= alternatives`, "literals", [classes] (^ negates),
// ., (groups), rule names, postfix * + ? {m} {m,} {m,n}, # comments, escapes
// \n \r \t \\ \" \] \- \xHH \uHHHH \UHHHHHHHH. Needs a rule named root.
// Refuses undefined rules, left recursion (it would never stop expanding)
// and grammars over the size limits. Throws GrammarError.
Grammar parse_gbnf(std::string_view text);

// A vocabulary's token bytes as a trie, built once and shared by every
// matcher over that vocabulary.
class TokenTrie {
public:
    // tokens[id]: the bytes the token stands for; "" never matches.
    explicit TokenTrie(const std::vector<std::string>& tokens);
    size_t n_tokens() const { return bytes_.size(); }
    const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }

    struct Node {
        uint32_t first_child = 0, n_children = 0;  // into children_
        uint32_t first_token = 0, n_tokens = 0;    // into tokens_: tokens whose bytes end here
    };
    std::vector<Node> nodes;                // nodes[0]: the root
    std::vector<uint32_t> children;         // child node ids, by byte
    std::vector<uint8_t> child_byte;
    std::vector<int32_t> tokens;
    // The memory it holds: about 10 MB at a 151k vocabulary.
    size_t memory_bytes() const;

private:
    std::vector<std::string> bytes_;
};

// The state of one generation under a grammar: every way the text so far can
// continue, as a set of stacks of grammar positions (linked nodes that share
// their tails).
class GrammarMatcher {
public:
    GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie);

    // Back to the empty text, keeping the masks already made (the next of
    // a request's n choices meets the same states).
    void restart();
    // Whether the token's bytes can extend the text (one walk of its bytes).
    bool allows(int32_t id);
    // Advances over the token's bytes; false (state unchanged) when they
    // cannot extend the text.
    bool accept(int32_t id);
    // The text so far is a complete sentence of the grammar.
    bool can_end() const;
    // Nothing can follow: the only way on is to end.
    bool must_end() const;
    // allowed[id] for every token (a bitset, n_tokens bits): the tokens whose
    // bytes can extend the text. Masks are cached by state, so a state seen
    // before costs a lookup.
    const std::vector<uint64_t>& mask();

    static constexpr size_t kMaxMasks = 256;  // masks cached at once
    // What a matcher over this trie holds besides its grammar, at most: its
    // cached masks, and the maps one mask is built with (estimated at 64
    // bytes a trie node: a successor and a stack set for each node walked).
    static size_t memory_bound(const TokenTrie& trie);

private:
    struct Node {
        uint32_t pos;      // element index (a Bytes element)
        uint32_t parent;   // kBottom: nothing below
        uint64_t hash;     // of the whole stack, for deduplication
    };
    static constexpr uint32_t kBottom = 0xffffffffu;  // the empty stack: the root is complete
    uint32_t push(uint32_t pos, uint32_t parent);
    void expand(uint32_t stack, std::vector<uint32_t>* out, int depth);
    void add_unique(uint32_t stack, std::vector<uint32_t>* out);
    bool same_stack(uint32_t a, uint32_t b) const;
    void advance(const std::vector<uint32_t>& from, uint8_t byte, std::vector<uint32_t>* out);
    bool walk(const std::string& bytes, std::vector<uint32_t>* out);
    void compact();
    std::string state_key() const;
    uint32_t intern(std::vector<uint32_t> stacks);
    uint32_t step(uint32_t set, uint8_t byte);
    void visit(uint32_t trie_node, uint32_t set);

    std::shared_ptr<const Grammar> g_;
    std::shared_ptr<const TokenTrie> trie_;
    std::vector<Node> nodes_;          // stack nodes; current_ refers into it
    std::vector<uint32_t> current_;    // the stacks now (tops are Bytes elements, or kBottom)
    // While a mask is built: the distinct stack sets met (by content), and
    // each (set, byte)'s successor, so the walk over the trie costs one
    // lookup per node once a state repeats (inside a string it always does).
    std::vector<std::vector<uint32_t>> sets_;
    std::unordered_map<uint64_t, std::vector<uint32_t>> set_index_;  // hash of a set -> its ids
    std::unordered_map<uint64_t, uint32_t> successor_;               // set << 8 | byte -> set (kDead: none)
    std::vector<uint32_t> scratch_;
    // While one set of stacks is expanded (restart, advance): the stacks
    // added so far by hash, and the expansion steps taken, so that a grammar
    // whose alternatives multiply (nested repetitions) fails in bounded time
    // instead of taking seconds per byte.
    std::unordered_multimap<uint64_t, uint32_t> added_;
    bool added_bottom_ = false;
    size_t expand_steps_ = 0;
    size_t mask_steps_ = 0;  // summed over the steps of one mask()
    void begin_expansion();
    std::vector<uint64_t>* building_ = nullptr;
    std::unordered_map<std::string, std::vector<uint64_t>> masks_;
};

}  // namespace ms
