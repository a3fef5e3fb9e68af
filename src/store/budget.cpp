#include "store/budget.h"

#include <algorithm>
#include <stdexcept>

namespace ms {

static std::string mib(uint64_t b) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.1f MiB", double(b) / double(1 << 20));
    return buf;
}

MemoryPlan plan_memory(const MemoryNeeds& n) {
    if (n.slot_bytes == 0 || n.min_slots < 1) throw std::runtime_error("memory budget: bad slot geometry");
    MemoryPlan p;
    p.fixed_bytes = n.resident + n.kv + n.scratch + n.process + n.requests;
    uint64_t min_cache = uint64_t(n.min_slots) * n.slot_bytes;
    if (p.fixed_bytes + min_cache > n.budget)
        throw BudgetTooSmall("memory budget: needs at least " + mib(p.fixed_bytes + min_cache) +
                                 " (resident weights " + mib(n.resident) + " + KV cache " + mib(n.kv) +
                                 " + scratch " + mib(n.scratch) + " + process " + mib(n.process) +
                                 (n.requests ? " + requests " + mib(n.requests) : "") + " + " +
                                 std::to_string(n.min_slots) +
                                 " expert slots of " + mib(n.slot_bytes) + "), have " + mib(n.budget) +
                                 (n.requests ? " (raise --mem, or lower -c, --request-mem or --grammar-mem)" : " (raise --mem or lower -c)"));
    uint64_t slots = (n.budget - p.fixed_bytes) / n.slot_bytes;
    if (n.max_slots > 0 && slots >= uint64_t(n.max_slots)) {
        slots = uint64_t(std::max(n.max_slots, n.min_slots));
        p.all_experts_fit = true;
    }
    p.slots = int(std::min<uint64_t>(slots, uint64_t(1) << 30));
    p.cache_bytes = uint64_t(p.slots) * n.slot_bytes;
    p.total_bytes = p.fixed_bytes + p.cache_bytes;
    return p;
}

}  // namespace ms
