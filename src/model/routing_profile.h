// A routing profile: how often each (layer, expert) was chosen, kept in a
// file between runs (--routing-profile), so a restart can put the hottest
// experts in the fast tier first instead of starting cold. run and serve
// write it when the model closes; the GPU's VRAM tier reads it at load.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ms {

struct RoutingProfile {
    int n_layer = 0, n_expert = 0;
    uint64_t tokens = 0;          // tokens the counts were taken over
    std::vector<uint64_t> uses;   // [layer * n_expert + expert]

    RoutingProfile() = default;
    RoutingProfile(int layers, int experts)
        : n_layer(layers), n_expert(experts), uses(size_t(layers) * size_t(experts), 0) {}

    uint64_t& at(int layer, int expert) { return uses[size_t(layer) * size_t(n_expert) + size_t(expert)]; }
    uint64_t at(int layer, int expert) const { return uses[size_t(layer) * size_t(n_expert) + size_t(expert)]; }

    // The file's profile, which must be for n_layer x n_expert; an empty
    // profile of that shape where the file does not exist. Throws
    // "<path>: <problem>" for a file that is not a profile or is another
    // model's.
    static RoutingProfile read(const std::string& path, int n_layer, int n_expert);
    // The same over a file's text (`path` names it in errors).
    static RoutingProfile parse(std::string_view text, const std::string& path, int n_layer, int n_expert);

    // Writes the older counts halved plus `now`'s (recent use weighs more),
    // through a temporary file renamed over `path`. Throws "<path>: ...".
    static void merge_into(const std::string& path, const RoutingProfile& now);

    // (layer, expert) pairs with uses, the most used first (ties: lower
    // layer, then lower expert), at most `max`.
    std::vector<std::pair<int, int>> hottest(size_t max) const;
};

}  // namespace ms
