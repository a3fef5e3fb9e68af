// The KV ring of a sequence's sliding-window layers (one window for all of
// them): a layer that only ever looks back `window` positions keeps a ring
// of rows instead of the whole context, and a sequence can be rewound only
// as far as the ring still holds what the next token needs.
#pragma once
#include <algorithm>
#include <cstdint>

#include "ops/attention.h"

namespace ms {

struct WindowRing {
    int64_t window = 0;  // positions a sliding-window layer sees (0: no such layers)
    int64_t rows = 0;    // the ring's rows; 0: no ring (the layers keep every position)
    int64_t top = 0;     // one past the highest position written since position 0

    WindowRing() = default;
    // A ring of kv_ring_rows(window, max_batch) rows, when that and the
    // window's repeated tail are shorter than the context.
    WindowRing(int64_t window_, int max_batch, int64_t n_ctx) : window(window_) {
        const int64_t r = window > 0 ? kv_ring_rows(window, max_batch) : 0;
        rows = r > 0 && r + window - 1 < n_ctx ? r : 0;
    }

    // Rows a layer's cache takes: the ring and its repeated tail for a
    // sliding-window layer, else the whole context, in whole tiles of K
    // (kv_plane_rows).
    int64_t cache_rows(bool sliding, int64_t n_ctx) const {
        return kv_plane_rows(sliding && rows > 0 ? rows + window - 1 : n_ctx);
    }

    // A layer's cache at k / v: cache_rows(sliding, n_ctx) rows in a plane
    // per KV head, K in tiles where the type has them (ops/attention.h).
    KvLayer layer(bool sliding, GgmlType type, int heads, int64_t k_width, int64_t v_width, int64_t n_ctx, uint8_t* k,
                  uint8_t* v) const {
        const bool ring = sliding && rows > 0;
        return KvLayer{type, k_width, v_width, k, v, ring ? rows : 0, ring ? window - 1 : 0, cache_rows(sliding, n_ctx),
                       heads, kv_tiles_k(type) && k != v};
    }

    // A forward pass wrote positions [pos0, pos0 + n).
    void wrote(int64_t pos0, int64_t n) {
        if (pos0 == 0) top = 0;
        top = std::max(top, pos0 + n);
    }

    // ModelState::rewind_limit: the ring has overwritten the positions older
    // than top - rows, and the token after n needs the window - 1 before it.
    int64_t rewind_limit(int64_t n) const {
        if (rows == 0 || n == 0) return n;
        return std::max<int64_t>(0, n - (window - 1)) >= top - rows ? n : 0;
    }
};

}  // namespace ms
