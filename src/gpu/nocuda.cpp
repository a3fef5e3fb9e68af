// The CUDA backend when moestream is built without CUDA (no nvcc at
// configure time, or MOESTREAM_CUDA=OFF): no device is ever available, and
// nothing past available() is reached.
#include <stdexcept>

#include "gpu/gpu.h"

namespace ms::gpu {

namespace {

[[noreturn]] void absent() { throw std::runtime_error("moestream was built without CUDA"); }

}  // namespace

// MOESTREAM_CUDA=OFF, or no CUDA toolkit and nvcc found when configuring.
bool available(std::string* why) {
    if (why) *why = "built without CUDA";
    return false;
}
std::string describe() { return ""; }
std::string probe(std::string* why) {
    available(why);
    return "";
}
std::string runtime_version() { return ""; }
void memory_info(size_t* free_bytes, size_t* total_bytes) { *free_bytes = *total_bytes = 0; }
bool supports(GgmlType) { return false; }
void* alloc(size_t) { absent(); }
void release(void*) {}
void* alloc_pinned(size_t) { absent(); }
void release_pinned(void*) {}
bool pin_host(void*, size_t, std::string*) { return false; }
void unpin_host(void*) {}
const uint8_t* device_view(const void*) { return nullptr; }
Stream new_stream() { absent(); }
void delete_stream(Stream) {}
Event new_event() { absent(); }
void delete_event(Event) {}
void record(Event, Stream) { absent(); }
void wait(Stream, Event) { absent(); }
void sync(Stream) { absent(); }
void sync_event(Event) { absent(); }
float elapsed_ms(Event, Event) { absent(); }
void copy_to_device(void*, const void*, size_t, Stream) { absent(); }
void copy_to_host(void*, const void*, size_t, Stream) { absent(); }
void copy_on_device(void*, const void*, size_t, Stream) { absent(); }
void fill(void*, int, size_t, Stream) { absent(); }
void check_last(const char*) { absent(); }
size_t act_bytes(int64_t) { absent(); }
void quantize_act(const float*, int64_t, int64_t, void*, Stream) { absent(); }
void matvec(GgmlType, const void*, int64_t, int64_t, Act, float*, Stream, bool) { absent(); }
void matvec_multi(int, const GgmlType*, const void* const*, const int64_t*, int64_t, Act, float* const*, Stream) {
    absent();
}
void expert_gate_up(GgmlType, const uint8_t* const*, const int32_t*, int, size_t, size_t, int64_t, int64_t, Act,
                    float*, Stream, const ExpertExtras&) {
    absent();
}
void expert_down_add(GgmlType, const uint8_t* const*, const int32_t*, int, size_t, int64_t, int64_t, Act,
                     const float*, float*, Stream, const ExpertExtras&) {
    absent();
}
void qk_norm_rope_store(float*, const float*, const float*, const float*, const float*, int, int, int, int, float,
                        const float*, float*, float*, const int32_t*, Stream, int, float* const*) {
    absent();
}
void matvec_experts(GgmlType, const uint8_t* const*, const int32_t*, int, size_t, int64_t, int64_t, Act, int64_t,
                    float*, Stream) {
    absent();
}
void rms_norm(const float*, const float*, int64_t, int64_t, float, float*, Stream, void*) { absent(); }
void prepare_attention(int, int) { absent(); }
size_t attention_scratch_bytes(int, int) { return 0; }
void attention(const float*, float*, float*, const int32_t*, int, int, int, float, float*, float*, Stream, void*,
               const FreshRow&, int, int, const float*, int, float* const*, const Chosen&) {
    absent();
}
size_t attention_tiled_scratch_bytes(int64_t, int, int) { return 0; }
bool attention_tiled(const float*, const float*, const float*, const int32_t*, int, int, int, float, float*, Stream,
                     void*, int, void*, int, const float*, int) {
    absent();
}
bool attention_tiled_shared(const float*, const float*, const int32_t*, int, int, int, float, float*, Stream, int,
                            const Chosen&) {
    absent();
}
size_t attention_expanded_scratch_bytes(int64_t, int, int, int) { return 0; }
bool attention_expanded_supports(int, int) { return false; }
bool mla_k_b_transposable(GgmlType) { return false; }
void mla_k_b_transposed(GgmlType, const void*, int, int, int, float*, Stream) { absent(); }
void mla_expand_planes(const float*, const float*, const float*, int64_t, int, int, int, int, int, int, int, void*,
                       Stream) {
    absent();
}
bool attention_expanded(const float*, const void*, const int32_t*, int, int, int, float, float*, Stream, int) {
    absent();
}
void capture_begin(Stream) { absent(); }
Graph capture_end(Stream) { absent(); }
void launch(Graph, Stream) { absent(); }
void delete_graph(Graph) {}
void swiglu(const float*, const float*, int64_t, float*, Stream) { absent(); }
void route_softmax_topk(const float*, int, int, bool, int32_t*, float*, Stream, int, bool) { absent(); }
void matmul(GgmlType, const void*, int64_t, int64_t, int, Act, float*, Stream, bool, int) { absent(); }
void matmul_experts(GgmlType, const uint8_t* const*, const ExpertTiles&, size_t, int64_t, int64_t, Act, float*, Stream,
                    int) {
    absent();
}
bool mma_supports(GgmlType) { return false; }
void mma_matmul(GgmlType, const void*, int64_t, int64_t, int, Act, float*, Stream, bool) { absent(); }
void mma_matmul_experts(GgmlType, const uint8_t* const*, const ExpertTiles&, size_t, int64_t, int64_t, Act, float*,
                        Stream) {
    absent();
}
void mma_matmul_f32(const float*, int64_t, int64_t, int, const float*, float*, Stream, bool) { absent(); }
void mma_gate_up_experts(GgmlType, const uint8_t* const*, const ExpertTiles&, size_t, size_t, int64_t, int64_t, Act,
                         float*, Stream, const ExpertExtras&) {
    absent();
}
void expert_gate_up_tokens(GgmlType, const uint8_t* const*, const ExpertTiles&, size_t, size_t, int64_t, int64_t, Act,
                           float*, Stream, const ExpertExtras&) {
    absent();
}
void combine_experts(const float*, const float*, int, int, int64_t, float*, Stream, const float*, const int32_t*) {
    absent();
}
Rates measure_rates(size_t, int) { absent(); }
double chain_us(int, int) { absent(); }

void add(float*, const float*, int64_t, Stream, int) { absent(); }
void scale_by(float*, int64_t, const float*, Stream, int) { absent(); }
void weighted_rows(const float*, const float*, int, int, int64_t, float*, Stream) { absent(); }
void scatter_rows(const float*, const int32_t*, int, int64_t, float*, Stream) { absent(); }
void add_sigmoid_gated(float*, const float*, const float*, int64_t, Stream, int) { absent(); }
void rope_store(float*, const float*, const float*, int, int, int, int, bool, const float*, float*, float*,
                const int32_t*, Stream, int, float* const*) {
    absent();
}
void route_sigmoid_topk(const float*, const float*, int, int, bool, float, int32_t*, float*, Stream, int, int, int) {
    absent();
}
void mla_rope_store(float*, int, int, int, float*, int, int, int, bool, const float*, float*, const int32_t*, Stream,
                    int, float* const*) {
    absent();
}
void indexer_keys(float*, const float*, float*, const float*, const float*, int, int, int, bool, const float*, float*,
                  const int32_t*, Stream, int, float* const*) {
    absent();
}
void indexer_select(const float*, const float*, const float*, const int32_t*, int, int, int, int, float*, int32_t*,
                    int32_t*, Stream, int, float* const*) {
    absent();
}
void copy_rows(void*, size_t, const void*, size_t, size_t, size_t, Stream) { absent(); }

void split_gated_q(const float*, int, int, float*, Stream, int) { absent(); }
void mul_sigmoid_heads(float*, const float*, int, int, Stream, int) { absent(); }
void deltanet_conv(const float*, const float*, int, int64_t, int, float*, float*, Stream) { absent(); }
void deltanet_recurrence(const DeltaNetDims&, const float*, const float*, const float*, const float*, const float*,
                         const float*, float, int, float*, float*, Stream) {
    absent();
}

}  // namespace ms::gpu
