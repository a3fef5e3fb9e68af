// Routing like a trained model, for every synth family: the designed
// elements (a carrier in the residual, recency-window attention, routers and
// experts blind to the carrier) that stop a random network's routing from
// collapsing, and their constants. qwen3moe's plan (synth.cpp) and the
// other families' tensor lists (synth_families.cpp) both take them from
// here; docs/routing.md explains the mechanism per family.
#pragma once
#include <cstdint>
#include <vector>

#include "synth/synth.h"

namespace ms {

struct SynthTensor;

// Constants measured with bench routing on English text (docs/routing.md):
// kCarrier residual channels hold the carrier; its gain at n_embd 256; the
// q/k norm weight of the recency dims (qwen3moe: how fast attention fades
// with distance). How the locality knob fades with depth is the preset's
// router_fade (synth.h).
constexpr int64_t kCarrier = 32;
constexpr double kCarrierGain = 4.0;
constexpr double kRecencySharpness = 1.2;

// The designed element of a tensor (synth.cpp applies it block by block):
// CarrierMax: the first `carrier` columns of every row at the type's largest
// value; QkRecency: the same, only on the rows of each head (head_dim apart)
// whose dims the recency mask marks; CarrierZero: those columns near zero;
// RowsZero: the first `carrier` rows near zero; RowsClear: the first
// `carrier` rows of every matrix (each expert's, in a stacked tensor)
// exactly zero, whole blocks of zero bytes. A pure QkRecency tensor
// (families without q/k norms) is zero but for those elements, so queries
// and keys hold the position alone.
enum class SynthDesign { None, CarrierMax, QkRecency, CarrierZero, RowsZero, RowsClear };

// QkRecency's mask, per row of a head: kRowOther (left random, or zero in a
// pure tensor), kRowRecency (reads the carrier), kRowCarrierZero (random but
// blind to the carrier: MLA's compressed rows, which the values read).
constexpr uint8_t kRowOther = 0, kRowRecency = 1, kRowCarrierZero = 2;

// Channels that hold the carrier at width n_embd.
int carrier_channels(int64_t n_embd);

// The carrier's attn_norm weight: the shared query/key part is the carrier
// inputs times weights of std 1/sqrt(n_embd), so the gain grows with
// sqrt(n_embd) to keep its weight against each token's own part.
float carrier_gain(int64_t n_embd);

// 1 for the dims of a head whose rope angle per position is 0.02..1 rad:
// mid frequencies, whose sum of cosines falls over a few tokens. n_rot
// leading dims rotate, in (i, i + n_rot/2) pairs; pair i turns
// base^(-2i/n_rot) / factor[i] (factors may be null).
// neox false: adjacent pairs (2i, 2i + 1) instead.
std::vector<uint8_t> recency_dims(int head_dim, int n_rot, double rope_base, const float* factors = nullptr,
                                  bool neox = true);

// The score two positions' carriers give each other at distance 0 in the
// qwen3moe presets (head 128, scale 1/sqrt(128), norm weight kRecencySharpness).
double recency_score();

// The q/k norm weight of the recency dims for a head of head_dim dims whose
// scores are multiplied by attn_scale that gives recency_score().
double recency_norm_weight(int head_dim, double attn_scale);

// The third of the layers (0, 1, 2) that holds `layer`.
int band_of(const SynthSpec& s, int layer);

// s.router_bands' scale of the third of the layers that holds `layer`.
double layer_band_scale(const SynthSpec& s, int layer);

// The locality knob at layer `layer`: s.router_locality fading with depth
// (locality / sqrt(1 + s.router_fade * layer)), times s.router_bands' scale
// of the layer's third.
double layer_locality(const SynthSpec& s, int layer);

// Marks the designed elements of a family's tensors (synth_families.h) for
// realistic routing when s.router_locality > 0; leaves them as they are
// where the family has no design yet.
void design_family_routing(const SynthSpec& s, std::vector<SynthTensor>& tensors);

}  // namespace ms
