// The OpenAI API as clients send it: a request body checked field by field
// into a GenerationRequest (chat or legacy completion), and the OpenAI-style
// JSON error a bad request gets. Nothing here touches the model.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "json/json.h"
#include "sampling/grammar.h"
#include "sampling/sampler.h"

namespace ms {

// A request the server refuses: HTTP status and OpenAI's error fields.
class ApiError : public std::runtime_error {
public:
    ApiError(int status, const std::string& message, std::string param = "",
             std::string type = "invalid_request_error", std::string code = "")
        : std::runtime_error(message), status(status), param(std::move(param)), type(std::move(type)),
          code(std::move(code)) {}
    int status;
    std::string param, type, code;
};

// {"error": {"message", "type", "param", "code"}} (null param/code when empty).
Json error_json(const ApiError& e);

// What the server accepts: bodies up to max_body_bytes, nested at most 64
// deep, no duplicate keys (which of two values a client meant is a guess).
JsonLimits request_json_limits(size_t max_body_bytes);
// Parses a body; malformed or over the limits -> ApiError 400 (413 when too
// large), its message the parser's.
Json parse_body(const std::string& body, size_t max_body_bytes);

// The largest max_tokens a request may ask for. Past the context left it is
// capped by the server (as llama-server does), not refused.
constexpr int64_t kMaxRequestTokens = int64_t(1) << 40;

struct RequestDefaults {
    std::string model_id;       // the one model served; a request naming another gets 404
    int64_t n_ctx = 0;          // context of each slot: the bound on prompt + max_tokens
    int64_t n_vocab = 0;        // logit_bias keys must be below it
    SamplerParams sampling;     // from the command line; fields of the request override them
};

struct GenerationRequest {
    bool chat = true;
    Json messages;              // chat: [{role, content}] with content flattened to text
    std::string prompt;         // completion
    int64_t max_tokens = -1;    // -1: until end of generation or the context is full
    SamplerParams sampling;
    std::vector<std::string> stop;
    bool stream = false;
    bool include_usage = false; // stream_options.include_usage: a last chunk with usage
    bool ignore_eos = false;    // llama-server's extension: generate exactly max_tokens
    // chat: the functions the model may call ([{type, function: {name,
    // description, parameters}}]; null: none, or tool_choice "none"; only
    // the named one for a named tool_choice). "required" and a named choice
    // are not enforced: nothing constrains what the model writes.
    Json tools;
    bool show_control = false;  // the reply's text keeps control tokens (tool-call markers that are)
    // What the reply must be a sentence of (response_format json_object or
    // json_schema, or llama-server's grammar / json_schema); null: free text.
    std::shared_ptr<const Grammar> grammar;
    std::string grammar_field;  // the field it came from, for errors about it
    // -1: no logprobs; else each token's log-probability and this many of
    // the most likely alternatives (chat: top_logprobs; completions: logprobs).
    int logprobs = -1;
    int n = 1;                  // choices, each sampled after one evaluation of the prompt
    // Completions: each choice's text starts with the prompt, and with
    // logprobs, its tokens start with the prompt's (the first one's null
    // where nothing comes before it).
    bool echo = false;
};

// POST /v1/chat/completions and POST /v1/completions bodies. Throw ApiError
// (400 wrong type or value, or a field this server does not know, naming the
// field; 404 unknown model).
GenerationRequest parse_chat_request(const Json& body, const RequestDefaults& d);
GenerationRequest parse_completion_request(const Json& body, const RequestDefaults& d);

}  // namespace ms
