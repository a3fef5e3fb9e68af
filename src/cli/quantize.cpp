// moestream quantize: a float (F32/F16/BF16) GGUF model to Q8_0 or Q4_K,
// metadata and tensor order kept. Like llama.cpp's quantizer, routers and
// every 1-D tensor (norms, biases) stay as they are.
#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "gguf/gguf.h"
#include "quant/dequant.h"
#include "quant/quantize.h"

namespace ms {

namespace {

bool is_float(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

// What a tensor becomes: the target where its rows fit the target's blocks,
// Q8_0 for Q4_K rows that are not a multiple of 256, else unchanged.
GgmlType target_type(const GgufTensor& t, GgmlType want) {
    if (t.n_dims < 2 || !is_float(t.type) || t.name.find("ffn_gate_inp") != std::string::npos) return t.type;
    if (t.ne[0] % int64_t(type_traits(want).block_size) == 0) return want;
    if (t.ne[0] % int64_t(type_traits(GgmlType::Q8_0).block_size) == 0) return GgmlType::Q8_0;
    return t.type;
}

}  // namespace

int cmd_quantize(int argc, char** argv) {
    Args a("moestream quantize IN.gguf OUT.gguf --type Q8_0|Q4_K",
           "Writes a copy of a float model (F32, F16 or BF16 tensors) with its matrices quantized: Q8_0 (the "
           "reference quantizer's bytes exactly) or Q4_K (each 32-value sub-block fitted by least squares; "
           "Q8_0 for matrices whose rows are not a multiple of 256). Router weights (ffn_gate_inp) and 1-D "
           "tensors are copied as they are, as are tensors already quantized. Metadata is copied, with "
           "general.file_type set to match.");
    std::vector<std::string> pos;
    std::string type_name = "Q8_0";
    a.positional(&pos, "IN.gguf OUT.gguf", 2, 2);
    a.option("--type", &type_name, "TYPE", "Q8_0 or Q4_K");
    if (!a.parse(argc, argv)) return 0;
    GgmlType want;
    if (type_name == "Q8_0") want = GgmlType::Q8_0;
    else if (type_name == "Q4_K") want = GgmlType::Q4_K;
    else throw std::runtime_error("unknown --type '" + type_name + "' (use Q8_0 or Q4_K)");

    const GgufFile in = GgufFile::open(pos[0]);
    GgufWriter out(pos[1], in.alignment());
    for (const auto& [key, value] : in.metadata()) {
        if (key != "general.file_type" && key != "general.quantization_version") out.set_value(key, value);
    }
    out.set_u32("general.file_type", want == GgmlType::Q8_0 ? 7 : 14);  // llama.cpp's MOSTLY_Q8_0, MOSTLY_Q4_K_S
    out.set_u32("general.quantization_version", 2);
    std::vector<GgmlType> types;
    std::map<std::string, int> count;
    uint64_t total = 0;
    for (const GgufTensor& t : in.tensors()) {
        types.push_back(target_type(t, want));
        out.add_tensor(t.name, types.back(), std::vector<int64_t>(t.ne, t.ne + std::max<uint32_t>(t.n_dims, 1)));
        count[type_traits(types.back()).name]++;
        total += t.nbytes;
    }
    out.begin_data();

    ProgressBar bar("quantize", total);
    uint64_t done = 0;
    std::vector<uint8_t> src, dst;
    std::vector<float> row;
    for (size_t i = 0; i < in.tensors().size(); i++) {
        const GgufTensor& t = in.tensors()[i];
        const int64_t rows = t.n_elements() / t.ne[0];
        const size_t in_row = t.row_bytes(), out_row = row_bytes(types[i], t.ne[0]);
        // Rows in chunks of about 16 MiB, so expert tensors of many GB never sit in memory.
        const int64_t chunk = std::max<int64_t>(1, int64_t((16u << 20) / std::max<size_t>(in_row, 1)));
        for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
            const int64_t n = std::min(chunk, rows - r0);
            src.resize(size_t(n) * in_row);
            in.read(t.split, t.offset + uint64_t(r0) * in_row, src.data(), src.size());
            if (types[i] == t.type) {
                out.write_tensor_data(src.data(), src.size());
            } else {
                dst.resize(size_t(n) * out_row);
                row.resize(size_t(t.ne[0]));
                for (int64_t r = 0; r < n; r++) {
                    dequantize_row(t.type, src.data() + size_t(r) * in_row, row.data(), t.ne[0]);
                    quantize_row(types[i], row.data(), dst.data() + size_t(r) * out_row, t.ne[0]);
                }
                out.write_tensor_data(dst.data(), dst.size());
            }
            done += src.size();
            bar.update(done);
        }
    }
    out.finish();
    bar.finish();
    std::string summary;
    for (const auto& [name, n] : count) summary += (summary.empty() ? "" : ", ") + std::to_string(n) + " " + name;
    printf("%s: %s (%s tensors)\n", pos[1].c_str(), format_bytes(double(out.bytes_written())).c_str(),
           summary.c_str());
    return 0;
}

}  // namespace ms
