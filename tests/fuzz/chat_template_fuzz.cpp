// libFuzzer target: parse arbitrary bytes as a chat template and render it with a fixed
// conversation, under small step and output caps. Any input must give a value or an error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json kContext = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "sys"},
      {"role": "user", "content": [{"type": "text", "text": "hi \u4f60\u597d"}]},
      {"role": "assistant", "content": null, "reasoning_content": "hmm",
       "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": [1, 2.5]}}}]},
      {"role": "tool", "content": "{\"ok\": true}"}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false
  })");
  auto tmpl =
      flint::tokenizer::ChatTemplate::parse(std::string(reinterpret_cast<const char*>(data), size));
  if (!tmpl) return 0;
  flint::tokenizer::ChatTemplateRenderOptions options;
  options.max_steps = 20000;
  options.max_output_bytes = 1 << 20;
  options.now_unix_seconds = 0;
  auto out = tmpl->render(kContext, options);
  (void)out;
  return 0;
}
