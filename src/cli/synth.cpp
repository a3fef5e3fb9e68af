// moestream synth: writes a synthetic model of a real architecture (see
// synth/synth.h) with a progress bar, then reports size and write rate.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "json/json.h"
#include "synth/synth.h"

namespace ms {

int cmd_synth(int argc, char** argv) {
    std::string preset = "tiny", out, type, vocab, bands, own, gate;
    int layers = 0, experts = 0, experts_used = 0, n_embd = 0, ffn = 0, heads = 0, kv_heads = 0, head_dim = 0;
    int64_t context = 0, seed = 1;
    double skew = -1, locality = -1, sharpness = -1, fade = -1;
    bool json = false, dry_run = false;
    std::string presets;
    for (const std::string& n : synth_preset_names()) presets += (presets.empty() ? "" : ", ") + n;
    Args args("moestream synth --preset NAME -o OUT.gguf [--type T] [overrides] [--router-skew S] [--router-locality L] [--seed N]",
              "Writes a synthetic model of a real architecture: real tensor names, shapes and metadata, a\n"
              "vocabulary, and random but valid quantized weights (scaled so activations stay sane).\n"
              "The vocabulary is generated (nothing is read from disk): byte-level BPE learned from public-domain\n"
              "English text compiled into the binary, padded to the preset's size with tokens that encoding never\n"
              "produces, with ChatML special tokens and chat template (mixtral-8x7b: SentencePiece with [INST]).\n"
              "English text splits into tokens about as a real vocabulary splits it (what routing depends on),\n"
              "with other ids. --vocab FILE.gguf copies the tokenizer (and its size) of a model or vocabulary\n"
              "GGUF instead.\n"
              "Presets (qwen3moe): tiny (a few MB demo: 6 layers, 16 experts top-4, n_embd 256, ~500-token\n"
              "vocabulary), qwen3-30b-a3b (48 layers, 128 experts top-8, n_embd 2048, expert FFN 768, 32/4 heads\n"
              "x 128, Qwen3's vocabulary size), qwen3-235b-a22b (94 layers, 128 experts top-8, n_embd 4096, FFN 1536,\n"
              "64/4 heads). Other families, at their published shapes: mixtral-8x7b (llama: 32 layers, 8 experts\n"
              "top-2, n_embd 4096, FFN 14336), gpt-oss-120b (36 layers, 128 experts top-4, n_embd 2880, MXFP4\n"
              "experts), deepseek-v3 (deepseek2: 61 layers, 3 dense, 256 experts top-8 + 1 shared, n_embd 7168,\n"
              "MLA), glm-4.5-air (glm4moe: 46 layers, 1 dense, 128 experts top-8 + 1 shared, n_embd 4096),\n"
              "qwen3.5-397b-a17b (qwen35moe: 60 layers, 3 of 4 Gated DeltaNet, 512 experts top-10 + 1 shared,\n"
              "n_embd 4096), qwen3.5-35b-a3b (40 layers, 256 experts top-8 + 1 shared, n_embd 2048), glm-5\n"
              "(glm-dsa: 78 layers, 3 dense, 256 experts top-8 + 1 shared, MLA with a lightning indexer),\n"
              "llama4-scout / llama4-maverick (48 layers, 16 / 128 experts top-1 + 1 shared, every / every other\n"
              "layer routed), minimax-m2 (62 layers, 256 experts top-8, n_embd 3072), deepseek-v4-flash\n"
              "(deepseek4: 43 layers, 256 experts top-6 + 1 shared, first 3 hash-routed, compressed attention,\n"
              "4 residual streams, MXFP4 experts).\n"
              "Every preset with experts but tiny carries a routing design fitted to published figures\n"
              "(minimax-m2's, glm-4.5-air's, the llama4 ones' and deepseek-v4-flash's borrowed from other\n"
              "families; docs/routing.md says how close each comes); --router-locality 0 gives the plain\n"
              "random network, whose routing collapses onto a few experts per layer with depth.\n"
              "Use --layers to fit a disk.\n"
              "Flags left at 0 keep the preset's value. Expert popularity per layer and the router skew are\n"
              "stored under moestream.synth.* and shown by `moestream inspect`.");
    args.option("--preset", &preset, "NAME", ("model shape: " + presets).c_str());
    args.option("-o,--output", &out, "OUT.gguf", "file to write (required)");
    args.option("--type", &type, "T",
                "weights: Q4_K_M (Q4_K; Q6_K head, ffn_down and attn_v on use_more_bits layers), Q8_0, "
                "MXFP4 (experts MXFP4, rest Q8_0) or F16; norms and routers are F32 (default: the preset's, "
                "Q4_K_M except gpt-oss-120b's and deepseek-v4-flash's MXFP4)");
    args.option("--layers", &layers, "N", "number of layers");
    args.option("--experts", &experts, "N", "routed experts per layer");
    args.option("--experts-used", &experts_used, "N", "experts selected per token");
    args.option("--n-embd", &n_embd, "N", "embedding width (multiple of 32; 256 for K-quants)");
    args.option("--ffn", &ffn, "N", "expert FFN width (multiple of 32; 256 for K-quants)");
    args.option("--heads", &heads, "N", "query heads");
    args.option("--kv-heads", &kv_heads, "N", "key/value heads (divides --heads)");
    args.option("--head-dim", &head_dim, "N", "head dimension");
    args.option("--context", &context, "N", "context_length written to the metadata");
    args.option("--vocab", &vocab, "FILE",
                "GGUF (a model or a vocabulary-only file) whose tokenizer.* keys are copied, with its vocabulary "
                "size (default: a generated vocabulary of the preset's size)");
    args.option("--router-skew", &skew, "S",
                "expert popularity ~ 1/rank^S within each layer (0 = uniform; one expert is capped at 45% of "
                "tokens, since no router can pick one expert for more than half of symmetric inputs; default: "
                "the preset's)");
    args.option("--router-sharpness", &sharpness, "W",
                "how fast the recency window's attention falls with distance, relative to the qwen3 presets' "
                "(families other than qwen3moe): lower means a broader window, more experts shared by nearby "
                "tokens and fewer used in all (default: the preset's, fitted to its family's published routing)");
    args.option("--router-locality", &locality, "L",
                "how much of the last few dozen tokens each router sees beside the current token (the value "
                "scale of a recency-window attention built into the weights): higher means more experts shared "
                "by nearby tokens; 0 gives a plain random network, whose routing collapses onto a few experts "
                "after the first layers (default: the preset's, chosen so the qwen3 presets route like the "
                "trained models on English text: docs/routing.md)");
    args.option("--router-fade", &fade, "D",
                "how the locality fades with depth: layer l's is L / sqrt(1 + D l); higher means deep layers "
                "see less recent context (default: the preset's, 0.5 unless its fit needed another: "
                "docs/routing.md)");
    args.option("--router-bands", &bands, "A,B,C",
                "the locality's scale in the first, middle and last third of the layers, on top of the fade "
                "(default: the preset's, 1,1,1 unless its fit needed another depth profile: docs/routing.md)");
    args.option("--router-own", &own, "A,B,C",
                "keep n_embd/16 residual channels that no layer writes, so they hold each token's embedding "
                "alone, and weigh them A, B and C in the first, middle and last third's routers (and experts): "
                "above 1 a third's routers see less of the context that earlier layers wrote, which its own "
                "locality cannot take back; 0,0,0 keeps no such channels (families with position-only "
                "attention: gpt-oss, mixtral, glm-4.5-air, llama4, minimax-m2; default: the preset's, 0,0,0 "
                "unless its fit needed it: docs/routing.md)");
    args.option("--router-gate", &gate, "token|steady",
                "qwen3.5 presets: the Gated DeltaNet layers' output gate reads each token's own residual "
                "(token) or the carrier alone, the same for every token (steady), so the context their "
                "state holds reaches the routers instead of being masked token by token (default: the "
                "preset's, steady for qwen3.5-35b-a3b: docs/routing.md)");
    args.option("--seed", &seed, "N", "random seed (same seed and flags give the same file)");
    args.flag("--dry-run", &dry_run,
              "write nothing: print what the file would hold (bytes in all, resident bytes, routed expert bytes, "
              "one expert's bytes), e.g. to size a full model before writing a --layers cut of it");
    args.flag("--json", &json, "print the result (bytes, seconds, MB/s; with --dry-run the sizes) as JSON on stdout");
    if (!args.parse(argc, argv)) return 0;
    if (out.empty() && !dry_run) throw std::runtime_error("missing -o OUT.gguf (see --help)");

    SynthSpec s = synth_preset(preset);
    if (!type.empty()) s.recipe = type;
    if (layers) s.n_layer = layers;
    if (experts) s.n_expert = experts;
    if (experts_used) s.n_expert_used = experts_used;
    if (n_embd) s.n_embd = n_embd;
    if (ffn) s.expert_ffn = ffn;
    if (heads) s.n_head = heads;
    if (kv_heads) s.n_head_kv = kv_heads;
    if (head_dim) s.head_dim = head_dim;
    if (context) s.context = context;
    if (!vocab.empty()) s.vocab_path = vocab;
    if (skew >= 0) s.router_skew = skew;
    if (locality >= 0) s.router_locality = locality;
    if (sharpness >= 0) s.router_sharpness = sharpness;
    if (fade >= 0) s.router_fade = fade;
    // Three comma-separated numbers into a per-third setting.
    auto thirds = [](const std::string& text, const char* flag, std::array<double, 3>& to) {
        std::istringstream in(text);
        std::string part;
        for (size_t i = 0; i < 3; i++) {
            char* end = nullptr;
            if (!std::getline(in, part, ',') || part.empty() ||
                (to[i] = std::strtod(part.c_str(), &end), *end != '\0'))
                throw std::runtime_error(std::string(flag) + " takes three numbers, A,B,C");
        }
        if (std::getline(in, part, ',')) throw std::runtime_error(std::string(flag) + " takes three numbers, A,B,C");
    };
    if (!bands.empty()) thirds(bands, "--router-bands", s.router_bands);
    if (!own.empty()) thirds(own, "--router-own", s.router_own);
    if (gate == "steady" || gate == "token") s.router_steady_gate = gate == "steady";
    else if (!gate.empty()) throw std::runtime_error("--router-gate takes token or steady");
    s.seed = uint64_t(seed);
    validate_spec(s);
    if (dry_run) {
        const SynthSizes z = synth_sizes(s);
        if (json) {
            Json j = Json::object();
            j["preset"] = s.preset;
            j["arch"] = s.arch;
            j["type"] = s.recipe;
            j["layers"] = s.n_layer;
            j["moe_layers"] = z.moe_layers;
            j["experts_per_layer"] = s.n_expert;
            j["experts_used"] = s.n_expert_used;
            j["n_vocab"] = z.n_vocab;
            j["tensors"] = z.n_tensors;
            j["bytes"] = z.total;
            j["resident_bytes"] = z.resident;
            j["expert_bytes"] = z.experts;
            j["one_expert_bytes"] = z.one_expert;
            j["routed_bytes_per_token"] = uint64_t(z.moe_layers) * uint64_t(s.n_expert_used) * z.one_expert;
            printf("%s\n", j.dump(2).c_str());
        } else {
            printf("%s (%s, %s): %d layers (%d with %d experts, %d used), vocabulary %lld\n", s.preset.c_str(),
                   s.arch.c_str(), s.recipe.c_str(), s.n_layer, z.moe_layers, s.n_expert, s.n_expert_used,
                   (long long)z.n_vocab);
            printf("  would write %s: resident %s, routed experts %s (one expert %s; %s routed a token)\n",
                   format_bytes(double(z.total)).c_str(), format_bytes(double(z.resident)).c_str(),
                   format_bytes(double(z.experts)).c_str(), format_bytes(double(z.one_expert)).c_str(),
                   format_bytes(double(z.moe_layers) * s.n_expert_used * double(z.one_expert)).c_str());
            if (z.rows > 0)
                printf("  per-layer embedding rows %s (%s a token), read like experts\n",
                       format_bytes(double(z.rows)).c_str(), format_bytes(double(z.rows) / double(z.n_vocab)).c_str());
        }
        return 0;
    }

    std::unique_ptr<ProgressBar> bar;  // made at the first report, when the total is known
    SynthResult r = write_synth_model(s, out, [&](uint64_t done, uint64_t total) {
        if (!bar) bar = std::make_unique<ProgressBar>("synth", total);
        bar->update(done);
    });
    if (bar) bar->finish();
    double mbps = r.seconds > 0 ? double(r.bytes) / 1e6 / r.seconds : 0;
    if (json) {
        Json j = Json::object();
        j["output"] = out;
        j["preset"] = s.preset;
        j["type"] = s.recipe;
        j["bytes"] = r.bytes;
        j["tensors"] = r.n_tensors;
        j["seconds"] = r.seconds;
        j["mb_per_s"] = mbps;
        printf("%s\n", j.dump(2).c_str());
    } else {
        printf("wrote %s: %d tensors, %s in %.2f s (%.0f MB/s)\n", out.c_str(), r.n_tensors,
               format_bytes(double(r.bytes)).c_str(), r.seconds, mbps);
    }
    return 0;
}

}  // namespace ms
