// Speculative decoding on every golden file of every runnable family:
// greedy generation with n-gram drafts, with forced drafts (every pass
// checks draft-max tokens, so most are rejected and the cache is rolled
// back) and with drafts that are mostly right, gives the same tokens as
// plain decoding, and its first tokens are
// the reference's greedy tokens (as in golden_test, up to the reference's
// own near-ties). Families whose state cannot go back a few positions
// (DeltaNet's recurrence, DeepSeek V4's compressed blocks) are covered:
// their rollbacks go through checkpoint() or re-evaluation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "../model/golden.h"
#include "model/ram_experts.h"
#include "runtime/session.h"
#include "../golden_required.h"

namespace ms {
namespace {

// Small passes (8 rows a piece of a layer), greedy: the options of the
// sessions below.
SessionOptions small_session(const golden::Case& g) {
    SessionOptions o;
    o.model_path = g.gguf;
    o.n_ctx = 128;
    o.kv_type = GgmlType::F32;
    o.n_threads = 2;
    o.n_batch = 16;
    o.n_ubatch = 8;
    o.sampling.temp = 0;
    return o;
}

std::vector<int32_t> generate(const golden::Case& g, DraftMode mode, int draft_max, int n, DraftStats* stats,
                              const std::vector<int32_t>* oracle = nullptr) {
    SessionOptions o = small_session(g);
    o.nextn = mode == DraftMode::Mtp;
    auto s = Session::open(o);
    DraftOptions d;
    d.mode = mode;
    d.max = draft_max;
    // Drafts from the plain run's tokens, every seventh position wrong: most
    // passes accept some drafts and reject one, so the cache is cut back
    // in the middle of what a pass wrote.
    if (oracle) {
        const size_t base = g.prompt.size();
        d.custom = [oracle, base](const int32_t*, size_t len, int k, std::vector<int32_t>* out) {
            int m = 0;
            for (size_t i = len - base; i < oracle->size() && m < k; i++, m++)
                out->push_back(i % 7 == 3 ? ((*oracle)[i] + 1) % 7 : (*oracle)[i]);
            return m;
        };
    }
    s->set_draft(d);
    s->prefill(g.prompt);
    std::vector<int32_t> out;
    s->generate(n, [&](int32_t t) {
        out.push_back(t);
        return true;
    }, nullptr, true);
    EXPECT_EQ(s->tokens().size(), g.prompt.size() + out.size());
    if (stats) *stats = s->draft_stats;
    return out;
}

class Speculate : public ::testing::TestWithParam<std::string> {};

TEST_P(Speculate, GreedyTokensIdenticalWithDrafts) {
    const golden::Case g = golden::load(GetParam());
    const int n = 32;
    const std::vector<int32_t> plain = generate(g, DraftMode::Off, 1, n, nullptr);
    ASSERT_EQ(plain.size(), size_t(n));
    // The reference's own greedy tokens, up to its first near-tie.
    const int64_t V = g.n_vocab;
    for (size_t i = 0; i < g.greedy.size(); i++) {
        const float* ref_row = i == 0 ? g.logits.data() + (g.prompt.size() - 1) * size_t(V)
                                      : g.gen.data() + (i - 1) * size_t(V);
        if (golden::top2_gap(ref_row, V) < 1e-3f) break;
        ASSERT_EQ(plain[i], g.greedy[i]) << "greedy token " << i;
    }
    for (auto [mode, k] : {std::pair{DraftMode::Ngram, 4}, std::pair{DraftMode::Forced, 5}}) {
        SCOPED_TRACE(std::string(draft_mode_name(mode)) + " " + std::to_string(k));
        DraftStats st;
        EXPECT_EQ(generate(g, mode, k, n, &st), plain);
        EXPECT_EQ(st.tokens, n);
        printf("%s %s %d: %lld drafted, %lld accepted, %lld passes\n", g.name.c_str(), draft_mode_name(mode), k,
               (long long)st.drafted, (long long)st.accepted, (long long)st.passes);
        if (mode == DraftMode::Forced) {
            EXPECT_GT(st.drafted, 0);
        }
    }
    {
        SCOPED_TRACE("oracle drafts");
        DraftStats st;
        EXPECT_EQ(generate(g, DraftMode::Ngram, 4, n, &st, &plain), plain);
        EXPECT_GT(st.accepted, n / 3);
        EXPECT_LT(st.passes, n);
        printf("%s oracle: %lld drafted, %lld accepted, %lld passes\n", g.name.c_str(), (long long)st.drafted,
               (long long)st.accepted, (long long)st.passes);
    }
}

// --draft mtp: where the file has a NextN block that runs (glm4moe), greedy
// tokens identical to plain decoding and consistent counters; elsewhere a
// one-line refusal naming the file.
TEST_P(Speculate, MtpDraftsGreedyIdenticalOrRefused) {
    const golden::Case g = golden::load(GetParam());
    const int n = 32;
    const ModelConfig c = Model::open(GgufFile::open(g.gguf))->config();
    if (c.arch != "glm4moe") {
        try {
            generate(g, DraftMode::Mtp, 3, n, nullptr);
            FAIL() << "--draft mtp was not refused";
        } catch (const std::runtime_error& e) {
            const std::string m = e.what();
            EXPECT_NE(m.find(g.gguf), std::string::npos) << m;
            EXPECT_NE(m.find("--draft mtp"), std::string::npos) << m;
            EXPECT_EQ(m.find('\n'), std::string::npos) << m;
            if (c.n_nextn == 0) {
                EXPECT_NE(m.find("has no NextN"), std::string::npos) << m;
            }
        }
        return;
    }
    ASSERT_GT(c.n_nextn, 0);
    const std::vector<int32_t> plain = generate(g, DraftMode::Off, 1, n, nullptr);
    for (int k : {1, 3}) {
        SCOPED_TRACE("mtp " + std::to_string(k));
        DraftStats st;
        EXPECT_EQ(generate(g, DraftMode::Mtp, k, n, &st), plain);
        EXPECT_EQ(st.tokens, n);
        EXPECT_GT(st.drafted, 0);
        EXPECT_LE(st.accepted, st.drafted);
        EXPECT_LE(st.drafted, st.passes * k);
        EXPECT_EQ(st.passes + st.accepted, st.tokens);  // each pass: its sampled token plus the accepted drafts
        printf("%s mtp %d: %lld drafted, %lld accepted, %lld passes, %.2f tokens per pass\n", g.name.c_str(), k,
               (long long)st.drafted, (long long)st.accepted, (long long)st.passes, st.tokens_per_pass());
    }
}

// serve --parallel with drafts: three sequences' passes (each its sampled
// token and up to 3 drafts) run as one forward call (Session::propose,
// run_passes, finish: Model::forward_rows), against each sequence stepping
// alone (Session::step): the same tokens, the same logits bit for bit and
// the same cache after every step, greedy and sampled, with forced drafts
// (most rejected: every pass rolls some sequences back) and n-gram ones.
// n_ubatch 8 holds two sequences' 4 rows, so a step is two calls, the
// first of two sequences.
TEST_P(Speculate, PassesOfSeveralSequencesMatchEachAlone) {
    const golden::Case g = golden::load(GetParam());
    auto lead = Session::open(small_session(g));
    const std::vector<std::vector<int32_t>> prompts = {
        g.prompt, std::vector<int32_t>(g.prompt.begin(), g.prompt.begin() + ptrdiff_t(g.prompt.size() + 1) / 2),
        std::vector<int32_t>(g.prompt.rbegin(), g.prompt.rend())};
    const int64_t V = lead->config().n_vocab;
    for (const float temp : {0.0f, 0.9f}) {
        for (const DraftMode mode : {DraftMode::Forced, DraftMode::Ngram}) {
            SCOPED_TRACE(std::string(draft_mode_name(mode)) + " temp " + std::to_string(temp));
            std::vector<std::unique_ptr<Session>> together, alone;
            for (size_t i = 0; i < prompts.size(); i++) {
                SamplerParams sp;
                sp.temp = temp;
                sp.seed = 11 + uint64_t(i);
                DraftOptions d;
                d.mode = mode;
                d.max = 3;
                for (auto* v : {&together, &alone}) {
                    v->push_back(lead->fork(sp));
                    v->back()->set_draft(d);
                    v->back()->prefill(prompts[i]);
                }
            }
            std::vector<std::vector<int32_t>> out_together(prompts.size()), out_alone(prompts.size());
            const int n = 16;
            int64_t drafted = 0, rejected = 0;
            for (int step = 0; step < 8; step++) {
                std::vector<Session*> passes;
                for (size_t i = 0; i < prompts.size(); i++) {
                    Session& s = *together[i];
                    const int left = n - int(out_together[i].size());
                    bool done = false;
                    s.propose(left, [&](int32_t t) { out_together[i].push_back(t); return true; }, true, &done);
                    if (s.has_pass()) passes.push_back(&s);
                }
                Session::run_passes(passes.data(), int(passes.size()));
                for (Session* s : passes) {
                    const size_t i = size_t(std::find_if(together.begin(), together.end(),
                                                         [&](const auto& p) { return p.get() == s; }) - together.begin());
                    const DraftStats before = s->draft_stats;
                    bool done = false;
                    s->finish([&](int32_t t) { out_together[i].push_back(t); return true; }, true, &done);
                    drafted += s->draft_stats.drafted - before.drafted;
                    rejected += (s->draft_stats.drafted - before.drafted) - (s->draft_stats.accepted - before.accepted);
                }
                for (size_t i = 0; i < prompts.size(); i++) {
                    bool done = false;
                    alone[i]->step(n - int(out_alone[i].size()), [&](int32_t t) { out_alone[i].push_back(t); return true; },
                                   true, &done);
                    ASSERT_EQ(out_together[i], out_alone[i]) << "sequence " << i << " step " << step;
                    ASSERT_EQ(together[i]->tokens(), alone[i]->tokens()) << "sequence " << i << " step " << step;
                    ASSERT_EQ(std::memcmp(together[i]->logits(), alone[i]->logits(), size_t(V) * 4), 0)
                        << "sequence " << i << " step " << step;
                }
            }
            // Forced drafts in every pass, most of them rejected: rows of
            // several tokens a sequence and rollbacks. (The n-gram drafter
            // finds little to repeat in these short texts: its passes are
            // mostly one token a sequence, forward_batch's case.)
            if (mode == DraftMode::Forced) {
                EXPECT_GT(drafted, 0);
                EXPECT_GT(rejected, 0);
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Families, Speculate, ::testing::ValuesIn(golden::runnable_models()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return golden::identifier(i.param); });

}  // namespace
}  // namespace ms

namespace ms {
namespace {

// A golden file's model with its NextN block enabled, every expert in RAM,
// and the state options the tests below use.
struct NextnModel {
    GgufFile file;
    std::unique_ptr<Model> model;
    std::unique_ptr<RamExperts> experts;
    ThreadPool pool{2};
    StateOptions so;

    explicit NextnModel(const std::string& path) : file(GgufFile::open(path)), model(Model::open(file)) {
        model->enable_nextn(file);
        model->load_resident(file);
        experts = std::make_unique<RamExperts>(file, model->expert_layers());
        so.n_ctx = 128;
        so.max_batch = 8;
        so.max_tokens = 64;
        so.kv_type = GgmlType::F32;
        so.n_threads = 2;
    }
    std::unique_ptr<ModelState> state() const { return model->new_state(so); }
    void forward(ModelState& st, const int32_t* tokens, int n, float* logits, bool all = false) {
        model->forward(st, *experts, pool, tokens, n, logits, all);
    }
    int draft(ModelState& st, int32_t token, int k, int32_t* out) {
        return model->draft_nextn(st, *experts, pool, token, k, out);
    }
};

// The NextN block's KV cache follows rejections: drafts made after verify
// passes that were cut back (most of what they wrote rejected) and plain
// steps equal the drafts of a fresh state that evaluated the same tokens as
// a prompt in calls of 5, at every position of a greedy continuation.
TEST(NextnRollback, DraftsAfterRejectionsMatchAFreshState) {
    for (const std::string& name : golden::family("glm4moe")) {
        SCOPED_TRACE(name);
        const golden::Case g = golden::load(name);
        NextnModel m(g.gguf);
        auto live = m.state();
        const int64_t V = m.model->config().n_vocab;
        std::vector<float> logits(size_t(4 * V));

        // The greedy continuation, token by token.
        std::vector<int32_t> seq = g.prompt;
        m.forward(*live, seq.data(), int(seq.size()), logits.data());
        for (int i = 0; i < 20; i++) {
            seq.push_back(golden::argmax(logits.data(), V));
            m.forward(*live, &seq.back(), 1, logits.data());
        }

        auto spec = m.state();
        const size_t P = g.prompt.size();
        m.forward(*spec, seq.data(), int(P), logits.data());
        int checked = 0;
        for (size_t p = P; p + 3 < seq.size();) {
            if (p % 5 == 4) {  // a step without drafts
                m.forward(*spec, &seq[p], 1, logits.data());
                p++;
                continue;
            }
            // What a fresh state drafts after seq[0..p] and seq[p].
            auto fresh = m.state();
            for (size_t i = 0; i < p; i += 5) {
                m.forward(*fresh, seq.data() + i, int(std::min<size_t>(5, p - i)), logits.data(),
                               false);
            }
            int32_t want[3], got[3];
            ASSERT_EQ(m.draft(*fresh, seq[p], 3, want), 3);
            ASSERT_EQ(m.draft(*spec, seq[p], 3, got), 3);
            EXPECT_EQ(std::vector<int32_t>(got, got + 3), std::vector<int32_t>(want, want + 3)) << "position " << p;
            checked++;
            // A verify pass of seq[p] and three guesses, the first `keep`
            // right (0, 1, 2 in turn), cut back after them.
            const int keep = int(p % 3);
            int32_t pass[4] = {seq[p], seq[p + 1], seq[p + 2], seq[p + 3]};
            for (int i = keep + 1; i < 4; i++) pass[i] = (pass[i] + 1 + i) % int32_t(V);
            m.forward(*spec, pass, 4, logits.data(), true);
            spec->n_past = int64_t(p) + 1 + keep;
            p += size_t(1 + keep);
        }
        EXPECT_GE(checked, 6);
    }
}

// Against nextn_reference.json (nextn_reference.py: the NextN block in plain
// Python from the GGUF, no moestream code): the depth-1 and depth-2 drafts
// after every position of the golden prompt of glm4moe-F32.
TEST(NextnReference, DraftsMatchAnIndependentReference) {
    const golden::Case g = golden::load("glm4moe-F32");
    const Json ref = Json::parse_file(std::string(MOESTREAM_SOURCE_DIR) + "/tests/runtime/nextn_reference.json");
    NextnModel m(g.gguf);
    std::vector<float> logits(size_t(m.model->config().n_vocab));
    int checked = 0;
    for (const Json& r : ref.at("drafts").as_array()) {
        const int i = int(r.at("position").as_int());
        ASSERT_EQ(r.at("next_token").as_int(), g.prompt[size_t(i) + 1]);
        auto st = m.state();
        m.forward(*st, g.prompt.data(), i + 1, logits.data());
        int32_t d[2];
        ASSERT_EQ(m.draft(*st, g.prompt[size_t(i) + 1], 2, d), 2);
        if (r.at("d1_gap").as_number() < 1e-3) continue;  // a near-tie either side may break
        EXPECT_EQ(d[0], r.at("d1").as_int()) << "position " << i;
        if (r.at("d2_gap").as_number() >= 1e-3) {
            EXPECT_EQ(d[1], r.at("d2").as_int()) << "position " << i;
        }
        checked++;
    }
    EXPECT_GE(checked, 30);
}

}  // namespace
}  // namespace ms
