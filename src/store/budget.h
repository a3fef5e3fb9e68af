// The memory-budget contract: resident weights + expert cache + KV cache +
// scratch <= --mem. The runtime states what it needs; the cache gets what is
// left, at least enough slots for one token's experts of one layer, and the
// run is refused up front (saying what would fit) when that is impossible.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace ms {

// A run refused because a memory budget (--mem, --gpu-mem) cannot hold the
// least it needs. The commands exit with kExitBudget for it (main.cpp), so
// a caller that sweeps budgets (bench model) tells a case that cannot fit
// from one that failed.
struct BudgetTooSmall : std::runtime_error {
    using std::runtime_error::runtime_error;
};
constexpr int kExitBudget = 3;

struct MemoryNeeds {
    uint64_t budget = 0;      // --mem
    uint64_t resident = 0;    // dense weights loaded into RAM
    uint64_t kv = 0;          // KV cache (and recurrent state)
    uint64_t scratch = 0;     // activations, logits, buffers
    uint64_t slot_bytes = 0;  // ExpertLayout::slot_bytes()
    int min_slots = 1;        // experts used per token (top-k) at least
    int max_slots = 0;        // every expert of the model: more would never be used
    uint64_t process = 0;     // what the process holds besides the above (code, tokenizer, metadata)
    uint64_t requests = 0;    // held for requests beside the sessions (serve: bodies, grammars)
};

struct MemoryPlan {
    int slots = 0;
    uint64_t cache_bytes = 0;  // slots * slot_bytes
    uint64_t fixed_bytes = 0;  // resident + kv + scratch + process + requests
    uint64_t total_bytes = 0;  // fixed + cache, <= budget
    bool all_experts_fit = false;
};

// Throws BudgetTooSmall("memory budget: needs at least X (resident R + KV
// K + scratch S + process P [+ requests Q] + N expert slots of B), have Y")
// when even the minimum does not fit.
MemoryPlan plan_memory(const MemoryNeeds& needs);

}  // namespace ms
