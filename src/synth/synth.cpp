#include "synth/synth.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "gguf/gguf.h"
#include "synth/synth_families.h"
#include "synth/synth_routing.h"
#include "synth/synth_vocab.h"
#include "quant/blocks.h"
#include "quant/dequant.h"
#include "quant/half.h"

namespace ms {

namespace {

// wyrand: a small, fast 64-bit generator (seeds, the random pool, Gaussians).
struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed) {}
    uint64_t next() {
        s += 0xa0761d6478bd642full;
        __uint128_t t = (__uint128_t)s * (s ^ 0xe7037ed1a0b428dbull);
        return uint64_t(t >> 64) ^ uint64_t(t);
    }
    double uniform() { return double(next() >> 11) * 0x1p-53; }  // [0, 1)
    double gaussian() {
        double u1 = uniform(), u2 = uniform();
        return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(6.283185307179586 * u2);
    }
};

uint64_t mix_seed(uint64_t a, uint64_t b) {
    Rng r(a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull));
    r.next();
    return r.next();
}

bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// --- block headers -------------------------------------------------------
// Each quantized block is random bytes except a few scale bytes, the same
// for every block of a tensor, chosen so dequantized values are zero-mean
// with standard deviation ~sigma.

struct BlockHeader {
    size_t offset = 0;  // where in the block the fixed bytes go
    size_t size = 0;
    uint8_t bytes[24] = {};
};

void put_f16(uint8_t* p, float v) {
    uint16_t h = fp32_to_fp16(v);
    memcpy(p, &h, 2);
}

// 6-bit scales and mins of the 8 sub-blocks of Q4_K / Q5_K into 12 bytes
// (the layout quant/blocks.h's k4_scale_min reads).
void pack_k4_scales(const uint8_t sc[8], const uint8_t m[8], uint8_t q[12]) {
    memset(q, 0, 12);
    for (int j = 0; j < 4; ++j) {
        q[j] = sc[j] & 63;
        q[j + 4] = m[j] & 63;
    }
    for (int j = 4; j < 8; ++j) {
        q[j + 4] = uint8_t((sc[j] & 0xf) | ((m[j] & 0xf) << 4));
        q[j - 4] |= uint8_t((sc[j] >> 4) << 6);
        q[j] |= uint8_t((m[j] >> 4) << 6);
    }
}

// Std of a uniform random integer over `levels` consecutive values.
double uniform_std(int levels) { return std::sqrt((double(levels) * levels - 1) / 12.0); }

BlockHeader make_header(GgmlType t, double sigma) {
    BlockHeader h;
    switch (t) {
        case GgmlType::Q8_0:  // x = d * q, q uniform int8
            h.size = 2;
            put_f16(h.bytes, float(sigma / uniform_std(256)));
            break;
        case GgmlType::Q4_K:
        case GgmlType::Q5_K: {
            // x = d*sc*q - dmin*m with q uniform over 16 (32) levels; sc = 16
            // and m = 30 (31) with dmin = 4d (8d) centre q exactly.
            int levels = t == GgmlType::Q4_K ? 16 : 32;
            uint8_t sc[8], m[8];
            std::fill(sc, sc + 8, uint8_t(16));
            std::fill(m, m + 8, uint8_t(t == GgmlType::Q4_K ? 30 : 31));
            float d = float(sigma / (16 * uniform_std(levels)));
            h.size = 16;
            put_f16(h.bytes, d);
            put_f16(h.bytes + 2, d * (t == GgmlType::Q4_K ? 4.0f : 8.0f));
            pack_k4_scales(sc, m, h.bytes + 4);
            break;
        }
        case GgmlType::Q6_K:  // x = d * sc * (q - 32), q uniform over 64 levels
            h.offset = offsetof(BlockQ6_K, scales);
            h.size = 18;
            memset(h.bytes, 16, 16);
            put_f16(h.bytes + 16, float(sigma / (16 * uniform_std(64))));
            break;
        case GgmlType::MXFP4: {  // x = fp4(q) * 2^(e-128); fp4 codes (doubled) have std sqrt(34.25)
            double e = 128 + std::round(std::log2(sigma / std::sqrt(34.25)));
            h.size = 1;
            h.bytes[0] = uint8_t(std::clamp(e, 2.0, 254.0));
            break;
        }
        default:
            break;
    }
    return h;
}

// Sets single elements of a block whose header is fixed (as synth's are):
// per element, the bits that hold its quant and the value each combination
// of them gives, found once by flipping bits and dequantizing, so no block
// layout is spelled out a second time here.
class ElementCodec {
public:
    ElementCodec(GgmlType t, const BlockHeader& h) : type_(t) {
        const TypeTraits& tr = type_traits(t);
        bs_ = int(tr.block_size);
        base_.assign(tr.type_size, 0);
        memcpy(base_.data() + h.offset, h.bytes, h.size);
        std::vector<float> ref(static_cast<size_t>(bs_)), out(static_cast<size_t>(bs_));
        dequantize_row(t, base_.data(), ref.data(), bs_);
        bits_.resize(size_t(bs_));
        std::vector<uint8_t> b;
        for (size_t bit = 0; bit < base_.size() * 8; bit++) {
            if (bit / 8 >= h.offset && bit / 8 < h.offset + h.size) continue;
            b = base_;
            b[bit / 8] ^= uint8_t(1u << (bit % 8));
            dequantize_row(t, b.data(), out.data(), bs_);
            int changed = -1, n = 0;
            for (int i = 0; i < bs_; i++)
                if (out[size_t(i)] != ref[size_t(i)]) changed = i, n++;
            if (n == 1) bits_[size_t(changed)].push_back(int(bit));
        }
        values_.resize(size_t(bs_));
        for (int i = 0; i < bs_; i++) {
            const std::vector<int>& bi = bits_[size_t(i)];
            if (bi.empty() || bi.size() > 8) throw std::runtime_error("synth: cannot design elements of this type");
            for (uint32_t combo = 0; combo < (1u << bi.size()); combo++) {
                b = base_;
                write(b.data(), i, combo);
                dequantize_row(t, b.data(), out.data(), bs_);
                values_[size_t(i)].push_back(out[size_t(i)]);
            }
        }
    }
    GgmlType type() const { return type_; }
    // Element i of the block becomes the representable value nearest target
    // (+infinity: the largest).
    void set(uint8_t* block, int i, float target) const {
        const std::vector<float>& v = values_[size_t(i)];
        uint32_t best = 0;
        for (uint32_t c = 1; c < v.size(); c++)
            if (std::isinf(target) ? v[c] > v[best] : std::fabs(v[c] - target) < std::fabs(v[best] - target)) best = c;
        write(block, i, best);
    }

private:
    void write(uint8_t* block, int i, uint32_t combo) const {
        const std::vector<int>& bi = bits_[size_t(i)];
        for (size_t j = 0; j < bi.size(); j++) {
            const uint8_t m = uint8_t(1u << (bi[j] % 8));
            if (combo >> j & 1) block[bi[j] / 8] |= m;
            else block[bi[j] / 8] &= uint8_t(~m);
        }
    }
    GgmlType type_;
    int bs_ = 0;
    std::vector<uint8_t> base_;
    std::vector<std::vector<int>> bits_;
    std::vector<std::vector<float>> values_;
};

// --- the tensor plan -----------------------------------------------------

// --- realistic routing -----------------------------------------------------
// Random networks collapse: attention that averages over every past position
// drives all tokens' residuals toward one direction, and every router then
// picks the same few experts. The designed elements of synth/synth_routing.h
// (a carrier in the residual, recency-window attention, routers blind to the
// carrier) give routing that follows the token and its recent context.

struct PlannedTensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    SynthFill fill = SynthFill::Random;
    double sigma = 0;
    int layer = -1;
    uint64_t nbytes = 0;
    uint64_t n_blocks = 0;
    BlockHeader header;
    std::vector<uint16_t> f16_table;  // F16 tensors: 4096 Gaussian values to pick from
    SynthDesign design = SynthDesign::None;
    int carrier = 0;                  // designed channels (columns, or rows for RowsZero / RowsClear)
    int head_dim = 0;                 // QkRecency: rows are heads of this size
    std::vector<uint8_t> recency;     // QkRecency: 1 for the dims of a head that carry position
    float value = INFINITY;           // CarrierMax, QkRecency: the designed value (infinity: the largest)
    bool pure = false;                // QkRecency: the rest of the tensor near zero
    int own_rows = 0;                 // rows [carrier, carrier + own_rows) of each matrix exact zeros
    std::vector<float> values;        // SynthFill::Values
};

// Random bytes for quantized blocks come from XOR-ing two windows of a 1 MiB
// random pool at random offsets with a random word, 64 KiB at a time: two
// cached loads and a store per 8 bytes, which the compiler vectorizes, so
// generation costs a fraction of the write(2) it feeds even when other work
// competes for the cores.
constexpr size_t kPoolWords = 128u << 10;

constexpr size_t kPieceWords = 8u << 10;

struct Plan {
    std::vector<uint64_t> pool;  // kPoolWords random words
    std::vector<PlannedTensor> tensors;
    uint64_t total_bytes = 0;
    // Routers: per-rank row scales and, per MoE layer, the rank of each expert.
    std::vector<double> rank_scale;
    std::vector<std::vector<int>> rank_of;  // [layer][expert]
    std::vector<std::unique_ptr<ElementCodec>> codecs;  // per tensor; null where nothing is designed
};

Plan make_plan(const SynthSpec& s, int64_t n_vocab, const RouterCalibration& cal) {
    Plan p;
    auto add = [&](const std::string& name, std::vector<int64_t> ne, SynthFill fill, double sigma, int layer) {
        PlannedTensor t;
        t.name = name;
        t.ne = std::move(ne);
        t.fill = fill;
        t.sigma = sigma;
        t.layer = layer;
        t.type = fill == SynthFill::Random         ? synth_tensor_type(s.recipe, name, layer, s.n_layer, s.n_expert, t.ne[0])
                 : fill == SynthFill::TokenExperts ? GgmlType::I32
                                                   : GgmlType::F32;
        uint64_t rows = 1;
        for (size_t d = 1; d < t.ne.size(); ++d) rows *= uint64_t(t.ne[d]);
        t.nbytes = row_bytes(t.type, t.ne[0]) * rows;
        t.n_blocks = uint64_t(t.ne[0]) / type_traits(t.type).block_size * rows;
        t.header = make_header(t.type, sigma);
        if (t.type == GgmlType::F16) {
            Rng r(mix_seed(s.seed, p.tensors.size()));
            for (int i = 0; i < 4096; ++i) t.f16_table.push_back(fp32_to_fp16(float(sigma * r.gaussian())));
        }
        p.total_bytes += t.nbytes;
        p.tensors.push_back(std::move(t));
    };
    if (s.arch != "qwen3moe") {
        std::vector<SynthTensor> family = family_tensors(s, n_vocab);
        design_family_routing(s, family);
        for (const SynthTensor& t : family) {
            add(t.name, t.ne, t.fill, t.sigma, t.layer);
            PlannedTensor& pt = p.tensors.back();
            pt.values = t.values;
            pt.design = t.design;
            pt.carrier = carrier_channels(s.n_embd);
            pt.head_dim = t.head_dim;
            pt.recency = t.recency;
            pt.value = t.value;
            pt.pure = t.pure;
            pt.own_rows = t.own_rows;
        }
    } else {
        const int64_t E = s.n_embd, F = s.expert_ffn, Q = int64_t(s.n_head) * s.head_dim,
                      KV = int64_t(s.n_head_kv) * s.head_dim;
        // Embedding rows go straight into the residual stream (unit scale); every
        // other matrix has std 1/sqrt(fan_in) so activations keep their size
        // through the layers. The head is 2x that, for peaked but not one-hot logits.
        // Realistic routing (synth/synth_routing.h): carrier channels and recency dims.
        const int J = carrier_channels(E);
        const bool real = s.router_locality > 0;
        const std::vector<uint8_t> recency = recency_dims(s.head_dim, s.head_dim, s.rope_base);
        auto design = [&](SynthDesign d) {
            if (!real) return;
            PlannedTensor& t = p.tensors.back();
            t.design = d;
            t.carrier = J;
            t.head_dim = s.head_dim;
            t.recency = recency;
        };
        auto values = [&](std::vector<float> v) {
            if (!real) return;
            PlannedTensor& t = p.tensors.back();
            t.fill = SynthFill::Values;
            t.values = std::move(v);
        };
        std::vector<float> attn_norm(static_cast<size_t>(E)), ffn_norm(static_cast<size_t>(E), 1.0f),
            qk_norm(static_cast<size_t>(s.head_dim));
        const float gain = carrier_gain(E);
        for (int j = 0; j < J; j++) attn_norm[size_t(j)] = gain, ffn_norm[size_t(j)] = 0;
        for (int i = 0; i < s.head_dim; i++) qk_norm[size_t(i)] = recency[size_t(i)] ? float(kRecencySharpness) : 0.0f;

        add("token_embd.weight", {E, n_vocab}, SynthFill::Random, 1.0, -1);
        design(SynthDesign::CarrierMax);
        for (int l = 0; l < s.n_layer; ++l) {
            std::string b = "blk." + std::to_string(l) + ".";
            add(b + "attn_norm.weight", {E}, SynthFill::Ones, 0, l);
            for (int64_t i = J; i < E; i++)
                attn_norm[size_t(i)] = float(layer_locality(s, l));
            values(attn_norm);
            add(b + "attn_q.weight", {E, Q}, SynthFill::Random, 1 / std::sqrt(double(E)), l);
            design(SynthDesign::QkRecency);
            add(b + "attn_k.weight", {E, KV}, SynthFill::Random, 1 / std::sqrt(double(E)), l);
            design(SynthDesign::QkRecency);
            add(b + "attn_v.weight", {E, KV}, SynthFill::Random, 1 / std::sqrt(double(E)), l);
            design(SynthDesign::CarrierZero);
            add(b + "attn_output.weight", {Q, E}, SynthFill::Random, 1 / std::sqrt(double(Q)), l);
            design(SynthDesign::RowsZero);
            add(b + "attn_q_norm.weight", {s.head_dim}, SynthFill::Ones, 0, l);
            values(qk_norm);
            add(b + "attn_k_norm.weight", {s.head_dim}, SynthFill::Ones, 0, l);
            values(qk_norm);
            add(b + "ffn_norm.weight", {E}, SynthFill::Ones, 0, l);
            values(ffn_norm);
            add(b + "ffn_gate_inp.weight", {E, s.n_expert}, SynthFill::Router, 0, l);
            add(b + "ffn_gate_exps.weight", {E, F, s.n_expert}, SynthFill::Random, 1 / std::sqrt(double(E)), l);
            add(b + "ffn_up_exps.weight", {E, F, s.n_expert}, SynthFill::Random, 1 / std::sqrt(double(E)), l);
            add(b + "ffn_down_exps.weight", {F, E, s.n_expert}, SynthFill::Random, 1 / std::sqrt(double(F)), l);
        }
        add("output_norm.weight", {E}, SynthFill::Ones, 0, -1);
        add("output.weight", {E, n_vocab}, SynthFill::Random, 2 / std::sqrt(double(E)), -1);
    }

    for (const PlannedTensor& t : p.tensors)
        p.codecs.push_back(t.design != SynthDesign::None && t.design != SynthDesign::RowsClear &&
                                   t.type != GgmlType::F16 && t.type != GgmlType::F32
                               ? std::make_unique<ElementCodec>(t.type, t.header)
                               : nullptr);

    Rng pool_rng(mix_seed(s.seed, 0x706f6f6cull));
    p.pool.resize(std::min<uint64_t>(kPoolWords, p.total_bytes / 8 + 1024));  // small models, small pool
    for (uint64_t& w : p.pool) w = pool_rng.next();

    p.rank_scale = cal.scale;
    Rng rng(mix_seed(s.seed, 0x726f75746572ull));
    for (int l = 0; l < s.n_layer; ++l) {
        std::vector<int> rank(size_t(s.n_expert));
        for (int e = 0; e < s.n_expert; ++e) rank[size_t(e)] = e;
        for (int e = s.n_expert - 1; e > 0; --e) std::swap(rank[size_t(e)], rank[rng.next() % uint64_t(e + 1)]);
        p.rank_of.push_back(rank);
    }
    return p;
}

// --- chunked generation ----------------------------------------------------

constexpr size_t kChunkBytes = 16u << 20;  // the writer sends chunks this big straight to write(2)
constexpr int kRing = 4;

struct Chunk {
    size_t tensor;
    uint64_t first_block, n_blocks, bytes;
};

std::vector<Chunk> make_chunks(const Plan& p) {
    std::vector<Chunk> out;
    for (size_t i = 0; i < p.tensors.size(); ++i) {
        const PlannedTensor& t = p.tensors[i];
        uint64_t block_bytes = type_traits(t.type).type_size;
        uint64_t per_chunk = t.fill == SynthFill::Random ? (kChunkBytes + block_bytes - 1) / block_bytes : t.n_blocks;
        for (uint64_t b = 0; b < t.n_blocks; b += per_chunk) {
            uint64_t n = std::min(per_chunk, t.n_blocks - b);
            out.push_back({i, b, n, n * block_bytes});
        }
    }
    return out;
}

void fill_from_pool(const std::vector<uint64_t>& pool, Rng& rng, uint8_t* out, size_t n) {
    const size_t words = n / 8, piece = std::min(kPieceWords, pool.size() / 2);
    for (size_t at = 0; at < words; at += piece) {
        size_t len = std::min(piece, words - at);
        const uint64_t* a = pool.data() + rng.next() % (pool.size() - len);
        const uint64_t* b = pool.data() + rng.next() % (pool.size() - len);
        uint64_t key = rng.next();
        for (size_t i = 0; i < len; ++i) {
            uint64_t v = a[i] ^ b[i] ^ key;
            memcpy(out + 8 * (at + i), &v, 8);
        }
    }
    if (n % 8) {
        uint64_t v = rng.next();
        memcpy(out + 8 * words, &v, n % 8);
    }
}

// The designed elements of a chunk of blocks (see Design). F16 tensors
// (codec null) take the values directly: 2.5 sigma for the largest.
void apply_design(const PlannedTensor& t, const ElementCodec* codec, const Chunk& c, uint8_t* out) {
    const int bs = int(type_traits(t.type).block_size);
    const uint64_t per_row = uint64_t(t.ne[0]) / uint64_t(bs);
    const size_t block_bytes = type_traits(t.type).type_size;
    auto set = [&](uint8_t* block, int i, float target) {
        if (codec) return codec->set(block, i, target);
        put_f16(block + 2 * i, std::isinf(target) ? float(2.5 * t.sigma) : std::fabs(target) < 1e-6f ? 0.0f : target);
    };
    for (uint64_t b = 0; b < c.n_blocks; ++b) {
        const uint64_t g = c.first_block + b, row = g / per_row;
        const int64_t col0 = int64_t(g % per_row) * bs;
        uint8_t* block = out + b * block_bytes;
        // Near-zero targets alternate in sign so what is left of them cancels.
        auto tiny = [&](int64_t col) { return (int64_t(row) + col) % 2 ? 1e-9f : -1e-9f; };
        if (t.own_rows > 0) {
            const int64_t r = int64_t(row % uint64_t(t.ne[1]));
            if (r >= t.carrier && r < t.carrier + t.own_rows) {
                memset(block, 0, block_bytes);
                continue;
            }
        }
        if (t.design == SynthDesign::None) continue;
        if (t.design == SynthDesign::RowsClear) {
            // A quantized zero is not exact (Q4_K's nearest are half a step
            // off), and what is left, times the token's own values, would
            // write each token's noise into the carrier; zero bytes are.
            if (int64_t(row % uint64_t(t.ne[1])) < t.carrier) memset(block, 0, block_bytes);
            continue;
        }
        if (t.design == SynthDesign::RowsZero) {
            if (row < uint64_t(t.carrier))
                for (int i = 0; i < bs; i++) set(block, i, tiny(col0 + i));
            continue;
        }
        const uint8_t kind = t.design == SynthDesign::QkRecency ? t.recency[size_t(row % uint64_t(t.head_dim))] : 1;
        if (kind == kRowCarrierZero) {  // a row of the token's own content: random, blind to the carrier
            for (int i = 0; i < bs && col0 + i < t.carrier; i++) set(block, i, tiny(col0 + i));
            continue;
        }
        const bool designed_row = kind == kRowRecency;
        if (t.pure && (!designed_row || col0 >= t.carrier)) {
            memset(block, 0, block_bytes);  // every block type here dequantizes all-zero bytes to zeros
            continue;
        }
        if (col0 >= t.carrier || !designed_row) continue;
        for (int i = 0; i < bs; i++) {
            if (col0 + i < t.carrier) set(block, i, t.design == SynthDesign::CarrierZero ? tiny(col0 + i) : t.value);
            else if (t.pure) set(block, i, tiny(col0 + i));
        }
    }
}

void generate_chunk(const SynthSpec& s, const Plan& p, const Chunk& c, size_t chunk_index, uint8_t* out) {
    const PlannedTensor& t = p.tensors[c.tensor];
    Rng rng(mix_seed(s.seed, (uint64_t(c.tensor) << 32) ^ chunk_index));
    if (t.fill == SynthFill::Ones) {
        for (uint64_t i = 0; i < c.n_blocks; ++i) {
            float one = 1.0f;
            memcpy(out + 4 * i, &one, 4);
        }
        return;
    }
    if (t.fill == SynthFill::Values) {
        memcpy(out, t.values.data() + c.first_block, c.n_blocks * 4);
        return;
    }
    if (t.fill == SynthFill::Zeros) {
        memset(out, 0, c.n_blocks * 4);
        return;
    }
    if (t.fill == SynthFill::RandomF32) {
        for (uint64_t i = 0; i < c.n_blocks; ++i) {
            float v = float(t.sigma * rng.gaussian());
            memcpy(out + 4 * i, &v, 4);
        }
        return;
    }
    if (t.fill == SynthFill::TokenExperts) {
        // Row v: ne[0] distinct experts of n_expert for token v, drawn from
        // the token id alone, as a hash router's table is.
        const int64_t k = t.ne[0];
        std::vector<int32_t> row(static_cast<size_t>(k));
        for (int64_t v = 0; v < t.ne[1]; ++v) {
            Rng r(mix_seed(s.seed, (uint64_t(t.layer) << 40) ^ uint64_t(v)));
            for (int64_t i = 0; i < k; ++i) {
                int32_t e = 0;
                do {
                    e = int32_t(r.next() % uint64_t(s.n_expert));
                } while (std::find(row.begin(), row.begin() + i, e) != row.begin() + i);
                row[size_t(i)] = e;
            }
            memcpy(out + 4 * v * k, row.data(), size_t(k) * 4);
        }
        return;
    }
    if (t.fill == SynthFill::Router) {
        // Row e: rank scale of expert e times a random unit-variance direction
        // normalized by sqrt(n_embd), so logits against a unit-RMS input have
        // std = the scale.
        const std::vector<int>& rank = p.rank_of[size_t(t.layer)];
        int64_t n = t.ne[0];
        for (int64_t e = 0; e < t.ne[1]; ++e) {
            double scale = p.rank_scale[size_t(rank[size_t(e)])] / std::sqrt(double(n));
            for (int64_t i = 0; i < n; ++i) {
                float v = float(scale * rng.gaussian());
                memcpy(out + 4 * (e * n + i), &v, 4);
            }
        }
        return;
    }
    if (t.type == GgmlType::F16) {
        // 4 weights per random word, each one of the tensor's 4096 Gaussian values.
        for (uint64_t i = 0; i < c.n_blocks; i += 4) {
            uint64_t r = rng.next();
            for (uint64_t k = 0; k < 4 && i + k < c.n_blocks; ++k)
                memcpy(out + 2 * (i + k), &t.f16_table[(r >> (16 * k)) & 4095], 2);
        }
        if (t.design != SynthDesign::None || t.own_rows > 0) apply_design(t, nullptr, c, out);
        return;
    }
    fill_from_pool(p.pool, rng, out, c.bytes);
    const size_t bs = type_traits(t.type).type_size;
    const BlockHeader& h = t.header;
    for (uint64_t b = 0; b < c.n_blocks; ++b) memcpy(out + b * bs + h.offset, h.bytes, h.size);
    if (t.design != SynthDesign::None || t.own_rows > 0) apply_design(t, p.codecs[c.tensor].get(), c, out);
}

// Bounded hand-off of generated chunks from the generator thread to the
// writer (the calling thread), in order.
struct ChunkRing {
    std::vector<std::vector<uint8_t>> bufs;
    std::mutex mu;
    std::condition_variable cv;
    size_t produced = 0, consumed = 0;
    bool abort = false;
    explicit ChunkRing(size_t bytes) : bufs(kRing) {
        for (auto& b : bufs) b.resize(bytes);
    }
};

// Streams a big file through the page cache without letting dirty pages
// pile up: buffered writes of many GB otherwise stall in writeback throttling
// (here 126 MB/s sustained against 1.1 GB/s for this pattern or O_DIRECT).
// Each new range is handed to writeback at once; ranges well behind the write
// position are waited for and dropped from the cache. Works on its own
// descriptor of the file, since the page cache belongs to the file.
class WriteBehind {
public:
    explicit WriteBehind(const std::string& path) : fd_(::open(path.c_str(), O_WRONLY | O_CLOEXEC)) {}
    ~WriteBehind() {
        if (fd_ >= 0) ::close(fd_);
    }
    // The file's logical size is now `end` (some of it may still sit in the
    // writer's own buffer: harmless, sync_file_range skips absent pages).
    void advance(uint64_t end) {
        if (fd_ < 0) return;  // advisory only
        if (end > kicked_) {
            sync_file_range(fd_, off_t(kicked_), off_t(end - kicked_), SYNC_FILE_RANGE_WRITE);
            kicked_ = end;
        }
        constexpr uint64_t kLag = 64u << 20;
        if (end > dropped_ + 2 * kLag) {
            uint64_t upto = end - kLag;
            sync_file_range(fd_, off_t(dropped_), off_t(upto - dropped_),
                            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
            posix_fadvise(fd_, off_t(dropped_), off_t(upto - dropped_), POSIX_FADV_DONTNEED);
            dropped_ = upto;
        }
    }

private:
    int fd_;
    uint64_t kicked_ = 0, dropped_ = 0;
};

void check_free_space(const std::string& path, uint64_t need) {
    std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/') + 1);
    struct statvfs st;
    if (statvfs(dir.c_str(), &st) != 0) return;  // cannot tell: let the writes report it
    uint64_t free_bytes = uint64_t(st.f_bavail) * st.f_frsize;
    if (free_bytes < need + (64u << 20))
        throw std::runtime_error(path + ": needs " + std::to_string(need >> 20) + " MiB but only " +
                                 std::to_string(free_bytes >> 20) + " MiB are free there");
}

uint32_t file_type_of(const std::string& recipe) {
    if (recipe == "Q4_K_M") return 15;
    if (recipe == "Q8_0") return 7;
    if (recipe == "MXFP4") return 38;  // MXFP4_MOE
    return 1;                          // F16
}

}  // namespace

namespace {

// tiny: small enough to make in a blink, still MoE with 16 experts per layer
// so that a few MB of budget forces expert reads; its ~500-token vocabulary
// (byte-level BPE with a ChatML template, from a golden model) keeps the head
// tiny. The qwen3 presets are Qwen3 MoE checkpoints' real dimensions and
// vocabulary. The other families' presets take their dimensions from the
// published configs; where we hold no copy of the real vocabulary (gpt-oss's
// o200k, DeepSeek's 129k, GLM's 151k) the Qwen3 one stands in: the
// embedding and head are then sized by its rows, not the real ones.
// vocab_path is relative to the golden data folder here.
const std::vector<SynthSpec>& presets() {
    static const std::vector<SynthSpec> all = {
        {.preset = "tiny", .n_layer = 6, .n_expert = 16, .n_expert_used = 4, .n_embd = 256, .expert_ffn = 256,
         .n_head = 4, .n_head_kv = 2, .head_dim = 64, .context = 512, .n_vocab = 499},
        {.preset = "qwen3-30b-a3b", .n_layer = 48, .n_expert = 128, .n_expert_used = 8, .n_embd = 2048,
         .expert_ffn = 768, .n_head = 32, .n_head_kv = 4, .head_dim = 128, .context = 40960,
         .router_skew = 0.5, .router_locality = 4.0},
        {.preset = "qwen3-235b-a22b", .n_layer = 94, .n_expert = 128, .n_expert_used = 8, .n_embd = 4096,
         .expert_ffn = 1536, .n_head = 64, .n_head_kv = 4, .head_dim = 128, .context = 40960,
         .router_skew = 0.5, .router_locality = 4.0},
        // Mixtral 8x7B: Llama 2's 32k SentencePiece vocabulary is the golden one.
        {.preset = "mixtral-8x7b", .arch = "llama", .n_layer = 32, .n_expert = 8, .n_expert_used = 2,
         .n_embd = 4096, .expert_ffn = 14336, .n_head = 32, .n_head_kv = 8, .head_dim = 128, .context = 32768,
         .tokenizer = "llama", .n_vocab = 32000,
         // Fitted to the Mixtral paper's repetition of consecutive tokens'
         // experts at layers 0, 15 and 31 (docs/routing.md): flat popularity
         // (its near-uniform loads), little locality, fading slowly, a sharp
         // window (more reuse for the same loads); most of it written in the
         // middle third, whose context the last third's routers see through
         // the token's own channels, weighed 13.
         .router_skew = 0, .router_locality = 1.0, .router_sharpness = 2.0, .router_fade = 0.12,
         .router_bands = {0.25, 3.0, 0.1}, .router_own = {1.0, 1.0, 13.0}},
        // gpt-oss-120b ships its experts in MXFP4, the rest in 8 bits.
        {.preset = "gpt-oss-120b", .arch = "gpt-oss", .n_layer = 36, .n_expert = 128, .n_expert_used = 4,
         .n_embd = 2880, .expert_ffn = 2880, .n_head = 64, .n_head_kv = 8, .head_dim = 64, .context = 131072,
         .rope_base = 150000, .sliding_window = 128,
         .recipe = "MXFP4", .router_skew = 0.5, .router_locality = 6.0},
        // DeepSeek V3 (671B): MLA (q rank 1536, KV rank 512, 128 + 64 rope
        // dims per head for q/k, 128 for v), 3 dense layers, 256 experts top-8
        // plus one shared.
        {.preset = "deepseek-v3", .arch = "deepseek2", .n_layer = 61, .n_expert = 256, .n_expert_used = 8,
         .n_embd = 7168, .expert_ffn = 2048, .n_head = 128, .n_head_kv = 1, .head_dim = 128, .context = 163840,
         .rope_base = 10000, .rope_dim = 64, .n_dense_lead = 3, .dense_ffn = 18432, .n_shared = 1,
         .q_lora = 1536, .kv_lora = 512, .v_head_dim = 128,
         // Fitted to GLM-5.x's previous-token reuse (nothing is published for
         // V3; docs/routing.md): flat popularity (the aux-loss-free balance),
         // the most locality the knob allows, kept at every depth (the
         // carrier gain follows the residual, so no layer collapses).
         .router_skew = 0, .router_locality = 8.0, .router_fade = 0},
        // GLM-4.5-Air (106B-A12B): 46 layers (its NextN block is left out),
        // the first dense, 128 experts top-8 plus one shared, half-rotary heads,
        // no q/k norm.
        {.preset = "glm-4.5-air", .arch = "glm4moe", .n_layer = 46, .n_expert = 128, .n_expert_used = 8,
         .n_embd = 4096, .expert_ffn = 1408, .n_head = 96, .n_head_kv = 8, .head_dim = 128, .context = 131072,
         .rope_dim = 64, .n_dense_lead = 1, .dense_ffn = 10944, .n_shared = 1,
         // Nothing is published for it: fitted to borrowed figures, 90 %
         // coverage of Qwen3-30B-A3B (128 experts top-8) and GLM-5.x's reuse
         // (docs/routing.md). High locality, fading slowly, keeps the deep
         // layers' reuse level.
         .router_skew = 1.0, .router_locality = 8.0, .router_fade = 0.05},
        // Qwen3.5-397B-A17B (Flash-MoE's model): 15 x (3 Gated DeltaNet + 1
        // gated full attention), 512 experts top-10 plus one shared, attention
        // 32/2 heads x 256 rotating a quarter of each head, DeltaNet 16 q/k and
        // 64 v heads x 128.
        {.preset = "qwen3.5-397b-a17b", .arch = "qwen35moe", .n_layer = 60, .n_expert = 512, .n_expert_used = 10,
         .n_embd = 4096, .expert_ffn = 1024, .n_head = 32, .n_head_kv = 2, .head_dim = 256, .context = 262144,
         .rope_base = 1e7, .rope_dim = 64, .n_shared = 1, .full_attention_interval = 4, .ssm_k_heads = 16,
         .ssm_v_heads = 64, .ssm_head_dim = 128,
         // Checked against a 512-expert Qwen-Next model's LRU rates (nothing
         // is published for this one; docs/routing.md).
         .router_skew = 0.3, .router_locality = 4.0, .router_sharpness = 0.5},
        // The 35B-A3B class (Qwen3.5-35B-A3B / Qwen3-Next widths): 40 layers,
        // 256 experts top-8 plus one shared of 512, n_embd 2048.
        {.preset = "qwen3.5-35b-a3b", .arch = "qwen35moe", .n_layer = 40, .n_expert = 256, .n_expert_used = 8,
         .n_embd = 2048, .expert_ffn = 512, .n_head = 16, .n_head_kv = 2, .head_dim = 256, .context = 262144,
         .rope_base = 1e7, .rope_dim = 64, .n_shared = 1, .full_attention_interval = 4, .ssm_k_heads = 16,
         .ssm_v_heads = 32, .ssm_head_dim = 128,
         // Fitted to the 90 % coverage and LRU rate of a model of this shape
         // (Ornith-1.5-35B-A3B) and GLM-5.x's reuse (docs/routing.md): the
         // DeltaNet layers' output gate the same for every token, so their
         // context reaches the routers; flat popularity.
         .router_skew = 0, .router_locality = 2.0, .router_sharpness = 0.5, .router_steady_gate = true},
        // GLM-5 (744B-A40B, colibri's target): DeepSeek V3's MLA (q rank 2048,
        // KV rank 512, 128 + 64 rope dims for q/k, 256 for v, 64 heads) with a
        // lightning indexer in every layer (32 heads x 128, top 2048), 3 dense
        // layers then 75 of 256 experts top-8 plus one shared.
        {.preset = "glm-5", .arch = "glm-dsa", .n_layer = 78, .n_expert = 256, .n_expert_used = 8,
         .n_embd = 6144, .expert_ffn = 2048, .n_head = 64, .n_head_kv = 1, .head_dim = 128, .context = 202752,
         .rope_dim = 64, .n_dense_lead = 3, .dense_ffn = 12288, .n_shared = 1, .q_lora = 2048, .kv_lora = 512,
         .v_head_dim = 256, .indexer_heads = 32, .indexer_dim = 128, .indexer_top_k = 2048,
         // Fitted to GLM-5.2's published reuse (docs/routing.md) on DeepSeek
         // V3's MLA design: its 64 heads without YaRN reuse less at the same
         // window, so the window is broader (sharpness in the carrier gain).
         .router_skew = 0, .router_locality = 8.0, .router_sharpness = 0.55, .router_fade = 0},
        // Llama 4 Scout (109B) and Maverick (400B): 48 layers, n_embd 5120,
        // 40/8 heads x 128; every layer routes in Scout (16 experts), every
        // other one in Maverick (128), top-1 by sigmoid plus a shared expert,
        // dense layers 16384 wide; Llama 4's 202k vocabulary is not here.
        {.preset = "llama4-scout", .arch = "llama4", .n_layer = 48, .n_expert = 16, .n_expert_used = 1,
         .n_embd = 5120, .expert_ffn = 8192, .n_head = 40, .n_head_kv = 8, .head_dim = 128, .context = 262144,
         .rope_base = 500000, .moe_step = 1, .dense_ffn = 16384, .n_shared = 1,
         // Nothing is published for it: fitted to Mixtral's repetition of
         // consecutive tokens' experts relative to chance, borrowed
         // (docs/routing.md); Mixtral's light locality, kept at every depth,
         // scaled by thirds: little in the first (its own popularity already
         // repeats at the target), most in the middle, and next to none in
         // the last, which inherits the middle's context.
         .router_skew = 0, .router_locality = 1.0, .router_fade = 0, .router_bands = {0.4, 1.6, 0.1}},
        {.preset = "llama4-maverick", .arch = "llama4", .n_layer = 48, .n_expert = 128, .n_expert_used = 1,
         .n_embd = 5120, .expert_ffn = 8192, .n_head = 40, .n_head_kv = 8, .head_dim = 128, .context = 262144,
         .rope_base = 500000, .moe_step = 2, .dense_ffn = 16384, .n_shared = 1,
         // Nothing is published for it: fitted to borrowed figures, GLM-5.x's
         // flat popularity and its reuse of ~11x chance, here 11 / 128
         // (docs/routing.md). Light locality fading with depth; a sharp
         // window, since top-1 routing repeats an expert whenever the
         // context it sees repeats.
         .router_skew = 0, .router_locality = 2.0, .router_sharpness = 1.8, .router_fade = 0.15},
        // DeepSeek V4 Flash (284B-A13B): 43 layers, all MoE, 256 experts top-6
        // plus one shared, the first 3 hash-routed; 64 heads x 512 sharing one
        // key/value vector, 64 rope dims, q rank 1024, output in 8 groups of
        // rank 1024; window 128, then ratio-4 (indexer: 64 heads x 128, top
        // 512) and ratio-128 compressed layers alternate; four residual
        // streams. Its experts ship in FP4, the rest in FP8: MXFP4 / Q8_0
        // here. Its 129k vocabulary is not here (Qwen3's 152k stands in).
        {.preset = "deepseek-v4-flash", .arch = "deepseek4", .n_layer = 43, .n_expert = 256, .n_expert_used = 6,
         .n_embd = 4096, .expert_ffn = 2048, .n_head = 64, .n_head_kv = 1, .head_dim = 512, .context = 1048576,
         .rope_base = 10000, .rope_dim = 64, .n_shared = 1, .q_lora = 1024, .sliding_window = 128,
         .indexer_heads = 64, .indexer_dim = 128, .indexer_top_k = 512, .hash_layers = 3, .out_groups = 8,
         .out_lora = 1024, .recipe = "MXFP4",
         // Fitted to borrowed figures (nothing is published on its scored
         // layers' coverage or reuse): the 90 % coverage of a 256-expert
         // Qwen3.5 shape and GLM-5.x's reuse of ~11x chance, here 6 x 11 /
         // 256 (docs/routing.md). The hash-routed layers follow the token
         // ids whatever the design.
         .router_skew = 0.6, .router_locality = 3.0, .router_fade = 0.3},
        // MiniMax-M2 (230B-A10B): 62 layers, n_embd 3072, 48/8 heads x 128
        // rotating 64 dims, q/k normed whole, 256 experts of 1536 top-8.
        {.preset = "minimax-m2", .arch = "minimax-m2", .n_layer = 62, .n_expert = 256, .n_expert_used = 8,
         .n_embd = 3072, .expert_ffn = 1536, .n_head = 48, .n_head_kv = 8, .head_dim = 128, .context = 196608,
         .rope_base = 5e6, .rope_dim = 64,
         // Nothing is published for it: fitted to borrowed figures, 90 %
         // coverage of a 256-expert top-8 Qwen3.5 shape and GLM-5.x's reuse
         // (docs/routing.md). Its 62 layers collapse from about the tenth
         // unless the locality stays up at every depth (no fade), so the
         // window is sharper to keep reuse down.
         .router_skew = 1.2, .router_locality = 8.0, .router_sharpness = 1.3, .router_fade = 0},
        // Gemma 4 26B-A4B (TurboFieldfare's model): 30 layers, n_embd 2816, 25
        // sliding-window layers (window 1024, 16 heads x 256, 8 KV heads, rope
        // 1e4) and every 6th full (heads x 512, 2 KV heads, V = K, rope 1e6
        // on a quarter of the dims); a GELU MLP of 2112 beside 128 experts of
        // 704, top-8. Gemma's 262k vocabulary is not here: Qwen3's stands in.
        {.preset = "gemma4-26b-a4b", .arch = "gemma4", .n_layer = 30, .n_expert = 128, .n_expert_used = 8,
         .n_embd = 2816, .expert_ffn = 704, .n_head = 16, .n_head_kv = 8, .head_dim = 256, .context = 262144,
         .dense_ffn = 2112, .sliding_window = 1024, .full_attention_interval = 6, .head_dim_full = 512,
         .n_head_kv_full = 2, .rope_base_swa = 10000, .v_from_k = true,
         .router_skew = 1.0, .router_locality = 2.0, .router_sharpness = 0.49},
        // Gemma 4 E4B: dense, 42 layers, n_embd 2560, 8 heads (2 KV heads of
        // 256 in sliding-window layers, window 512; 2 of 512 in every 6th),
        // MLP 10240, per-layer embeddings of 256, the last 18 layers reading
        // earlier layers' KV caches; full layers have their own attn_v. No
        // experts: its per-layer embedding rows are what streams.
        {.preset = "gemma4-e4b", .arch = "gemma4", .n_layer = 42, .n_expert = 1, .n_expert_used = 1,
         .n_embd = 2560, .expert_ffn = 32, .n_head = 8, .n_head_kv = 2, .head_dim = 256, .context = 131072,
         .dense_ffn = 10240, .sliding_window = 512, .full_attention_interval = 6, .head_dim_full = 512,
         .n_head_kv_full = 2, .rope_base_swa = 10000, .per_layer_embd = 256, .shared_kv_layers = 18,
         .routed = false, .router_locality = 0},
    };
    return all;
}

}  // namespace

const std::vector<std::string>& synth_preset_names() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> v;
        for (const SynthSpec& p : presets()) v.push_back(p.preset);
        return v;
    }();
    return names;
}

SynthSpec synth_preset(const std::string& name) {
    for (const SynthSpec& p : presets())
        if (name == p.preset) return p;
    std::string known;
    for (const std::string& n : synth_preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw std::runtime_error("unknown preset '" + name + "' (known: " + known + ")");
}

void validate_spec(const SynthSpec& s) {
    auto need = [](bool ok, const std::string& what) {
        if (!ok) throw std::runtime_error(what);
    };
    need(s.recipe == "Q4_K_M" || s.recipe == "Q8_0" || s.recipe == "MXFP4" || s.recipe == "F16",
         "unknown --type '" + s.recipe + "' (use Q4_K_M, Q8_0, MXFP4 or F16)");
    need(s.n_layer >= 1 && s.n_layer <= 1000, "--layers must be 1..1000");
    need(s.n_expert >= 1 && s.n_expert <= 1024, "--experts must be 1..1024");
    need(s.n_expert_used >= 1 && s.n_expert_used <= s.n_expert, "--experts-used must be 1..experts");
    need(s.n_embd >= 32 && s.n_embd % 32 == 0 && s.n_embd <= 65536, "--n-embd must be a multiple of 32, 32..65536");
    need(s.expert_ffn >= 32 && s.expert_ffn % 32 == 0 && s.expert_ffn <= 65536,
         "--ffn must be a multiple of 32, 32..65536");
    need(s.n_head >= 1 && s.n_head_kv >= 1 && s.n_head % s.n_head_kv == 0,
         "--heads must be a positive multiple of --kv-heads");
    need(s.head_dim >= 2 && s.head_dim % 2 == 0 && int64_t(s.head_dim) * s.n_head % 32 == 0 &&
             int64_t(s.head_dim) * s.n_head <= 65536,
         "--head-dim must be even, with heads x head-dim a multiple of 32");
    need(s.context >= 1, "--context must be positive");
    need(std::isfinite(s.router_skew) && s.router_skew >= 0 && s.router_skew <= 8, "--router-skew must be 0..8");
    need(!s.vocab_path.empty() || s.tokenizer == "gpt2" || s.tokenizer == "llama",
         "unknown vocabulary tokenizer '" + s.tokenizer + "' (use gpt2 or llama)");
    need(!s.vocab_path.empty() || (s.n_vocab >= 512 && s.n_vocab <= (1 << 20)) ||
             (s.tokenizer == "gpt2" && s.n_vocab >= 265 && s.n_vocab <= (1 << 20)),
         "the generated vocabulary's size must be 265..2^20 tokens (512.. for llama)");
    need(std::isfinite(s.router_sharpness) && s.router_sharpness >= 0.05 && s.router_sharpness <= 8,
         "--router-sharpness must be 0.05..8");
    need(std::isfinite(s.router_locality) && s.router_locality >= 0 && s.router_locality <= 8,
         "--router-locality must be 0..8");
    need(std::isfinite(s.router_fade) && s.router_fade >= 0 && s.router_fade <= 64, "--router-fade must be 0..64");
    for (double b : s.router_bands)
        need(std::isfinite(b) && b >= 0 && b <= 8, "--router-bands must be three scales of 0..8");
    for (double w : s.router_own)
        need(std::isfinite(w) && w >= 0 && w <= 64, "--router-own must be three weights of 0..64");
    need(s.router_own == std::array<double, 3>{0, 0, 0} || s.arch == "gpt-oss" || s.arch == "llama" ||
             s.arch == "glm4moe" || s.arch == "llama4" || s.arch == "minimax-m2",
         "--router-own is for the families with position-only attention (gpt-oss, mixtral, glm-4.5-air, llama4, "
         "minimax-m2)");
    need(!s.router_steady_gate || s.arch == "qwen35moe", "--router-gate is for the qwen3.5 presets");
    if (s.arch != "qwen3moe") validate_family(s);
}

GgmlType synth_tensor_type(const std::string& recipe, const std::string& tensor, int layer, int n_layer,
                           int n_expert, int64_t row_len) {
    auto has = [&](const char* s) { return tensor.find(s) != std::string::npos; };
    GgmlType t = GgmlType::F16;
    if (recipe == "Q8_0") {
        t = GgmlType::Q8_0;
    } else if (recipe == "MXFP4") {
        t = has("_exps.") ? GgmlType::MXFP4 : GgmlType::Q8_0;
    } else if (recipe == "Q4_K_M") {
        t = GgmlType::Q4_K;
        if (tensor == "output.weight") t = GgmlType::Q6_K;
        else if (has("attn_v.") && n_expert == 8) t = GgmlType::Q8_0;
        else if (has("attn_v.") && use_more_bits(layer, n_layer)) t = GgmlType::Q6_K;
        else if (has("attn_k.") && n_expert == 8) t = GgmlType::Q8_0;
        else if (has("attn_output.") && n_expert == 8) t = GgmlType::Q5_K;
        else if (has("ffn_down") && use_more_bits(layer, n_layer)) t = GgmlType::Q6_K;
    }
    // Rows must hold whole blocks.
    if (row_len % type_traits(t).block_size != 0) t = GgmlType::Q8_0;
    if (row_len % type_traits(t).block_size != 0) t = GgmlType::F16;
    return t;
}

std::vector<double> zipf_targets(int n_expert, int k, double skew, double cap) {
    cap = std::max(cap, double(k) / n_expert);  // uniform must stay reachable
    std::vector<double> w(static_cast<size_t>(n_expert));
    for (int r = 0; r < n_expert; ++r) w[size_t(r)] = std::pow(double(r + 1), -skew);
    // Find c with sum(min(cap, c * w)) = k by bisection (monotone in c).
    double lo = 0, hi = 1;
    auto total = [&](double c) {
        double t = 0;
        for (double x : w) t += std::min(cap, c * x);
        return t;
    };
    while (total(hi) < k) hi *= 2;
    for (int it = 0; it < 100; ++it) {
        double mid = 0.5 * (lo + hi);
        (total(mid) < k ? lo : hi) = mid;
    }
    std::vector<double> p(static_cast<size_t>(n_expert));
    for (int r = 0; r < n_expert; ++r) p[size_t(r)] = std::min(cap, hi * w[size_t(r)]);
    return p;
}

namespace {

// Fraction of samples in which each expert is among the top k of
// scale[e] * z[s][e].
std::vector<double> selection_frequency(const std::vector<float>& z, int n, int k, const std::vector<double>& scale) {
    size_t samples = z.size() / size_t(n);
    std::vector<double> count(size_t(n), 0);
    std::vector<std::pair<float, int>> logit(static_cast<size_t>(n));
    for (size_t s = 0; s < samples; ++s) {
        for (int e = 0; e < n; ++e) logit[size_t(e)] = {float(scale[size_t(e)]) * z[s * size_t(n) + size_t(e)], e};
        std::nth_element(logit.begin(), logit.begin() + (k - 1), logit.end(),
                         [](const auto& a, const auto& b) { return a.first > b.first; });
        for (int i = 0; i < k; ++i) count[size_t(logit[size_t(i)].second)] += 1;
    }
    for (double& c : count) c /= double(samples);
    return count;
}

std::vector<float> gaussian_samples(size_t n, uint64_t seed) {
    Rng r(seed);
    std::vector<float> z(n);
    for (float& x : z) x = float(r.gaussian());
    return z;
}

// x with P(z > x) = p for a standard normal z (0 < p < 1), by bisection.
double normal_upper_quantile(double p) {
    double lo = -40, hi = 40;
    for (int i = 0; i < 200; ++i) {
        double mid = 0.5 * (lo + hi);
        (0.5 * std::erfc(mid / std::sqrt(2.0)) > p ? lo : hi) = mid;
    }
    return 0.5 * (lo + hi);
}

}  // namespace

RouterCalibration calibrate_router(const std::vector<double>& target, int k, uint64_t seed) {
    const int n = int(target.size());
    RouterCalibration cal;
    cal.scale.assign(size_t(n), 1.0);
    bool uniform = std::all_of(target.begin(), target.end(), [&](double t) { return std::fabs(t - target[0]) < 1e-12; });
    if (uniform) {
        cal.popularity = target;  // equal scales: exactly uniform
        return cal;
    }
    // Start from the many-experts limit: the k-th largest logit is close to
    // a fixed threshold T, so expert e is picked when scale_e * z > T, i.e.
    // with probability Q(T / scale_e). With T = 1, scale_e = 1 / Q^-1(p_e).
    for (int e = 0; e < n; ++e)
        cal.scale[size_t(e)] = 1.0 / std::max(1e-3, normal_upper_quantile(std::clamp(target[size_t(e)], 1e-6, 0.499)));
    // Then correct by Monte Carlo: damped, bounded multiplicative steps, on
    // the same samples every round (common random numbers) so the iteration
    // settles instead of chasing noise. Enough samples that the rarest
    // experts are seen a few hundred times.
    double rarest = std::max(1e-3, *std::min_element(target.begin(), target.end()));
    size_t samples = size_t(std::clamp(300.0 / rarest, 4000.0, 20000.0));
    std::vector<float> z = gaussian_samples(samples * size_t(n), mix_seed(seed, 1));
    for (int it = 0; it < 40; ++it) {
        std::vector<double> got = selection_frequency(z, n, k, cal.scale);
        double worst = 0;
        for (int e = 0; e < n; ++e) {
            double g = std::max(got[size_t(e)], 0.5 / double(samples));
            double step = std::log(target[size_t(e)] / g);
            worst = std::max(worst, std::fabs(target[size_t(e)] - g) / target[size_t(e)]);
            cal.scale[size_t(e)] *= std::exp(std::clamp(0.5 * step, -0.2, 0.2));
        }
        if (worst < 0.02) break;
    }
    // Selection depends only on ratios of scales: keep the geometric mean at 1.
    double log_mean = 0;
    for (double x : cal.scale) log_mean += std::log(x);
    for (double& x : cal.scale) x /= std::exp(log_mean / n);
    // Report what the scales achieve on fresh samples.
    cal.popularity = selection_frequency(gaussian_samples(samples * size_t(n), mix_seed(seed, 2)), n, k, cal.scale);
    return cal;
}

namespace {

int64_t vocab_rows(const GgufFile& vocab, const std::string& path) {
    int64_t n = int64_t(vocab.get_strings("tokenizer.ggml.tokens").size());
    if (n == 0) throw std::runtime_error(path + ": no tokenizer.ggml.tokens (not a vocabulary GGUF)");
    return n;
}

}  // namespace

SynthSizes synth_sizes(const SynthSpec& spec) {
    validate_spec(spec);
    SynthSizes z;
    z.n_vocab = spec.vocab_path.empty() ? spec.n_vocab : vocab_rows(GgufFile::open(spec.vocab_path), spec.vocab_path);
    RouterCalibration uniform;  // sizes do not depend on the router's values
    uniform.scale.assign(size_t(spec.n_expert), 1.0);
    const Plan plan = make_plan(spec, z.n_vocab, uniform);
    std::vector<uint64_t> layer_experts(size_t(spec.n_layer), 0);
    for (const PlannedTensor& t : plan.tensors) {
        z.total += t.nbytes;
        // Per-expert biases are small and stay resident, as inspect counts them.
        if (t.name.find("_exps.weight") != std::string::npos) {
            z.experts += t.nbytes;
            layer_experts[size_t(t.layer)] += t.nbytes / uint64_t(spec.n_expert);
        }
    }
    for (const PlannedTensor& t : plan.tensors)
        if (t.name == "per_layer_token_embd.weight") z.rows += t.nbytes;
    z.resident = z.total - z.experts - z.rows;
    z.n_tensors = int(plan.tensors.size());
    for (uint64_t b : layer_experts) {
        z.moe_layers += b > 0;
        z.one_expert = std::max(z.one_expert, b);
    }
    return z;
}

SynthResult write_synth_model(const SynthSpec& spec, const std::string& path,
                              const std::function<void(uint64_t, uint64_t)>& progress) {
    validate_spec(spec);
    auto t0 = std::chrono::steady_clock::now();
    std::optional<GgufFile> vocab_file;
    SynthVocab vocab;
    int64_t n_vocab = spec.n_vocab;
    if (!spec.vocab_path.empty()) {
        vocab_file = GgufFile::open(spec.vocab_path);
        n_vocab = vocab_rows(*vocab_file, spec.vocab_path);
    } else {
        vocab = make_synth_vocab(spec.tokenizer, spec.n_vocab);
    }

    std::vector<double> target =
        zipf_targets(spec.n_expert, spec.n_expert_used, spec.router_skew, kRouterCap);
    RouterCalibration cal = calibrate_router(target, spec.n_expert_used, mix_seed(spec.seed, 0xca1));
    Plan plan = make_plan(spec, n_vocab, cal);
    check_free_space(path, plan.total_bytes);

    std::string tmp = path + ".partial";
    GgufWriter w(tmp);
    w.set_string("general.architecture", spec.arch);
    w.set_string("general.name", "moestream synthetic " + spec.preset);
    w.set_u32("general.file_type", file_type_of(spec.recipe));
    w.set_u32("general.quantization_version", 2);
    if (spec.arch != "qwen3moe") {
        write_family_metadata(w, spec);
    } else {
        const std::string a = "qwen3moe.";
        w.set_u32(a + "block_count", uint32_t(spec.n_layer));
        w.set_u32(a + "context_length", uint32_t(spec.context));
        w.set_u32(a + "embedding_length", uint32_t(spec.n_embd));
        // Qwen3 MoE checkpoints state the dense-equivalent width (experts-used x
        // expert width); loaders read the expert width from its own key.
        w.set_u32(a + "feed_forward_length", uint32_t(spec.expert_ffn * spec.n_expert_used));
        w.set_u32(a + "attention.head_count", uint32_t(spec.n_head));
        w.set_u32(a + "attention.head_count_kv", uint32_t(spec.n_head_kv));
        w.set_u32(a + "attention.key_length", uint32_t(spec.head_dim));
        w.set_u32(a + "attention.value_length", uint32_t(spec.head_dim));
        w.set_u32(a + "rope.dimension_count", uint32_t(spec.head_dim));
        w.set_f32(a + "rope.freq_base", float(spec.rope_base));
        w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
        w.set_u32(a + "expert_count", uint32_t(spec.n_expert));
        w.set_u32(a + "expert_used_count", uint32_t(spec.n_expert_used));
        w.set_u32(a + "expert_feed_forward_length", uint32_t(spec.expert_ffn));
    }
    if (vocab_file) {
        for (const auto& [key, value] : vocab_file->metadata())
            if (key.rfind("tokenizer.", 0) == 0) w.set_value(key, value);
    } else {
        write_synth_vocab(w, vocab);
    }
    w.set_string("moestream.synth.preset", spec.preset);
    w.set_string("moestream.synth.type", spec.recipe);
    w.set_u64("moestream.synth.seed", spec.seed);
    w.set_f32("moestream.synth.router_skew", float(spec.router_skew));
    w.set_f32("moestream.synth.router_locality", float(spec.router_locality));
    if (spec.arch != "qwen3moe") w.set_f32("moestream.synth.router_sharpness", float(spec.router_sharpness));
    if (spec.router_fade != SynthSpec{}.router_fade) w.set_f32("moestream.synth.router_fade", float(spec.router_fade));
    if (spec.router_bands != SynthSpec{}.router_bands)
        w.set_f32s("moestream.synth.router_bands",
                   {float(spec.router_bands[0]), float(spec.router_bands[1]), float(spec.router_bands[2])});
    if (spec.router_own != SynthSpec{}.router_own)
        w.set_f32s("moestream.synth.router_own",
                   {float(spec.router_own[0]), float(spec.router_own[1]), float(spec.router_own[2])});
    if (spec.router_steady_gate) w.set_string("moestream.synth.router_gate", "steady");
    std::vector<float> popularity;
    for (int l = 0; l < spec.n_layer; ++l)
        for (int e = 0; e < spec.n_expert; ++e)
            popularity.push_back(float(cal.popularity[size_t(plan.rank_of[size_t(l)][size_t(e)])]));
    w.set_f32s("moestream.synth.expert_popularity", popularity);
    for (const PlannedTensor& t : plan.tensors) w.add_tensor(t.name, t.type, t.ne);
    w.begin_data();

    std::vector<Chunk> chunks = make_chunks(plan);
    size_t largest = 0;
    for (const Chunk& c : chunks) largest = std::max<size_t>(largest, c.bytes);
    ChunkRing ring(largest);
    std::thread generator([&] {
        for (size_t i = 0; i < chunks.size(); ++i) {
            {
                std::unique_lock<std::mutex> lock(ring.mu);
                ring.cv.wait(lock, [&] { return ring.abort || ring.produced - ring.consumed < kRing; });
                if (ring.abort) return;
            }
            generate_chunk(spec, plan, chunks[i], i, ring.bufs[i % kRing].data());
            std::lock_guard<std::mutex> lock(ring.mu);
            ring.produced++;
            ring.cv.notify_all();
        }
    });
    uint64_t done = 0;
    WriteBehind behind(tmp);
    try {
        for (size_t i = 0; i < chunks.size(); ++i) {
            {
                std::unique_lock<std::mutex> lock(ring.mu);
                ring.cv.wait(lock, [&] { return ring.produced > i; });
            }
            w.write_tensor_data(ring.bufs[i % kRing].data(), chunks[i].bytes);
            behind.advance(w.bytes_written());
            done += chunks[i].bytes;
            {
                std::lock_guard<std::mutex> lock(ring.mu);
                ring.consumed++;
                ring.cv.notify_all();
            }
            if (progress) progress(done, plan.total_bytes);
        }
        generator.join();
        w.finish();
    } catch (...) {
        {
            std::lock_guard<std::mutex> lock(ring.mu);
            ring.abort = true;
            ring.cv.notify_all();
        }
        if (generator.joinable()) generator.join();
        ::unlink(tmp.c_str());
        throw;
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        ::unlink(tmp.c_str());
        throw std::runtime_error(path + ": cannot rename " + tmp + ": " + std::strerror(errno));
    }
    SynthResult r;
    r.bytes = w.bytes_written();
    r.n_tensors = int(plan.tensors.size());
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

}  // namespace ms
