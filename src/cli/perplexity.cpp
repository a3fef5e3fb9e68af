// moestream perplexity: exp(mean negative log-likelihood) of a text under
// the model, over non-overlapping windows of the context length, streamed
// through the store like every other command (llama.cpp's `perplexity`).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/session_flags.h"
#include "json/json.h"
#include "telemetry/build_info.h"

namespace ms {

namespace {

// -log softmax(row)[target], in double so long texts sum without drift.
double token_nll(const float* row, int64_t n_vocab, int32_t target) {
    float mx = row[0];
    for (int64_t i = 1; i < n_vocab; i++) mx = std::max(mx, row[i]);
    double sum = 0;
    for (int64_t i = 0; i < n_vocab; i++) sum += std::exp(double(row[i]) - double(mx));
    return std::log(sum) + double(mx) - double(row[target]);
}

}  // namespace

int cmd_perplexity(int argc, char** argv) {
    Args a("moestream perplexity -m MODEL -f TEXT [-c N] [--chunks N] [--json]",
           "Perplexity of the text under the model: the text is tokenized whole and cut into non-overlapping "
           "windows of N tokens (-c), each evaluated from an empty cache; every token of a window is predicted "
           "from the ones before it in that window, so the first one is not scored (with a model that adds BOS, "
           "each window starts with BOS and all its text tokens are scored). Prints exp(mean negative "
           "log-likelihood) over all scored tokens. Experts stream from the drive under --mem like run.");
    SessionFlags flags;
    flags.ctx = 512;
    std::string path;
    int chunks = 0;
    bool json = false;
    a.option("-f,--file", &path, "FILE", "the text to score");
    a.option("--chunks", &chunks, "N", "score only the first N windows (0: all)");
    a.flag("--json", &json, "print the result as JSON on stdout (perplexity, tokens, windows, per-window values)");
    flags.declare(a, false);
    if (!a.parse(argc, argv)) return 0;
    if (path.empty()) throw std::runtime_error("no text given (-f FILE)");
    if (chunks < 0) throw std::runtime_error("--chunks must be >= 0");
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error(path + ": cannot open");
    const std::string text(std::istreambuf_iterator<char>(f), {});

    auto s = flags.open();
    const int64_t V = s->config().n_vocab;
    const bool bos = s->tokenizer().add_bos();
    const std::vector<int32_t> ids = s->tokenize(text, false);
    const int64_t window = s->n_ctx() - (bos ? 1 : 0);  // text tokens a window holds
    if (window < 2) throw std::runtime_error("-c must leave room for at least 2 tokens a window");
    int64_t n_windows = 0;
    for (int64_t at = 0; at < int64_t(ids.size()); at += window) {
        if (int64_t(ids.size()) - at >= (bos ? 1 : 2)) n_windows++;  // a window must score at least one token
    }
    if (chunks > 0) n_windows = std::min<int64_t>(n_windows, chunks);
    if (n_windows == 0) throw std::runtime_error(path + ": too short to score (" + std::to_string(ids.size()) + " tokens)");

    std::vector<float> logits(size_t(s->n_ctx()) * size_t(V));
    std::vector<int32_t> win;
    Json per_window = Json::array();
    double nll = 0;
    int64_t scored = 0;
    ProgressBar bar("perplexity", uint64_t(n_windows), false);
    for (int64_t w = 0; w < n_windows; w++) {
        const int64_t at = w * window, n = std::min<int64_t>(window, int64_t(ids.size()) - at);
        win.clear();
        if (bos) win.push_back(s->tokenizer().bos());
        win.insert(win.end(), ids.begin() + at, ids.begin() + at + n);
        s->rewind(0);
        s->prefill_all(win, logits.data());
        double w_nll = 0;
        for (size_t i = 1; i < win.size(); i++) w_nll += token_nll(&logits[(i - 1) * size_t(V)], V, win[i]);
        nll += w_nll;
        scored += int64_t(win.size()) - 1;
        per_window.push_back(Json(std::exp(w_nll / double(win.size() - 1))));
        bar.update(uint64_t(w + 1));
    }
    bar.finish();
    const double ppl = std::exp(nll / double(scored));
    if (json) {
        Json j = Json::object();
        j["model"] = flags.model;
        j["build"] = build_info(flags.gpu != "off");
        j["file"] = path;
        j["perplexity"] = ppl;
        j["mean_nll"] = nll / double(scored);
        j["tokens"] = int64_t(ids.size());
        j["tokens_scored"] = scored;
        j["windows"] = n_windows;
        j["ctx"] = s->n_ctx();
        j["window_perplexity"] = per_window;
        printf("%s\n", j.dump(2).c_str());
    } else {
        printf("perplexity: %.4f over %lld tokens (%lld windows of %lld)\n", ppl, (long long)scored,
               (long long)n_windows, (long long)s->n_ctx());
    }
    fflush(stdout);
    flags.finish("perplexity", *s);
    return 0;
}

}  // namespace ms
