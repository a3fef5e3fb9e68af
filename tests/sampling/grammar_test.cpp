#include "sampling/grammar.h"

#include <gtest/gtest.h>

#include <random>

namespace ms {
namespace {

std::string error_of(const std::string& text) {
    try {
        parse_gbnf(text);
    } catch (const GrammarError& e) {
        return e.what();
    }
    return "";
}

TEST(Gbnf, RefusesBadGrammarsWithOneLine) {
    EXPECT_EQ(error_of("a ::= \"x\""), "grammar: no rule named 'root'");
    EXPECT_EQ(error_of("root ::= b"), "grammar: rule 'b' is used but not defined");
    EXPECT_EQ(error_of("root ::= \"x\"\nroot ::= \"y\""), "grammar: line 2: rule 'root' is defined twice");
    EXPECT_EQ(error_of("root ::= \"abc"), "grammar: line 1: unterminated string");
    EXPECT_EQ(error_of("root ::= [a-"), "grammar: line 1: unterminated character class");
    EXPECT_EQ(error_of("root ::= \"\\q\""), "grammar: line 1: unknown escape '\\q'");
    EXPECT_EQ(error_of("root ::= (\"a\""), "grammar: line 1: expected ')'");
    EXPECT_EQ(error_of("root ::= \"a\"{3,2}"), "grammar: line 1: repetition {m,n} with n < m");
    EXPECT_EQ(error_of("root ::= \"a\"{99999}"), "grammar: line 1: repetition count over 4096");
    EXPECT_EQ(error_of("root ::= [z-a]"), "grammar: line 1: character range is backwards");
    EXPECT_EQ(error_of("root ::= root \"a\" | \"b\""),
              "grammar: rule 'root' is left-recursive (it can reach itself before any character)");
    EXPECT_EQ(error_of("root ::= x\nx ::= \"a\"? root"),
              "grammar: rule 'x' is left-recursive (it can reach itself before any character)");
    EXPECT_EQ(error_of("root ::= (\"\")*"), "grammar: rule 'root' is left-recursive (it can reach itself before any character)");
    EXPECT_EQ(error_of("root ::= \"a\" )"), "grammar: line 1: unmatched ')'");
    EXPECT_EQ(error_of("root = \"a\""), "grammar: line 1: expected '::=' after rule name 'root'");
    EXPECT_EQ(error_of("root ::= \"\xff\""), "grammar: line 1: invalid UTF-8");
    std::string deep = "root ::= ";
    for (int i = 0; i < 200; i++) deep += "(";
    EXPECT_EQ(error_of(deep), "grammar: line 1: groups nested too deep");
}

// The tokens of a small vocabulary a grammar allows, by walking each.
std::vector<int32_t> allowed(GrammarMatcher& m, size_t n) {
    std::vector<int32_t> out;
    for (size_t i = 0; i < n; i++)
        if (m.allows(int32_t(i))) out.push_back(int32_t(i));
    return out;
}

std::vector<int32_t> from_mask(GrammarMatcher& m, size_t n) {
    std::vector<int32_t> out;
    const std::vector<uint64_t>& mask = m.mask();
    for (size_t i = 0; i < n; i++)
        if ((mask[i >> 6] >> (i & 63)) & 1) out.push_back(int32_t(i));
    return out;
}

TEST(GrammarMatcher, MasksTokensByTheirBytes) {
    const std::vector<std::string> vocab = {"a", "b", "ab", "1", "12", "x", "xa", "", "1b", "abc"};
    auto trie = std::make_shared<TokenTrie>(vocab);
    auto g = std::make_shared<Grammar>(parse_gbnf("root ::= \"ab\" [0-9]+ | \"x\"  # comment\n"));
    GrammarMatcher m(g, trie);
    EXPECT_EQ(allowed(m, vocab.size()), (std::vector<int32_t>{0, 2, 5}));
    EXPECT_EQ(from_mask(m, vocab.size()), (std::vector<int32_t>{0, 2, 5}));
    EXPECT_FALSE(m.can_end());
    EXPECT_FALSE(m.accept(1));  // "b" cannot start
    EXPECT_TRUE(m.accept(0));   // "a"
    EXPECT_EQ(from_mask(m, vocab.size()), (std::vector<int32_t>{1}));
    EXPECT_TRUE(m.accept(1));
    EXPECT_FALSE(m.can_end());  // [0-9]+ needs one digit
    EXPECT_EQ(from_mask(m, vocab.size()), (std::vector<int32_t>{3, 4}));
    EXPECT_TRUE(m.accept(4));
    EXPECT_TRUE(m.can_end());
    EXPECT_FALSE(m.must_end());
    EXPECT_EQ(from_mask(m, vocab.size()), (std::vector<int32_t>{3, 4}));

    m.restart();  // back to the start: the first mask again
    EXPECT_EQ(from_mask(m, vocab.size()), (std::vector<int32_t>{0, 2, 5}));
    EXPECT_EQ(allowed(m, vocab.size()), (std::vector<int32_t>{0, 2, 5}));

    GrammarMatcher x(g, trie);
    EXPECT_TRUE(x.accept(5));
    EXPECT_TRUE(x.must_end());
    EXPECT_EQ(from_mask(x, vocab.size()), std::vector<int32_t>{});
}

TEST(GrammarMatcher, MatchesCharactersSplitAcrossTokens) {
    // U+00E9 is C3 A9; U+4E2D is E4 B8 AD.
    const std::vector<std::string> vocab = {"\xC3", "\xA9", "\xC3\xA9", "a", "\xE4\xB8", "\xAD", "\xE4\xB8\xAD", "\xFF"};
    auto trie = std::make_shared<TokenTrie>(vocab);
    auto g = std::make_shared<Grammar>(parse_gbnf("root ::= [^a]{2}"));
    GrammarMatcher m(g, trie);
    EXPECT_EQ(from_mask(m, vocab.size()), (std::vector<int32_t>{0, 2, 4, 6}));
    EXPECT_TRUE(m.accept(0));
    // Any continuation byte completes C3 (C3 AD is U+00ED); a lead byte does not.
    EXPECT_EQ(from_mask(m, vocab.size()), (std::vector<int32_t>{1, 5}));
    EXPECT_TRUE(m.accept(1));
    EXPECT_TRUE(m.accept(4));
    EXPECT_EQ(from_mask(m, vocab.size()), (std::vector<int32_t>{1, 5}));
    EXPECT_TRUE(m.accept(5));
    EXPECT_TRUE(m.must_end());
    // Escapes name code points: \u00e9 is the two bytes.
    GrammarMatcher e(std::make_shared<Grammar>(parse_gbnf("root ::= \"\\u00e9\" [\\x61]")), trie);
    EXPECT_EQ(from_mask(e, vocab.size()), (std::vector<int32_t>{0, 2}));
}

TEST(GrammarMatcher, RepetitionCountsAreExact) {
    std::vector<std::string> vocab = {"a", "b"};
    auto trie = std::make_shared<TokenTrie>(vocab);
    for (const char* rule : {"root ::= \"a\"{2,4} \"b\"", "root ::= (\"a\" \"a\"?) (\"a\" \"a\"?) \"b\""}) {
        // Strings a^k b are in the language exactly for k = 2..4.
        for (int k = 0; k <= 6; k++) {
            GrammarMatcher m(std::make_shared<Grammar>(parse_gbnf(rule)), trie);
            bool ok = true;
            for (int i = 0; i < k && ok; i++) ok = m.accept(0);
            ok = ok && m.accept(1) && m.can_end();
            EXPECT_EQ(ok, k >= 2 && k <= 4) << rule << " k=" << k;
        }
    }
}

// The trie walk and the token-by-token walk agree on random states of a
// JSON-like grammar over a vocabulary of random byte strings.
TEST(GrammarMatcher, MaskAgreesWithTokenWalks) {
    std::mt19937 rng(7);
    const std::string alphabet = "{}[]\":, 0123456789abtrue\\nfalsé\xE4\xB8\xAD";
    std::vector<std::string> vocab;
    for (int i = 0; i < 3000; i++) {
        std::string t;
        const int len = 1 + int(rng() % 5);
        for (int j = 0; j < len; j++) t += alphabet[rng() % alphabet.size()];
        vocab.push_back(t);
    }
    auto trie = std::make_shared<TokenTrie>(vocab);
    auto g = std::make_shared<Grammar>(parse_gbnf(R"(root ::= value
value ::= "{" ws (string ":" ws value ("," ws string ":" ws value)*)? "}" | "[" ws (value ("," ws value)*)? "]" | string | [0-9]+ | "true" | "false"
string ::= "\"" ([^"\\] | "\\" ["\\n])* "\""
ws ::= " "?
)"));
    for (int run = 0; run < 20; run++) {
        GrammarMatcher m(g, trie);
        for (int step = 0; step < 30; step++) {
            const std::vector<int32_t> a = allowed(m, vocab.size()), b = from_mask(m, vocab.size());
            ASSERT_EQ(a, b);
            if (a.empty()) break;
            ASSERT_TRUE(m.accept(a[rng() % a.size()]));
        }
    }
}

// Nested repetitions multiply the parses of one string ("a"+ nested k deep
// has about 2^k distinct stacks after a few a's). The matcher either answers
// exactly or says "too ambiguous" within its step bounds; it never spends
// unbounded time, and a refused mask is not cached half-built.
TEST(GrammarMatcher, AmbiguousGrammarsFailWithinBounds) {
    std::vector<std::string> vocab = {"a", "aa", "aaaa", "b"};
    auto trie = std::make_shared<TokenTrie>(vocab);
    for (int depth : {2, 6, 12, 24}) {
        std::string rule = "root ::= \"a\"";
        for (int i = 0; i < depth; i++) rule += "+";
        rule += " \"b\"";
        GrammarMatcher m(std::make_shared<Grammar>(parse_gbnf(rule)), trie);
        int accepted = 0;
        std::string error;
        try {
            for (; accepted < 6; accepted++) {
                const std::vector<int32_t> mask = from_mask(m, vocab.size());
                // At least one a, then b: b once an a is in.
                const std::vector<int32_t> want = accepted ? std::vector<int32_t>{0, 1, 2, 3} : std::vector<int32_t>{0, 1, 2};
                ASSERT_EQ(mask, want) << "depth " << depth;
                ASSERT_TRUE(m.accept(2));
            }
        } catch (const std::runtime_error& e) {
            error = e.what();
        }
        if (depth <= 6) {
            EXPECT_EQ(error, "") << "depth " << depth;
            EXPECT_TRUE(m.accept(3) && m.must_end());
        } else {
            // 2^12 stacks and more: over the bounds (which bound is met first
            // depends on the grammar's shape).
            EXPECT_EQ(error.rfind("grammar: too ambiguous", 0), 0u) << "depth " << depth << ": " << error;
            // Asking again refuses again instead of returning a partial mask.
            EXPECT_THROW(from_mask(m, vocab.size()), std::runtime_error) << "depth " << depth;
        }
    }
}

}  // namespace
}  // namespace ms
