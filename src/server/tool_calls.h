// Tool calls in a model's own words: which format a chat template teaches
// its model (Qwen3's JSON in <tool_call> tags, Qwen3.5/Qwen3-Coder's XML
// functions, GLM's arg_key/arg_value, MiniMax-M2's invoke, DeepSeek V3.1's
// tool-call tokens, Gemma 4's call:NAME{...}, Mistral's [TOOL_CALLS]), and
// the OpenAI tool_calls parsed out of a reply written that way.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "json/json.h"

namespace ms {

enum class ToolFormat { None, QwenJson, QwenXml, Glm, MiniMax, DeepSeek, Gemma4, Mistral };

// The format a chat template's source teaches (None: no tool calls known).
ToolFormat tool_format(const std::string& chat_template);

// Whether the format's markers are control tokens, which a reply's text
// leaves out unless asked to show them.
bool tool_markers_are_control(ToolFormat f);

struct ToolCall {
    std::string name;
    std::string arguments;  // a JSON object, as text (OpenAI's function.arguments)
};

struct ParsedReply {
    std::string content;          // the text outside the calls
    std::vector<ToolCall> calls;  // in the order written
};

// Splits a finished reply. tools: the request's tools (their parameter
// schemas say which XML-written values stay strings). A call that does not
// parse stays in content.
ParsedReply parse_tool_calls(ToolFormat f, const std::string& text, const Json& tools);

// A finished reply as the assistant message a chat template reads back
// (`chat` keeps its conversation so): the text outside the calls as content
// and the calls as tool_calls, each call's arguments an object; the reply's
// exact text as content when it holds no call.
Json assistant_message(ToolFormat f, const std::string& reply, const Json& tools);

// How much of a reply still being written may be sent as content: up to the
// first call's marker, and short of a tail that could be the start of one.
size_t tool_free_prefix(ToolFormat f, const std::string& text);

}  // namespace ms
