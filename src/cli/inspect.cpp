// moestream inspect: what a GGUF model is and what running it needs, as text
// for people or JSON for scripts. All figures come from model/summary.h.
#include <cmath>
#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "gguf/gguf.h"
#include "json/json.h"
#include "model/summary.h"
#include "synth/synth.h"
#include "telemetry/build_info.h"

namespace ms {

namespace {

std::string format_count(double n) {
    const char* units[] = {"", " K", " M", " B", " T"};
    int u = 0;
    while (n >= 1000 && u < 4) { n /= 1000; ++u; }
    char buf[32];
    snprintf(buf, sizeof buf, u ? "%.2f%s" : "%.0f%s", n, units[u]);
    return buf;
}

std::string shape_text(const GgufTensor& t) {
    std::string s = "[";
    for (uint32_t d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
    return s + "]";
}

// Names of the slices one expert spans, in file order: "gate, up, down".
std::string range_names(const GgufFile& f, const MoeLayer& l) {
    std::string out;
    for (size_t i : l.tensors) {
        std::string n = f.tensors()[i].name;
        size_t a = n.find("ffn_"), b = n.find("_exps");
        out += (out.empty() ? "" : ", ") + (a != std::string::npos && b != std::string::npos ? n.substr(a + 4, b - a - 4) : n);
    }
    return out;
}

Json to_json(const GgufFile& f, const ModelSummary& s, bool with_tensors) {
    const Hparams& h = s.hp;
    Json j = Json::object();
    j["build"] = build_info();
    Json files = Json::array();
    for (const std::string& p : s.files) files.push_back(p);
    j["files"] = files;
    j["file_bytes"] = s.file_bytes;
    j["gguf_version"] = s.version;
    j["alignment"] = s.alignment;
    j["n_tensors"] = s.n_tensors;
    j["architecture"] = h.arch;
    j["name"] = h.name;
    Json hp = Json::object();
    hp["n_layer"] = h.n_layer;
    hp["n_embd"] = h.n_embd;
    hp["n_head"] = h.n_head;
    hp["n_head_kv"] = h.n_head_kv;
    if (!h.n_head_kv_layer.empty()) {
        Json a = Json::array();
        for (int64_t x : h.n_head_kv_layer) a.push_back(x);
        hp["n_head_kv_per_layer"] = a;
    }
    hp["head_dim_k"] = h.head_dim_k;
    hp["head_dim_v"] = h.head_dim_v;
    hp["n_expert"] = h.n_expert;
    hp["n_expert_used"] = h.n_expert_used;
    hp["expert_ffn"] = h.expert_ffn;
    hp["ffn"] = h.ffn;
    hp["n_shared_expert"] = h.n_shared_expert;
    hp["shared_ffn"] = h.shared_ffn;
    hp["n_dense_lead"] = h.n_dense_lead;
    hp["n_nextn"] = h.n_nextn;
    hp["context"] = h.context;
    hp["sliding_window"] = h.sliding_window;
    hp["attention_chunk"] = h.attention_chunk;
    hp["moe_layer_step"] = h.moe_layer_step;
    hp["kv_lora_rank"] = h.kv_lora_rank;
    hp["rope_base"] = h.rope_base;
    hp["rope_dim"] = h.rope_dim;
    hp["rope_scaling"] = h.rope_scaling;
    hp["rope_factor"] = h.rope_factor;
    hp["full_attention_interval"] = h.full_attention_interval;
    j["hparams"] = hp;
    Json tok = Json::object();
    tok["model"] = h.tokenizer_model;
    tok["pre"] = h.tokenizer_pre;
    tok["n_vocab"] = h.n_vocab;
    tok["chat_template"] = h.chat_template;
    j["tokenizer"] = tok;
    j["params"] = s.params;
    j["active_params"] = s.active_params;
    j["tensor_bytes"] = s.tensor_bytes;
    Json classes = Json::object();
    const char* keys[kTensorClassCount] = {"resident", "experts", "embedding_rows", "unused"};
    for (int c = 0; c < kTensorClassCount; ++c) {
        Json o = Json::object();
        o["bytes"] = s.bytes_by_class[c];
        o["params"] = s.params_by_class[c];
        classes[keys[c]] = o;
    }
    j["classes"] = classes;
    Json ex = Json::object();
    ex["moe_layers"] = int64_t(s.moe_layers.size());
    ex["bytes_per_expert_min"] = s.expert_bytes_min;
    ex["bytes_per_expert_max"] = s.expert_bytes_max;
    ex["bytes_per_expert_avg"] = s.expert_bytes_avg;
    ex["ranges_per_expert"] = s.expert_ranges_max;
    ex["side_bytes"] = s.expert_side_bytes;
    Json as = Json::object();
    for (const auto& [type, bytes] : s.expert_bytes_as) as[type_name(type)] = bytes;
    ex["bytes_per_expert_as"] = as;
    Json layers = Json::array();
    for (const MoeLayer& l : s.moe_layers) {
        Json o = Json::object();
        o["layer"] = l.layer;
        o["n_expert"] = l.n_expert;
        o["bytes_per_expert"] = l.expert_bytes;
        o["ranges"] = l.ranges;
        o["slices"] = range_names(f, l);
        o["side_bytes_per_expert"] = l.side_bytes;
        layers.push_back(o);
    }
    ex["layers"] = layers;
    j["experts"] = ex;
    Json types = Json::array();
    for (const TypeUse& u : s.types) {
        Json o = Json::object();
        o["type"] = type_name(u.type);
        o["tensors"] = u.tensors;
        o["bytes"] = u.bytes;
        o["params"] = u.params;
        types.push_back(o);
    }
    j["types"] = types;
    Json mem = Json::object();
    mem["ctx"] = s.mem.ctx;
    mem["kv_bytes"] = s.mem.kv_bytes;
    mem["state_bytes"] = s.mem.state_bytes;
    mem["kv_token_bytes"] = s.mem.kv_token_bytes;
    mem["full_kv_token_bytes"] = s.mem.full_kv_token_bytes;
    mem["logits_bytes"] = s.mem.logits_bytes;
    mem["ram_streaming"] = s.mem.ram_streaming;
    mem["ram_all"] = s.mem.ram_all;
    j["memory"] = mem;
    if (s.synth.present) {
        Json sy = Json::object();
        sy["preset"] = s.synth.preset;
        sy["router_skew"] = s.synth.router_skew;
        sy["seed"] = s.synth.seed;
        sy["top1_share"] = top_expert_share(s.synth.popularity, 1);
        sy["topk_share"] = top_expert_share(s.synth.popularity, int(h.n_expert_used));
        sy["top10pct_share"] = top_expert_share(s.synth.popularity, int(std::ceil(double(h.n_expert) / 10)));
        if (h.n_expert > 0 && h.n_expert_used > 0) {
            std::vector<double> t = zipf_targets(int(h.n_expert), int(h.n_expert_used), s.synth.router_skew, kRouterCap);
            sy["target_top1_share"] = top_expert_share({t}, 1);
            sy["target_topk_share"] = top_expert_share({t}, int(h.n_expert_used));
        }
        j["synth"] = sy;
    }
    if (with_tensors) {
        Json ts = Json::array();
        for (size_t i = 0; i < f.tensors().size(); ++i) {
            const GgufTensor& t = f.tensors()[i];
            Json o = Json::object();
            o["name"] = t.name;
            o["type"] = type_name(t.type);
            Json shape = Json::array();
            for (uint32_t d = 0; d < t.n_dims; ++d) shape.push_back(t.ne[d]);
            o["shape"] = shape;
            o["bytes"] = t.nbytes;
            o["offset"] = t.offset;
            o["split"] = t.split;
            o["class"] = tensor_class_name(s.tensor_class[i]);
            ts.push_back(o);
        }
        j["tensors"] = ts;
    }
    return j;
}

void print_text(const GgufFile& f, const ModelSummary& s, bool with_tensors) {
    const Hparams& h = s.hp;
    printf("file            %s\n", s.files[0].c_str());
    if (s.files.size() > 1) printf("                split into %zu files\n", s.files.size());
    printf("format          GGUF v%u, alignment %llu, %lld tensors, %s\n", s.version,
           (unsigned long long)s.alignment, (long long)s.n_tensors, format_bytes(double(s.file_bytes)).c_str());
    printf("architecture    %s%s%s\n", h.arch.empty() ? "(none)" : h.arch.c_str(), h.name.empty() ? "" : "  name: ",
           h.name.c_str());
    printf("layers          %lld", (long long)h.n_layer);
    if (h.n_dense_lead) printf(" (first %lld dense)", (long long)h.n_dense_lead);
    if (h.moe_layer_step > 1) printf(" (MoE every %lld layers, the rest dense)", (long long)h.moe_layer_step);
    if (h.n_nextn) printf(" (last %lld NextN/MTP, run only with --draft mtp)", (long long)h.n_nextn);
    printf("\nembedding       %lld\n", (long long)h.n_embd);
    printf("attention       %lld heads, %lld KV heads", (long long)h.n_head, (long long)h.n_head_kv);
    if (!h.n_head_kv_layer.empty()) {
        printf(" (per layer:");
        for (int64_t x : h.n_head_kv_layer) printf(" %lld", (long long)x);
        printf(")");
    }
    printf(", head dim %lld", (long long)h.head_dim_k);
    if (h.head_dim_v != h.head_dim_k) printf("/%lld", (long long)h.head_dim_v);
    if (h.kv_lora_rank) printf(", MLA kv_lora_rank %lld", (long long)h.kv_lora_rank);
    if (h.sliding_window) printf(", sliding window %lld", (long long)h.sliding_window);
    if (h.attention_chunk)
        printf(", chunks of %lld on 3 of every 4 layers (the 4th: no RoPE, whole context)",
               (long long)h.attention_chunk);
    if (h.full_attention_interval) printf(", full attention every %lld layers (rest recurrent)", (long long)h.full_attention_interval);
    printf("\ncontext         %lld\n", (long long)h.context);
    printf("rope            base %g", h.rope_base);
    if (h.rope_dim) printf(", %lld dims", (long long)h.rope_dim);
    if (!h.rope_scaling.empty()) printf(", scaling %s x%g", h.rope_scaling.c_str(), h.rope_factor);
    printf("\n");
    if (h.n_expert) {
        printf("experts         %lld routed, %lld used per token, expert FFN %lld", (long long)h.n_expert,
               (long long)h.n_expert_used, (long long)h.expert_ffn);
        if (h.n_shared_expert)
            printf("; %lld shared (FFN width %lld in all)", (long long)h.n_shared_expert, (long long)h.shared_ffn);
        printf("\n");
    } else {
        printf("experts         none (dense");
        if (h.ffn) printf(", FFN %lld", (long long)h.ffn);
        printf(")\n");
    }
    printf("tokenizer       %s", h.tokenizer_model.empty() ? "(none)" : h.tokenizer_model.c_str());
    if (!h.tokenizer_pre.empty()) printf(" (pre %s)", h.tokenizer_pre.c_str());
    printf(", %lld tokens, chat template: %s\n", (long long)h.n_vocab, h.chat_template ? "yes" : "no");
    if (s.n_tensors == 0) {
        printf("tensors         none (a vocabulary-only file)\n");
        return;
    }
    printf("parameters      %s total, %s active per token\n", format_count(double(s.params)).c_str(),
           format_count(double(s.active_params)).c_str());
    printf("bytes by class\n");
    for (int c = 0; c < kTensorClassCount; ++c) {
        if (c == int(TensorClass::Unused) && !s.bytes_by_class[c]) continue;
        printf("  %-16s %12s  %5.1f%%  (%s params)\n", tensor_class_name(TensorClass(c)),
               format_bytes(double(s.bytes_by_class[c])).c_str(),
               s.tensor_bytes ? 100.0 * double(s.bytes_by_class[c]) / double(s.tensor_bytes) : 0.0,
               format_count(double(s.params_by_class[c])).c_str());
    }
    if (!s.moe_layers.empty()) {
        const MoeLayer& l0 = s.moe_layers[0];
        printf("per expert      %s avg (%llu bytes), min %s, max %s, over %zu MoE layers\n",
               format_bytes(s.expert_bytes_avg).c_str(), (unsigned long long)std::llround(s.expert_bytes_avg),
               format_bytes(double(s.expert_bytes_min)).c_str(), format_bytes(double(s.expert_bytes_max)).c_str(),
               s.moe_layers.size());
        printf("                %d byte ranges per expert in the GGUF (%s slices)\n", s.expert_ranges_max,
               range_names(f, l0).c_str());
        if (s.expert_side_bytes)
            printf("                plus per-expert bias/scale tensors, %s in all (kept resident)\n",
                   format_bytes(double(s.expert_side_bytes)).c_str());
        if (!s.expert_bytes_as.empty()) {
            printf("                as other types (all matrices):");
            for (size_t i = 0; i < s.expert_bytes_as.size(); i++)
                printf("%s %s %s", i ? "," : "", type_name(s.expert_bytes_as[i].first),
                       format_bytes(s.expert_bytes_as[i].second).c_str());
            printf("\n");
        }
    }
    printf("quant types\n");
    for (const TypeUse& u : s.types)
        printf("  %-8s %12s  %5.1f%%  %4d tensors\n", type_name(u.type), format_bytes(double(u.bytes)).c_str(),
               s.tensor_bytes ? 100.0 * double(u.bytes) / double(s.tensor_bytes) : 0.0, u.tensors);
    if (h.arch == "deepseek4") {
        printf("memory          context %lld: attention state (F32) %s = %s fixed (windows, unpooled tokens) + %llu "
               "bytes a token (compressed blocks, indexer keys) against %llu for full F16 K/V",
               (long long)s.mem.ctx, format_bytes(double(s.mem.kv_bytes)).c_str(),
               format_bytes(double(s.mem.state_bytes)).c_str(), (unsigned long long)s.mem.kv_token_bytes,
               (unsigned long long)s.mem.full_kv_token_bytes);
    } else {
        printf("memory          context %lld: KV cache (F16) %s", (long long)s.mem.ctx,
               format_bytes(double(s.mem.kv_bytes)).c_str());
    }
    if (s.mem.state_bytes && h.arch != "deepseek4") printf(" incl. recurrent state %s", format_bytes(double(s.mem.state_bytes)).c_str());
    if (h.kv_lora_rank > 0 && s.mem.full_kv_token_bytes > 0) {
        printf("\n  MLA cache         %llu bytes a token (compressed rows: kv_lora %lld + rope %lld per layer) against "
               "%llu for full K/V, %.1fx less",
               (unsigned long long)s.mem.kv_token_bytes, (long long)h.kv_lora_rank, (long long)h.rope_dim,
               (unsigned long long)s.mem.full_kv_token_bytes,
               double(s.mem.full_kv_token_bytes) / double(std::max<uint64_t>(s.mem.kv_token_bytes, 1)));
    }
    printf("\n  experts streamed  %s = resident + KV + %lld x largest expert + logits\n",
           format_bytes(double(s.mem.ram_streaming)).c_str(), (long long)h.n_expert_used);
    printf("  all in RAM        %s = all weights read by decoding + KV + logits\n",
           format_bytes(double(s.mem.ram_all)).c_str());
    if (s.synth.present) {
        int top10 = int(std::ceil(double(h.n_expert) / 10));
        printf("synthetic       preset %s, seed %llu, router skew %g\n", s.synth.preset.c_str(),
               (unsigned long long)s.synth.seed, s.synth.router_skew);
        if (!s.synth.popularity.empty() && h.n_expert) {
            double uniform = 1.0 / double(h.n_expert);
            printf("  expected expert popularity (calibrated, mean over layers; uniform would be %.2f%% each):\n",
                   100 * uniform);
            printf("  top 1 expert %.2f%%, top %lld %.1f%%, top %d (10%%) %.1f%% of selections\n",
                   100 * top_expert_share(s.synth.popularity, 1), (long long)h.n_expert_used,
                   100 * top_expert_share(s.synth.popularity, int(h.n_expert_used)), top10,
                   100 * top_expert_share(s.synth.popularity, top10));
            std::vector<double> t =
                zipf_targets(int(h.n_expert), int(h.n_expert_used), s.synth.router_skew, kRouterCap);
            printf("  target law 1/rank^%g (one expert capped at %.0f%% of tokens): top 1 %.2f%%, top %lld %.1f%%\n",
                   s.synth.router_skew, 100 * kRouterCap, 100 * top_expert_share({t}, 1), (long long)h.n_expert_used,
                   100 * top_expert_share({t}, int(h.n_expert_used)));
        }
    }
    if (with_tensors) {
        printf("tensors\n");
        for (size_t i = 0; i < f.tensors().size(); ++i) {
            const GgufTensor& t = f.tensors()[i];
            printf("  %-36s %-6s %-24s %12s  %s\n", t.name.c_str(), type_name(t.type), shape_text(t).c_str(),
                   format_bytes(double(t.nbytes)).c_str(), tensor_class_name(s.tensor_class[i]));
        }
    }
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
    std::vector<std::string> pos;
    bool json = false, tensors = false;
    int64_t ctx = 0;
    Args args("moestream inspect MODEL.gguf [--json] [--ctx N] [--tensors]",
              "Describes a GGUF model (a split set opens from its first file): architecture and hyper-parameters,\n"
              "tokenizer, parameter counts, bytes by class (resident / routed experts / embedding rows), bytes and\n"
              "file byte ranges per expert, the quant-type mix, and the RAM a run needs. Memory formulas:\n"
              "  KV = 2 bytes x tokens x KV heads x (K dim + V dim), summed over attention layers (sliding-window\n"
              "       layers hold min(ctx, window) tokens, Llama 4's chunked ones min(ctx, chunk); MLA caches\n"
              "       kv_lora_rank + rope dims; recurrent layers keep a fixed F32 state)\n"
              "  experts streamed = resident + KV + experts-used x largest expert + logits (n_vocab x 4)\n"
              "  all in RAM = every weight decoding reads + KV + logits");
    args.positional(&pos, "MODEL.gguf", 1, 1);
    args.flag("--json", &json, "print one JSON object instead of text");
    args.option("-c,--ctx", &ctx, "N", "context length for the KV-cache figure (0: min(model context, 4096))");
    args.flag("--tensors", &tensors, "also list every tensor with its type, shape, bytes and class");
    if (!args.parse(argc, argv)) return 0;
    if (ctx < 0) throw std::runtime_error("--ctx must be >= 0");
    GgufFile f = GgufFile::open(pos[0]);
    ModelSummary s = summarize_model(f, ctx);
    if (json) printf("%s\n", to_json(f, s, tensors).dump(2).c_str());
    else print_text(f, s, tensors);
    return 0;
}

}  // namespace ms
