// Tokenizer units against independent references: BPE and SentencePiece
// merges against naive O(n^2) re-implementations on random vocabularies,
// pre-tokenizer splits against the published behaviour of each regex, special
// tokens, broken vocabularies (clear errors), byte-exact round trips of
// arbitrary bytes, end-of-generation ids, and the streaming decoder.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "../golden_dir.h"

namespace fs = std::filesystem;
using namespace ms;

namespace {

const std::string kGolden = MOESTREAM_GOLDEN_DIR;

const Tokenizer& golden(const std::string& rel) {
    static std::map<std::string, Tokenizer> cache;
    auto it = cache.find(rel);
    if (it == cache.end()) it = cache.emplace(rel, Tokenizer::from_gguf(GgufFile::open(kGolden + "/" + rel))).first;
    return it->second;
}
const Tokenizer& qwen3() { return golden("tokenizer/qwen3-vocab.gguf"); }
const Tokenizer& llama_spm() { return golden("tokenizer/ggml-vocab-llama-spm.gguf"); }
const Tokenizer& gemma4() { return golden("models/gemma4-F32.gguf"); }

bool sanitized() { return getenv("MOESTREAM_SANITIZED") != nullptr; }

// Expects from_spec to throw with `what` in the message.
void expect_error(const VocabSpec& v, const std::string& what) {
    try {
        Tokenizer::from_spec(v, "test.gguf");
        ADD_FAILURE() << "no error, expected one about: " << what;
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).rfind("test.gguf: ", 0), 0u) << e.what();
    }
}

// ---- byte-level BPE against a naive reference --------------------------------

// Learns `n` merges from text by repeatedly joining the most frequent
// adjacent pair (ties: first seen), as BPE training does.
std::vector<std::pair<std::string, std::string>> learn_merges(const std::string& text, int n) {
    std::vector<std::string> sym;
    for (char c : text) sym.push_back(std::string(1, c));
    std::vector<std::pair<std::string, std::string>> merges;
    for (int k = 0; k < n; k++) {
        std::map<std::pair<std::string, std::string>, int> count;
        std::vector<std::pair<std::string, std::string>> order;
        for (size_t i = 0; i + 1 < sym.size(); i++)
            if (count[{sym[i], sym[i + 1]}]++ == 0) order.push_back({sym[i], sym[i + 1]});
        std::pair<std::string, std::string> best;
        int best_n = 0;
        for (const auto& p : order)
            if (count[p] > best_n) best = p, best_n = count[p];
        if (best_n < 2) break;
        merges.push_back(best);
        std::vector<std::string> next;
        for (size_t i = 0; i < sym.size(); i++) {
            if (i + 1 < sym.size() && sym[i] == best.first && sym[i + 1] == best.second) {
                next.push_back(best.first + best.second);
                i++;
            } else {
                next.push_back(sym[i]);
            }
        }
        sym = next;
    }
    return merges;
}

// Naive BPE: merge the lowest-ranked adjacent pair, leftmost first, until none.
std::vector<std::string> naive_bpe(const std::string& word, const std::map<std::pair<std::string, std::string>, int>& rank) {
    std::vector<std::string> s;
    for (char c : word) s.push_back(std::string(1, c));
    for (;;) {
        int best = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < s.size(); i++) {
            auto it = rank.find({s[i], s[i + 1]});
            if (it != rank.end() && (best < 0 || it->second < best)) best = it->second, at = i;
        }
        if (best < 0) return s;
        s[at] += s[at + 1];
        s.erase(s.begin() + long(at) + 1);
    }
}

TEST(ByteBpe, MergesMatchNaiveReferenceOnRandomVocabularies) {
    std::mt19937 rng(42);
    for (int round = 0; round < 20; round++) {
        const std::string alphabet = round % 2 ? "ab" : "abcde";
        auto rand_text = [&](size_t n) {
            std::string t;
            for (size_t i = 0; i < n; i++) t += alphabet[rng() % alphabet.size()];
            return t;
        };
        auto merges = learn_merges(rand_text(400), 40);
        VocabSpec v;
        v.model = "gpt2";
        v.pre = "gpt-2";
        for (char c : alphabet) v.tokens.push_back(std::string(1, c));
        std::map<std::pair<std::string, std::string>, int> rank;
        for (const auto& [a, b] : merges) {
            rank.emplace(std::make_pair(a, b), int(rank.size()));
            v.merges.push_back(a + " " + b);
            if (std::find(v.tokens.begin(), v.tokens.end(), a + b) == v.tokens.end()) v.tokens.push_back(a + b);
        }
        Tokenizer tok = Tokenizer::from_spec(v);
        for (int k = 0; k < 50; k++) {
            std::string word = rand_text(1 + rng() % 120);  // letters only: one pre-token
            std::vector<std::string> want = naive_bpe(word, rank);
            std::vector<int32_t> ids = tok.encode(word, false, true);
            std::vector<std::string> got;
            for (int32_t id : ids) got.push_back(tok.text(id));
            ASSERT_EQ(got, want) << "word " << word;
            EXPECT_EQ(tok.decode(ids), word);
        }
    }
}

TEST(ByteBpe, Gpt2ByteMappingIsThePublishedOne) {
    SKIP_WITHOUT_GOLDEN();
    // Printable bytes stand for themselves; space is 'Ġ' (U+0120), newline 'Ċ'
    // (U+010A), byte 0 'Ā' (U+0100), 0xAD (soft hyphen) U+0143.
    EXPECT_EQ(gpt2_byte_to_cp('a'), uint32_t('a'));
    EXPECT_EQ(gpt2_byte_to_cp(' '), 0x120u);
    EXPECT_EQ(gpt2_byte_to_cp('\n'), 0x10Au);
    EXPECT_EQ(gpt2_byte_to_cp(0), 0x100u);
    EXPECT_EQ(gpt2_byte_to_cp(0xAD), 0x143u);
    std::vector<bool> seen(512);
    for (int b = 0; b < 256; b++) {
        uint32_t cp = gpt2_byte_to_cp(uint8_t(b));
        ASSERT_LT(cp, 512u);
        EXPECT_FALSE(seen[cp]) << b;
        seen[cp] = true;
        EXPECT_EQ(gpt2_cp_to_byte(cp), b);
    }
    // The GPT-2 vocabulary's first 256 tokens are exactly these characters.
    const Tokenizer& t = golden("tokenizer/ggml-vocab-gpt-2.gguf");
    EXPECT_EQ(t.piece(t.find("\xC4\xA0")), " ");  // "Ġ"
    EXPECT_EQ(t.encode(" ", false, false), std::vector<int32_t>{t.find("\xC4\xA0")});
}

// ---- pre-tokenizers --------------------------------------------------------------

std::vector<std::string> split(const char* pre, const std::string& text) {
    const PreTokenizerDef* d = find_pre_tokenizer(pre);
    EXPECT_NE(d, nullptr) << pre;
    if (!d) return {};
    PreTokenizer p(d->patterns);
    std::vector<Span> out, tmp;
    void* md = PreTokenizer::new_match_data();
    p.split(text, out, tmp, md);
    PreTokenizer::free_match_data(md);
    std::vector<std::string> words;
    for (Span s : out) words.push_back(text.substr(s.start, s.len));
    return words;
}

using Words = std::vector<std::string>;

TEST(PreTokenizer, SplitsAsTheRegexesAreDocumented) {
    // GPT-2: contractions, optional leading space, whitespace run minus one.
    EXPECT_EQ(split("gpt-2", "Hello world's 123!!  x"),
              (Words{"Hello", " world", "'s", " 123", "!!", " ", " x"}));
    // Qwen2: single digits, newline runs kept with their spaces.
    EXPECT_EQ(split("qwen2", "abc 1234\n\n  def"), (Words{"abc", " ", "1", "2", "3", "4", "\n\n", " ", " def"}));
    // Llama 3: digits in threes, case-insensitive contractions, punctuation
    // with a leading space and trailing newlines.
    EXPECT_EQ(split("llama-bpe", "I'M 1234567 ok?!\nyes"), (Words{"I", "'M", " ", "123", "456", "7", " ok", "?!\n", "yes"}));
    // GPT-4o / o200k: camel case splits at upper case, contractions stay on the word.
    EXPECT_EQ(split("gpt-4o", "HelloWorld don't 12345"), (Words{"Hello", "World", " don't", " ", "123", "45"}));
    // Qwen 3.5: combining marks stay with letters.
    EXPECT_EQ(split("qwen35", "cafe\xCC\x81 ok"), (Words{"cafe\xCC\x81", " ok"}));
    // DeepSeek V3: digits in threes first, then CJK runs, then the rest.
    EXPECT_EQ(split("deepseek-v3", "ab12345中文x"), (Words{"ab", "123", "45", "中文", "x"}));
    // DeepSeek LLM: newlines alone, letter runs with one leading space, trailing spaces.
    EXPECT_EQ(split("deepseek-llm", "Hi there\n42  "), (Words{"Hi", " there", "\n", "42", "  "}));
    // Gemma 4: only newline runs are split off.
    EXPECT_EQ(split("gemma4", "a b\n\nc"), (Words{"a b", "\n\n", "c"}));
    // Invalid UTF-8 is never matched: it lands in a gap piece of its own.
    EXPECT_EQ(split("qwen2", "ab\xFF\xFE" "cd"), (Words{"ab", "\xFF\xFE", "cd"}));
}

TEST(PreTokenizer, KnownNamesAndFallback) {
    for (const char* name : {"default", "gpt-2", "qwen2", "qwen35", "llama-bpe", "llama3", "deepseek-llm",
                             "deepseek-v3", "gpt-4o", "olmo", "glm4", "tekken", "starcoder", "falcon",
                             "deepseek-coder", "bailingmoe", "seed-coder", "gemma4"}) {
        const PreTokenizerDef* d = find_pre_tokenizer(name);
        ASSERT_NE(d, nullptr) << name;
        EXPECT_NO_THROW(PreTokenizer{d->patterns}) << name;
    }
    EXPECT_EQ(find_pre_tokenizer("no-such-pre"), nullptr);
    EXPECT_TRUE(find_pre_tokenizer("llama-bpe")->ignore_merges);
    VocabSpec v;
    v.model = "gpt2";
    v.pre = "no-such-pre";
    v.tokens = {"a", "b", "ab"};
    v.merges = {"a b"};
    Tokenizer t = Tokenizer::from_spec(v);  // warns on stderr
    EXPECT_EQ(t.pre(), "default");
    EXPECT_EQ(t.encode("ab", false, false), std::vector<int32_t>{2});
    // A "gpt2" vocabulary with the gemma4 pre-tokenizer is Gemma 4 style BPE:
    // spaces become U+2581, no byte-level mapping.
    v.pre = "gemma4";
    v.tokens = {"a", "\xE2\x96\x81", "b", "\xE2\x96\x81" "b"};
    v.merges = {"\xE2\x96\x81 b"};
    Tokenizer g = Tokenizer::from_spec(v);
    EXPECT_EQ(g.encode("a b", false, false), (std::vector<int32_t>{0, 3}));
    EXPECT_EQ(g.decode({0, 3}), "a b");
}

// ---- SentencePiece against a naive reference -------------------------------------

TEST(Spm, MergesMatchNaiveReferenceOnRandomScores) {
    std::mt19937 rng(7);
    const std::string letters = "abc";
    for (int round = 0; round < 20; round++) {
        VocabSpec v;
        v.model = "llama";
        v.tokens = {"<unk>", "<s>", "</s>"};
        v.token_types = {2, 3, 3};
        v.scores = {0, 0, 0};
        for (int b = 0; b < 256; b++) {
            char hex[8];
            snprintf(hex, sizeof hex, "<0x%02X>", b);
            v.tokens.push_back(hex);
            v.token_types.push_back(6);
            v.scores.push_back(0);
        }
        std::map<std::string, float> score;
        auto add = [&](const std::string& t) {
            if (score.count(t)) return;
            float s = -float(rng() % 1000) / 10.0f;
            score[t] = s;
            v.tokens.push_back(t);
            v.token_types.push_back(1);
            v.scores.push_back(s);
        };
        for (char c : letters) add(std::string(1, c));
        add("\xE2\x96\x81");
        for (int k = 0; k < 25; k++) {  // random pieces of length 2..4
            std::string t;
            for (int n = 2 + int(rng() % 3); n > 0; n--) t += letters[rng() % letters.size()];
            add(t);
        }
        v.add_space_prefix = false;
        Tokenizer tok = Tokenizer::from_spec(v);
        for (int k = 0; k < 50; k++) {
            std::string text;
            for (int n = 1 + int(rng() % 60); n > 0; n--) text += letters[rng() % letters.size()];
            // Naive: merge the highest-scoring adjacent pair that is a piece, leftmost first.
            std::vector<std::string> s;
            for (char c : text) s.push_back(std::string(1, c));
            for (;;) {
                int at = -1;
                float best = 0;
                for (size_t i = 0; i + 1 < s.size(); i++) {
                    auto it = score.find(s[i] + s[i + 1]);
                    if (it != score.end() && (at < 0 || it->second > best)) at = int(i), best = it->second;
                }
                if (at < 0) break;
                s[size_t(at)] += s[size_t(at) + 1];
                s.erase(s.begin() + at + 1);
            }
            std::vector<std::string> got;
            std::vector<int32_t> ids = tok.encode(text, false, false);
            for (int32_t id : ids) got.push_back(tok.text(id));
            ASSERT_EQ(got, s) << text;
            EXPECT_EQ(tok.decode(ids), text);
        }
    }
}

TEST(Spm, SpacePrefixByteFallbackAndBos) {
    SKIP_WITHOUT_GOLDEN();
    const Tokenizer& t = llama_spm();
    EXPECT_TRUE(t.add_bos());
    EXPECT_TRUE(t.add_space_prefix());
    EXPECT_EQ(t.bos(), 1);
    EXPECT_EQ(t.eos(), 2);
    std::vector<int32_t> ids = t.encode("Hello", true, false);
    ASSERT_EQ(ids.size(), 2u);
    EXPECT_EQ(ids[0], 1);
    EXPECT_EQ(t.text(ids[1]), "\xE2\x96\x81Hello");  // "▁Hello": the prefixed space
    EXPECT_EQ(t.decode(ids), "Hello");
    // A character without a piece falls back to its UTF-8 bytes.
    ids = t.encode("\xF0\x9F\xA6\x99", false, false);  // 🦙
    std::vector<std::string> texts;
    for (int32_t id : ids) texts.push_back(t.text(id));
    EXPECT_EQ(texts, (std::vector<std::string>{"\xE2\x96\x81", "<0xF0>", "<0x9F>", "<0xA6>", "<0x99>"}));
    EXPECT_EQ(t.decode(ids), "\xF0\x9F\xA6\x99");
    // Special tokens in the text, and the space prefix after them.
    ids = t.encode("<s>Hi</s>", false, true);
    ASSERT_GE(ids.size(), 3u);
    EXPECT_EQ(ids.front(), 1);
    EXPECT_EQ(ids.back(), 2);
    EXPECT_EQ(t.text(ids[1]), "\xE2\x96\x81Hi");
}

TEST(SpmBpe, Gemma4NewlinesSpacesAndBos) {
    SKIP_WITHOUT_GOLDEN();
    const Tokenizer& t = gemma4();
    EXPECT_EQ(t.model(), "gemma4");
    EXPECT_TRUE(t.add_bos());
    EXPECT_FALSE(t.add_space_prefix());
    std::vector<int32_t> ids = t.encode("a\n\nb c", true, true);
    std::vector<std::string> texts;
    for (int32_t id : ids) texts.push_back(t.text(id));
    // BOS, "a", the "\n\n" token whole, "b", then "▁c" (or "▁" "c") - check by text.
    ASSERT_GE(texts.size(), 4u);
    EXPECT_EQ(texts[0], "<bos>");
    EXPECT_EQ(texts[1], "a");
    EXPECT_EQ(texts[2], "\n\n");
    EXPECT_EQ(texts[3], "b");
    EXPECT_EQ(t.decode(ids), "a\n\nb c");
    // Characters outside the vocabulary become <0xXX> byte tokens.
    ids = t.encode("\xC3\xA9", false, false);  // é
    texts.clear();
    for (int32_t id : ids) texts.push_back(t.text(id));
    EXPECT_EQ(texts, (std::vector<std::string>{"<0xC3>", "<0xA9>"}));
}

// ---- special tokens ----------------------------------------------------------------

VocabSpec special_vocab() {
    VocabSpec v;
    v.model = "gpt2";
    v.pre = "qwen2";
    for (int b = 0; b < 256; b++) {
        std::string s;
        utf8_append(s, gpt2_byte_to_cp(uint8_t(b)));
        v.tokens.push_back(s);
    }
    v.tokens.push_back("ab");
    v.merges = {"a b"};
    v.token_types.assign(v.tokens.size(), 1);
    auto add = [&](const std::string& t, int type) {
        v.tokens.push_back(t);
        v.token_types.push_back(type);
        return int32_t(v.tokens.size() - 1);
    };
    add("<|im", 3);          // 257
    add("<|im_start|>", 3);  // 258
    add("<|im_end|>", 3);    // 259
    add("<think>", 4);       // 260 user-defined
    add("xx", 3);            // 261: overlaps with itself in "xxx"
    return v;
}

TEST(Special, LongestFirstAndParseSpecialOff) {
    Tokenizer t = Tokenizer::from_spec(special_vocab());
    EXPECT_EQ(t.encode("<|im_start|>ab<|im_end|>", false, true), (std::vector<int32_t>{258, 256, 259}));
    // "<|im" alone is its own token; the longer one wins where both match.
    EXPECT_EQ(t.encode("<|im<|im_start|>", false, true), (std::vector<int32_t>{257, 258}));
    // Leftmost claim of a self-overlapping token: "xxx" -> "xx" + "x".
    EXPECT_EQ(t.encode("xxx", false, true), (std::vector<int32_t>{261, 'x'}));
    // parse_special off: control tokens are plain text, user-defined still match.
    std::vector<int32_t> plain = t.encode("<|im_end|><think>", false, false);
    EXPECT_EQ(plain.back(), 260);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), 259), 0);
    EXPECT_EQ(t.decode(plain), "<|im_end|><think>");
    EXPECT_EQ(t.decode(t.encode("a<|im_end|>b", false, true)), "a<|im_end|>b");
    EXPECT_TRUE(t.is_eog(259));  // "<|im_end|>" by name
    EXPECT_TRUE(t.is_control(259));
    EXPECT_FALSE(t.is_control(260));
}

TEST(Special, EndOfGenerationIds) {
    SKIP_WITHOUT_GOLDEN();
    const Tokenizer& q = qwen3();
    int32_t im_end = q.find("<|im_end|>"), eot = q.find("<|endoftext|>");
    EXPECT_EQ(q.eos(), im_end);
    EXPECT_TRUE(q.is_eog(im_end));
    EXPECT_TRUE(q.is_eog(eot));
    EXPECT_FALSE(q.is_eog(q.find("<|im_start|>")));
    EXPECT_FALSE(q.is_eog(q.find("Hello")));
    EXPECT_FALSE(q.add_bos());
    EXPECT_EQ(q.bos(), Tokenizer::kNoToken);
    // Harmony (gpt-oss): <|return|> and <|call|> end a turn, <|end|> does not.
    VocabSpec v = special_vocab();
    for (const char* s : {"<|return|>", "<|call|>", "<|end|>", "<|channel|>"}) {
        v.tokens.push_back(s);
        v.token_types.push_back(3);
    }
    Tokenizer h = Tokenizer::from_spec(v);
    EXPECT_TRUE(h.is_eog(h.find("<|return|>")));
    EXPECT_TRUE(h.is_eog(h.find("<|call|>")));
    EXPECT_FALSE(h.is_eog(h.find("<|end|>")));
    EXPECT_FALSE(h.is_control(h.find("<|channel|>")));  // shown: the caller parses channels
}

// ---- broken vocabularies -----------------------------------------------------------

TEST(Malformed, ClearErrors) {
    VocabSpec ok = special_vocab();
    EXPECT_NO_THROW(Tokenizer::from_spec(ok));
    VocabSpec v = ok;
    v.tokens.clear();
    v.token_types.clear();
    expect_error(v, "tokenizer.ggml.tokens is missing or empty");
    v = ok;
    v.model = "";
    expect_error(v, "tokenizer.ggml.model is missing");
    v.model = "bert";
    expect_error(v, "unsupported tokenizer.ggml.model 'bert'");
    v = ok;
    v.merges = {"a zz"};
    expect_error(v, "tokenizer.ggml.merges[0] 'a zz': 'zz' is not in the vocabulary");
    v.merges = {"a b", "b a"};
    expect_error(v, "merges[1] 'b a': the merged token 'ba' is not in the vocabulary");
    v.merges = {"ab"};
    expect_error(v, "not two tokens separated by a space");
    v.merges = {"a "};
    expect_error(v, "not two tokens separated by a space");
    v.merges.clear();
    expect_error(v, "tokenizer.ggml.merges is missing");
    v = ok;
    v.bos = 100000;
    expect_error(v, "tokenizer.ggml.bos_token_id = 100000 is outside the vocabulary");
    v = ok;
    v.eos = -5;
    expect_error(v, "eos_token_id = -5");
    v = ok;
    v.token_types[3] = 9;
    expect_error(v, "token_type[3] = 9 is not a token type");
    v.token_types.resize(10);
    expect_error(v, "token_type has 10 entries");
    v = ok;
    v.scores.assign(v.tokens.size(), 0.0);
    v.scores[2] = std::nan("");
    expect_error(v, "scores[2] is not a finite number");
    v.scores.resize(3);
    expect_error(v, "scores has 3 entries");
    v = ok;
    v.pad = -1;  // "none"
    EXPECT_EQ(Tokenizer::from_spec(v).pad(), Tokenizer::kNoToken);
}

TEST(Malformed, GgufWithoutVocabulary) {
    std::string dir = testing::TempDir() + "tok_test_" + std::to_string(getpid());
    fs::create_directories(dir);
    std::string path = dir + "/novocab.gguf";
    {
        GgufWriter w(path);
        w.set_string("general.architecture", "llama");
        w.set_string("tokenizer.ggml.model", "gpt2");
        w.set_strings("tokenizer.ggml.merges", {"a b"});
        w.begin_data();
        w.finish();
    }
    try {
        Tokenizer::from_gguf(GgufFile::open(path));
        ADD_FAILURE() << "no error";
    } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()), path + ": tokenizer.ggml.tokens is missing or empty");
    }
    {
        GgufWriter w(path);
        w.set_string("tokenizer.ggml.model", "gpt2");
        w.set_strings("tokenizer.ggml.tokens", {"a", "b", "ab"});
        w.set_strings("tokenizer.ggml.merges", {"a b"});
        w.set_string("tokenizer.ggml.bos_token_id", "not a number");
        w.begin_data();
        w.finish();
    }
    EXPECT_THROW(Tokenizer::from_gguf(GgufFile::open(path)), std::runtime_error);
    fs::remove_all(dir);
}

// ---- byte-exact round trips ------------------------------------------------------------

TEST(RoundTrip, ArbitraryBytesIncludingInvalidUtf8) {
    SKIP_WITHOUT_GOLDEN();
    std::mt19937 rng(3);
    const std::vector<const Tokenizer*> toks = {&qwen3(), &golden("tokenizer/ggml-vocab-gpt-2.gguf"), &llama_spm(),
                                                &gemma4(), &golden("models/deepseek3-F32.gguf"),
                                                &golden("models/gpt-oss-F32.gguf")};
    const int rounds = sanitized() ? 20 : 200;
    for (const Tokenizer* t : toks) {
        for (int k = 0; k < rounds; k++) {
            std::string s;
            for (int n = int(rng() % 64); n > 0; n--) {
                // Mostly ASCII, some UTF-8 and some bytes that are not UTF-8.
                uint32_t r = rng() % 10;
                if (r < 6) s += char(32 + rng() % 95);
                else if (r < 8) utf8_append(s, 0xA0 + rng() % 0x3000);
                else s += char(rng() % 256);
            }
            // "▁" in the input reads back as a space in SentencePiece vocabularies.
            if (t->model() != "gpt2" && s.find("\xE2\x96\x81") != std::string::npos) continue;
            std::vector<int32_t> ids = t->encode(s, false, false);
            ASSERT_EQ(t->decode(ids), s) << t->model() << "/" << t->pre() << " round " << k;
            for (int32_t id : ids) ASSERT_TRUE(id >= 0 && size_t(id) < t->n_vocab());
        }
    }
}

TEST(RoundTrip, DecodeSkipsUnknownIdsAndPiecesAreBytes) {
    SKIP_WITHOUT_GOLDEN();
    const Tokenizer& t = qwen3();
    std::vector<int32_t> ids = t.encode("Hello world", false, false);
    std::vector<int32_t> noisy = ids;
    noisy.insert(noisy.begin() + 1, -7);
    noisy.push_back(int32_t(t.n_vocab()));
    EXPECT_EQ(t.decode(noisy), "Hello world");
    EXPECT_EQ(t.piece(-1), "");
    EXPECT_EQ(t.piece(t.find("\xC4\xA0world")), " world");  // "Ġworld"
}

TEST(RoundTrip, ConcurrentEncodeGivesSameIds) {
    SKIP_WITHOUT_GOLDEN();
    const Tokenizer& t = qwen3();
    std::string text;
    for (int i = 0; i < 300; i++) text += "The quick brown fox " + std::to_string(i) + " jumps. 你好 🦙\n";
    const std::vector<int32_t> want = t.encode(text, false, true);
    std::vector<std::vector<int32_t>> got(2);
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; i++) threads.emplace_back([&, i] { got[size_t(i)] = t.encode(text, false, true); });
    for (auto& th : threads) th.join();
    EXPECT_EQ(got[0], want);
    EXPECT_EQ(got[1], want);
    EXPECT_EQ(t.decode(want), text);
}

// ---- streaming decoder -----------------------------------------------------------------

TEST(Stream, MultiByteCharactersSplitAcrossTokens) {
    SKIP_WITHOUT_GOLDEN();
    const Tokenizer& t = qwen3();
    const std::string text = "Emoji 🦙🚀 and 漢字, Ελληνικά, 😶‍🌫️ done";
    std::vector<int32_t> ids = t.encode(text, false, false);
    // At least one token must end inside a character for the test to mean anything.
    int split_tokens = 0;
    for (int32_t id : ids)
        if (!utf8_valid(t.piece(id))) split_tokens++;
    ASSERT_GT(split_tokens, 0);
    StreamDecoder d(t);
    std::string out;
    for (int32_t id : ids) {
        std::string chunk = d.push(id);
        EXPECT_TRUE(utf8_valid(chunk)) << "token " << id;
        out += chunk;
    }
    EXPECT_EQ(d.pending(), 0u);
    out += d.flush();
    EXPECT_EQ(out, text);
}

TEST(Stream, ByteTokensAndInvalidBytes) {
    SKIP_WITHOUT_GOLDEN();
    const Tokenizer& t = llama_spm();
    auto byte = [&](int b) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        return t.find(hex);
    };
    StreamDecoder d(t);
    EXPECT_EQ(d.push(byte(0xE6)), "");
    EXPECT_EQ(d.push(byte(0xBC)), "");
    EXPECT_EQ(d.pending(), 2u);
    EXPECT_EQ(d.push(byte(0xA2)), "漢");
    // A lone continuation byte and a byte that never occurs in UTF-8 become U+FFFD.
    EXPECT_EQ(d.push(byte(0x80)), "\xEF\xBF\xBD");
    EXPECT_EQ(d.push(byte(0xFF)), "\xEF\xBF\xBD");
    // A lead byte followed by a non-continuation: U+FFFD, then the character.
    EXPECT_EQ(d.push(byte(0xE6)), "");
    EXPECT_EQ(d.push(byte('A')), "\xEF\xBF\xBD" "A");
    // An unfinished character at the end is flushed as one U+FFFD.
    EXPECT_EQ(d.push(byte(0xF0)), "");
    EXPECT_EQ(d.push(byte(0x9F)), "");
    EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");
    EXPECT_EQ(d.pending(), 0u);
    // Control tokens: shown by default, hidden on request.
    StreamDecoder shown(t), hidden(t, false);
    EXPECT_EQ(shown.push(t.eos()), "</s>");
    EXPECT_EQ(hidden.push(t.eos()), "");
}

TEST(Utf8, CheckFollowsTheUnicodeTable) {
    auto check = [](const std::string& s) {
        return utf8_check(reinterpret_cast<const unsigned char*>(s.data()), s.size());
    };
    EXPECT_EQ(check("a"), 1);
    EXPECT_EQ(check("\xC3\xA9"), 2);
    EXPECT_EQ(check("\xE2\x96\x81"), 3);
    EXPECT_EQ(check("\xF0\x9F\xA6\x99"), 4);
    EXPECT_EQ(check("\xF0\x9F"), 0);        // truncated
    EXPECT_EQ(check("\xC0\xAF"), -1);       // overlong lead
    EXPECT_EQ(check("\xE0\x80\x80"), -1);   // overlong 3-byte
    EXPECT_EQ(check("\xED\xA0\x80"), -1);   // surrogate
    EXPECT_EQ(check("\xF4\x90\x80\x80"), -1);  // above U+10FFFF
    EXPECT_EQ(check("\xE6\xBC" "A"), -2);   // maximal subpart of two bytes
    EXPECT_EQ(check("\x80"), -1);
}

}  // namespace
