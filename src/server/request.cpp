#include "server/request.h"

#include <cmath>
#include <random>

#include "server/json_schema.h"

namespace ms {

namespace {

constexpr size_t kMaxStops = 16;
constexpr size_t kMaxStopBytes = 256;

[[noreturn]] void bad(const std::string& param, const std::string& message) { throw ApiError(400, message, param); }

const char* kind_name(const Json& v) {
    switch (v.kind()) {
        case Json::Kind::Null: return "null";
        case Json::Kind::Bool: return "a boolean";
        case Json::Kind::Number: return "a number";
        case Json::Kind::String: return "a string";
        case Json::Kind::Array: return "an array";
        case Json::Kind::Object: return "an object";
    }
    return "?";
}

// A field that is absent or null leaves the default; any other kind than
// expected is a 400 naming the field.
const Json* field(const Json& body, const char* name) {
    const Json* v = body.find(name);
    return v && !v->is_null() ? v : nullptr;
}

double number(const Json& body, const char* name, double lo, double hi, double def) {
    const Json* v = field(body, name);
    if (!v) return def;
    if (!v->is_number()) bad(name, std::string("'") + name + "' must be a number, not " + kind_name(*v));
    const double x = v->as_number();
    if (!(x >= lo && x <= hi)) {  // NaN fails too
        bad(name, std::string("'") + name + "' must be between " + Json(lo).dump() + " and " + Json(hi).dump());
    }
    return x;
}

int64_t integer(const Json& body, const char* name, int64_t lo, int64_t hi, int64_t def) {
    const Json* v = field(body, name);
    if (!v) return def;
    // Checked as a double first: converting an out-of-range double is undefined.
    const double x = v->is_number() ? v->as_number() : NAN;
    if (!v->is_number() || x != std::floor(x)) {
        bad(name, std::string("'") + name + "' must be an integer, not " + (v->is_number() ? "a fraction" : kind_name(*v)));
    }
    if (x < double(lo) || x > double(hi)) {
        bad(name, std::string("'") + name + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    }
    return v->as_int();
}

bool boolean(const Json& body, const char* name, bool def) {
    const Json* v = field(body, name);
    if (!v) return def;
    if (!v->is_bool()) bad(name, std::string("'") + name + "' must be a boolean, not " + kind_name(*v));
    return v->as_bool();
}

constexpr int64_t kMaxChoices = 16;

// logit_bias: {"token id": bias in [-100, 100]}.
void parse_logit_bias(const Json& body, const RequestDefaults& d, SamplerParams* p) {
    const Json* b = field(body, "logit_bias");
    if (!b) return;
    if (!b->is_object()) bad("logit_bias", std::string("'logit_bias' must be an object, not ") + kind_name(*b));
    if (b->size() > 1024) bad("logit_bias", "'logit_bias' takes at most 1024 tokens");
    for (const auto& [key, v] : b->as_object()) {
        const std::string at = "logit_bias." + key;
        size_t used = 0;
        long long id = -1;
        try {
            id = std::stoll(key, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (key.empty() || used != key.size() || key[0] == '+' || key[0] == ' ' || id < 0 || id >= d.n_vocab) {
            bad(at, "'logit_bias' keys must be token ids from 0 to " + std::to_string(d.n_vocab - 1) + ", not '" + key + "'");
        }
        if (!v.is_number() || !(v.as_number() >= -100 && v.as_number() <= 100)) {
            bad(at, "'" + at + "' must be a number from -100 to 100");
        }
        p->logit_bias.emplace_back(int32_t(id), float(v.as_number()));
    }
}

// The reply's grammar: response_format (OpenAI) or llama-server's grammar
// (GBNF text) or json_schema; at most one of them.
void parse_constraint(const Json& body, GenerationRequest* r) {
    std::string gbnf, from;
    auto schema_grammar = [&](const Json& schema, const std::string& param) {
        try {
            return json_schema_to_gbnf(schema);
        } catch (const std::runtime_error& e) {
            bad(param, e.what());
        }
    };
    if (const Json* f = field(body, "response_format")) {
        const Json* type = f->is_object() ? f->find("type") : nullptr;
        const std::string t = type && type->is_string() ? type->as_string() : "";
        if (t == "json_object") {
            gbnf = json_object_gbnf();
        } else if (t == "json_schema") {
            const Json* js = f->find("json_schema");
            const Json* schema = js && js->is_object() ? js->find("schema") : nullptr;
            if (!schema) bad("response_format", "response_format json_schema needs 'json_schema': {'schema': {...}}");
            gbnf = schema_grammar(*schema, "response_format.json_schema.schema");
        } else if (t != "text") {
            bad("response_format", "'response_format' must be {\"type\": \"text\"}, \"json_object\" or \"json_schema\"");
        }
        if (!gbnf.empty()) from = "response_format";
    }
    if (const Json* g = field(body, "grammar")) {
        if (!from.empty()) bad("grammar", "'grammar' and '" + from + "' cannot both be given");
        if (!g->is_string()) bad("grammar", std::string("'grammar' must be a string (GBNF), not ") + kind_name(*g));
        gbnf = g->as_string();
        from = "grammar";
    }
    if (const Json* js = field(body, "json_schema")) {
        if (!from.empty()) bad("json_schema", "'json_schema' and '" + from + "' cannot both be given");
        gbnf = schema_grammar(*js, "json_schema");
        from = "json_schema";
    }
    if (from.empty()) return;
    try {
        r->grammar = std::make_shared<const Grammar>(parse_gbnf(gbnf));
        r->grammar_field = from;
    } catch (const GrammarError& e) {
        bad(from, e.what());
    }
}

// A field neither endpoint knows is refused by name: a client that sends
// an option believes it worked.
void refuse_unknown(const Json& body, const char* const* known, size_t n_known) {
    if (!body.is_object()) return;
    for (const auto& [key, v] : body.as_object()) {
        bool ok = false;
        for (size_t i = 0; i < n_known && !ok; i++) ok = key == known[i];
        if (!ok) bad(key, "'" + key + "' is not supported by this server");
    }
}

const char* const kCommonFields[] = {
    "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "repeat_penalty", "presence_penalty",
    "frequency_penalty", "seed", "stop", "stream", "stream_options", "ignore_eos", "logprobs", "response_format",
    "grammar", "json_schema", "n", "logit_bias", "user", "cache_prompt"};

void refuse_unknown_fields(const Json& body, std::initializer_list<const char*> extra) {
    std::vector<const char*> known(std::begin(kCommonFields), std::end(kCommonFields));
    known.insert(known.end(), extra.begin(), extra.end());
    refuse_unknown(body, known.data(), known.size());
}

// Fields shared by both endpoints: model, sampling, limits, stop, stream.
void parse_common(const Json& body, const RequestDefaults& d, GenerationRequest* r) {
    if (!body.is_object()) bad("", std::string("the request body must be a JSON object, not ") + kind_name(body));
    if (const Json* m = field(body, "model")) {
        if (!m->is_string()) bad("model", std::string("'model' must be a string, not ") + kind_name(*m));
        if (m->as_string() != d.model_id) {
            throw ApiError(404, "The model '" + m->as_string() + "' does not exist; this server serves '" +
                                    d.model_id + "'", "model", "invalid_request_error", "model_not_found");
        }
    }
    r->n = int(integer(body, "n", 1, kMaxChoices, 1));
    // max_completion_tokens is the newer name of max_tokens in chat.
    const char* limit_name = field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    r->max_tokens = integer(body, limit_name, 1, kMaxRequestTokens, r->max_tokens);

    SamplerParams& p = r->sampling;
    p = d.sampling;
    p.temp = float(number(body, "temperature", 0.0, 2.0, p.temp));
    const double top_p = number(body, "top_p", 0.0, 1.0, p.top_p);
    if (top_p == 0) p.temp = 0;  // the smallest set reaching 0 is the best token alone
    else p.top_p = float(top_p);
    p.top_k = int(integer(body, "top_k", 0, 1 << 30, p.top_k));
    p.min_p = float(number(body, "min_p", 0.0, 1.0, p.min_p));
    p.repeat_penalty = float(number(body, "repeat_penalty", 1e-3, 100.0, p.repeat_penalty));
    p.presence_penalty = float(number(body, "presence_penalty", -2.0, 2.0, p.presence_penalty));
    p.frequency_penalty = float(number(body, "frequency_penalty", -2.0, 2.0, p.frequency_penalty));
    if (field(body, "seed")) {
        p.seed = uint64_t(integer(body, "seed", -(int64_t(1) << 62), int64_t(1) << 62, 0));
    } else {
        // Each request its own draw, so two requests do not repeat each other.
        static thread_local std::mt19937_64 rng{std::random_device{}()};
        p.seed = p.seed ^ rng();
    }

    if (const Json* s = field(body, "stop")) {
        if (s->is_string()) {
            r->stop.push_back(s->as_string());
        } else if (s->is_array()) {
            if (s->size() > kMaxStops) bad("stop", "'stop' takes at most " + std::to_string(kMaxStops) + " strings");
            for (const Json& e : s->as_array()) {
                if (!e.is_string()) bad("stop", std::string("'stop' must hold strings, not ") + kind_name(e));
                r->stop.push_back(e.as_string());
            }
        } else {
            bad("stop", std::string("'stop' must be a string or an array of strings, not ") + kind_name(*s));
        }
        for (const std::string& st : r->stop) {
            if (st.empty() || st.size() > kMaxStopBytes) {
                bad("stop", "each stop string must be 1 to " + std::to_string(kMaxStopBytes) + " bytes");
            }
        }
    }
    r->stream = boolean(body, "stream", false);
    r->ignore_eos = boolean(body, "ignore_eos", false);
    if (r->ignore_eos && r->max_tokens < 0) bad("ignore_eos", "'ignore_eos' needs 'max_tokens'");
    if (const Json* so = field(body, "stream_options")) {
        if (!so->is_object()) bad("stream_options", std::string("'stream_options' must be an object, not ") + kind_name(*so));
        r->include_usage = boolean(*so, "include_usage", false);
    }
    if (const Json* c = field(body, "cache_prompt"); c && !(c->is_bool() && c->as_bool())) {
        bad("cache_prompt", "'cache_prompt' can only be true: the server always reuses a slot's cached prefix");
    }
    if (const Json* u = field(body, "user"); u && !u->is_string()) {
        bad("user", std::string("'user' must be a string, not ") + kind_name(*u));
    }
    parse_logit_bias(body, d, &p);
    parse_constraint(body, r);
}

// tools: [{"type": "function", "function": {"name", "description"?,
// "parameters"?}}]; tool_choice: "none", "auto", "required" or
// {"type": "function", "function": {"name"}}.
void parse_tools(const Json& body, GenerationRequest* r) {
    const Json* t = field(body, "tools");
    if (!t) return;
    if (!t->is_array()) bad("tools", std::string("'tools' must be an array, not ") + kind_name(*t));
    if (t->size() > 128) bad("tools", "'tools' takes at most 128 functions");
    for (size_t i = 0; i < t->size(); i++) {
        const std::string at = "tools[" + std::to_string(i) + "]";
        const Json& tool = (*t)[i];
        const Json* type = tool.is_object() ? tool.find("type") : nullptr;
        const Json* fn = tool.is_object() ? tool.find("function") : nullptr;
        if (!type || !type->is_string() || type->as_string() != "function" || !fn || !fn->is_object()) {
            bad(at, "'" + at + "' must be {\"type\": \"function\", \"function\": {...}}");
        }
        const Json* name = fn->find("name");
        if (!name || !name->is_string() || name->as_string().empty()) {
            bad(at + ".function.name", "'" + at + ".function.name' must be a non-empty string");
        }
        if (const Json* p = field(*fn, "parameters"); p && !p->is_object()) {
            bad(at + ".function.parameters", "'" + at + ".function.parameters' must be an object (a JSON Schema)");
        }
    }
    r->tools = t->size() > 0 ? *t : Json();
    const Json* choice = field(body, "tool_choice");
    if (!choice) return;
    if (choice->is_string()) {
        const std::string& c = choice->as_string();
        if (c == "none") r->tools = Json();
        else if (c != "auto" && c != "required") bad("tool_choice", "'tool_choice' must be none, auto, required or a function");
        return;
    }
    const Json* fn = choice->is_object() ? choice->find("function") : nullptr;
    const Json* name = fn && fn->is_object() ? fn->find("name") : nullptr;
    if (!name || !name->is_string()) bad("tool_choice", "'tool_choice' must be none, auto, required or a function");
    Json only = Json::array();
    for (const Json& tool : t->as_array())
        if (tool.at("function").at("name").as_string() == name->as_string()) only.push_back(tool);
    if (only.size() == 0) bad("tool_choice", "'tool_choice' names '" + name->as_string() + "', which is not in 'tools'");
    r->tools = only;
}

// An assistant message's tool_calls as chat templates read them: each
// call's arguments an object (OpenAI sends a JSON string).
Json tool_calls_for_template(const Json& calls, const std::string& at) {
    const std::string param = at + ".tool_calls";
    if (!calls.is_array()) bad(param, "'" + param + "' must be an array");
    Json out = Json::array();
    for (const Json& c : calls.as_array()) {
        const Json* fn = c.is_object() ? c.find("function") : nullptr;
        const Json* name = fn && fn->is_object() ? fn->find("name") : nullptr;
        if (!name || !name->is_string()) bad(param, "each of '" + param + "' needs function.name");
        Json f = Json::object();
        f["name"] = *name;
        const Json* args = fn->find("arguments");
        if (args && args->is_string()) {
            try {
                f["arguments"] = Json::parse(args->as_string());
            } catch (const std::runtime_error&) {
                bad(param, "the arguments of '" + param + "' must be a JSON object");
            }
        } else {
            f["arguments"] = args ? *args : Json::object();
        }
        Json call = Json::object();
        call["id"] = c.find("id") ? c.at("id") : Json("");
        call["type"] = "function";
        call["function"] = f;
        out.push_back(std::move(call));
    }
    return out;
}

// OpenAI content: a string, or parts of which only text is supported here.
std::string content_text(const Json& c, size_t index) {
    const std::string param = "messages[" + std::to_string(index) + "].content";
    if (c.is_null()) return "";
    if (c.is_string()) return c.as_string();
    if (!c.is_array()) bad(param, "'" + param + "' must be a string or an array of parts, not " + kind_name(c));
    std::string out;
    for (const Json& part : c.as_array()) {
        const Json* type = part.is_object() ? part.find("type") : nullptr;
        const Json* text = part.is_object() ? part.find("text") : nullptr;
        if (!type || !type->is_string() || type->as_string() != "text" || !text || !text->is_string()) {
            bad(param, "only text parts ({\"type\": \"text\", \"text\": ...}) are supported in '" + param + "'");
        }
        out += text->as_string();
    }
    return out;
}

}  // namespace

Json error_json(const ApiError& e) {
    Json err = Json::object();
    err["message"] = e.what();
    err["type"] = e.type;
    err["param"] = e.param.empty() ? Json() : Json(e.param);
    err["code"] = e.code.empty() ? Json() : Json(e.code);
    Json j = Json::object();
    j["error"] = std::move(err);
    return j;
}

JsonLimits request_json_limits(size_t max_body_bytes) {
    JsonLimits lim;
    lim.max_bytes = max_body_bytes;
    lim.max_depth = 64;
    lim.allow_duplicate_keys = false;
    return lim;
}

Json parse_body(const std::string& body, size_t max_body_bytes) {
    if (body.size() > max_body_bytes) {
        throw ApiError(413, "the request body of " + std::to_string(body.size()) + " bytes exceeds the limit of " +
                                std::to_string(max_body_bytes));
    }
    try {
        return Json::parse(body, "request body", request_json_limits(max_body_bytes));
    } catch (const std::runtime_error& e) {
        throw ApiError(400, e.what());
    }
}

GenerationRequest parse_chat_request(const Json& body, const RequestDefaults& d) {
    GenerationRequest r;
    r.chat = true;
    refuse_unknown_fields(body, {"messages", "top_logprobs", "tools", "tool_choice"});
    parse_common(body, d, &r);
    parse_tools(body, &r);
    const int64_t top = integer(body, "top_logprobs", 0, 20, 0);
    if (boolean(body, "logprobs", false)) r.logprobs = int(top);
    else if (field(body, "top_logprobs")) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (r.grammar && !r.tools.is_null()) bad("tools", "'tools' cannot be combined with a response format or grammar");
    const Json* msgs = body.find("messages");
    if (!msgs) bad("messages", "'messages' is required");
    if (!msgs->is_array() || msgs->size() == 0) bad("messages", "'messages' must be a non-empty array");
    r.messages = Json::array();
    size_t i = 0;
    for (const Json& m : msgs->as_array()) {
        const std::string at = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) bad(at, "'" + at + "' must be an object, not " + std::string(kind_name(m)));
        const Json* role = m.find("role");
        if (!role || !role->is_string()) bad(at + ".role", "'" + at + ".role' must be a string");
        std::string rs = role->as_string();
        if (rs == "developer") rs = "system";  // OpenAI's newer name; templates know "system"
        if (rs != "system" && rs != "user" && rs != "assistant" && rs != "tool") {
            bad(at + ".role", "unknown role '" + rs + "' in '" + at + "' (system, developer, user, assistant, tool)");
        }
        Json out = Json::object();
        out["role"] = rs;
        out["content"] = content_text(m.find("content") ? m.at("content") : Json(), i);
        if (rs == "assistant") {
            if (const Json* calls = field(m, "tool_calls")) out["tool_calls"] = tool_calls_for_template(*calls, at);
        }
        if (rs == "tool") {
            for (const char* key : {"tool_call_id", "name"}) {
                if (const Json* v = field(m, key)) {
                    if (!v->is_string()) bad(at + "." + key, "'" + at + "." + key + "' must be a string");
                    out[key] = *v;
                }
            }
        }
        r.messages.push_back(std::move(out));
        i++;
    }
    return r;
}

GenerationRequest parse_completion_request(const Json& body, const RequestDefaults& d) {
    GenerationRequest r;
    r.chat = false;
    r.max_tokens = 16;  // OpenAI's default for completions
    refuse_unknown_fields(body, {"prompt", "echo", "suffix", "best_of"});
    parse_common(body, d, &r);
    r.logprobs = int(integer(body, "logprobs", 0, 20, -1));
    if (field(body, "best_of") && integer(body, "best_of", 1, kMaxChoices, 1) != r.n) {
        bad("best_of", "'best_of' other than n is not supported (no ranking of choices)");
    }
    const Json* p = body.find("prompt");
    if (!p) bad("prompt", "'prompt' is required");
    if (p->is_string()) {
        r.prompt = p->as_string();
    } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
        r.prompt = (*p)[0].as_string();
    } else {
        bad("prompt", "'prompt' must be a string (or an array of one string)");
    }
    r.echo = boolean(body, "echo", false);
    if (field(body, "suffix")) bad("suffix", "suffix is not supported");
    return r;
}

}  // namespace ms
