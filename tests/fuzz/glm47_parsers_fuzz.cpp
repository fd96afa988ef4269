// libFuzzer target for the GLM-4.7 tool-call and reasoning parsers and the chat request parser:
// arbitrary model output (split at a fuzzer-chosen byte) and arbitrary request bodies must never
// crash, and streaming must add up to the whole-text parse.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/glm47_reasoning_parser.h"
#include "server/glm47_tool_parser.h"
#include "server/openai_types.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace flint::server;
  if (size == 0) return 0;
  const size_t cut = data[0] % size;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  ToolSchemas schemas;
  schemas.string_args["get_weather"] = {"city"};

  const ToolParseResult whole = glm47_parse_tool_calls(text, schemas);
  Glm47ToolStreamParser stream(schemas);
  std::string content;
  std::vector<std::string> args;
  for (const ToolStreamDelta& d :
       {stream.feed(text.substr(0, cut)), stream.feed(text.substr(cut)), stream.finish()}) {
    content += d.content;
    for (const ToolCallDelta& t : d.tool_calls) {
      if (t.name) args.emplace_back();
      if (args.empty()) std::abort();  // a fragment before its call's first delta
      args[t.index] += t.arguments;
    }
  }
  if (args.size() != whole.tool_calls.size()) std::abort();
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] != whole.tool_calls[i].arguments) std::abort();
  }

  const ReasoningSplit split = glm47_split_reasoning(text, true);
  Glm47ReasoningStreamParser rs(true);
  ReasoningSplit acc;
  for (const ReasoningSplit& d :
       {rs.feed(text.substr(0, cut)), rs.feed(text.substr(cut)), rs.finish()}) {
    acc.reasoning += d.reasoning;
    acc.content += d.content;
  }
  if (acc.reasoning != split.reasoning || acc.content != split.content) std::abort();

  auto body = parse_json_body(text);
  if (body) {
    std::string param;
    (void)parse_chat_request(*body, 1000, &param);
    (void)parse_completion_request(*body, 1000, &param);
  }
  return 0;
}
