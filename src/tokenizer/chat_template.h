// Chat templates: a Jinja2 interpreter for the subset real chat templates use, set up the way
// Hugging Face's apply_chat_template sets up Jinja2. Test partners:
// tests/unit/tokenizer/chat_template_test.cpp, tests/python/tokenizer/test_chat_template_parity.py.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/result.h"

namespace flint::formats {
class GgufFile;
}

namespace flint::tokenizer {

namespace jinja {
struct Template;  // the parsed program (src/tokenizer/jinja/)
}

// Per-render limits and injected globals.
struct ChatTemplateRenderOptions {
  int64_t max_steps = 5'000'000;            // node evaluations; past it rendering fails
  size_t max_output_bytes = 64u << 20;      // rendered text (and any string value) cap
  std::optional<int64_t> now_unix_seconds;  // strftime_now's clock (local time); unset = now
};

// A parsed chat template. Parse once, render many: render() is const and thread-safe.
class ChatTemplate {
 public:
  // Parses Jinja source (newlines normalised, trim_blocks and lstrip_blocks on, one trailing
  // newline dropped, loop controls enabled). A syntax error names its line and column.
  static Result<ChatTemplate> parse(std::string source);

  // Renders with `context` as the top-level variables: messages, tools, add_generation_prompt,
  // bos_token, eos_token, plus any chat_template_kwargs merged at top level (e.g.
  // enable_thinking). `context` must be a JSON object. raise_exception() in the template, a
  // runtime type error, or exceeding a limit returns an error; the output is byte-identical to
  // Python Jinja2 under apply_chat_template otherwise. Use ordered_json (parse the request with
  // nlohmann::ordered_json::parse) so that object keys keep the client's order, as Python dicts do:
  // tojson prints tool schemas in that order. The nlohmann::json overload sees keys sorted.
  Result<std::string> render(const nlohmann::ordered_json& context,
                             const ChatTemplateRenderOptions& options = {}) const;
  Result<std::string> render(const nlohmann::json& context,
                             const ChatTemplateRenderOptions& options = {}) const;

  const std::string& source() const;

 private:
  std::shared_ptr<const jinja::Template> tmpl_;
};

// The "chat_template" of a parsed tokenizer_config.json: a string, or a list of
// {name, template} from which "default" is picked. kNotFound when absent.
Result<std::string> chat_template_from_tokenizer_config(const nlohmann::ordered_json& config);

// The GGUF metadata key tokenizer.chat_template. kNotFound when absent.
Result<std::string> chat_template_from_gguf(const formats::GgufFile& gguf);

// Finds the template source the way vLLM does. `override_arg` is the --chat-template value: a
// path to an existing file is read; otherwise a string containing "{{" / "{%" / "{#" is the
// template itself; otherwise an error. Without it, `model_path` is searched: a directory gives
// chat_template.jinja, then tokenizer_config.json "chat_template"; a .gguf file gives its
// tokenizer.chat_template. kNotFound when the model has none.
Result<std::string> load_chat_template_source(const std::string& model_path,
                                              const std::string& override_arg = "");

}  // namespace flint::tokenizer
