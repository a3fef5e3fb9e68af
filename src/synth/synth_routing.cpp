#include "synth/synth_routing.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "synth/synth_families.h"

namespace ms {

int carrier_channels(int64_t n_embd) { return int(std::min<int64_t>(kCarrier, n_embd / 8)); }

float carrier_gain(int64_t n_embd) { return float(kCarrierGain * std::sqrt(double(n_embd) / 256.0)); }

std::vector<uint8_t> recency_dims(int head_dim, int n_rot, double rope_base, const float* factors, bool neox) {
    std::vector<uint8_t> r(size_t(head_dim), kRowOther);
    for (int i = 0; i < n_rot / 2; i++) {
        const double theta = std::pow(rope_base, -2.0 * i / n_rot) / (factors ? double(factors[i]) : 1.0);
        if (theta > 1.0 || theta < 0.02) continue;
        r[size_t(neox ? i : 2 * i)] = r[size_t(neox ? i + n_rot / 2 : 2 * i + 1)] = kRowRecency;
    }
    return r;
}

double recency_score() { return kRecencySharpness * kRecencySharpness * 128.0 / std::sqrt(128.0); }

double recency_norm_weight(int head_dim, double attn_scale) {
    // With the carrier dominating the recency dims, a normed head holds
    // sqrt(head_dim / n_recency) there, times the weight w, so the score of
    // two positions' carriers at distance 0 is head_dim * w^2 * attn_scale
    // whatever the number of recency dims; the mid frequencies are spread
    // evenly in log angle, so the fall with distance has the same shape.
    return std::sqrt(recency_score() / (double(head_dim) * attn_scale));
}

int band_of(const SynthSpec& s, int layer) {
    // Thirds as docs/routing.md's tables cut them, the longer ones last
    // (32 layers: 0-9, 10-20, 21-31).
    return std::clamp((3 * layer + 2) / std::max(s.n_layer, 1), 0, 2);
}

double layer_band_scale(const SynthSpec& s, int layer) { return s.router_bands[size_t(band_of(s, layer))]; }

double layer_locality(const SynthSpec& s, int layer) {
    return s.router_locality / std::sqrt(1.0 + s.router_fade * layer) * layer_band_scale(s, layer);
}

namespace {

// A QkRecency tensor over heads of mask.size() rows: the mask's recency rows
// read the carrier at `value`; pure: every other element zero.
void mark_recency(SynthTensor& t, const std::vector<uint8_t>& mask, float value = INFINITY, bool pure = false) {
    t.design = SynthDesign::QkRecency;
    t.head_dim = int(mask.size());
    t.recency = mask;
    t.value = value;
    t.pure = pure;
}

// q/k norm weights: w on the recency dims, 0 elsewhere.
std::vector<float> recency_norm(const std::vector<uint8_t>& rec, float w) {
    std::vector<float> v(rec.size());
    for (size_t i = 0; i < rec.size(); i++) v[i] = rec[i] == kRowRecency ? w : 0.0f;
    return v;
}

// Pure (norm-free) queries and keys: the size q and k each take on every
// one of n_rec recency dims so that the score at distance 0 is
// recency_score() times the sharpness knob, after attn_scale.
double pure_recency_qk(const SynthSpec& s, int n_rec, double attn_scale) {
    return std::sqrt(recency_score() * s.router_sharpness / (n_rec * attn_scale));
}

// A tensor's name inside its block ("attn_q.weight" for "blk.3.attn_q.weight").
std::string block_name(const std::string& name) {
    if (name.rfind("blk.", 0) != 0) return name;
    return name.substr(name.find('.', 4) + 1);
}

// Norm weights: the carrier channels at `carrier`, the rest at `rest`.
std::vector<float> carrier_split(int64_t n, int J, float carrier, float rest) {
    std::vector<float> v(size_t(n), rest);
    std::fill(v.begin(), v.begin() + std::min<int64_t>(J, n), carrier);
    return v;
}

void set_values(SynthTensor& t, std::vector<float> v) {
    t.fill = SynthFill::Values;
    t.values = std::move(v);
}

// Gemma 4 has per-head q/k norms (attention scale 1) like qwen3moe, so the
// recency window is qwen3moe's. What differs: embeddings are scaled by
// sqrt(n_embd) and every sub-layer's output is RMS-normed before it joins
// the residual, so the locality knob is the weight of post_attention_norm
// (recent context against the embedding's sqrt(n_embd)); the value vectors
// are normed too. Full-attention layers take V from the K projection, which
// would carry the carrier into the residual: their attention is muted
// (post_attention_norm 0) and only the sliding-window layers mix context.
void design_gemma4(const SynthSpec& s, std::vector<SynthTensor>& ts) {
    const int64_t E = s.n_embd;
    const int J = carrier_channels(E);
    const float gain = carrier_gain(E);
    const std::vector<uint8_t> rec = recency_dims(s.head_dim, s.head_dim, s.rope_base_swa);
    const std::vector<float> qk =
        recency_norm(rec, float(recency_norm_weight(s.head_dim, 1.0) * std::sqrt(s.router_sharpness)));
    for (SynthTensor& t : ts) {
        const std::string n = block_name(t.name);
        const int l = t.layer;
        const bool full = l >= 0 && (l + 1) % s.full_attention_interval == 0;
        if (n == "token_embd.weight") t.design = SynthDesign::CarrierMax;
        else if (n == "attn_norm.weight") set_values(t, carrier_split(E, J, gain, 1.0f));
        else if ((n == "attn_q.weight" || n == "attn_k.weight") && !full) mark_recency(t, rec);
        else if ((n == "attn_q_norm.weight" || n == "attn_k_norm.weight") && !full) set_values(t, qk);
        else if (n == "attn_v.weight") t.design = SynthDesign::CarrierZero;
        else if (n == "attn_output.weight") t.design = SynthDesign::RowsZero;
        else if (n == "post_attention_norm.weight") {
            // layer_locality(s, l) x sqrt(E), in the order the fitted files were made with
            const float ctx = full ? 0.0f
                                   : float(s.router_locality * std::sqrt(double(E)) /
                                           std::sqrt(1.0 + s.router_fade * l) * layer_band_scale(s, l));
            set_values(t, carrier_split(E, J, 0.0f, ctx));
        } else if (n == "ffn_norm.weight" || n == "pre_ffw_norm_2.weight" || n == "post_ffw_norm.weight" ||
                   n == "post_norm.weight")
            set_values(t, carrier_split(E, J, 0.0f, 1.0f));
        else if (n == "ffn_gate_inp.scale")
            set_values(t, carrier_split(E, J, 0.0f, float(std::sqrt(double(E)))));
    }
}

// The embedding's carrier value where the queries and keys are not normed
// (their size then follows it); within every weight type's range at std 1.
constexpr float kCarrierValue = 1.5f;

void carry_carrier_value(SynthTensor& embedding) {
    embedding.design = SynthDesign::CarrierMax;
    embedding.value = kCarrierValue;
}

// Families whose attention has no per-head q/k norms (gpt-oss, Mixtral,
// MiniMax-M2): the queries' and keys' recency rows read only the carrier
// and every other weight of attn_q / attn_k is zero, so each query and key
// is the position alone, and the designed value sets how fast scores fall
// with distance: at layer 0 (residual RMS ~1, carrier kCarrierValue x the
// attn_norm gain) the score at distance 0 is recency_score() times
// s.router_sharpness. Where q and k are RMS-normed over the whole
// projection (MiniMax-M2), the norm gives every recency dim the same size
// whatever the residual, as a per-head norm does, and its weights set the
// window instead. The residual adds unnormed sub-layer outputs, as in
// qwen3moe, so the locality knob is the token part of attn_norm, which
// feeds the values.
struct PlainAttention {
    double attn_scale = 1;                // the scale of q.k: 1/sqrt(head) times any YaRN factor on both
    std::string ffn_norm = "ffn_norm";    // the norm before the router and experts
    bool neox = true;                     // NeoX rope pairs (i, i + n_rot/2); false: adjacent pairs
    bool whole_qk_norm = false;           // attn_q_norm / attn_k_norm over the whole projection
    bool follow_residual = false;         // carrier gain grown with the residual's expected RMS (below)
    bool clear_carrier_rows = false;      // attn_output and every ffn_down write exact zeros to the carrier
    bool unweighted_head_norm = false;    // q and k RMS-normed per head after rope, without weights
    int mute_every = 0;                   // n > 0: every n-th layer (l + 1 = n, 2n, ...) has its attention muted
    // The sharpness knob scales attn_norm's carrier gain (F32, exact) by
    // its square root instead of the q/k weights, which Q4_K rounds to the
    // same level over a wide range (Llama 4 Maverick gave the same routing
    // at sharpness 1 and 1.4, and another at 2).
    bool sharpness_in_gain = false;
};

// Without q/k norms, a query is the sum of the normed residual's carrier
// channels, so it is only as clean as they are. attn_output's RowsZero
// leaves Q4_K's half-step residues (zero is not on its grid), which times
// the values write each token's own noise into the carrier, and random
// ffn_down rows add theirs: in glm-4.5-air at locality 8 this noise was
// twice the carrier after layer 0 and grew by about one a layer, so
// queries and keys turned content-dependent (clear_carrier_rows: exact
// zeros there). And a query's size is the carrier's share, J x value x
// gain / rms(x): each layer's attention adds about kValueRms x its locality
// to the residual's RMS (orthogonal, summed in squares; measured at layer 0
// of glm-4.5-air), so by layer 1 of a locality of 8 the residual is ~7x the
// embedding's, scores shrink ~50x and every query attends evenly to the
// prefix, the averaging that collapses a random network (docs/routing.md,
// glm-4.5-air). Growing attn_norm's carrier gain with this RMS
// (follow_residual) keeps every layer's window that of layer 0. gpt-oss
// and Mixtral, fitted at lower locality or depth, keep the plain design.
constexpr double kValueRms = 0.88;

// Muted layers (mute_every, below) add nothing to it.
double expected_residual_rms(const SynthSpec& s, int layer, int mute_every) {
    double sq = 1;
    for (int j = 0; j < layer; j++)
        if (mute_every == 0 || (j + 1) % mute_every != 0) sq += std::pow(kValueRms * layer_locality(s, j), 2);
    return std::sqrt(sq);
}

// One head's weights tiled over a projection of n elements.
std::vector<float> tiled(const std::vector<float>& head, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); i++) v[i] = head[i % head.size()];
    return v;
}

void design_plain_attention(const SynthSpec& s, std::vector<SynthTensor>& ts, const PlainAttention& o) {
    const int64_t E = s.n_embd;
    const int J = carrier_channels(E);
    const float gain = carrier_gain(E);
    const int n_rot = s.rope_dim > 0 ? s.rope_dim : s.head_dim;
    const std::vector<uint8_t> rec = recency_dims(s.head_dim, n_rot, s.rope_base, nullptr, o.neox);
    const int n_rec = int(std::count(rec.begin(), rec.end(), kRowRecency));
    // Where q and k are normed, their size is the norm's, so the carrier's
    // weight only has to stay clear of zero: the largest.
    SynthSpec at_weights = s;
    if (o.sharpness_in_gain) at_weights.router_sharpness = 1;
    const float v = o.whole_qk_norm || o.unweighted_head_norm
                        ? INFINITY
                        : float(pure_recency_qk(at_weights, n_rec, o.attn_scale) / (J * kCarrierValue * gain));
    const double gain_sharpness = o.sharpness_in_gain ? std::sqrt(s.router_sharpness) : 1.0;
    const int own = s.router_own != std::array<double, 3>{0, 0, 0} ? int(E / 16) : 0;
    const std::vector<float> qk = recency_norm(
        rec, float(recency_norm_weight(s.head_dim, o.attn_scale) * std::sqrt(s.router_sharpness)));
    for (SynthTensor& t : ts) {
        const std::string n = block_name(t.name);
        const int l = t.layer;
        if (n == "token_embd.weight") {
            carry_carrier_value(t);
        } else if (n == "attn_norm.weight") {
            const double g =
                gain_sharpness * (o.follow_residual ? gain * expected_residual_rms(s, l, o.mute_every) : gain);
            const bool muted = o.mute_every > 0 && (l + 1) % o.mute_every == 0;
            // A muted layer's q, k and v are all zero: it adds nothing.
            set_values(t, muted ? std::vector<float>(size_t(E), 0.0f)
                                : carrier_split(E, J, float(g), float(layer_locality(s, l))));
        } else if (n == "attn_q.weight" || n == "attn_k.weight") {
            mark_recency(t, rec, v, true);
        } else if (o.whole_qk_norm && (n == "attn_q_norm.weight" || n == "attn_k_norm.weight")) {
            set_values(t, tiled(qk, t.ne[0]));
        } else if (n == "attn_v.weight") {
            t.design = SynthDesign::CarrierZero;
        } else if (n == "attn_output.weight") {
            t.design = o.clear_carrier_rows ? SynthDesign::RowsClear : SynthDesign::RowsZero;
        } else if (o.clear_carrier_rows && n.rfind("ffn_down", 0) == 0 && t.ne.size() >= 2) {
            t.design = SynthDesign::RowsClear;
        } else if (n == o.ffn_norm + ".weight") {
            std::vector<float> w = carrier_split(E, J, 0.0f, 1.0f);
            if (own > 0) std::fill(w.begin() + J, w.begin() + J + own, float(s.router_own[size_t(band_of(s, l))]));
            set_values(t, std::move(w));
        }
        if (own > 0 && (n == "attn_output.weight" || (n.rfind("ffn_down", 0) == 0 && t.ne.size() >= 2)))
            t.own_rows = own;
    }
}

// Position-only queries through a q latent (MLA, DeepSeek V4): attn_q_a
// writes the carrier alone into the latent's first J channels (its norm
// then makes them the same for every token), attn_q_b's rows that q_head
// marks read them at q_value, and the rest of q is zero. False for any
// other tensor.
bool mark_latent_queries(SynthTensor& t, const std::string& name, int q_lora, int J,
                         const std::vector<uint8_t>& q_head, float q_value) {
    if (name == "attn_q_a.weight") {
        std::vector<uint8_t> latent(size_t(q_lora), kRowOther);
        std::fill(latent.begin(), latent.begin() + J, kRowRecency);
        mark_recency(t, latent, INFINITY, true);
        return true;
    }
    if (name != "attn_q_b.weight") return false;
    mark_recency(t, q_head, q_value, true);
    return true;
}

// Multi-head latent attention (DeepSeek V3, GLM-5): the score of a head is
// q_nope . (attn_k_b c) + q_pe . k_pe, the values read the compressed row
// c. Position-only queries and keys, as for plain attention: attn_q_a
// writes the carrier alone into the first J latent channels (attn_q_a_norm
// then makes them the same for every token), attn_q_b's rope recency rows
// read only those channels and the rest of q is zero (no content score);
// attn_kv_a_mqa's rope recency rows read only the residual's carrier (k_pe),
// its other rope rows are zero, and its compressed rows are the token's own,
// blind to the carrier; attn_kv_a_norm's weight is the locality knob.
// k_pe is not normed, so as in glm4moe the carrier is kept clean
// (attn_output's and every ffn_down's carrier rows exact zeros) and
// attn_norm's carrier gain follows the residual's expected RMS: without
// it the window broadened with depth and the deep layers collapsed once
// the locality stayed up (glm-5 at locality 8, no fade: 45.5 experts for
// 90 % in MoE layers 7-8 at 45 % reuse). The sharpness knob scales the
// same F32 gain, which only k_pe reads (the q latent is normed): Q4_K
// rounds the q/k weights to the same level over a wide range (glm-5
// routed the same at sharpness 0.7 and 1), as Maverick's
// sharpness_in_gain.
// `attn_scale`: the scale of q.k, YaRN's included.
void design_mla(const SynthSpec& s, std::vector<SynthTensor>& ts, double attn_scale) {
    const int64_t E = s.n_embd;
    const int J = carrier_channels(E);
    const float gain = carrier_gain(E);
    // Without a q latent of at least J channels (V2-Lite's uncompressed q)
    // the queries cannot be made position-only this way: left random.
    if (s.q_lora < J) return;
    const std::vector<uint8_t> rope = recency_dims(s.rope_dim, s.rope_dim, s.rope_base, nullptr, false);
    const int n_rec = int(std::count(rope.begin(), rope.end(), kRowRecency));
    std::vector<uint8_t> q_head(size_t(s.head_dim), kRowOther), kv(size_t(s.kv_lora), kRowCarrierZero);
    q_head.insert(q_head.end(), rope.begin(), rope.end());
    kv.insert(kv.end(), rope.begin(), rope.end());
    // Per recency dim, q and k of the same size giving the score at
    // sharpness 1; the knob is in the gain below.
    SynthSpec at_weights = s;
    at_weights.router_sharpness = 1;
    const double qk = pure_recency_qk(at_weights, n_rec, attn_scale);
    // attn_q_a_norm leaves the J latent carrier channels at sqrt(q_lora / J).
    const float vq = float(qk / (J * std::sqrt(double(s.q_lora) / J))), vk = float(qk / (J * kCarrierValue * gain));
    for (SynthTensor& t : ts) {
        const std::string n = block_name(t.name);
        const int l = t.layer;
        if (n == "token_embd.weight") {
            carry_carrier_value(t);
        } else if (n == "attn_norm.weight") {
            set_values(t, carrier_split(E, J, float(gain * s.router_sharpness * expected_residual_rms(s, l, 0)),
                                        1.0f));
        } else if (n == "attn_kv_a_norm.weight") {
            // The compressed row is normed, so the values' scale (the locality
            // knob) is its norm's weight.
            set_values(t, std::vector<float>(size_t(s.kv_lora), float(layer_locality(s, l))));
        } else if (mark_latent_queries(t, n, s.q_lora, J, q_head, vq)) {
        } else if (n == "attn_kv_a_mqa.weight") {
            mark_recency(t, kv, vk, true);
        } else if (n == "attn_output.weight" || (n.rfind("ffn_down", 0) == 0 && t.ne.size() >= 2)) {
            t.design = SynthDesign::RowsClear;
        } else if (n == "ffn_norm.weight") {
            set_values(t, carrier_split(E, J, 0.0f, 1.0f));
        }
    }
}

// DeepSeek V4: one vector per token serves as key and value (attn_kv,
// RMS-normed with weights, its last rope_dim dims roped), queries come
// through a normed latent and are RMS-normed per head without weights.
// Position-only scores as MLA's: attn_q_a writes the carrier alone into the
// first J latent channels, attn_q_b's rope recency rows read them and the
// rest of q is zero; attn_kv's rope recency rows read the residual's
// carrier, its other rows are the token's own, blind to the carrier. Since
// the key is the value, attn_kv_a_norm's weight carries both knobs: the
// locality on the token's dims, and on the recency dims the size that gives
// the qwen3 presets' score at distance 0 times the sharpness (q's per-head
// norm fixes its size, so the score is sqrt(n_rec) times that weight
// when the raw recency dims are about as large as the token's, which vk
// sets at layer 0). The recency dims are those of the compressed layers'
// theta, which the window-only layers' (rope_base) also hold in range. The
// residual streams add unnormed outputs, as in glm4moe: the carrier is kept
// clean and its gain follows the residual's expected RMS. The compressors
// and the indexer stay random: their blocks' keys score near zero against
// the window's recent tokens.
void design_deepseek4(const SynthSpec& s, std::vector<SynthTensor>& ts) {
    const int64_t E = s.n_embd;
    const int J = carrier_channels(E), D = s.head_dim, R = s.rope_dim;
    const float gain = carrier_gain(E);
    const std::vector<uint8_t> rope = recency_dims(R, R, kDeepseek4CompressRopeBase, nullptr, false);
    const int n_rec = int(std::count(rope.begin(), rope.end(), kRowRecency));
    std::vector<uint8_t> q_head(size_t(D - R), kRowOther), kv(size_t(D - R), kRowCarrierZero);
    q_head.insert(q_head.end(), rope.begin(), rope.end());
    kv.insert(kv.end(), rope.begin(), rope.end());
    const float vk = float(1 / (J * kCarrierValue * gain));
    const float recency_weight = float(recency_score() * s.router_sharpness / std::sqrt(double(n_rec)));
    for (SynthTensor& t : ts) {
        const std::string n = block_name(t.name);
        const int l = t.layer;
        if (n == "token_embd.weight") {
            carry_carrier_value(t);
        } else if (n == "attn_norm.weight") {
            set_values(t, carrier_split(E, J, float(gain * expected_residual_rms(s, l, 0)), 1.0f));
        } else if (mark_latent_queries(t, n, s.q_lora, J, q_head, INFINITY)) {
        } else if (n == "attn_kv.weight") {
            mark_recency(t, kv, vk, true);
        } else if (n == "attn_kv_a_norm.weight") {
            std::vector<float> w(size_t(D), float(layer_locality(s, l)));
            for (int i = 0; i < R; i++) w[size_t(D - R + i)] = rope[size_t(i)] == kRowRecency ? recency_weight : 0.0f;
            set_values(t, std::move(w));
        } else if (n == "attn_output_b.weight" || (n.rfind("ffn_down", 0) == 0 && t.ne.size() >= 2)) {
            t.design = SynthDesign::RowsClear;
        } else if (n == "ffn_norm.weight") {
            set_values(t, carrier_split(E, J, 0.0f, 1.0f));
        }
    }
}

// Qwen3.5 / Qwen3-Next: every full_attention_interval-th layer is gated
// attention with per-head q/k norms, designed as qwen3moe's (attn_q's rows
// per head are [q | gate]: only q's recency rows read the carrier). The
// Gated DeltaNet layers between get the recency from their state instead:
// a log decay of kDeltaNetLogDecay x router_sharpness a token (ssm_a, with
// dt bias 2) keeps the last few tokens' keys and values in it, and their
// inputs are blind to the carrier. The decay follows the sharpness knob, so
// one knob sets how far back both kinds of layer look (three in four layers
// are DeltaNet: their decay, not the attention window, sets most of the
// reuse). Their output is RMS-normed per head, so the locality knob is
// ssm_norm's weight there, attn_norm's token part in the attention layers.
constexpr double kDeltaNetLogDecay = -1.4;  // at sharpness 0.5, about half of the state kept a token
constexpr double kDeltaNetDtBias = 2.0;

void design_qwen35(const SynthSpec& s, std::vector<SynthTensor>& ts) {
    const int64_t E = s.n_embd;
    const int J = carrier_channels(E), hd = s.head_dim;
    const float gain = carrier_gain(E);
    const std::vector<uint8_t> rec = recency_dims(hd, s.rope_dim > 0 ? s.rope_dim : hd, s.rope_base);
    std::vector<uint8_t> q_rows = rec;
    q_rows.resize(size_t(2 * hd), kRowOther);  // the gate half
    const std::vector<float> qk =
        recency_norm(rec, float(recency_norm_weight(hd, 1 / std::sqrt(double(hd))) * std::sqrt(s.router_sharpness)));
    const double softplus_bias = std::log1p(std::exp(kDeltaNetDtBias));
    for (SynthTensor& t : ts) {
        const std::string n = block_name(t.name);
        const int l = t.layer;
        const float locality = float(layer_locality(s, l));
        if (n == "token_embd.weight") t.design = SynthDesign::CarrierMax;
        else if (n == "attn_norm.weight") set_values(t, carrier_split(E, J, gain, locality));
        else if (n == "attn_q.weight") mark_recency(t, q_rows);
        else if (n == "attn_k.weight") mark_recency(t, rec);
        else if (n == "attn_q_norm.weight" || n == "attn_k_norm.weight") set_values(t, qk);
        else if (s.router_steady_gate && n == "attn_gate.weight")
            mark_recency(t, {kRowRecency}, INFINITY, true);  // every row the carrier alone: z the same for all
        else if (n == "attn_v.weight" || n == "attn_qkv.weight" || n == "attn_gate.weight" ||
                 n == "ssm_beta.weight" || n == "ssm_alpha.weight")
            t.design = SynthDesign::CarrierZero;
        else if (n == "attn_output.weight" || n == "ssm_out.weight") t.design = SynthDesign::RowsZero;
        else if (n == "ssm_a")
            set_values(t, std::vector<float>(size_t(t.ne[0]), float(kDeltaNetLogDecay * s.router_sharpness / softplus_bias)));
        else if (n == "ssm_dt.bias") set_values(t, std::vector<float>(size_t(t.ne[0]), float(kDeltaNetDtBias)));
        else if (n == "ssm_norm.weight") set_values(t, std::vector<float>(size_t(t.ne[0]), locality));
        else if (n == "post_attention_norm.weight") set_values(t, carrier_split(E, J, 0.0f, 1.0f));
    }
}

}  // namespace

void design_family_routing(const SynthSpec& s, std::vector<SynthTensor>& tensors) {
    if (s.router_locality <= 0) return;
    if (s.arch == "gemma4" && s.routed) design_gemma4(s, tensors);
    // gpt-oss: YaRN (factor 32) multiplies both q and k by 1 + 0.1 ln 32.
    const double yarn = 1 + 0.1 * std::log(32.0);
    if (s.arch == "qwen35moe") design_qwen35(s, tensors);
    if (s.arch == "deepseek2") {
        // YaRN factor 40 with log multiplier 0.1 scales q.k by (1 + 0.1 ln 40)^2.
        const double m = 1 + 0.1 * std::log(40.0);
        design_mla(s, tensors, m * m / std::sqrt(double(s.head_dim + s.rope_dim)));
    }
    // GLM-5: the same MLA without YaRN; the lightning indexer's queries come
    // from the designed q latent, and a text shorter than its top-k keeps
    // every position, so the recency window is MLA's.
    if (s.arch == "glm-dsa") design_mla(s, tensors, 1 / std::sqrt(double(s.head_dim + s.rope_dim)));
    if (s.arch == "gpt-oss")
        design_plain_attention(s, tensors, {.attn_scale = yarn * yarn / std::sqrt(double(s.head_dim)),
                                            .ffn_norm = "post_attention_norm"});
    // Mixtral (llama): adjacent-pair rope.
    if (s.arch == "llama")
        design_plain_attention(s, tensors, {.attn_scale = 1 / std::sqrt(double(s.head_dim)), .neox = false});
    // GLM-4.5 (no q/k norms in the Air; half-rotary heads).
    if (s.arch == "glm4moe")
        design_plain_attention(s, tensors, {.attn_scale = 1 / std::sqrt(double(s.head_dim)),
                                            .ffn_norm = "post_attention_norm",
                                            .follow_residual = true,
                                            .clear_carrier_rows = true});
    // Llama 4: adjacent-pair rope. Every 4th layer has no rope
    // (model/llama4.cpp) and its position-only queries would attend evenly
    // to the whole prefix, the averaging that collapses a random network:
    // muted, as gemma4's full layers are. The residual adds unnormed
    // outputs, as in glm4moe, so the carrier is kept clean. Scout's roped
    // layers RMS-norm each head of q and k without weights, so
    // position-only queries and keys give a fixed window (about 0.7 of the
    // qwen3 presets' score at distance 0; no sharpness knob). Maverick's
    // (128 experts) have no q/k norm, as glm-4.5-air's: the designed value
    // sets the window and the carrier gain follows the residual.
    if (s.arch == "llama4") {
        const bool head_norm = s.n_expert != 128;
        design_plain_attention(s, tensors, {.attn_scale = 1 / std::sqrt(double(s.head_dim)), .neox = false,
                                            .follow_residual = !head_norm, .clear_carrier_rows = true,
                                            .unweighted_head_norm = head_norm, .mute_every = 4,
                                            .sharpness_in_gain = !head_norm});
    }
    if (s.arch == "deepseek4") design_deepseek4(s, tensors);
    if (s.arch == "minimax-m2")
        design_plain_attention(s, tensors, {.attn_scale = 1 / std::sqrt(double(s.head_dim)), .whole_qk_norm = true});
}

}  // namespace ms
