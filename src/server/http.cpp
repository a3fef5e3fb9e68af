#include "server/http.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <mutex>
#include <thread>

#include "runtime/chat_prompt.h"
#include "server/chat_page.h"
#include "server/tool_calls.h"
#include "telemetry/system.h"

namespace ms {

namespace {

// "127.0.0.1" and port of a socket's own or peer address.
bool address_of(int fd, bool peer, std::string* host, int* port) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if ((peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
              : getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len)) != 0) {
        return false;
    }
    char buf[INET6_ADDRSTRLEN] = {};
    if (ss.ss_family == AF_INET) {
        const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
        inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
        *port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
        inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
        *port = ntohs(a->sin6_port);
    } else {
        return false;
    }
    *host = buf;
    return true;
}

// Calls fn(fd, local host, local port, peer host, peer port) for each
// connected TCP socket of this process until fn returns true; returns that fd
// or -1. cpp-httplib 0.11 hides the sockets it accepted, and two things need
// them: seeing a client leave while the reply is generated (later releases
// added Request::is_connection_closed), and closing idle keep-alive
// connections at shutdown instead of waiting out their timeout.
template <class F>
int find_socket(F fn) {
    DIR* dir = opendir("/proc/self/fd");
    if (!dir) return -1;
    int found = -1;
    while (dirent* e = readdir(dir)) {
        char* end = nullptr;
        const long fd = strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0') continue;
        struct stat st;
        if (fstat(int(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
        std::string local, remote;
        int local_port = 0, remote_port = 0;
        if (address_of(int(fd), false, &local, &local_port) && address_of(int(fd), true, &remote, &remote_port) &&
            fn(int(fd), local, local_port, remote, remote_port)) {
            found = int(fd);
            break;
        }
    }
    closedir(dir);
    return found;
}

// The accepted socket of a request, found by its two addresses.
int client_socket(const httplib::Request& req) {
    return find_socket([&](int, const std::string& local, int local_port, const std::string& remote, int remote_port) {
        return local_port == req.local_port && remote_port == req.remote_port && remote == req.remote_addr &&
               local == req.local_addr;
    });
}

// False once the peer has closed or reset the connection. A client does not
// send while it waits for its reply, so readable-with-no-data is the close.
bool client_alive(int fd) {
    pollfd p{fd, short(POLLIN | POLLRDHUP), 0};
    if (poll(&p, 1, 0) <= 0) return true;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return false;
    char c;
    return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) != 0;
}

// Compares in time independent of where the strings differ.
bool same_secret(const std::string& given, const std::string& key) {
    if (given.size() != key.size()) return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < key.size(); i++) diff |= static_cast<unsigned char>(given[i] ^ key[i]);
    return diff == 0;
}

void send_json(httplib::Response& res, int status, const Json& body) {
    res.status = status;
    res.set_content(body.dump() + "\n", "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
    if (e.status == 503) res.set_header("Retry-After", "1");
    send_json(res, e.status, error_json(e));
}

Json usage_json(const Usage& u) {
    Json j = Json::object();
    j["prompt_tokens"] = u.prompt_tokens;
    j["completion_tokens"] = u.completion_tokens;
    j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
    Json details = Json::object();
    details["cached_tokens"] = u.cached_tokens;
    j["prompt_tokens_details"] = details;
    return j;
}

// OpenAI's tool_calls: ids from the response's, and in a stream chunk each
// call's index.
Json tool_calls_json(const std::vector<ToolCall>& calls, const std::string& id, bool indexed) {
    Json out = Json::array();
    for (size_t i = 0; i < calls.size(); i++) {
        Json fn = Json::object();
        fn["name"] = calls[i].name;
        fn["arguments"] = calls[i].arguments;
        Json c = Json::object();
        if (indexed) c["index"] = int64_t(i);
        c["id"] = "call_" + id + "_" + std::to_string(i);
        c["type"] = "function";
        c["function"] = fn;
        out.push_back(std::move(c));
    }
    return out;
}

// A token as text: its bytes where they are valid UTF-8, U+FFFD for a
// piece of a character (the bytes field has them exactly).
std::string token_string(const Tokenizer& tok, int32_t id) {
    StreamDecoder d(tok, true);
    std::string s = d.push(id);
    return s + d.flush();
}

Json token_bytes(const Tokenizer& tok, int32_t id) {
    Json b = Json::array();
    for (unsigned char c : tok.piece(id)) b.push_back(int64_t(c));
    return b;
}

// OpenAI's logprobs object: chat {"content": [{token, logprob, bytes,
// top_logprobs}]}; completions {tokens, token_logprobs, top_logprobs,
// text_offset} (offsets into the choice's text, carried in *offset).
Json logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprob>& lps, bool chat, size_t* offset) {
    Json j = Json::object();
    if (chat) {
        Json content = Json::array();
        for (const TokenLogprob& lp : lps) {
            Json e = Json::object();
            e["token"] = token_string(tok, lp.token);
            e["logprob"] = double(lp.logprob);
            e["bytes"] = token_bytes(tok, lp.token);
            Json top = Json::array();
            for (const auto& [t, l] : lp.top) {
                Json a = Json::object();
                a["token"] = token_string(tok, t);
                a["logprob"] = double(l);
                a["bytes"] = token_bytes(tok, t);
                top.push_back(std::move(a));
            }
            e["top_logprobs"] = std::move(top);
            content.push_back(std::move(e));
        }
        j["content"] = std::move(content);
        j["refusal"] = Json();
        return j;
    }
    Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(), offsets = Json::array();
    for (const TokenLogprob& lp : lps) {
        tokens.push_back(token_string(tok, lp.token));
        token_logprobs.push_back(double(lp.logprob));
        Json alts = Json::object();
        for (const auto& [t, l] : lp.top) alts[token_string(tok, t)] = double(l);
        top.push_back(std::move(alts));
        offsets.push_back(int64_t(*offset));
        *offset += tok.piece(lp.token).size();
    }
    j["tokens"] = std::move(tokens);
    j["token_logprobs"] = std::move(token_logprobs);
    j["top_logprobs"] = std::move(top);
    j["text_offset"] = std::move(offsets);
    return j;
}

}  // namespace

struct HttpServer::Impl {
    Engine& engine;
    ServerOptions options;
    RequestDefaults defaults;
    std::unique_ptr<ChatPrompt> chat;  // null when the model has no chat template
    std::string chat_error;
    ToolFormat tools = ToolFormat::None;  // how the template has the model write tool calls
    httplib::Server http;
    int port = -1;
    // httplib's stop() does nothing until listen() runs: stop() and listen()
    // meet through these (sequentially consistent, so one sees the other).
    std::atomic<bool> listen_called{false}, listen_done{false}, stop_requested{false};
    std::atomic<uint64_t> next_id{1};
    std::atomic<uint64_t> rejected{0};
    std::mutex count_mu;
    std::map<std::pair<std::string, int>, uint64_t> counts;  // (route, status) -> responses

    Impl(Engine& e, const ServerOptions& o) : engine(e), options(o) {
        const Session& s = engine.session();
        defaults.model_id = o.model_id;
        defaults.n_ctx = s.n_ctx();
        defaults.n_vocab = s.config().n_vocab;
        defaults.sampling = o.sampling;
        try {
            chat = std::make_unique<ChatPrompt>(s, o.chat_template);
            tools = tool_format(chat->source());
        } catch (const std::exception& ex) {
            chat_error = ex.what();
        }
        routes();
    }

    void routes();
    void generate(const httplib::Request& req, httplib::Response& res, bool is_chat);
    std::string metrics();
    Json models() const;
};

void HttpServer::Impl::routes() {
    const size_t body_limit = options.max_body_bytes;
    http.new_task_queue = [n = options.http_threads] { return new httplib::ThreadPool(size_t(n)); };
    http.set_payload_max_length(body_limit);
    http.set_keep_alive_timeout(options.idle_timeout_s);
    http.set_read_timeout(options.idle_timeout_s, 0);
    http.set_write_timeout(options.idle_timeout_s, 0);

    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (options.api_key.empty() || req.path == "/health" || req.path == "/") return httplib::Server::HandlerResponse::Unhandled;
        const std::string auth = req.get_header_value("Authorization");
        const std::string prefix = "Bearer ";
        if (auth.compare(0, prefix.size(), prefix) == 0 && same_secret(auth.substr(prefix.size()), options.api_key)) {
            return httplib::Server::HandlerResponse::Unhandled;
        }
        res.set_header("WWW-Authenticate", "Bearer");
        send_error(res, ApiError(401, auth.empty() ? "no API key: send Authorization: Bearer <key>" : "invalid API key",
                                 "", "invalid_request_error", "invalid_api_key"));
        return httplib::Server::HandlerResponse::Handled;
    });
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
        // httplib's own refusals (unknown path, body too large...) in OpenAI's shape;
        // handlers' errors already have a JSON body.
        if (!res.body.empty() || res.status < 400) return;
        const std::string msg = res.status == 404 ? "no route " + req.method + " " + req.path
                                : res.status == 413 ? std::string("the request body is too large")
                                                    : "HTTP error " + std::to_string(res.status);
        send_json(res, res.status, error_json(ApiError(res.status, msg)));
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string msg = "internal error";
        try {
            std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            msg = e.what();
        } catch (...) {
        }
        send_json(res, 500, error_json(ApiError(500, msg, "", "server_error")));
    });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
        static const char* known[] = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health",
                                      "/metrics", "/"};
        std::string route = "other";
        for (const char* k : known)
            if (req.path == k) route = k;
        std::lock_guard<std::mutex> lk(count_mu);
        counts[{route, res.status}]++;
    });

    http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
        Json j = Json::object();
        j["status"] = "ok";
        send_json(res, 200, j);
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { send_json(res, 200, models()); });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(metrics(), "text/plain; version=0.0.4");
    });
    http.Get("/", [](const httplib::Request&, httplib::Response& res) {
        res.set_content(kChatPage, "text/html; charset=utf-8");
    });
    for (const char* path : {"/v1/chat/completions", "/chat/completions"}) {
        http.Post(path, [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, true); });
    }
    for (const char* path : {"/v1/completions", "/completions"}) {
        http.Post(path, [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, false); });
    }
}

Json HttpServer::Impl::models() const {
    const Session& s = engine.session();
    Json m = Json::object();
    m["id"] = options.model_id;
    m["object"] = "model";
    m["created"] = int64_t(0);
    m["owned_by"] = "moestream";
    Json meta = Json::object();
    meta["arch"] = s.config().arch;
    meta["n_ctx"] = s.n_ctx();
    meta["n_vocab"] = s.config().n_vocab;
    m["meta"] = meta;
    Json data = Json::array();
    data.push_back(m);
    Json j = Json::object();
    j["object"] = "list";
    j["data"] = data;
    return j;
}

void HttpServer::Impl::generate(const httplib::Request& req, httplib::Response& res, bool is_chat) {
    std::shared_ptr<Job> job;
    try {
        const Json body = parse_body(req.body, options.max_body_bytes);
        GenerationRequest r = is_chat ? parse_chat_request(body, defaults) : parse_completion_request(body, defaults);
        std::vector<int32_t> prompt;
        if (is_chat) {
            if (!chat) throw ApiError(400, chat_error + "; use /v1/completions");
            if (!r.tools.is_null()) {
                if (tools == ToolFormat::None) {
                    throw ApiError(400, "the model's chat template has no tool-call format this server knows", "tools");
                }
                r.show_control = tool_markers_are_control(tools);
            }
            try {
                prompt = chat->tokens(r.messages, r.tools);
            } catch (const TemplateError& e) {
                throw ApiError(400, std::string("the chat template refused the messages: ") + e.what(), "messages");
            }
        } else {
            prompt = engine.session().tokenize(r.prompt, true);
            if (prompt.empty()) throw ApiError(400, "'prompt' is empty", "prompt");
        }
        if (engine.session().draft().mode != DraftMode::Off) {
            // Speculation samples inside the session, out of reach of the mask and the per-token records.
            const char* off = r.grammar ? "response_format" : r.logprobs >= 0 ? "logprobs" : r.n > 1 ? "n" : nullptr;
            if (off) throw ApiError(400, std::string("'") + off + "' is not available with --draft", off);
        }
        const int64_t n_ctx = defaults.n_ctx;
        if (int64_t(prompt.size()) >= n_ctx) {
            throw ApiError(400, "the prompt is " + std::to_string(prompt.size()) + " tokens; the context holds " +
                                    std::to_string(n_ctx) + " (prompt and reply together)",
                           is_chat ? "messages" : "prompt", "invalid_request_error", "context_length_exceeded");
        }
        if (r.max_tokens > 0 && int64_t(prompt.size()) + r.max_tokens > n_ctx) {
            throw ApiError(400, "the prompt (" + std::to_string(prompt.size()) + " tokens) and max_tokens (" +
                                    std::to_string(r.max_tokens) + ") exceed the context of " + std::to_string(n_ctx),
                           "max_tokens", "invalid_request_error", "context_length_exceeded");
        }
        job = std::make_shared<Job>(std::move(r), std::move(prompt), options.timeout_s);
        if (const int fd = client_socket(req); fd >= 0) job->client_alive = [fd] { return client_alive(fd); };
        if (!engine.submit(job)) {
            rejected++;
            throw ApiError(503, "the server is busy: every slot is generating and the queue is full; retry later",
                           "", "server_error", "overloaded");
        }
    } catch (const ApiError& e) {
        send_error(res, e);
        return;
    }

    const std::string id = (is_chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    const int64_t created = int64_t(time(nullptr));
    const GenerationRequest& r = job->request;
    // The fields every response and stream chunk of this request starts with.
    auto envelope = [this, id, created](const char* object) {
        Json j = Json::object();
        j["id"] = id;
        j["object"] = object;
        j["created"] = created;
        j["model"] = options.model_id;
        return j;
    };
    const Tokenizer& tok = engine.session().tokenizer();
    auto chunk = [envelope, is_chat, &tok](int choice_index, const std::string& text, const std::string& reason, bool first,
                                            const std::vector<TokenLogprob>* lp, size_t* offset) {
        Json c = envelope(is_chat ? "chat.completion.chunk" : "text_completion");
        Json choice = Json::object();
        choice["index"] = choice_index;
        if (is_chat) {
            Json delta = Json::object();
            if (first) delta["role"] = "assistant";
            if (!text.empty() || first) delta["content"] = text;
            choice["delta"] = delta;
        } else {
            choice["text"] = text;
        }
        choice["logprobs"] = lp ? logprobs_json(tok, *lp, is_chat, offset) : Json();
        choice["finish_reason"] = reason.empty() ? Json() : Json(reason);
        Json choices = Json::array();
        choices.push_back(choice);
        c["choices"] = choices;
        return c;
    };

    const ToolFormat format = r.tools.is_null() ? ToolFormat::None : tools;
    const bool want_logprobs = r.logprobs >= 0;
    if (!r.stream) {
        std::vector<JobOutput> out;
        while (!job->wait(&out, 1.0)) {
        }
        if (!job->error.empty()) {
            if (job->error != "cancelled") send_error(res, ApiError(500, job->error, "", "server_error"));
            return;
        }
        std::vector<JobOutput> per(size_t(r.n));
        for (JobOutput& o : out) {
            JobOutput& p = per[size_t(o.choice)];
            p.text += o.text;
            p.logprobs.insert(p.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
            if (!o.finish_reason.empty()) p.finish_reason = o.finish_reason;
        }
        Json j = envelope(is_chat ? "chat.completion" : "text_completion");
        Json choices = Json::array();
        for (int i = 0; i < r.n; i++) {
            const JobOutput& p = per[size_t(i)];
            Json choice = Json::object();
            choice["index"] = i;
            std::string reason = p.finish_reason;
            if (is_chat) {
                const ParsedReply reply = parse_tool_calls(format, p.text, r.tools);
                Json msg = Json::object();
                msg["role"] = "assistant";
                msg["content"] = reply.calls.empty() || !reply.content.empty() ? Json(reply.content) : Json();
                if (!reply.calls.empty()) {
                    msg["tool_calls"] = tool_calls_json(reply.calls, id, false);
                    reason = "tool_calls";
                }
                choice["message"] = msg;
            } else {
                choice["text"] = p.text;
            }
            size_t offset = 0;
            choice["logprobs"] = want_logprobs ? logprobs_json(tok, p.logprobs, is_chat, &offset) : Json();
            choice["finish_reason"] = reason;
            choices.push_back(std::move(choice));
        }
        j["choices"] = choices;
        j["usage"] = usage_json(job->usage);
        send_json(res, 200, j);
        return;
    }

    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");  // proxies: pass each event on at once
    // Per choice: whether its first chunk went out, and with tools the reply
    // so far and how much of it went out as content (up to where a tool call
    // begins; the calls go out parsed when the choice ends); the text offset
    // of completions' logprobs.
    struct ChoiceStream {
        bool sent_first = false;
        std::string reply;
        size_t sent = 0, offset = 0;
    };
    auto streams = std::make_shared<std::vector<ChoiceStream>>(size_t(r.n));
    res.set_chunked_content_provider(
        "text/event-stream",
        [job, chunk, format, streams, id, want_logprobs](size_t, httplib::DataSink& sink) {
            auto send = [&](const Json& j) {
                const std::string line = "data: " + j.dump() + "\n\n";
                return sink.write(line.data(), line.size());
            };
            std::vector<JobOutput> out;
            const bool done = job->wait(&out, 0.5);
            const bool include_usage = job->request.include_usage;
            auto with_usage = [&](Json c) {
                if (include_usage) c["usage"] = Json();
                return c;
            };
            if (out.empty() && !done) {
                // Nothing new: the first chunk of choice 0 still tells the
                // client the reply has begun.
                ChoiceStream& cs = (*streams)[0];
                if (cs.sent_first) return true;
                JobOutput o;
                out.push_back(o);
            }
            for (const JobOutput& o : out) {
                ChoiceStream& cs = (*streams)[size_t(o.choice)];
                std::string text = o.text;
                const bool ended = !o.finish_reason.empty();
                ParsedReply parsed;
                if (format != ToolFormat::None) {
                    cs.reply += text;
                    const size_t free = tool_free_prefix(format, cs.reply);
                    if (ended) parsed = parse_tool_calls(format, cs.reply, job->request.tools);
                    const size_t upto = ended && parsed.calls.empty() ? cs.reply.size() : std::max(free, cs.sent);
                    text = cs.reply.substr(cs.sent, upto - cs.sent);
                    cs.sent = upto;
                }
                if (!cs.sent_first || !text.empty() || !o.logprobs.empty()) {
                    const std::vector<TokenLogprob>* lp = want_logprobs ? &o.logprobs : nullptr;
                    if (!send(with_usage(chunk(o.choice, text, "", !cs.sent_first, lp, &cs.offset)))) {
                        job->cancelled = true;
                        return false;
                    }
                    cs.sent_first = true;
                }
                if (!ended) continue;
                std::string reason = o.finish_reason;
                if (!parsed.calls.empty()) {
                    Json c = chunk(o.choice, "", "", false, nullptr, nullptr);
                    Json delta = Json::object();
                    delta["tool_calls"] = tool_calls_json(parsed.calls, id, true);
                    c["choices"].as_array()[0]["delta"] = delta;
                    send(with_usage(c));
                    reason = "tool_calls";
                }
                send(with_usage(chunk(o.choice, "", reason, false, nullptr, nullptr)));
            }
            if (!done) return true;
            if (!job->error.empty()) {
                if (job->error != "cancelled") send(error_json(ApiError(500, job->error, "", "server_error")));
                sink.done();
                return true;
            }
            if (include_usage) {
                Json u = chunk(0, "", "", false, nullptr, nullptr);
                u["choices"] = Json::array();
                u["usage"] = usage_json(job->usage);
                send(u);
            }
            const char* end = "data: [DONE]\n\n";
            sink.write(end, strlen(end));
            sink.done();
            return true;
        },
        [job](bool) { job->cancelled = true; });
}

std::string HttpServer::Impl::metrics() {
    const EngineStats s = engine.stats();
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help) {
        out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    };
    auto value = [&](const std::string& name, double v) {
        char buf[64];
        snprintf(buf, sizeof buf, " %.17g\n", v);
        out += name + buf;
    };
    metric("moestream_http_responses_total", "counter", "HTTP responses by route and status");
    {
        std::lock_guard<std::mutex> lk(count_mu);
        for (const auto& [key, n] : counts) {
            value("moestream_http_responses_total{route=\"" + key.first + "\",status=\"" +
                      std::to_string(key.second) + "\"}",
                  double(n));
        }
    }
    metric("moestream_requests_total", "counter", "generation requests by outcome");
    value("moestream_requests_total{outcome=\"done\"}", double(s.requests_done));
    value("moestream_requests_total{outcome=\"cancelled\"}", double(s.requests_cancelled));
    value("moestream_requests_total{outcome=\"failed\"}", double(s.requests_failed));
    value("moestream_requests_total{outcome=\"rejected\"}", double(rejected.load()));
    metric("moestream_queue_depth", "gauge", "requests waiting for a slot");
    value("moestream_queue_depth", s.queued);
    metric("moestream_slots_busy", "gauge", "slots generating");
    value("moestream_slots_busy", s.busy_slots);
    metric("moestream_slots", "gauge", "slots (--parallel)");
    value("moestream_slots", s.slots);
    metric("moestream_prompt_tokens_total", "counter", "prompt tokens of finished requests");
    value("moestream_prompt_tokens_total", double(s.prompt_tokens));
    metric("moestream_prompt_tokens_cached_total", "counter", "prompt tokens found in a slot's KV cache (not evaluated)");
    value("moestream_prompt_tokens_cached_total", double(s.cached_prompt_tokens));
    metric("moestream_prefill_tokens_total", "counter", "prompt tokens evaluated");
    value("moestream_prefill_tokens_total", double(s.prefilled_tokens));
    metric("moestream_generated_tokens_total", "counter", "tokens generated");
    value("moestream_generated_tokens_total", double(s.generated_tokens));
    metric("moestream_prefill_seconds_total", "counter", "seconds spent evaluating prompts");
    value("moestream_prefill_seconds_total", s.prefill_seconds);
    metric("moestream_decode_seconds_total", "counter", "seconds spent generating tokens");
    value("moestream_decode_seconds_total", s.decode_seconds);
    metric("moestream_decode_tokens_per_second", "gauge", "generated tokens per second of decoding, all slots together");
    value("moestream_decode_tokens_per_second", s.decode_seconds > 0 ? double(s.generated_tokens) / s.decode_seconds : 0);
    metric("moestream_decode_passes_total", "counter", "decode forward passes (with --draft, or several slots decoding together, each may give several tokens)");
    value("moestream_decode_passes_total", double(s.decode_passes));
    metric("moestream_draft_tokens_total", "counter", "tokens drafted for speculative decoding");
    value("moestream_draft_tokens_total", double(s.drafted_tokens));
    metric("moestream_draft_accepted_tokens_total", "counter", "drafted tokens the model accepted");
    value("moestream_draft_accepted_tokens_total", double(s.accepted_tokens));
    metric("moestream_tokens_per_decode_pass", "gauge", "generated tokens per decode forward pass");
    value("moestream_tokens_per_decode_pass", s.decode_passes > 0 ? double(s.generated_tokens) / double(s.decode_passes) : 0);
    metric("moestream_prefill_tokens_per_second", "gauge", "prompt tokens evaluated per second of prefill");
    value("moestream_prefill_tokens_per_second", s.prefill_seconds > 0 ? double(s.prefilled_tokens) / s.prefill_seconds : 0);
    metric("moestream_expert_cache_hits_total", "counter", "expert uses found in the cache");
    value("moestream_expert_cache_hits_total", double(s.hits));
    metric("moestream_expert_cache_misses_total", "counter", "expert uses read from the drive");
    value("moestream_expert_cache_misses_total", double(s.misses));
    metric("moestream_expert_cache_hit_rate", "gauge", "hits / (hits + misses) since start");
    value("moestream_expert_cache_hit_rate", s.hits + s.misses ? double(s.hits) / double(s.hits + s.misses) : 0);
    metric("moestream_bytes_needed_total", "counter", "bytes the model needed, by reason");
    metric("moestream_bytes_read_total", "counter", "bytes requested from the drive (aligned), by reason");
    uint64_t needed = 0;
    for (int r = 0; r < kReadReasons; r++) {
        const std::string reason = read_reason_name(ReadReason(r));
        value("moestream_bytes_needed_total{reason=\"" + reason + "\"}", double(s.needed[r]));
        value("moestream_bytes_read_total{reason=\"" + reason + "\"}", double(s.read[r]));
        needed += s.needed[r];
    }
    const uint64_t process_read = proc_io_read_bytes();
    metric("moestream_process_read_bytes_total", "counter", "bytes this process caused to be read from storage");
    value("moestream_process_read_bytes_total", double(process_read));
    metric("moestream_read_amplification", "gauge", "bytes read from storage per byte the model needed");
    value("moestream_read_amplification", needed ? double(process_read) / double(needed) : 0);
    metric("moestream_rss_bytes", "gauge", "resident set size");
    value("moestream_rss_bytes", double(rss_bytes()));
    metric("moestream_peak_rss_bytes", "gauge", "peak resident set size");
    value("moestream_peak_rss_bytes", double(peak_rss_bytes()));
    return out;
}

HttpServer::HttpServer(Engine& engine, const ServerOptions& options)
    : impl_(std::make_unique<Impl>(engine, options)) {}

HttpServer::~HttpServer() = default;

void HttpServer::bind() {
    const ServerOptions& o = impl_->options;
    if (o.port == 0) {
        impl_->port = impl_->http.bind_to_any_port(o.host);
    } else if (impl_->http.bind_to_port(o.host, o.port)) {
        impl_->port = o.port;
    }
    if (impl_->port <= 0) {
        throw std::runtime_error("cannot listen on " + o.host + ":" + std::to_string(o.port) +
                                 " (address in use, or not an address of this machine)");
    }
}

int HttpServer::port() const { return impl_->port; }

void HttpServer::listen() {
    impl_->listen_called = true;
    if (!impl_->stop_requested) impl_->http.listen_after_bind();
    impl_->listen_done = true;
}

void HttpServer::stop() {
    impl_->stop_requested = true;
    while (impl_->listen_called && !impl_->listen_done && !impl_->http.is_running()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    impl_->http.stop();
    // Wake the threads that wait on idle keep-alive connections (and cut
    // replies in flight: their sequences stop as their clients would).
    const int port = impl_->port;
    find_socket([port](int fd, const std::string&, int local_port, const std::string&, int) {
        if (local_port == port) shutdown(fd, SHUT_RDWR);
        return false;
    });
}

}  // namespace ms
