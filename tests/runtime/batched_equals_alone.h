// Batched decode against each sequence alone (Session::decode_batch): the
// check the CPU's batch_decode_test and the GPU's gpu_test share.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "../model/golden.h"
#include "runtime/session.h"

namespace ms {

// Decodes three sequences (the golden prompt, its first half, its reverse)
// batched and alone, step by step, greedily; checks equal logits (where
// max_rel_l2 > 0: within that relative L2 of each other) and returns the
// batched golden-prompt sequence's tokens. logits, where given, gets every
// step's batched logits, sequence by sequence.
inline std::vector<int32_t> batched_equals_alone(const golden::Case& g, Session& lead, int steps,
                                                 double max_rel_l2 = 0, std::vector<float>* logits = nullptr) {
    std::vector<std::vector<int32_t>> prompts = {
        g.prompt, std::vector<int32_t>(g.prompt.begin(), g.prompt.begin() + ptrdiff_t(g.prompt.size() + 1) / 2),
        std::vector<int32_t>(g.prompt.rbegin(), g.prompt.rend())};
    std::vector<std::unique_ptr<Session>> batched, alone;
    for (size_t i = 0; i < prompts.size(); i++) {
        batched.push_back(lead.fork(SamplerParams{}));
        alone.push_back(lead.fork(SamplerParams{}));
        batched.back()->prefill(prompts[i]);
        alone.back()->prefill(prompts[i]);
    }
    std::vector<Session*> ptrs;
    for (auto& s : batched) ptrs.push_back(s.get());
    const int64_t V = lead.config().n_vocab;
    std::vector<int32_t> out;
    for (int step = 0; step < steps; step++) {
        std::vector<int32_t> next;
        for (auto& s : batched) next.push_back(golden::argmax(s->logits(), V));
        out.push_back(next[0]);
        Session::decode_batch(ptrs.data(), next.data(), int(next.size()));
        for (size_t i = 0; i < alone.size(); i++) {
            alone[i]->decode(next[i]);
            if (max_rel_l2 > 0) {
                EXPECT_LE(golden::rel_l2(batched[i]->logits(), alone[i]->logits(), size_t(V)), max_rel_l2)
                    << "sequence " << i << " step " << step;
            } else {
                EXPECT_EQ(std::memcmp(batched[i]->logits(), alone[i]->logits(), size_t(V) * 4), 0)
                    << "sequence " << i << " step " << step;
            }
            if (logits) logits->insert(logits->end(), batched[i]->logits(), batched[i]->logits() + V);
            EXPECT_EQ(batched[i]->tokens(), alone[i]->tokens());
        }
    }
    return out;
}

}  // namespace ms
