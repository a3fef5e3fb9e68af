// The routing of a run: for every evaluated token and every MoE layer, the
// ids of the experts the router chose, best first. Recorded by moe_forward
// when a trace is attached (run --routing-trace, bench routing) and replayed
// offline by bench routing to ask what a cache of a given size would hit.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ms {

class RoutingTrace {
public:
    // k: experts per token (the largest any layer uses).
    RoutingTrace(int n_layer, int n_expert, int k);

    int n_layer() const { return n_layer_; }
    int n_expert() const { return n_expert_; }
    int k() const { return k_; }
    int64_t n_tokens() const { return n_tokens_; }

    // A forward call over n_tokens tokens starts (ExpertSource::start_step):
    // its layers' records then fill those tokens in order, however many
    // slices (-ub) a layer's tokens come in.
    void begin_call(int n_tokens);
    // Called for each MoE layer of a forward call, once per slice of its
    // tokens, with their ids (n_tok rows of `k` ids). Without begin_call, a
    // layer not above the previous recorded one starts a new call (its
    // tokens follow the last call's). Allocates as the trace grows: callers
    // that care reserve().
    void record(int layer, const int32_t* ids, int n_tok, int k);
    void reserve(int64_t tokens);

    // Expert ids of `token` at `layer`: k() entries, -1 where the layer
    // routed nothing (a dense layer) or fewer than k() experts.
    const int32_t* ids(int64_t token, int layer) const {
        return ids_.data() + (size_t(token) * size_t(n_layer_) + size_t(layer)) * size_t(k_);
    }
    // Whether `layer` routed any token (false for dense layers).
    bool routed(int layer) const { return routed_[size_t(layer)]; }

    // Text format, one line per token and routed layer: "token layer e0 e1 ...".
    void write(const std::string& path) const;
    // Parses what write() wrote; throws "NAME:LINE: problem" on bad input.
    static RoutingTrace parse(const std::string& text, const std::string& name);
    static RoutingTrace read(const std::string& path);

private:
    int n_layer_, n_expert_, k_;
    int64_t n_tokens_ = 0;
    int64_t step_first_ = 0;  // first token of the forward call being recorded
    int last_layer_ = -1;
    int64_t call_tokens_ = 0;     // tokens of the call begun by begin_call (0: none)
    std::vector<int64_t> cursor_; // per layer: tokens of the call recorded so far
    std::vector<int32_t> ids_;
    std::vector<bool> routed_;
};

}  // namespace ms
