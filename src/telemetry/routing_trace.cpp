#include "telemetry/routing_trace.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace ms {

namespace {

constexpr const char* kMagic = "# moestream routing trace v1";

}  // namespace

RoutingTrace::RoutingTrace(int n_layer, int n_expert, int k)
    : n_layer_(n_layer), n_expert_(n_expert), k_(k), routed_(size_t(std::max(n_layer, 0)), false) {
    if (n_layer < 1 || n_expert < 1 || k < 1 || k > n_expert)
        throw std::runtime_error("routing trace: need layers >= 1 and 1 <= k <= experts");
}

void RoutingTrace::reserve(int64_t tokens) { ids_.reserve(size_t(tokens) * size_t(n_layer_) * size_t(k_)); }

void RoutingTrace::begin_call(int n_tokens) {
    if (n_tokens < 1) return;
    step_first_ = n_tokens_;
    n_tokens_ += n_tokens;
    ids_.resize(size_t(n_tokens_) * size_t(n_layer_) * size_t(k_), -1);
    call_tokens_ = n_tokens;
    cursor_.assign(size_t(n_layer_), 0);
}

void RoutingTrace::record(int layer, const int32_t* ids, int n_tok, int k) {
    if (layer < 0 || layer >= n_layer_ || k < 1 || k > k_ || n_tok < 1) return;
    if (call_tokens_ > 0) {
        int64_t& at = cursor_[size_t(layer)];
        const int64_t n = std::min<int64_t>(n_tok, call_tokens_ - at);
        routed_[size_t(layer)] = true;
        for (int64_t t = 0; t < n; t++) {
            int32_t* row = ids_.data() + (size_t(step_first_ + at + t) * size_t(n_layer_) + size_t(layer)) * size_t(k_);
            std::copy(ids + size_t(t) * size_t(k), ids + size_t(t + 1) * size_t(k), row);
        }
        at += n;
        return;
    }
    if (layer <= last_layer_ || n_tokens_ == 0) {
        step_first_ = n_tokens_;
        n_tokens_ += n_tok;
        ids_.resize(size_t(n_tokens_) * size_t(n_layer_) * size_t(k_), -1);
    }
    // A later layer of the same call covers the same tokens.
    n_tok = int(std::min<int64_t>(n_tok, n_tokens_ - step_first_));
    last_layer_ = layer;
    routed_[size_t(layer)] = true;
    for (int t = 0; t < n_tok; t++) {
        int32_t* row = ids_.data() + (size_t(step_first_ + t) * size_t(n_layer_) + size_t(layer)) * size_t(k_);
        std::copy(ids + size_t(t) * size_t(k), ids + size_t(t + 1) * size_t(k), row);
    }
}

void RoutingTrace::write(const std::string& path) const {
    FILE* f = fopen(path.c_str(), "w");
    if (!f) throw std::runtime_error(path + ": cannot write");
    fprintf(f, "%s layers=%d experts=%d k=%d tokens=%lld\n", kMagic, n_layer_, n_expert_, k_,
            (long long)n_tokens_);
    for (int64_t t = 0; t < n_tokens_; t++) {
        for (int l = 0; l < n_layer_; l++) {
            if (!routed_[size_t(l)]) continue;
            const int32_t* e = ids(t, l);
            fprintf(f, "%lld %d", (long long)t, l);
            for (int r = 0; r < k_ && e[r] >= 0; r++) fprintf(f, " %d", e[r]);
            fputc('\n', f);
        }
    }
    const bool ok = ferror(f) == 0;
    if (fclose(f) != 0 || !ok) throw std::runtime_error(path + ": write failed");
}

RoutingTrace RoutingTrace::read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(path + ": cannot open");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return parse(text, path);
}

RoutingTrace RoutingTrace::parse(const std::string& text, const std::string& name) {
    size_t line_no = 1;
    auto fail = [&](const std::string& what) {
        throw std::runtime_error(name + ":" + std::to_string(line_no) + ": " + what);
    };
    size_t eol = text.find('\n');
    const std::string head = text.substr(0, eol);
    int layers = 0, experts = 0, k = 0;
    long long tokens = 0;
    const std::string magic = kMagic;
    if (head.compare(0, magic.size(), magic) != 0) fail("not a moestream routing trace (first line)");
    if (sscanf(head.c_str() + magic.size(), " layers=%d experts=%d k=%d tokens=%lld", &layers, &experts, &k,
               &tokens) != 4 ||
        layers < 1 || layers > 512 || experts < 1 || experts > 65536 || k < 1 || k > experts || k > 64 ||
        tokens < 0)
        fail("bad header (expected layers=L experts=E k=K tokens=T, L <= 512, K <= 64, K <= E <= 65536)");
    // Lines first: every token has a line for every routed layer, so the
    // header's token count is checked against them before anything is
    // sized from it.
    struct Line {
        int64_t token;
        int layer, n;
        int32_t e[64];
    };
    std::vector<Line> lines;
    std::vector<bool> routed(size_t(layers), false);
    size_t at = eol == std::string::npos ? text.size() : eol + 1;
    while (at < text.size()) {
        line_no++;
        eol = text.find('\n', at);
        if (eol == std::string::npos) eol = text.size();
        const std::string line = text.substr(at, eol - at);
        at = eol + 1;
        if (line.empty()) continue;
        long v[66];
        int n = 0;
        const char* p = line.c_str();
        while (*p) {
            if (*p == ' ') {
                p++;
                continue;
            }
            if (n == k + 2) fail("more than k experts");
            char* end = nullptr;
            errno = 0;
            v[n++] = strtol(p, &end, 10);
            if (end == p || errno || (*end && *end != ' ')) fail("expected integers separated by spaces");
            p = end;
        }
        if (n < 3) fail("expected: token layer expert...");
        if (v[0] < 0 || v[0] >= tokens) fail("token " + std::to_string(v[0]) + " outside the header's count");
        if (v[1] < 0 || v[1] >= layers) fail("layer " + std::to_string(v[1]) + " outside the header's count");
        Line L{v[0], int(v[1]), n - 2, {}};
        for (int r = 0; r < L.n; r++) {
            if (v[r + 2] < 0 || v[r + 2] >= experts)
                fail("expert " + std::to_string(v[r + 2]) + " outside the header's count");
            for (int q = 0; q < r; q++)
                if (L.e[q] == v[r + 2]) fail("expert " + std::to_string(v[r + 2]) + " listed twice");
            L.e[r] = int32_t(v[r + 2]);
        }
        routed[size_t(L.layer)] = true;
        lines.push_back(L);
    }
    const int64_t n_routed = std::count(routed.begin(), routed.end(), true);
    if (int64_t(lines.size()) != tokens * n_routed)
        fail(std::to_string(lines.size()) + " lines for " + std::to_string(tokens) + " tokens x " +
             std::to_string(n_routed) + " routed layers");
    if (double(tokens) * layers * k > double(int64_t(1) << 26))
        fail("trace too large for one analysis (tokens x layers x k above 2^26)");
    RoutingTrace tr(layers, experts, k);
    tr.n_tokens_ = tokens;
    tr.routed_ = routed;
    tr.ids_.assign(size_t(tokens) * size_t(layers) * size_t(k), -1);
    for (const Line& L : lines) {
        int32_t* row = tr.ids_.data() + (size_t(L.token) * size_t(layers) + size_t(L.layer)) * size_t(k);
        if (row[0] >= 0) throw std::runtime_error(name + ": token " + std::to_string(L.token) + " layer " +
                                                  std::to_string(L.layer) + " listed twice");
        std::copy(L.e, L.e + L.n, row);
    }
    return tr;
}

}  // namespace ms
