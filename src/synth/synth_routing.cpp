#include "synth/synth_routing.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "synth/synth_families.h"

namespace ms {

int carrier_channels(int64_t n_embd) { return int(std::min<int64_t>(kCarrier, n_embd / 8)); }

float carrier_gain(int64_t n_embd) { return float(kCarrierGain * std::sqrt(double(n_embd) / 256.0)); }

std::vector<uint8_t> recency_dims(int head_dim, int n_rot, double rope_base, const float* factors) {
    std::vector<uint8_t> r(size_t(head_dim), 0);
    for (int i = 0; i < n_rot / 2; i++) {
        const double theta = std::pow(rope_base, -2.0 * i / n_rot) / (factors ? double(factors[i]) : 1.0);
        if (theta <= 1.0 && theta >= 0.02) r[size_t(i)] = r[size_t(i + n_rot / 2)] = 1;
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

namespace {

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
    const float w = float(recency_norm_weight(s.head_dim, 1.0) * std::sqrt(s.router_sharpness));
    std::vector<float> qk(size_t(s.head_dim));
    for (int i = 0; i < s.head_dim; i++) qk[size_t(i)] = rec[size_t(i)] ? w : 0.0f;
    for (SynthTensor& t : ts) {
        const std::string n = block_name(t.name);
        const int l = t.layer;
        const bool full = l >= 0 && (l + 1) % s.full_attention_interval == 0;
        auto recency = [&] {
            t.design = SynthDesign::QkRecency;
            t.head_dim = s.head_dim;
            t.recency = rec;
        };
        if (n == "token_embd.weight") t.design = SynthDesign::CarrierMax;
        else if (n == "attn_norm.weight") set_values(t, carrier_split(E, J, gain, 1.0f));
        else if ((n == "attn_q.weight" || n == "attn_k.weight") && !full) recency();
        else if ((n == "attn_q_norm.weight" || n == "attn_k_norm.weight") && !full) set_values(t, qk);
        else if (n == "attn_v.weight") t.design = SynthDesign::CarrierZero;
        else if (n == "attn_output.weight") t.design = SynthDesign::RowsZero;
        else if (n == "post_attention_norm.weight") {
            const float ctx = full ? 0.0f
                                   : float(s.router_locality * std::sqrt(double(E)) /
                                           std::sqrt(1.0 + kLocalityDecay * l));
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

// Families whose attention has no q/k norms (gpt-oss, Mixtral, GLM-4.5):
// the queries' and keys' recency rows read only the carrier and every other
// weight of attn_q / attn_k is zero, so each query and key is the position
// alone, and the designed value sets how fast scores fall with distance: at
// layer 0 (residual RMS ~1, carrier kCarrierValue x the attn_norm gain) the
// score at distance 0 is recency_score() times s.router_sharpness. The
// residual adds unnormed sub-layer outputs, as in qwen3moe, so the locality
// knob is the token part of attn_norm, which feeds the values.
// `attn_scale`: the scale of q.k (1/sqrt(head) times any YaRN factor on both).
// s.router_sharpness scales the score.
void design_plain_attention(const SynthSpec& s, std::vector<SynthTensor>& ts, double attn_scale,
                            const std::string& ffn_norm) {
    const int64_t E = s.n_embd;
    const int J = carrier_channels(E);
    const float gain = carrier_gain(E);
    const int n_rot = s.rope_dim > 0 ? s.rope_dim : s.head_dim;
    const std::vector<uint8_t> rec = recency_dims(s.head_dim, n_rot, s.rope_base);
    const int n_rec = int(std::count(rec.begin(), rec.end(), 1));
    const double qk = std::sqrt(recency_score() * s.router_sharpness / (n_rec * attn_scale));
    const float v = float(qk / (J * kCarrierValue * gain));
    for (SynthTensor& t : ts) {
        const std::string n = block_name(t.name);
        const int l = t.layer;
        if (n == "token_embd.weight") {
            t.design = SynthDesign::CarrierMax;
            t.value = kCarrierValue;
        } else if (n == "attn_norm.weight") {
            set_values(t, carrier_split(E, J, gain, float(s.router_locality / std::sqrt(1.0 + kLocalityDecay * l))));
        } else if (n == "attn_q.weight" || n == "attn_k.weight") {
            t.design = SynthDesign::QkRecency;
            t.head_dim = s.head_dim;
            t.recency = rec;
            t.value = v;
            t.pure = true;
        } else if (n == "attn_v.weight") {
            t.design = SynthDesign::CarrierZero;
        } else if (n == "attn_output.weight") {
            t.design = SynthDesign::RowsZero;
        } else if (n == ffn_norm + ".weight") {
            set_values(t, carrier_split(E, J, 0.0f, 1.0f));
        }
    }
}

}  // namespace

void design_family_routing(const SynthSpec& s, std::vector<SynthTensor>& tensors) {
    if (s.router_locality <= 0) return;
    if (s.arch == "gemma4" && s.routed) design_gemma4(s, tensors);
    // gpt-oss: YaRN (factor 32) multiplies both q and k by 1 + 0.1 ln 32.
    const double yarn = 1 + 0.1 * std::log(32.0);
    if (s.arch == "gpt-oss") design_plain_attention(s, tensors, yarn * yarn / std::sqrt(double(s.head_dim)), "post_attention_norm");
}

}  // namespace ms
