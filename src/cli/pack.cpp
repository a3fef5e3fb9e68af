// moestream pack: writes the packed expert sidecar MODEL.gguf.experts (each
// expert's gate|up|down contiguous, 4 KiB aligned, xxh3-checksummed, the
// header fingerprinting the model), or checks one with --verify.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "gguf/gguf.h"
#include "json/json.h"
#include "store/layout.h"
#include "telemetry/build_info.h"

namespace ms {

namespace {

const char kSuffix[] = ".experts";

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

int cmd_pack(int argc, char** argv) {
    Args args("moestream pack MODEL.gguf [-o OUT] | moestream pack --verify SIDECAR-or-MODEL",
              "Writes the packed expert sidecar: every routed expert's gate, up and down bytes in one\n"
              "contiguous, 4 KiB-aligned record with an xxh3 checksum, behind a header that fingerprints\n"
              "the model (size, mtime, tensor table). `run --layout auto` (the default) uses it when it\n"
              "sits next to the model: one O_DIRECT read per expert instead of three. --verify checks a\n"
              "sidecar's fingerprint against its model and every expert's checksum.");
    std::vector<std::string> pos;
    std::string out;
    bool verify = false, json = false;
    args.positional(&pos, "MODEL.gguf", 1, 1);
    args.option("-o,--output", &out, "OUT", "sidecar path (default: MODEL.gguf.experts)");
    args.flag("--verify", &verify, "check an existing sidecar (give the sidecar or its model) instead of writing");
    args.flag("--json", &json, "print the result as JSON on stdout");
    if (!args.parse(argc, argv)) return 0;

    std::string model = pos[0], sidecar = out;
    if (verify && ends_with(model, kSuffix)) {
        // Given a sidecar: its model sits next to it, or where the header says.
        sidecar = model;
        model = model.substr(0, model.size() - (sizeof kSuffix - 1));
        if (access(model.c_str(), F_OK) != 0) model = sidecar_source(sidecar);
    }
    if (sidecar.empty()) sidecar = sidecar_path(model);

    GgufFile f = GgufFile::open(model);
    std::vector<ExpertLayer> layers = find_expert_layers(f);
    uint64_t total = 0, experts = 0;
    for (const ExpertLayer& L : layers) total += L.expert_bytes() * uint64_t(L.n_expert), experts += uint64_t(L.n_expert);

    Json j = Json::object();
    j["model"] = model;
    j["build"] = build_info();
    j["sidecar"] = sidecar;
    if (verify) {
        ProgressBar bar("verify", total);
        VerifyResult r = verify_sidecar(f, layers, sidecar, [&](uint64_t done, uint64_t) { bar.update(done); });
        bar.finish();
        j["ok"] = true;
        j["experts"] = r.experts;
        j["expert_bytes"] = r.bytes;
        if (json) printf("%s\n", j.dump(2).c_str());
        else printf("%s: ok: %llu experts, %s checked against %s\n", sidecar.c_str(), (unsigned long long)r.experts,
                    format_bytes(double(r.bytes)).c_str(), model.c_str());
        return 0;
    }
    ProgressBar bar("pack", total);
    write_sidecar(f, layers, sidecar, [&](uint64_t done, uint64_t) { bar.update(done); });
    bar.finish();
    ExpertLayout lay = ExpertLayout::packed(f, layers, sidecar);  // reads back the header it just wrote
    int n_moe = 0;
    for (const ExpertLayer& L : layers) n_moe += L.n_expert > 0;
    j["experts"] = experts;
    j["moe_layers"] = n_moe;
    j["expert_bytes"] = total;
    j["slot_bytes"] = lay.slot_bytes();
    if (json) printf("%s\n", j.dump(2).c_str());
    else printf("wrote %s: %llu experts in %d layers, %s of expert weights\n", sidecar.c_str(),
                (unsigned long long)experts, n_moe, format_bytes(double(total)).c_str());
    return 0;
}

}  // namespace ms
