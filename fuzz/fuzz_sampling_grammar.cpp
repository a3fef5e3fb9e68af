// libFuzzer harness for GBNF grammars (src/sampling/grammar): the input is
// grammar text from a client. Every input is either a grammar or a
// GrammarError ("grammar: ..."), never another exception or a crash; an
// accepted grammar is then walked for a few tokens over a small vocabulary
// (mask, accept), where the only failure allowed is the matcher's bound on
// ambiguity. The mask and the token-by-token check must agree.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "sampling/grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    std::shared_ptr<ms::Grammar> g;
    try {
        g = std::make_shared<ms::Grammar>(ms::parse_gbnf(text));
    } catch (const ms::GrammarError& e) {
        if (std::strncmp(e.what(), "grammar: ", 9) != 0) abort();
        return 0;
    }
    static const auto trie = std::make_shared<ms::TokenTrie>(std::vector<std::string>{
        "a", "b", "ab", "\"", "{", "}", "[", "]", ",", ":", " ", "\n", "0", "12", "x", "true", "\xC3", "\xA9", "\xC3\xA9",
        "\xE4\xB8\xAD", "\\", "\\n", "-", "."});
    try {
        ms::GrammarMatcher m(g, trie);
        for (int step = 0; step < 8; step++) {
            const std::vector<uint64_t>& mask = m.mask();
            int32_t pick = -1;
            for (int32_t t = 0; t < int32_t(trie->n_tokens()); t++) {
                const bool in_mask = (mask[size_t(t) >> 6] >> (t & 63)) & 1;
                if (in_mask != m.allows(t)) abort();
                if (in_mask && (pick < 0 || (size + size_t(step)) % 3 == size_t(t) % 3)) pick = t;
            }
            if (pick < 0) break;
            if (!m.accept(pick)) abort();
        }
    } catch (const std::runtime_error& e) {
        if (std::strncmp(e.what(), "grammar: ", 9) != 0) abort();
    }
    return 0;
}
