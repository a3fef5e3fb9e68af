#include "model/nextn.h"

#include "ops/norm.h"
#include "quant/dequant.h"

namespace ms {

void nextn_input_row(const NextnBlock& b, const Tensor& embd, int32_t token, const float* h, int64_t n_embd,
                     float eps, float* row) {
    // The embedding goes through row's second half, which hnorm then fills.
    dequantize_row(embd.type, embd.row(token), row + n_embd, n_embd);
    rms_norm(row + n_embd, b.enorm.f32(), n_embd, eps, row);
    rms_norm(h, b.hnorm.f32(), n_embd, eps, row + n_embd);
}

}  // namespace ms
