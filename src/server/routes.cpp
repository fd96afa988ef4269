// Route handlers: request parsing, chat template, tokenization, engine submission, and the JSON /
// SSE responses in vLLM's shapes.
#include "server/routes.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <random>

#include "server/errors.h"
#include "server/glm47_reasoning_parser.h"
#include "server/glm47_tool_parser.h"
#include "server/openai_types.h"
#include "server/response_json.h"
#include "server/sse.h"

namespace flint::server {
namespace {

using ojson = nlohmann::ordered_json;
using engine::FinishReason;
using engine::PositionLogprobs;
using engine::RequestOutput;
constexpr auto kPoll = std::chrono::milliseconds(1000);

std::string random_hex(int n) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  static const char* kHex = "0123456789abcdef";
  std::string s(n, '0');
  for (char& c : s) c = kHex[rng() & 15];
  return s;
}

int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void send_json(httplib::Response& res, const ojson& j, int status = 200) {
  res.status = status;
  res.set_content(dump_json(j), "application/json");
}

// vLLM's context-length message (clients match it with regexes).
Status check_context(int num_prompt, const std::optional<int>& max_tokens, int max_model_len) {
  if (max_tokens) {
    if (num_prompt + *max_tokens > max_model_len) {
      return make_error(ErrorCode::kInvalidArgument,
                        "This model's maximum context length is {} tokens. However, you requested "
                        "{} output tokens and your prompt contains at least {} input tokens, for a "
                        "total of at least {} tokens. Please reduce the length of the input prompt "
                        "or the number of requested output tokens.",
                        max_model_len, *max_tokens, num_prompt, num_prompt + *max_tokens);
    }
  } else if (num_prompt >= max_model_len) {
    return make_error(ErrorCode::kInvalidArgument,
                      "This model's maximum context length is {} tokens. However, your request has "
                      "{} input tokens. Please reduce the length of the input messages.",
                      max_model_len, num_prompt);
  }
  return ok();
}

// The string-typed argument keys of each tool, for the glm47 parser's value typing.
ToolSchemas tool_schemas(const ojson& tools) {
  ToolSchemas s;
  if (!tools.is_array()) return s;
  for (const ojson& t : tools) {
    const ojson& fn = t["function"];
    auto& keys = s.string_args[fn["name"].get<std::string>()];
    auto params = fn.find("parameters");
    if (params == fn.end() || !params->is_object()) continue;
    auto props = params->find("properties");
    if (props == params->end() || !props->is_object()) continue;
    for (auto it = props->begin(); it != props->end(); ++it) {
      if (it->is_object() && it->value("type", ojson()) == "string") keys.insert(it.key());
    }
  }
  return s;
}

Result<std::string> render_chat(const ServingModel& m, const ServerConfig& cfg,
                                const ojson& messages, const ojson& tools,
                                bool add_generation_prompt, const ojson& request_kwargs) {
  if (!m.chat_template) {
    return make_error(ErrorCode::kInvalidArgument,
                      "this model has no chat template; pass --chat-template to the server");
  }
  ojson ctx = cfg.default_chat_template_kwargs;
  for (auto it = request_kwargs.begin(); it != request_kwargs.end(); ++it) ctx[it.key()] = *it;
  ctx["messages"] = messages;
  if (!tools.is_null()) ctx["tools"] = tools;
  ctx["add_generation_prompt"] = add_generation_prompt;
  ctx["bos_token"] = m.bos_token;
  ctx["eos_token"] = m.eos_token;
  auto text = m.chat_template->render(ctx);
  if (!text) return text.error().with_context("chat template");
  return text;
}

// Waits for the next output; on silence calls `ping` (false: the client went away).
template <typename Ping>
std::optional<RequestOutput> next_output(engine::OutputStream& stream, Ping&& ping, bool* gone) {
  while (true) {
    auto out = stream.next(kPoll);
    if (out) return out;
    if (stream.done()) return std::nullopt;
    if (!ping()) {
      *gone = true;
      return std::nullopt;
    }
  }
}

// ---- chat ----

struct ChatChoice {
  std::optional<Glm47ReasoningStreamParser> reasoning;
  std::optional<Glm47ToolStreamParser> tools;
  std::string text;
  std::vector<PositionLogprobs> logprobs;
  std::vector<std::string> tool_ids;
  int num_tool_calls_sent = 0;
  bool finished = false;
};

struct ChatJob {
  const ServingModel* model;
  const ServerConfig* cfg;
  Metrics* metrics;
  ChatRequest req;
  std::string id;
  std::string model_name;
  int64_t created = 0;
  int num_prompt = 0;
  int num_cached = 0;
  int num_completion = 0;
  bool tools_active = false;
  bool reasoning_active = false;
  bool thinking = true;
  ToolSchemas schemas;
  std::vector<ChatChoice> choices;
  std::shared_ptr<engine::OutputStream> stream;

  ojson chunk(ojson choices_json) const {
    ojson c = {{"id", id},
               {"object", "chat.completion.chunk"},
               {"created", created},
               {"model", model_name},
               {"choices", std::move(choices_json)}};
    if (req.stream_options.continuous_usage_stats) {
      c["usage"] = usage_json(num_prompt, num_completion, num_cached);
    }
    return c;
  }

  // Runs one text delta through the reasoning and tool parsers into an OpenAI delta object.
  ojson delta_json(ChatChoice& ch, const std::string& text, bool final) {
    ojson delta = ojson::object();
    std::string reasoning, content;
    if (ch.reasoning) {
      ReasoningSplit s = ch.reasoning->feed(text);
      if (final) {
        ReasoningSplit f = ch.reasoning->finish();
        s.reasoning += f.reasoning;
        s.content += f.content;
      }
      reasoning = std::move(s.reasoning);
      content = std::move(s.content);
    } else {
      content = text;
    }
    std::vector<ToolCallDelta> calls;
    if (ch.tools) {
      ToolStreamDelta d = ch.tools->feed(content);
      if (final) {
        ToolStreamDelta f = ch.tools->finish();
        d.content += f.content;
        for (auto& t : f.tool_calls) d.tool_calls.push_back(std::move(t));
      }
      content = std::move(d.content);
      calls = std::move(d.tool_calls);
    }
    if (!reasoning.empty() && req.include_reasoning) {
      delta["reasoning"] = reasoning;
      if (cfg->emit_reasoning_content) delta["reasoning_content"] = reasoning;
    }
    if (!content.empty()) delta["content"] = content;
    ojson tc = ojson::array();
    for (const ToolCallDelta& t : calls) {
      if (!req.parallel_tool_calls && t.index > 0) continue;
      ojson j = {{"index", t.index}};
      if (t.name) {
        ch.tool_ids.push_back("chatcmpl-tool-" + random_hex(32));
        j["id"] = ch.tool_ids.back();
        j["type"] = "function";
        j["function"] = {{"name", *t.name}, {"arguments", t.arguments}};
      } else {
        j["function"] = {{"arguments", t.arguments}};
      }
      tc.push_back(std::move(j));
    }
    if (!tc.empty()) delta["tool_calls"] = std::move(tc);
    return delta;
  }

  std::string finish_reason(const ChatChoice& ch, FinishReason r) const {
    if (r == FinishReason::kStop && ch.tools && ch.tools->num_calls() > 0) return "tool_calls";
    return engine::finish_reason_name(r);
  }

  // SSE events for one engine output.
  std::vector<std::string> stream_events(const RequestOutput& out) {
    std::vector<std::string> events;
    if (out.error) {
      events.push_back(sse_event_raw(error_json(*out.error)));
      return events;
    }
    num_cached = out.num_cached_tokens;
    for (const engine::CompletionDelta& d : out.outputs) {
      if (d.index < 0 || d.index >= static_cast<int>(choices.size())) continue;
      ChatChoice& ch = choices[d.index];
      num_completion += static_cast<int>(d.new_token_ids.size());
      const bool final = d.finish_reason.has_value();
      ojson delta = delta_json(ch, d.text, final);
      ojson choice = {{"index", d.index}, {"delta", delta}};
      if (req.logprobs && !d.logprobs.empty()) {
        choice["logprobs"] = chat_logprobs_json(*model->tokenizer, d.logprobs, req.top_logprobs);
      } else {
        choice["logprobs"] = nullptr;
      }
      if (final) {
        ch.finished = true;
        choice["finish_reason"] = finish_reason(ch, *d.finish_reason);
        choice["stop_reason"] = stop_reason_json(d);
        metrics->count_finished(engine::finish_reason_name(*d.finish_reason));
      } else {
        choice["finish_reason"] = nullptr;
        if (delta.empty() && choice["logprobs"].is_null()) continue;
      }
      events.push_back(sse_event(chunk(ojson::array({choice}))));
    }
    return events;
  }

  ojson final_response() {
    ojson out_choices = ojson::array();
    for (size_t i = 0; i < choices.size(); ++i) {
      ChatChoice& ch = choices[i];
      ReasoningSplit split{"", ch.text};
      if (reasoning_active) split = glm47_split_reasoning(ch.text, thinking);
      ojson message = {{"role", "assistant"}};
      ojson content = split.content.empty() ? ojson() : ojson(split.content);
      ojson calls = ojson::array();
      if (tools_active) {
        ToolParseResult parsed = glm47_parse_tool_calls(split.content, schemas);
        content = parsed.content ? ojson(*parsed.content) : ojson();
        for (const ParsedToolCall& c : parsed.tool_calls) {
          calls.push_back({{"id", "chatcmpl-tool-" + random_hex(32)},
                           {"type", "function"},
                           {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
          if (!req.parallel_tool_calls) break;
        }
        if (parsed.tool_calls.empty() && split.content.empty()) content = nullptr;
      }
      message["content"] = content;
      if (reasoning_active) {
        ojson r =
            split.reasoning.empty() || !req.include_reasoning ? ojson() : ojson(split.reasoning);
        message["reasoning"] = r;
        if (cfg->emit_reasoning_content) message["reasoning_content"] = r;
      }
      message["tool_calls"] = calls;
      ojson c = {{"index", i}, {"message", message}};
      c["logprobs"] = req.logprobs
                          ? chat_logprobs_json(*model->tokenizer, ch.logprobs, req.top_logprobs)
                          : ojson();
      c["finish_reason"] = nullptr;
      c["stop_reason"] = nullptr;
      out_choices.push_back(std::move(c));
    }
    return out_choices;
  }
};

// ---- completions ----

struct CompletionJob {
  const ServingModel* model;
  Metrics* metrics;
  CompletionRequest req;
  std::string id;
  std::string model_name;
  std::string prompt_text;  // for echo
  int64_t created = 0;
  int num_prompt = 0;
  int num_cached = 0;
  int num_completion = 0;
  std::vector<std::string> texts;
  std::vector<ojson> logprobs;
  std::vector<size_t> offsets;
  std::vector<bool> echoed;
  std::optional<std::vector<PositionLogprobs>> prompt_logprobs;
  std::shared_ptr<engine::OutputStream> stream;

  ojson chunk(ojson choices_json) const {
    ojson c = {{"id", id},
               {"object", "text_completion"},
               {"created", created},
               {"model", model_name},
               {"choices", std::move(choices_json)}};
    if (req.stream_options.continuous_usage_stats) {
      c["usage"] = usage_json(num_prompt, num_completion, num_cached);
    }
    return c;
  }

  // Text and logprobs of `d` (with the echoed prompt in front of a choice's first delta).
  std::pair<std::string, ojson> piece(const engine::CompletionDelta& d) {
    std::string text;
    ojson lp = empty_completion_logprobs();
    size_t& offset = offsets[d.index];
    if (req.echo && !echoed[d.index]) {
      echoed[d.index] = true;
      text = prompt_text;
      if (req.logprobs && prompt_logprobs) {
        append_completion_logprobs(*model->tokenizer, *prompt_logprobs, *req.logprobs,
                                   /*first_null=*/true, &offset, &lp);
      }
    }
    text += d.text;
    if (req.logprobs) {
      append_completion_logprobs(*model->tokenizer, d.logprobs, *req.logprobs, false, &offset, &lp);
    }
    return {text, lp};
  }

  std::vector<std::string> stream_events(const RequestOutput& out) {
    std::vector<std::string> events;
    if (out.error) {
      events.push_back(sse_event_raw(error_json(*out.error)));
      return events;
    }
    num_cached = out.num_cached_tokens;
    if (out.prompt_logprobs) prompt_logprobs = out.prompt_logprobs;
    for (const engine::CompletionDelta& d : out.outputs) {
      if (d.index < 0 || d.index >= static_cast<int>(texts.size())) continue;
      num_completion += static_cast<int>(d.new_token_ids.size());
      auto [text, lp] = piece(d);
      ojson choice = {{"index", d.index}, {"text", text}};
      choice["logprobs"] = req.logprobs ? lp : ojson();
      if (d.finish_reason) {
        choice["finish_reason"] = engine::finish_reason_name(*d.finish_reason);
        choice["stop_reason"] = stop_reason_json(d);
        metrics->count_finished(engine::finish_reason_name(*d.finish_reason));
      } else {
        choice["finish_reason"] = nullptr;
        if (text.empty() && lp["tokens"].empty()) continue;
      }
      events.push_back(sse_event(chunk(ojson::array({choice}))));
    }
    return events;
  }
};

// Streams SSE from `next_events` (called per engine output) and ends with the usage chunk and
// [DONE]; aborts the request when the client goes away.
template <typename Job>
void stream_response(httplib::Response& res, std::shared_ptr<Job> job, engine::Engine* eng,
                     std::vector<std::string> first_events) {
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", [job, eng, first = std::move(first_events)](
                                                            size_t, httplib::DataSink& sink) {
    auto write = [&](std::string_view s) { return sink.write(s.data(), s.size()); };
    auto gone = [&] {
      eng->abort(job->id);
      job->metrics->count_finished("abort");  // its final output is never read
      return false;
    };
    for (const std::string& e : first) {
      if (!write(e)) return gone();
    }
    bool client_gone = false;
    while (true) {
      auto out = next_output(
          *job->stream, [&] { return write(": ping\n\n"); }, &client_gone);
      if (client_gone) return gone();
      if (!out) break;
      for (const std::string& e : job->stream_events(*out)) {
        if (!write(e)) return gone();
      }
      if (out->finished) break;  // the engine logs the finished request
    }
    if (job->req.stream_options.include_usage) {
      ojson u = job->chunk(ojson::array());
      u["usage"] = usage_json(job->num_prompt, job->num_completion, job->num_cached);
      if (!write(sse_event(u))) return gone();
    }
    write(kSseDone);
    sink.done();
    return true;
  });
}

// Collects every output of a non-streaming request. While waiting, JSON-insignificant spaces are
// written so that a client that went away is noticed (the write fails) and the request aborted.
template <typename Job, typename OnOutput, typename Finish>
void collect_response(httplib::Response& res, std::shared_ptr<Job> job, engine::Engine* eng,
                      OnOutput on_output, Finish finish) {
  // Not plain "application/json": httplib would gzip it, and the compressor holds back the spaces.
  res.set_chunked_content_provider(
      "application/json; charset=utf-8",
      [job, eng, on_output, finish](size_t, httplib::DataSink& sink) {
        auto write = [&](std::string_view s) { return sink.write(s.data(), s.size()); };
        bool client_gone = false;
        std::optional<Error> error;
        while (true) {
          auto out = next_output(
              *job->stream, [&] { return write(" "); }, &client_gone);
          if (client_gone || !out) break;
          if (out->error) error = *out->error;
          on_output(*out);
          if (out->finished) break;  // the engine logs the finished request
          if (!write(" ")) {
            client_gone = true;
            break;
          }
        }
        if (client_gone) {
          eng->abort(job->id);
          job->metrics->count_finished("abort");  // its final output is never read
          return false;
        }
        std::string body = error ? error_json(*error) : dump_json(finish());
        write(body);
        sink.done();
        return true;
      });
}

}  // namespace

void send_error(httplib::Response& res, const Error& error, std::string_view param) {
  HttpError e = to_http_error(error, param);
  res.status = e.status;
  res.set_content(e.body, "application/json");
}

Routes::Routes(const ServerConfig& config)
    : config_(config), metrics_(config.served_model_names.front()) {}

bool Routes::authorized(const httplib::Request& req, httplib::Response& res) const {
  if (config_.api_keys.empty()) return true;
  const std::string auth = req.get_header_value("Authorization");
  for (const std::string& key : config_.api_keys) {
    if (auth == "Bearer " + key) return true;
  }
  send_error(res, make_error(ErrorCode::kPermissionDenied, "{}",
                             auth.empty() ? "missing API key: send 'Authorization: Bearer <key>'"
                                          : "invalid API key"));
  return false;
}

const ServingModel* Routes::ready_or_503(httplib::Response& res) const {
  const ServingModel* m = model_.load();
  if (!m) send_error(res, make_error(ErrorCode::kUnavailable, "Loading model"));
  return m;
}

Status Routes::check_model_name(const std::string& name) const {
  if (name.empty()) return ok();
  for (const std::string& n : config_.served_model_names) {
    if (n == name) return ok();
  }
  return make_error(ErrorCode::kNotFound, "The model `{}` does not exist.", name);
}

void Routes::health(const httplib::Request&, httplib::Response& res) {
  if (!ready_or_503(res)) return;
  res.status = 200;
}

void Routes::version(const httplib::Request&, httplib::Response& res) {
  send_json(res, {{"version", "0.1.0"}});
}

void Routes::models(const httplib::Request&, httplib::Response& res) {
  const ServingModel* m = model_.load();
  ojson data = ojson::array();
  for (const std::string& name : config_.served_model_names) {
    ojson card = {{"id", name},          {"object", "model"},          {"created", now_unix()},
                  {"owned_by", "flint"}, {"root", config_.model_path}, {"parent", nullptr}};
    if (m) card["max_model_len"] = m->engine->config().max_model_len;
    data.push_back(card);
  }
  send_json(res, {{"object", "list"}, {"data", data}});
}

void Routes::metrics(const httplib::Request&, httplib::Response& res) {
  const ServingModel* m = model_.load();
  engine::EngineStats stats;
  if (m) {
    metrics_.observe(m->engine->take_latency_samples());
    stats = m->engine->stats();
  }
  res.set_content(metrics_.render(stats), "text/plain; version=0.0.4; charset=utf-8");
}

void Routes::tokenize(const httplib::Request& req, httplib::Response& res) {
  const ServingModel* m = ready_or_503(res);
  if (!m) return;
  auto body = parse_json_body(req.body);
  if (!body) return send_error(res, body.error());
  std::string param;
  auto tr = parse_tokenize_request(*body, &param);
  if (!tr) return send_error(res, tr.error(), param);
  if (auto st = check_model_name(tr->model); !st) return send_error(res, st.error(), "model");
  std::string text;
  if (tr->prompt) {
    text = *tr->prompt;
  } else {
    auto rendered = render_chat(*m, config_, tr->messages, ojson(), tr->add_generation_prompt,
                                tr->chat_template_kwargs);
    if (!rendered) return send_error(res, rendered.error(), "messages");
    text = std::move(*rendered);
  }
  auto ids = m->tokenizer->encode(text, tr->add_special_tokens);
  if (!ids) return send_error(res, ids.error(), "prompt");
  ojson out = {{"count", ids->size()},
               {"max_model_len", m->engine->config().max_model_len},
               {"tokens", *ids}};
  if (tr->return_token_strs) {
    ojson strs = ojson::array();
    for (int32_t id : *ids) strs.push_back(m->tokenizer->id_to_token(id));
    out["token_strs"] = strs;
  }
  send_json(res, out);
}

void Routes::detokenize(const httplib::Request& req, httplib::Response& res) {
  const ServingModel* m = ready_or_503(res);
  if (!m) return;
  auto body = parse_json_body(req.body);
  if (!body) return send_error(res, body.error());
  std::string param;
  auto dr = parse_detokenize_request(*body, m->tokenizer->vocab_size(), &param);
  if (!dr) return send_error(res, dr.error(), param);
  if (auto st = check_model_name(dr->model); !st) return send_error(res, st.error(), "model");
  send_json(res, {{"prompt", m->tokenizer->decode(dr->tokens, /*skip_special_tokens=*/false)}});
}

void Routes::chat_completions(const httplib::Request& req, httplib::Response& res) {
  const ServingModel* m = ready_or_503(res);
  if (!m) return;
  auto body = parse_json_body(req.body);
  if (!body) return send_error(res, body.error());
  std::string param;
  const int64_t vocab = m->tokenizer->vocab_size();
  auto parsed = parse_chat_request(*body, vocab, &param);
  if (!parsed) return send_error(res, parsed.error(), param);
  if (auto st = check_model_name(parsed->model); !st) return send_error(res, st.error(), "model");

  auto job = std::make_shared<ChatJob>();
  job->model = m;
  job->cfg = &config_;
  job->metrics = &metrics_;
  job->req = std::move(*parsed);
  ChatRequest& cr = job->req;
  const bool wants_tools = cr.tool_choice != ToolChoice::kNone;
  if (wants_tools && cr.tool_choice == ToolChoice::kAuto &&
      (!config_.enable_auto_tool_choice || config_.tool_call_parser.empty())) {
    return send_error(res,
                      make_error(ErrorCode::kInvalidArgument,
                                 "\"auto\" tool choice requires --enable-auto-tool-choice and "
                                 "--tool-call-parser to be set"),
                      "tool_choice");
  }
  if (wants_tools && config_.tool_call_parser.empty()) {
    return send_error(res,
                      make_error(ErrorCode::kInvalidArgument,
                                 "\"required\" and named tool choice require --tool-call-parser"),
                      "tool_choice");
  }
  job->tools_active = wants_tools;
  job->reasoning_active = !config_.reasoning_parser.empty();
  ojson kwargs = config_.default_chat_template_kwargs;
  for (auto it = cr.chat_template_kwargs.begin(); it != cr.chat_template_kwargs.end(); ++it) {
    kwargs[it.key()] = *it;
  }
  job->thinking = thinking_enabled(kwargs);
  job->schemas = tool_schemas(cr.tools);
  const bool hide_tools =
      cr.tool_choice == ToolChoice::kNone && config_.exclude_tools_when_tool_choice_none;
  auto prompt = render_chat(*m, config_, cr.messages, hide_tools ? ojson() : cr.tools,
                            cr.add_generation_prompt, cr.chat_template_kwargs);
  if (!prompt) return send_error(res, prompt.error(), "messages");
  auto ids = m->tokenizer->encode(*prompt, /*add_special_tokens=*/false);
  if (!ids) return send_error(res, ids.error(), "messages");
  job->num_prompt = static_cast<int>(ids->size());
  if (auto st =
          check_context(job->num_prompt, cr.params.max_tokens, m->engine->config().max_model_len);
      !st) {
    return send_error(res, st.error(), "messages");
  }
  // Tag tokens must survive detokenization for the parsers to see them.
  if (job->tools_active || job->reasoning_active) cr.params.skip_special_tokens = false;

  job->id = "chatcmpl-" + random_hex(32);
  job->model_name = cr.model.empty() ? model_name() : cr.model;
  job->created = now_unix();
  job->choices.resize(cr.params.n);
  for (ChatChoice& ch : job->choices) {
    if (job->reasoning_active) ch.reasoning.emplace(job->thinking);
    if (job->tools_active) ch.tools.emplace(job->schemas);
  }
  engine::Request request;
  request.request_id = job->id;
  request.prompt_token_ids = std::move(*ids);
  request.params = cr.params;
  auto stream = m->engine->add_request(std::move(request));
  if (!stream) return send_error(res, stream.error());
  job->stream = *stream;

  if (cr.stream) {
    std::vector<std::string> first;
    for (int i = 0; i < cr.params.n; ++i) {
      ojson choice = {{"index", i},
                      {"delta", {{"role", "assistant"}, {"content", ""}}},
                      {"logprobs", nullptr},
                      {"finish_reason", nullptr}};
      first.push_back(sse_event(job->chunk(ojson::array({choice}))));
    }
    return stream_response(res, job, m->engine, std::move(first));
  }
  auto finish_reasons = std::make_shared<std::vector<ojson>>(cr.params.n);
  auto stop_reasons = std::make_shared<std::vector<ojson>>(cr.params.n);
  collect_response(
      res, job, m->engine,
      [job, finish_reasons, stop_reasons](const RequestOutput& out) {
        job->num_cached = out.num_cached_tokens;
        for (const engine::CompletionDelta& d : out.outputs) {
          if (d.index < 0 || d.index >= static_cast<int>(job->choices.size())) continue;
          ChatChoice& ch = job->choices[d.index];
          ch.text += d.text;
          job->num_completion += static_cast<int>(d.new_token_ids.size());
          ch.logprobs.insert(ch.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
          if (d.finish_reason) {
            (*finish_reasons)[d.index] = engine::finish_reason_name(*d.finish_reason);
            (*stop_reasons)[d.index] = stop_reason_json(d);
            job->metrics->count_finished(engine::finish_reason_name(*d.finish_reason));
          }
        }
      },
      [job, finish_reasons, stop_reasons]() {
        ojson choices = job->final_response();
        for (size_t i = 0; i < choices.size(); ++i) {
          ojson reason = (*finish_reasons)[i];
          if (reason == "stop" && !choices[i]["message"]["tool_calls"].empty())
            reason = "tool_calls";
          choices[i]["finish_reason"] = reason;
          choices[i]["stop_reason"] = (*stop_reasons)[i];
        }
        return ojson{{"id", job->id},
                     {"object", "chat.completion"},
                     {"created", job->created},
                     {"model", job->model_name},
                     {"choices", choices},
                     {"usage", usage_json(job->num_prompt, job->num_completion, job->num_cached)}};
      });
}

void Routes::completions(const httplib::Request& req, httplib::Response& res) {
  const ServingModel* m = ready_or_503(res);
  if (!m) return;
  auto body = parse_json_body(req.body);
  if (!body) return send_error(res, body.error());
  std::string param;
  auto parsed = parse_completion_request(*body, m->tokenizer->vocab_size(), &param);
  if (!parsed) return send_error(res, parsed.error(), param);
  if (auto st = check_model_name(parsed->model); !st) return send_error(res, st.error(), "model");
  auto job = std::make_shared<CompletionJob>();
  job->model = m;
  job->metrics = &metrics_;
  job->req = std::move(*parsed);
  CompletionRequest& cr = job->req;
  std::vector<int32_t> ids;
  if (cr.prompt_text) {
    auto enc = m->tokenizer->encode(*cr.prompt_text, /*add_special_tokens=*/true);
    if (!enc) return send_error(res, enc.error(), "prompt");
    ids = std::move(*enc);
    job->prompt_text = *cr.prompt_text;
  } else {
    ids = cr.prompt_token_ids;
    job->prompt_text = m->tokenizer->decode(ids, /*skip_special_tokens=*/false);
  }
  if (ids.empty())
    return send_error(res, make_error(ErrorCode::kInvalidArgument, "'prompt' must not be empty"),
                      "prompt");
  job->num_prompt = static_cast<int>(ids.size());
  if (auto st =
          check_context(job->num_prompt, cr.params.max_tokens, m->engine->config().max_model_len);
      !st) {
    return send_error(res, st.error(), "prompt");
  }
  job->id = "cmpl-" + random_hex(32);
  job->model_name = cr.model.empty() ? model_name() : cr.model;
  job->created = now_unix();
  job->texts.resize(cr.params.n);
  job->logprobs.assign(cr.params.n, empty_completion_logprobs());
  job->offsets.assign(cr.params.n, 0);
  job->echoed.assign(cr.params.n, false);
  engine::Request request;
  request.request_id = job->id;
  request.prompt_token_ids = std::move(ids);
  request.params = cr.params;
  auto stream = m->engine->add_request(std::move(request));
  if (!stream) return send_error(res, stream.error());
  job->stream = *stream;
  if (cr.stream) return stream_response(res, job, m->engine, {});

  auto finish_reasons = std::make_shared<std::vector<ojson>>(cr.params.n);
  auto stop_reasons = std::make_shared<std::vector<ojson>>(cr.params.n);
  collect_response(
      res, job, m->engine,
      [job, finish_reasons, stop_reasons](const RequestOutput& out) {
        job->num_cached = out.num_cached_tokens;
        if (out.prompt_logprobs) job->prompt_logprobs = out.prompt_logprobs;
        for (const engine::CompletionDelta& d : out.outputs) {
          if (d.index < 0 || d.index >= static_cast<int>(job->texts.size())) continue;
          job->num_completion += static_cast<int>(d.new_token_ids.size());
          auto [text, lp] = job->piece(d);
          job->texts[d.index] += text;
          for (const char* k : {"text_offset", "token_logprobs", "tokens", "top_logprobs"}) {
            for (auto& v : lp[k]) job->logprobs[d.index][k].push_back(v);
          }
          if (d.finish_reason) {
            (*finish_reasons)[d.index] = engine::finish_reason_name(*d.finish_reason);
            (*stop_reasons)[d.index] = stop_reason_json(d);
            job->metrics->count_finished(engine::finish_reason_name(*d.finish_reason));
          }
        }
      },
      [job, finish_reasons, stop_reasons]() {
        ojson choices = ojson::array();
        for (size_t i = 0; i < job->texts.size(); ++i) {
          ojson c = {{"index", i}, {"text", job->texts[i]}};
          c["logprobs"] = job->req.logprobs ? job->logprobs[i] : ojson();
          c["finish_reason"] = (*finish_reasons)[i];
          c["stop_reason"] = (*stop_reasons)[i];
          choices.push_back(std::move(c));
        }
        return ojson{{"id", job->id},
                     {"object", "text_completion"},
                     {"created", job->created},
                     {"model", job->model_name},
                     {"choices", choices},
                     {"usage", usage_json(job->num_prompt, job->num_completion, job->num_cached)}};
      });
}

}  // namespace flint::server
