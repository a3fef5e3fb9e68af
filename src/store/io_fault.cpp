// Injected faults (make_fault_engine in io.h): a wrapper around any engine
// that makes chosen (layer, expert) reads fail, come back short, arrive late
// or arrive damaged, so tests can hold the store to "a clear error or a
// correct answer" on every engine.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <vector>

#include "store/io.h"

namespace ms {

namespace {

using Clock = std::chrono::steady_clock;

// "eio", "short", "corrupt" or "slow=MS", then "@LAYER:EXPERT" (each a number
// or *), then optionally "xN" (the first N matching reads only).
FaultRule parse_rule(const std::string& text) {
    auto bad = [&](const std::string& why) {
        return std::runtime_error("--io-faults: '" + text + "': " + why +
                                  " (expected KIND@LAYER:EXPERT[xN], KIND one of eio, short, corrupt, slow=MS)");
    };
    auto number = [&](const std::string& s) {
        if (s == "*") return -1;
        if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
            throw bad("'" + s + "' is not a number or *");
        return std::stoi(s);
    };
    FaultRule r;
    const size_t at = text.find('@');
    if (at == std::string::npos) throw bad("no @");
    const std::string kind = text.substr(0, at);
    if (kind == "eio") {
        r.kind = FaultKind::Eio;
    } else if (kind == "short") {
        r.kind = FaultKind::Short;
    } else if (kind == "corrupt") {
        r.kind = FaultKind::Corrupt;
    } else if (kind.rfind("slow=", 0) == 0) {
        r.kind = FaultKind::Slow;
        r.ms = number(kind.substr(5));
        if (r.ms < 0) throw bad("slow needs milliseconds");
    } else {
        throw bad("unknown kind '" + kind + "'");
    }
    std::string where = text.substr(at + 1);
    const size_t x = where.find('x');
    if (x != std::string::npos) {
        r.count = number(where.substr(x + 1));
        if (r.count < 0) throw bad("x needs a count");
        where = where.substr(0, x);
    }
    const size_t colon = where.find(':');
    if (colon == std::string::npos) throw bad("no LAYER:EXPERT");
    r.layer = number(where.substr(0, colon));
    r.expert = number(where.substr(colon + 1));
    return r;
}

class FaultEngine : public IoEngine {
public:
    FaultEngine(std::unique_ptr<IoEngine> inner, std::vector<FaultRule> rules, FaultLocator locate)
        : inner_(std::move(inner)), rules_(std::move(rules)), locate_(std::move(locate)) {}

    const char* name() const override { return inner_->name(); }
    bool wants_direct() const override { return inner_->wants_direct(); }
    void register_memory(void* base, size_t bytes, size_t unit) override {
        inner_->register_memory(base, bytes, unit);
        note_ = inner_->note();
    }

    void submit(const IoRequest* reqs, size_t n) override {
        for (size_t i = 0; i < n; i++) {
            IoRequest r = reqs[i];
            FaultRule* rule = match(r);
            if (!rule) {
                inner_->submit(&r, 1);
                continue;
            }
            switch (rule->kind) {
                case FaultKind::Eio:
                    ready_.push_back({r.tag, -EIO});
                    break;
                case FaultKind::Short:
                    // Whole pages, so the rest stays O_DIRECT-aligned for the retry.
                    r.len = std::max<uint64_t>(4096, r.len / 2 / 4096 * 4096);
                    inner_->submit(&r, 1);
                    break;
                case FaultKind::Slow:
                    delay_ms_[r.tag] = rule->ms;
                    inner_->submit(&r, 1);
                    break;
                case FaultKind::Corrupt:
                    corrupt_[r.tag] = static_cast<uint8_t*>(r.dst);
                    inner_->submit(&r, 1);
                    break;
            }
        }
    }

    size_t reap(IoCompletion* out, size_t max, bool wait) override {
        for (;;) {
            take_inner(false);
            const Clock::time_point now = Clock::now();
            for (size_t i = 0; i < delayed_.size();) {
                if (delayed_[i].due <= now) {
                    ready_.push_back(delayed_[i].c);
                    delayed_[i] = delayed_.back();
                    delayed_.pop_back();
                } else {
                    i++;
                }
            }
            if (!ready_.empty() || !wait || outstanding() == 0) break;
            if (delayed_.empty()) {
                take_inner(true);  // only the inner engine has reads: block on it
            } else {
                std::this_thread::sleep_for(std::chrono::microseconds(200));
            }
        }
        const size_t n = std::min(max, ready_.size());
        std::copy(ready_.begin(), ready_.begin() + long(n), out);
        ready_.erase(ready_.begin(), ready_.begin() + long(n));
        return n;
    }

    size_t outstanding() const override { return inner_->outstanding() + ready_.size() + delayed_.size(); }

private:
    struct Delayed {
        IoCompletion c;
        Clock::time_point due;
    };

    FaultRule* match(const IoRequest& r) {
        int layer = -1, expert = -1;
        locate_(r.tag, &layer, &expert);
        for (FaultRule& f : rules_) {
            if (f.count == 0) continue;
            if ((f.layer >= 0 && f.layer != layer) || (f.expert >= 0 && f.expert != expert)) continue;
            if (f.count > 0) f.count--;
            return &f;
        }
        return nullptr;
    }

    void take_inner(bool wait) {
        IoCompletion buf[64];
        const size_t n = inner_->reap(buf, 64, wait);
        for (size_t i = 0; i < n; i++) {
            const IoCompletion& c = buf[i];
            if (auto it = corrupt_.find(c.tag); it != corrupt_.end()) {
                // The middle byte of every page: a read's first and last
                // pages may be alignment padding, but not all of them.
                for (int64_t i = 2048; i < c.result; i += 4096) it->second[i] ^= 0x5a;
                corrupt_.erase(it);
            }
            if (auto it = delay_ms_.find(c.tag); it != delay_ms_.end()) {
                delayed_.push_back({c, Clock::now() + std::chrono::milliseconds(it->second)});
                delay_ms_.erase(it);
                continue;
            }
            ready_.push_back(c);
        }
    }

    std::unique_ptr<IoEngine> inner_;
    std::vector<FaultRule> rules_;
    FaultLocator locate_;
    std::vector<IoCompletion> ready_;
    std::vector<Delayed> delayed_;
    std::unordered_map<uint64_t, int> delay_ms_;
    std::unordered_map<uint64_t, uint8_t*> corrupt_;
};

}  // namespace

std::vector<FaultRule> parse_faults(const std::string& spec) {
    std::vector<FaultRule> rules;
    size_t start = 0;
    while (start <= spec.size()) {
        size_t comma = spec.find(',', start);
        if (comma == std::string::npos) comma = spec.size();
        const std::string one = spec.substr(start, comma - start);
        if (!one.empty()) rules.push_back(parse_rule(one));
        start = comma + 1;
    }
    if (rules.empty()) throw std::runtime_error("--io-faults: no rule in '" + spec + "'");
    return rules;
}

std::unique_ptr<IoEngine> make_fault_engine(std::unique_ptr<IoEngine> inner, std::vector<FaultRule> rules,
                                            FaultLocator locate) {
    return std::make_unique<FaultEngine>(std::move(inner), std::move(rules), std::move(locate));
}

}  // namespace ms
