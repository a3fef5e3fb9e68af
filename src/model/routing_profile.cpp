#include "model/routing_profile.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "json/json.h"

namespace ms {

namespace {

const char* kFormat = "moestream routing profile";

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw std::runtime_error(path + ": " + what);
}

// A count: a non-negative integer below 2^53 (exact in a double).
uint64_t count(const Json& v, const std::string& path, const char* what) {
    if (!v.is_int() || v.as_int() < 0 || v.as_int() > (int64_t(1) << 53)) fail(path, std::string(what) + " is not a count");
    return uint64_t(v.as_int());
}

}  // namespace

RoutingProfile RoutingProfile::read(const std::string& path, int n_layer, int n_expert) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return RoutingProfile(n_layer, n_expert);
    std::ifstream f(path, std::ios::binary);
    if (!f) fail(path, std::string("cannot open: ") + std::strerror(errno));
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return parse(text, path, n_layer, n_expert);
}

RoutingProfile RoutingProfile::parse(std::string_view text, const std::string& path, int n_layer, int n_expert) {
    RoutingProfile p(n_layer, n_expert);
    Json j;
    try {
        JsonLimits limits;
        limits.max_bytes = size_t(64) << 20;
        limits.max_depth = 4;
        j = Json::parse(text, path, limits);
    } catch (const std::runtime_error& e) {
        const std::string m = e.what();
        throw std::runtime_error(m.rfind(path, 0) == 0 ? m : path + ": " + m);
    }
    if (!j.is_object()) fail(path, "not a routing profile (not a JSON object)");
    const Json* format = j.find("format");
    if (!format || !format->is_string() || format->as_string() != kFormat) {
        fail(path, std::string("not a routing profile (no \"format\": \"") + kFormat + "\")");
    }
    const Json* layers = j.find("layers");
    const Json* experts = j.find("experts");
    const Json* uses = j.find("uses");
    const Json* tokens = j.find("tokens");
    if (!layers || !experts || !uses || !tokens) fail(path, "needs \"layers\", \"experts\", \"tokens\" and \"uses\"");
    const uint64_t fl = count(*layers, path, "\"layers\""), fe = count(*experts, path, "\"experts\"");
    if (fl != uint64_t(n_layer) || fe != uint64_t(n_expert)) {
        fail(path, "written for " + std::to_string(fl) + " layers of " + std::to_string(fe) +
                       " experts; this model has " + std::to_string(n_layer) + " of " + std::to_string(n_expert) +
                       " (another model's profile?)");
    }
    p.tokens = count(*tokens, path, "\"tokens\"");
    if (!uses->is_array() || uses->size() != size_t(n_layer)) {
        fail(path, "\"uses\" is not an array of " + std::to_string(n_layer) + " layers");
    }
    for (int l = 0; l < n_layer; l++) {
        const Json& row = (*uses)[size_t(l)];
        if (!row.is_array() || row.size() != size_t(n_expert)) {
            fail(path, "\"uses\"[" + std::to_string(l) + "] is not an array of " + std::to_string(n_expert) + " counts");
        }
        for (int e = 0; e < n_expert; e++) p.at(l, e) = count(row[size_t(e)], path, "a use count");
    }
    return p;
}

void RoutingProfile::merge_into(const std::string& path, const RoutingProfile& now) {
    RoutingProfile old = read(path, now.n_layer, now.n_expert);
    Json j = Json::object();
    j["format"] = kFormat;
    j["layers"] = now.n_layer;
    j["experts"] = now.n_expert;
    j["tokens"] = old.tokens / 2 + now.tokens;
    Json uses = Json::array();
    for (int l = 0; l < now.n_layer; l++) {
        Json row = Json::array();
        for (int e = 0; e < now.n_expert; e++) row.push_back(old.at(l, e) / 2 + now.at(l, e));
        uses.push_back(std::move(row));
    }
    j["uses"] = std::move(uses);
    const std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f) fail(path, std::string("cannot write ") + tmp + ": " + std::strerror(errno));
        f << j.dump() << "\n";
        if (!f.flush()) fail(path, std::string("cannot write ") + tmp + ": " + std::strerror(errno));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(path, std::string("cannot replace: ") + std::strerror(errno));
}

std::vector<std::pair<int, int>> RoutingProfile::hottest(size_t max) const {
    std::vector<std::pair<int, int>> out;
    for (int l = 0; l < n_layer; l++) {
        for (int e = 0; e < n_expert; e++) {
            if (at(l, e) > 0) out.emplace_back(l, e);
        }
    }
    std::stable_sort(out.begin(), out.end(),
                     [&](const auto& a, const auto& b) { return at(a.first, a.second) > at(b.first, b.second); });
    if (out.size() > max) out.resize(max);
    return out;
}

}  // namespace ms
