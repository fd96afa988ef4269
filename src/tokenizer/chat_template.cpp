// ChatTemplate: parse once, render many; and finding the template source of a model.
// Test partners: tests/unit/tokenizer/chat_template_test.cpp, tests/python/tokenizer/.
#include "tokenizer/chat_template.h"

#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "formats/gguf.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/renderer.h"

namespace flint::tokenizer {

namespace {

// True when `j` nests deeper than `limit` (checked before converting, which recurses).
bool too_deep(const nlohmann::ordered_json& j, int limit) {
  if (limit < 0) return true;
  if (!j.is_structured()) return false;
  for (const auto& e : j) {
    if (too_deep(e, limit - 1)) return true;
  }
  return false;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string source) {
  auto t = jinja::parse_template(std::move(source));
  if (!t) return t.error().with_context("chat template");
  ChatTemplate ct;
  ct.tmpl_ = std::shared_ptr<const jinja::Template>(std::move(*t));
  return ct;
}

const std::string& ChatTemplate::source() const { return tmpl_->source; }

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context,
                                         const ChatTemplateRenderOptions& options) const {
  if (!context.is_object()) {
    return make_error(ErrorCode::kInvalidArgument, "chat template: context must be an object");
  }
  if (too_deep(context, jinja::kMaxValueDepth - 1)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "chat template: context nested deeper than {} levels",
                      jinja::kMaxValueDepth - 1);
  }
  jinja::RenderLimits limits;
  limits.max_steps = options.max_steps;
  limits.max_output_bytes = options.max_output_bytes;
  limits.now_unix_seconds = options.now_unix_seconds ? *options.now_unix_seconds
                                                     : static_cast<int64_t>(std::time(nullptr));
  jinja::Renderer r(limits);
  auto out = r.run(*tmpl_, jinja::Value::from_json(context));
  if (!out) return out.error().with_context("chat template");
  return out;
}

Result<std::string> ChatTemplate::render(const nlohmann::json& context,
                                         const ChatTemplateRenderOptions& options) const {
  nlohmann::ordered_json ordered;
  try {
    ordered = nlohmann::ordered_json::parse(context.dump());
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kInvalidArgument, "chat template: bad context: {}", e.what());
  }
  return render(ordered, options);
}

Result<std::string> chat_template_from_tokenizer_config(const nlohmann::ordered_json& config) {
  if (!config.is_object() || !config.contains("chat_template") ||
      config["chat_template"].is_null()) {
    return make_error(ErrorCode::kNotFound, "tokenizer_config.json has no chat_template");
  }
  const auto& ct = config["chat_template"];
  if (ct.is_string()) return ct.get<std::string>();
  if (ct.is_array()) {
    for (const auto& entry : ct) {
      if (entry.is_object() && entry.contains("name") && entry["name"] == "default" &&
          entry.contains("template") && entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
    return make_error(ErrorCode::kNotFound,
                      "tokenizer_config.json: chat_template list has no entry named 'default'");
  }
  return make_error(ErrorCode::kInvalidFile,
                    "tokenizer_config.json: chat_template must be a string or a list");
}

Result<std::string> chat_template_from_gguf(const formats::GgufFile& gguf) {
  const formats::GgufValue* v = gguf.find("tokenizer.chat_template");
  if (!v) return make_error(ErrorCode::kNotFound, "{}: no tokenizer.chat_template", gguf.path());
  auto s = v->as_string();
  if (!s) return s.error().with_context("{}: tokenizer.chat_template", gguf.path());
  return s;
}

namespace {

Result<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error(ErrorCode::kIo, "cannot open {}", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return make_error(ErrorCode::kIo, "cannot read {}", path);
  return ss.str();
}

}  // namespace

Result<std::string> load_chat_template_source(const std::string& model_path,
                                              const std::string& override_arg) {
  namespace fs = std::filesystem;
  try {
    if (!override_arg.empty()) {
      std::error_code ec;
      if (fs::is_regular_file(override_arg, ec)) return read_file(override_arg);
      if (override_arg.find("{{") != std::string::npos ||
          override_arg.find("{%") != std::string::npos ||
          override_arg.find("{#") != std::string::npos) {
        return override_arg;
      }
      return make_error(ErrorCode::kNotFound,
                        "--chat-template '{}' is neither a readable file nor a template",
                        override_arg);
    }
    std::error_code ec;
    if (fs::is_directory(model_path, ec)) {
      fs::path dir(model_path);
      if (fs::is_regular_file(dir / "chat_template.jinja", ec)) {
        return read_file((dir / "chat_template.jinja").string());
      }
      fs::path cfg = dir / "tokenizer_config.json";
      if (fs::is_regular_file(cfg, ec)) {
        FLINT_ASSIGN_OR_RETURN(std::string text, read_file(cfg.string()));
        nlohmann::ordered_json j;
        try {
          j = nlohmann::ordered_json::parse(text);
        } catch (const std::exception& e) {
          return make_error(ErrorCode::kInvalidFile, "{}: {}", cfg.string(), e.what());
        }
        auto r = chat_template_from_tokenizer_config(j);
        if (!r) return r.error().with_context("{}", model_path);
        return r;
      }
      return make_error(ErrorCode::kNotFound,
                        "{}: no chat_template.jinja or tokenizer_config.json chat_template",
                        model_path);
    }
    if (fs::is_regular_file(model_path, ec)) {
      FLINT_ASSIGN_OR_RETURN(formats::GgufFile gguf, formats::GgufFile::open(model_path));
      return chat_template_from_gguf(gguf);
    }
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kIo, "chat template: {}", e.what());
  }
  return make_error(ErrorCode::kNotFound, "{}: no such file or directory", model_path);
}

}  // namespace flint::tokenizer
