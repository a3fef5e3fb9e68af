// The resident weights of a DecoderSpec family (model/decoder.h), checked
// and declared once for both forward passes over them: the CPU decoder's
// (model/decoder.cpp, a LayerMajorModel) and the GPU's (model/gpu_decoder.cpp,
// a plain Model). Base is the class the pass derives from, so neither
// inherits the other's forward; both are instantiated in decoder_weights.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/attention_block.h"
#include "model/decoder.h"
#include "model/deltanet.h"
#include "model/dsa_indexer.h"
#include "model/ffn_block.h"
#include "model/mla_attention.h"
#include "model/model.h"
#include "ops/rope.h"

namespace ms {

template <class Base>
class DecoderWeights : public Base {
protected:
    // Checks the tensors `spec` names (shapes and types, as Model::open
    // does) for the layers run, config.n_layer - config.n_nextn, and the
    // NextN blocks' own tensors where present (none of them is read);
    // throws naming the file. Sets config.n_vocab from token_embd.
    DecoderWeights(const GgufFile& f, ModelConfig c, const DecoderSpec& spec);

    // Model's members, named plainly here and in the definitions (a
    // dependent base's names are not looked up otherwise).
    using Base::config_;
    using Base::expert_layers_;
    using Base::maybe;
    using Base::need;
    using Base::need_experts;
    using Base::present;

    // token_embd when the file has no output head (tied).
    const Tensor& output() const { return tied_output_ ? token_embd_ : output_; }
    // The rope angles' divisors are read with the weights.
    Rope rope() const {
        Rope r = rope_;
        if (!rope_freqs_.empty()) r.freq_factors = rope_freqs_.f32();
        return r;
    }

    // Layer il's attention (plain, or MLA with its indexer) and its
    // feed-forward half, into the vectors below and expert_layers_ at il,
    // which must exist: the constructor's layers, and the NextN block's as
    // one more after them (Decoder::enable_nextn).
    void declare_attention(const GgufFile& f, const DecoderSpec& spec, int il);
    void declare_ffn(const GgufFile& f, const DecoderSpec& spec, int il);

    DecoderSpec spec_;  // also for the NextN block's layer, declared on demand
    Rope rope_;
    MlaShape mla_shape_;
    IndexerShape indexer_shape_;
    int n_run_ = 0;       // the layers run: n_layer less the NextN blocks
    int64_t window_ = 0;  // the sliding-window (or chunked) layers' window (0: none)
    Tensor token_embd_, output_norm_, output_, rope_freqs_;
    bool tied_output_ = false;
    std::vector<AttentionLayer> attn_;     // MLA layers: the norm only
    std::vector<MlaLayer> mla_;            // empty unless spec.mla.kv_lora > 0
    std::vector<IndexerLayer> indexer_;    // empty unless spec.indexer.top_k > 0
    std::vector<int64_t> indexer_slot_;    // per layer: its key cache's slot, -1 where it reuses a selection
    int64_t n_indexer_ = 0;
    std::vector<DeltaNetLayer> deltanet_;  // per layer; empty where the layer attends
    std::vector<int64_t> deltanet_slot_;   // per layer: its states' slot, -1 where it attends
    DeltaNetShape deltanet_shape_;
    int64_t n_deltanet_ = 0;
    std::vector<FfnLayer> ffn_;

private:
    void declare_deltanet(const GgufFile& f, const DecoderSpec& spec, int il);
    void declare_mla(const GgufFile& f, const std::string& p, MlaLayer* l);
    void declare_indexer(const GgufFile& f, const std::string& p, int il);
    void dense(const GgufFile& f, const std::string& p, const char* suffix, int64_t n_ff, DenseFfn* out);
    // A 2-D tensor read as plain floats (per-expert bias rows).
    void need_f32(const GgufFile& f, const std::string& name, std::vector<int64_t> shape, Tensor* out);
};

}  // namespace ms
