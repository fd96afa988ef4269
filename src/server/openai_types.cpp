// Request validation: one reader per field, so each error names its parameter.
#include "server/openai_types.h"

#include <cmath>
#include <set>

namespace flint::server {
namespace {

using ojson = nlohmann::ordered_json;

// Reads typed fields of one JSON object; the first failure is remembered with its field name.
class Fields {
 public:
  Fields(const ojson& obj, std::string prefix, std::string* param)
      : obj_(obj), prefix_(std::move(prefix)), param_(param) {}

  bool ok() const { return !error_.has_value(); }
  Error error() const { return *error_; }

  template <typename... Args>
  bool fail(const std::string& key, fmt::format_string<Args...> f, Args&&... args) {
    if (!error_) {
      error_ = make_error(ErrorCode::kInvalidArgument, f, std::forward<Args>(args)...);
      if (param_) *param_ = prefix_ + key;
    }
    return false;
  }

  const ojson* get(const std::string& key) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  bool number(const std::string& key, std::optional<double>* out, double lo, double hi) {
    const ojson* v = get(key);
    if (!v) return true;
    if (!v->is_number())
      return fail(key, "'{}' must be a number, got {}", prefix_ + key, v->type_name());
    double d = v->get<double>();
    if (!std::isfinite(d) || d < lo || d > hi) {
      return fail(key, "'{}' must be in [{}, {}], got {}", prefix_ + key, lo, hi, d);
    }
    *out = d;
    return true;
  }
  bool integer(const std::string& key, std::optional<int64_t>* out, int64_t lo, int64_t hi) {
    const ojson* v = get(key);
    if (!v) return true;
    int64_t x = 0;
    if (v->is_number_integer()) {
      if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
        return fail(key, "'{}' must be in [{}, {}], got {}", prefix_ + key, lo, hi, v->dump());
      }
      x = v->get<int64_t>();
    } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
               std::floor(v->get<double>()) == v->get<double>() &&
               std::fabs(v->get<double>()) < 9e15) {
      x = static_cast<int64_t>(v->get<double>());  // 3.0 is an integer, as in pydantic
    } else {
      return fail(key, "'{}' must be an integer, got {}", prefix_ + key, v->dump());
    }
    if (x < lo || x > hi)
      return fail(key, "'{}' must be in [{}, {}], got {}", prefix_ + key, lo, hi, x);
    *out = x;
    return true;
  }
  bool boolean(const std::string& key, bool* out) {
    return typed(key, out, "a boolean", [](const ojson& v) { return v.is_boolean(); });
  }
  bool string(const std::string& key, std::string* out) {
    return typed(key, out, "a string", [](const ojson& v) { return v.is_string(); });
  }
  bool object(const std::string& key, ojson* out) {
    return typed(key, out, "an object", [](const ojson& v) { return v.is_object(); });
  }
  // Rejects every key not in `known` (an unsupported parameter is never silently ignored).
  bool only(const std::set<std::string>& known) {
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      if (!known.count(it.key())) {
        return fail(it.key(), "unsupported parameter '{}'", prefix_ + it.key());
      }
    }
    return true;
  }

 private:
  // Reads `key` into `out` when it is present and `has_type` holds (`type_name` names the type in
  // the error otherwise).
  template <typename T, typename HasType>
  bool typed(const std::string& key, T* out, const char* type_name, HasType has_type) {
    const ojson* v = get(key);
    if (!v) return true;
    if (!has_type(*v))
      return fail(key, "'{}' must be {}, got {}", prefix_ + key, type_name, v->type_name());
    *out = v->get<T>();
    return true;
  }

  const ojson& obj_;
  std::string prefix_;
  std::string* param_;
  std::optional<Error> error_;
};

bool valid_utf8(const std::string& s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80           ? 1
                 : (c >> 5) == 0x6  ? 2
                 : (c >> 4) == 0xE  ? 3
                 : (c >> 3) == 0x1E ? 4
                                    : 0;
    if (len == 0 || i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

// Fields shared by chat and completions: sampling, stop, penalties, stream_options.
bool read_sampling(Fields& f, int64_t vocab_size, bool is_chat, engine::SamplingParams* p,
                   bool* stream, StreamOptions* so) {
  std::optional<double> d;
  std::optional<int64_t> i;
  if (!f.number("temperature", &d, 0.0, 1e4)) return false;
  if (d) p->temperature = static_cast<float>(*d), d.reset();
  if (!f.number("top_p", &d, 0.0, 1.0)) return false;
  if (d) {
    if (*d <= 0.0) return f.fail("top_p", "'top_p' must be in (0, 1], got {}", *d);
    p->top_p = static_cast<float>(*d), d.reset();
  }
  if (!f.integer("top_k", &i, -1, vocab_size > 0 ? vocab_size : INT32_MAX)) return false;
  if (i) p->top_k = static_cast<int>(*i), i.reset();
  if (!f.number("min_p", &d, 0.0, 1.0)) return false;
  if (d) p->min_p = static_cast<float>(*d), d.reset();
  if (!f.number("repetition_penalty", &d, 0.0, 100.0)) return false;
  if (d) {
    if (*d <= 0.0)
      return f.fail("repetition_penalty", "'repetition_penalty' must be > 0, got {}", *d);
    p->repetition_penalty = static_cast<float>(*d), d.reset();
  }
  if (!f.number("presence_penalty", &d, -2.0, 2.0)) return false;
  if (d) p->presence_penalty = static_cast<float>(*d), d.reset();
  if (!f.number("frequency_penalty", &d, -2.0, 2.0)) return false;
  if (d) p->frequency_penalty = static_cast<float>(*d), d.reset();
  if (!f.integer("seed", &i, INT64_MIN, INT64_MAX)) return false;
  if (i) p->seed = static_cast<uint64_t>(*i), i.reset();
  if (!f.integer("n", &i, 1, kMaxChoices)) return false;
  if (i) p->n = static_cast<int>(*i), i.reset();
  if (!f.integer("min_tokens", &i, 0, INT32_MAX)) return false;
  if (i) p->min_tokens = static_cast<int>(*i), i.reset();
  std::optional<int64_t> max_tokens, max_completion_tokens;
  if (!f.integer("max_tokens", &max_tokens, 1, INT32_MAX)) return false;
  if (is_chat && !f.integer("max_completion_tokens", &max_completion_tokens, 1, INT32_MAX)) {
    return false;
  }
  if (max_completion_tokens) max_tokens = max_completion_tokens;  // vLLM: it wins
  if (max_tokens) p->max_tokens = static_cast<int>(*max_tokens);
  if (!f.boolean("ignore_eos", &p->ignore_eos)) return false;
  if (!f.boolean("skip_special_tokens", &p->skip_special_tokens)) return false;
  if (!f.boolean("include_stop_str_in_output", &p->include_stop_str_in_output)) return false;

  if (const ojson* stop = f.get("stop")) {
    std::vector<std::string> stops;
    if (stop->is_string()) {
      stops.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const ojson& s : *stop) {
        if (!s.is_string()) return f.fail("stop", "'stop' must be a string or a list of strings");
        stops.push_back(s.get<std::string>());
      }
    } else {
      return f.fail("stop", "'stop' must be a string or a list of strings");
    }
    if (stops.size() > static_cast<size_t>(kMaxStopStrings)) {
      return f.fail("stop", "'stop' has {} strings, at most {} allowed", stops.size(),
                    kMaxStopStrings);
    }
    for (const std::string& s : stops) {
      if (s.size() > kMaxStopStringBytes) {
        return f.fail("stop", "'stop' strings must be at most {} bytes", kMaxStopStringBytes);
      }
      if (!s.empty()) p->stop.push_back(s);
    }
  }
  if (const ojson* ids = f.get("stop_token_ids")) {
    if (!ids->is_array())
      return f.fail("stop_token_ids", "'stop_token_ids' must be a list of integers");
    for (const ojson& t : *ids) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab_size) {
        return f.fail("stop_token_ids", "'stop_token_ids' must hold token ids in [0, {})",
                      vocab_size);
      }
      p->stop_token_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
  }
  if (const ojson* bias = f.get("logit_bias")) {
    if (!bias->is_object()) return f.fail("logit_bias", "'logit_bias' must be an object");
    for (auto it = bias->begin(); it != bias->end(); ++it) {
      char* end = nullptr;
      const std::string& key = it.key();
      long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || id < 0 || id >= vocab_size) {
        return f.fail("logit_bias", "'logit_bias' key '{}' is not a token id in [0, {})", key,
                      vocab_size);
      }
      if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < -100.0 ||
          it->get<double>() > 100.0) {
        return f.fail("logit_bias", "'logit_bias' values must be numbers in [-100, 100]");
      }
      p->logit_bias.emplace_back(static_cast<int32_t>(id), it->get<float>());
    }
  }
  if (!f.boolean("stream", stream)) return false;
  if (const ojson* opts = f.get("stream_options")) {
    if (!*stream) {
      return f.fail("stream_options", "Stream options can only be defined when `stream=True`.");
    }
    if (!opts->is_object()) return f.fail("stream_options", "'stream_options' must be an object");
    Fields of(*opts, "stream_options.", nullptr);
    if (!of.only({"include_usage", "continuous_usage_stats"}) ||
        !of.boolean("include_usage", &so->include_usage) ||
        !of.boolean("continuous_usage_stats", &so->continuous_usage_stats)) {
      return f.fail("stream_options", "{}", of.error().message);
    }
  }
  // best_of is gone from vLLM's V1 engine; accept only the no-op value.
  if (!f.integer("best_of", &i, 1, 1)) return false;
  return true;
}

const std::set<std::string> kSamplingKeys = {"model",
                                             "temperature",
                                             "top_p",
                                             "top_k",
                                             "min_p",
                                             "repetition_penalty",
                                             "presence_penalty",
                                             "frequency_penalty",
                                             "seed",
                                             "n",
                                             "min_tokens",
                                             "max_tokens",
                                             "ignore_eos",
                                             "skip_special_tokens",
                                             "include_stop_str_in_output",
                                             "stop",
                                             "stop_token_ids",
                                             "logit_bias",
                                             "stream",
                                             "stream_options",
                                             "best_of",
                                             "user"};

std::set<std::string> with(std::set<std::string> base, std::initializer_list<const char*> more) {
  for (const char* k : more) base.insert(k);
  return base;
}

// Validates chat messages and normalises them for the template: text parts joined, tool-call
// arguments parsed into objects, `reasoning` renamed to `reasoning_content`.
bool read_messages(Fields& f, const ojson& in, ojson* out) {
  if (!in.is_array() || in.empty())
    return f.fail("messages", "'messages' must be a non-empty list");
  static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool"};
  *out = ojson::array();
  for (size_t idx = 0; idx < in.size(); ++idx) {
    const ojson& m = in[idx];
    const std::string where = fmt::format("messages[{}]", idx);
    if (!m.is_object()) return f.fail("messages", "'{}' must be an object", where);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string() || !kRoles.count(role->get<std::string>())) {
      return f.fail("messages", "'{}.role' must be one of system, developer, user, assistant, tool",
                    where);
    }
    ojson msg = ojson::object();
    for (auto it = m.begin(); it != m.end(); ++it) {
      const std::string& key = it.key();
      const ojson& v = *it;
      if (key == "role" || key == "name" || key == "tool_call_id") {
        if (!v.is_string() && !(key != "role" && v.is_null())) {
          return f.fail("messages", "'{}.{}' must be a string", where, key);
        }
        msg[key] = v;
      } else if (key == "content") {
        if (v.is_null() || v.is_string()) {
          msg["content"] = v;
        } else if (v.is_array()) {
          std::string text;
          for (const ojson& part : v) {
            if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
                !part["text"].is_string()) {
              return f.fail("messages",
                            "'{}.content' parts must be {{\"type\": \"text\", "
                            "\"text\": string}} (images and audio are not supported)",
                            where);
            }
            if (!text.empty()) text += "\n";
            text += part["text"].get<std::string>();
          }
          msg["content"] = text;
        } else {
          return f.fail("messages", "'{}.content' must be a string or a list of parts", where);
        }
      } else if (key == "reasoning" || key == "reasoning_content") {
        if (!v.is_null() && !v.is_string()) {
          return f.fail("messages", "'{}.{}' must be a string", where, key);
        }
        if (!v.is_null()) msg["reasoning_content"] = v;
      } else if (key == "tool_calls") {
        if (!v.is_array()) return f.fail("messages", "'{}.tool_calls' must be a list", where);
        ojson calls = ojson::array();
        for (const ojson& tc : v) {
          if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object() ||
              !tc["function"].contains("name") || !tc["function"]["name"].is_string()) {
            return f.fail("messages", "'{}.tool_calls' entries need function.name", where);
          }
          ojson call = tc;
          ojson fn = tc["function"];
          ojson args = fn.value("arguments", ojson("{}"));
          if (args.is_string()) {
            ojson parsed = ojson::parse(args.get<std::string>(), nullptr, false);
            if (parsed.is_discarded() || !parsed.is_object()) {
              return f.fail("messages", "'{}.tool_calls' arguments must be a JSON object", where);
            }
            args = parsed;
          } else if (!args.is_object()) {
            return f.fail("messages", "'{}.tool_calls' arguments must be a JSON object", where);
          }
          fn["arguments"] = args;
          call["function"] = fn;
          calls.push_back(call);
        }
        msg["tool_calls"] = calls;
      } else {
        return f.fail("messages", "unsupported field '{}.{}'", where, key);
      }
    }
    if (!msg.contains("content")) msg["content"] = nullptr;
    out->push_back(std::move(msg));
  }
  return true;
}

bool read_tools(Fields& f, ChatRequest* r) {
  if (const ojson* tools = f.get("tools")) {
    if (!tools->is_array() || tools->empty()) {
      return f.fail("tools", "'tools' must be a non-empty list of function tools");
    }
    for (const ojson& t : *tools) {
      if (!t.is_object() || t.value("type", "function") != "function" || !t.contains("function") ||
          !t["function"].is_object() || !t["function"].contains("name") ||
          !t["function"]["name"].is_string() ||
          (t["function"].contains("parameters") && !t["function"]["parameters"].is_object() &&
           !t["function"]["parameters"].is_null())) {
        return f.fail("tools",
                      "'tools' entries must be {{\"type\": \"function\", \"function\": "
                      "{{\"name\": string, \"parameters\": object}}}}");
      }
    }
    r->tools = *tools;
  }
  r->tool_choice = r->tools.is_null() ? ToolChoice::kNone : ToolChoice::kAuto;
  if (const ojson* tc = f.get("tool_choice")) {
    if (tc->is_string()) {
      const std::string s = tc->get<std::string>();
      if (s == "none") {
        r->tool_choice = ToolChoice::kNone;
      } else if (s == "auto") {
        r->tool_choice = ToolChoice::kAuto;
      } else if (s == "required") {
        r->tool_choice = ToolChoice::kRequired;
      } else {
        return f.fail("tool_choice",
                      "'tool_choice' must be none, auto, required or a named function");
      }
    } else if (tc->is_object() && tc->contains("function") && (*tc)["function"].is_object() &&
               (*tc)["function"].contains("name") && (*tc)["function"]["name"].is_string()) {
      r->tool_choice = ToolChoice::kNamed;
      r->tool_choice_name = (*tc)["function"]["name"].get<std::string>();
    } else {
      return f.fail("tool_choice",
                    "'tool_choice' must be none, auto, required or a named function");
    }
    if (r->tool_choice != ToolChoice::kNone && r->tools.is_null()) {
      return f.fail("tool_choice", "When using `tool_choice`, `tools` must be set.");
    }
    if (r->tool_choice == ToolChoice::kNamed) {
      bool found = false;
      for (const ojson& t : r->tools) found |= t["function"]["name"] == r->tool_choice_name;
      if (!found) {
        return f.fail("tool_choice", "Tool '{}' has not been passed in `tools`.",
                      r->tool_choice_name);
      }
    }
  }
  return f.boolean("parallel_tool_calls", &r->parallel_tool_calls);
}

}  // namespace

Result<nlohmann::ordered_json> parse_json_body(const std::string& body) {
  if (!valid_utf8(body))
    return make_error(ErrorCode::kInvalidArgument, "request body is not valid UTF-8");
  ojson j = ojson::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return make_error(ErrorCode::kInvalidArgument, "request body is not valid JSON");
  if (!j.is_object())
    return make_error(ErrorCode::kInvalidArgument, "request body must be a JSON object");
  return j;
}

bool thinking_enabled(const nlohmann::ordered_json& kwargs) {
  for (const char* key : {"enable_thinking", "thinking"}) {
    auto it = kwargs.find(key);
    if (it != kwargs.end() && it->is_boolean() && !it->get<bool>()) return false;
  }
  return true;
}

Result<ChatRequest> parse_chat_request(const nlohmann::ordered_json& body, int64_t vocab_size,
                                       std::string* param) {
  ChatRequest r;
  Fields f(body, "", param);
  static const std::set<std::string> kKeys =
      with(kSamplingKeys, {"messages", "max_completion_tokens", "logprobs", "top_logprobs", "tools",
                           "tool_choice", "parallel_tool_calls", "chat_template_kwargs",
                           "add_generation_prompt", "include_reasoning", "reasoning_effort",
                           "response_format", "echo", "continue_final_message"});
  if (!f.only(kKeys) || !f.string("model", &r.model)) return f.error();
  if (!read_messages(f, body.contains("messages") ? body["messages"] : ojson(), &r.messages)) {
    return f.error();
  }
  if (!read_sampling(f, vocab_size, /*is_chat=*/true, &r.params, &r.stream, &r.stream_options) ||
      !read_tools(f, &r) || !f.object("chat_template_kwargs", &r.chat_template_kwargs) ||
      !f.boolean("add_generation_prompt", &r.add_generation_prompt) ||
      !f.boolean("include_reasoning", &r.include_reasoning) ||
      !f.boolean("logprobs", &r.logprobs)) {
    return f.error();
  }
  std::optional<int64_t> top;
  if (!f.integer("top_logprobs", &top, 0, engine::kMaxLogprobs)) return f.error();
  if (top) {
    if (!r.logprobs) {
      f.fail("top_logprobs", "when using `top_logprobs`, `logprobs` must be set to true.");
      return f.error();
    }
    r.top_logprobs = static_cast<int>(*top);
  }
  if (r.logprobs) r.params.logprobs = r.top_logprobs;
  std::string effort;
  if (!f.string("reasoning_effort", &effort)) return f.error();
  if (!effort.empty()) {
    static const std::set<std::string> kEfforts = {"none", "minimal", "low", "medium", "high"};
    if (!kEfforts.count(effort)) {
      f.fail("reasoning_effort", "'reasoning_effort' must be none, minimal, low, medium or high");
      return f.error();
    }
    if (!r.chat_template_kwargs.contains("enable_thinking")) {
      r.chat_template_kwargs["enable_thinking"] = effort != "none";
    }
  }
  bool flag = false;
  if (!f.boolean("echo", &flag)) return f.error();
  if (flag) return f.fail("echo", "'echo' is not supported for chat completions"), f.error();
  if (!f.boolean("continue_final_message", &flag)) return f.error();
  if (flag) {
    return f.fail("continue_final_message", "'continue_final_message' is not supported"), f.error();
  }
  if (const ojson* rf = f.get("response_format")) {
    if (!rf->is_object() || rf->value("type", "") != "text") {
      f.fail("response_format",
             "'response_format' other than {{\"type\": \"text\"}} is not supported "
             "(no structured output yet)");
      return f.error();
    }
  }
  return r;
}

Result<CompletionRequest> parse_completion_request(const nlohmann::ordered_json& body,
                                                   int64_t vocab_size, std::string* param) {
  CompletionRequest r;
  Fields f(body, "", param);
  static const std::set<std::string> kKeys =
      with(kSamplingKeys, {"prompt", "echo", "logprobs", "suffix", "prompt_logprobs"});
  if (!f.only(kKeys) || !f.string("model", &r.model)) return f.error();
  const ojson* prompt = f.get("prompt");
  auto token_list = [&](const ojson& arr) -> bool {
    for (const ojson& t : arr) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab_size) {
        return f.fail("prompt", "'prompt' token ids must be integers in [0, {})", vocab_size);
      }
      r.prompt_token_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    return true;
  };
  if (!prompt) {
    f.fail("prompt", "'prompt' is required");
    return f.error();
  }
  if (prompt->is_string()) {
    r.prompt_text = prompt->get<std::string>();
  } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
    r.prompt_text = (*prompt)[0].get<std::string>();
  } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number()) {
    if (!token_list(*prompt)) return f.error();
  } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_array()) {
    if (!token_list((*prompt)[0])) return f.error();
  } else if (prompt->is_array() && prompt->size() > 1) {
    f.fail("prompt",
           "batched prompts (a list of {} prompts) are not supported; send one request "
           "per prompt",
           prompt->size());
    return f.error();
  } else {
    f.fail("prompt", "'prompt' must be a string, a list of token ids, or a list of one of those");
    return f.error();
  }
  if (r.prompt_text && r.prompt_text->empty()) {
    f.fail("prompt", "'prompt' must not be empty");
    return f.error();
  }
  if (!read_sampling(f, vocab_size, /*is_chat=*/false, &r.params, &r.stream, &r.stream_options) ||
      !f.boolean("echo", &r.echo)) {
    return f.error();
  }
  if (!r.params.max_tokens) r.params.max_tokens = 16;  // OpenAI's and vLLM's completions default
  std::optional<int64_t> lp;
  if (!f.integer("logprobs", &lp, 0, engine::kMaxLogprobs)) return f.error();
  if (lp) r.logprobs = static_cast<int>(*lp), r.params.logprobs = static_cast<int>(*lp);
  if (!f.integer("prompt_logprobs", &lp, 0, engine::kMaxLogprobs)) return f.error();
  if (lp) {
    if (r.stream)
      return f.fail("prompt_logprobs", "'prompt_logprobs' is not available when streaming"),
             f.error();
    r.params.prompt_logprobs = static_cast<int>(*lp);
  }
  if (f.get("suffix")) return f.fail("suffix", "'suffix' is not supported"), f.error();
  if (r.echo && r.logprobs) r.params.prompt_logprobs = *r.logprobs;
  return r;
}

Result<TokenizeRequest> parse_tokenize_request(const nlohmann::ordered_json& body,
                                               std::string* param) {
  TokenizeRequest r;
  Fields f(body, "", param);
  if (!f.only({"model", "prompt", "content", "messages", "add_special_tokens",
               "add_generation_prompt", "return_token_strs", "chat_template_kwargs"}) ||
      !f.string("model", &r.model) || !f.boolean("add_special_tokens", &r.add_special_tokens) ||
      !f.boolean("add_generation_prompt", &r.add_generation_prompt) ||
      !f.boolean("return_token_strs", &r.return_token_strs) ||
      !f.object("chat_template_kwargs", &r.chat_template_kwargs)) {
    return f.error();
  }
  std::string text;
  for (const char* key : {"prompt", "content"}) {
    if (f.get(key)) {
      if (!f.string(key, &text)) return f.error();
      r.prompt = text;
    }
  }
  if (const ojson* m = f.get("messages")) {
    if (r.prompt)
      return f.fail("messages", "give either 'prompt' or 'messages', not both"), f.error();
    if (!read_messages(f, *m, &r.messages)) return f.error();
    if (!body.contains("add_special_tokens")) r.add_special_tokens = false;  // vLLM's chat default
  } else if (!r.prompt) {
    return f.fail("prompt", "'prompt' or 'messages' is required"), f.error();
  }
  return r;
}

Result<DetokenizeRequest> parse_detokenize_request(const nlohmann::ordered_json& body,
                                                   int64_t vocab_size, std::string* param) {
  DetokenizeRequest r;
  Fields f(body, "", param);
  if (!f.only({"model", "tokens"}) || !f.string("model", &r.model)) return f.error();
  const ojson* tokens = f.get("tokens");
  if (!tokens || !tokens->is_array())
    return f.fail("tokens", "'tokens' must be a list of token ids"), f.error();
  for (const ojson& t : *tokens) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab_size) {
      return f.fail("tokens", "'tokens' must hold token ids in [0, {})", vocab_size), f.error();
    }
    r.tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return r;
}

}  // namespace flint::server
