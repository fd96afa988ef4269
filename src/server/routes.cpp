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

// The server's default chat_template_kwargs overridden by the request's.
ojson template_kwargs(const ServerConfig& cfg, const ojson& request_kwargs) {
  ojson kwargs = cfg.default_chat_template_kwargs;
  for (auto it = request_kwargs.begin(); it != request_kwargs.end(); ++it) kwargs[it.key()] = *it;
  return kwargs;
}

Result<std::string> render_chat(const ServingModel& m, const ServerConfig& cfg,
                                const ojson& messages, const ojson& tools,
                                bool add_generation_prompt, const ojson& request_kwargs) {
  if (!m.chat_template) {
    return make_error(ErrorCode::kInvalidArgument,
                      "this model has no chat template; pass --chat-template to the server");
  }
  ojson ctx = template_kwargs(cfg, request_kwargs);
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

// What a chat and a completions request share: the response envelope, the token counts, each
// choice's finish and stop reasons, and the engine stream. Owned by its handler's callbacks.
struct Job {
  Job(const char* object, const char* chunk_object, const ServingModel* model, Metrics* metrics,
      const StreamOptions& stream_options)
      : object(object),
        chunk_object(chunk_object),
        model(model),
        metrics(metrics),
        stream_options(stream_options) {}

  const char* object;        // of the whole response
  const char* chunk_object;  // of a streamed chunk
  const ServingModel* model;
  Metrics* metrics;
  StreamOptions stream_options;
  std::string id;
  std::string model_name;
  int64_t created = 0;
  int num_prompt = 0;
  int num_cached = 0;
  int num_completion = 0;
  std::vector<ojson> finish_reasons;  // [n] null until the choice finishes
  std::vector<ojson> stop_reasons;    // [n]
  std::shared_ptr<engine::OutputStream> stream;

  ojson usage() const { return usage_json(num_prompt, num_completion, num_cached); }

  // A streamed chunk, with the usage so far when the client asked for it on every chunk.
  ojson chunk(ojson choices_json) const {
    ojson c = envelope(chunk_object, std::move(choices_json));
    if (stream_options.continuous_usage_stats) c["usage"] = usage();
    return c;
  }

  // The non-streamed response.
  ojson response(ojson choices_json) const {
    ojson r = envelope(object, std::move(choices_json));
    r["usage"] = usage();
    return r;
  }

  // Checks the context length (a failure is sent naming `prompt_param`), then names the job and
  // submits `prompt` for `n` choices to the engine. False when an error was sent.
  bool start(httplib::Response& res, std::string_view prompt_param, const char* id_prefix,
             std::string name, std::vector<int32_t> prompt, const engine::SamplingParams& params) {
    num_prompt = static_cast<int>(prompt.size());
    const int max_model_len = model->engine->config().max_model_len;
    if (auto st = check_context(num_prompt, params.max_tokens, max_model_len); !st) {
      send_error(res, st.error(), prompt_param);
      return false;
    }
    id = id_prefix + random_hex(32);
    model_name = std::move(name);
    created = now_unix();
    finish_reasons.assign(params.n, ojson());
    stop_reasons.assign(params.n, ojson());
    engine::Request request;
    request.request_id = id;
    request.prompt_token_ids = std::move(prompt);
    request.params = params;
    auto s = model->engine->add_request(std::move(request));
    if (!s) {
      send_error(res, s.error());
      return false;
    }
    stream = *s;
    return true;
  }

  // Takes the counts of `out` and calls `fn(delta)` for each delta of a known choice, after
  // recording (and counting) a finishing choice's reasons.
  template <typename Fn>
  void for_each_delta(const RequestOutput& out, Fn&& fn) {
    num_cached = out.num_cached_tokens;
    for (const engine::CompletionDelta& d : out.outputs) {
      if (d.index < 0 || d.index >= static_cast<int>(finish_reasons.size())) continue;
      num_completion += static_cast<int>(d.new_token_ids.size());
      if (d.finish_reason) {
        finish_reasons[d.index] = engine::finish_reason_name(*d.finish_reason);
        stop_reasons[d.index] = stop_reason_json(d);
        metrics->count_finished(engine::finish_reason_name(*d.finish_reason));
      }
      fn(d);
    }
  }

  // A streamed choice's finish_reason, and its stop_reason once it finished.
  void add_finish(const engine::CompletionDelta& d, ojson* choice) const {
    (*choice)["finish_reason"] = finish_reasons[d.index];
    if (d.finish_reason) (*choice)["stop_reason"] = stop_reasons[d.index];
  }

 private:
  ojson envelope(const char* obj, ojson choices_json) const {
    return {{"id", id},
            {"object", obj},
            {"created", created},
            {"model", model_name},
            {"choices", std::move(choices_json)}};
  }
};

// ---- chat ----

struct ChatChoice {
  std::optional<Glm47ReasoningStreamParser> reasoning;
  std::optional<Glm47ToolStreamParser> tools;
  std::string text;
  std::vector<PositionLogprobs> logprobs;
  std::vector<std::string> tool_ids;
  int num_tool_calls_sent = 0;
};

struct ChatJob : Job {
  ChatJob(const ServingModel* model, Metrics* metrics, const ServerConfig* cfg, ChatRequest req)
      : Job("chat.completion", "chat.completion.chunk", model, metrics, req.stream_options),
        cfg(cfg),
        req(std::move(req)) {}

  const ServerConfig* cfg;
  ChatRequest req;
  bool tools_active = false;
  bool reasoning_active = false;
  bool thinking = true;
  ToolSchemas schemas;
  std::vector<ChatChoice> choices;

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

  // SSE events for one engine output.
  std::vector<std::string> stream_events(const RequestOutput& out) {
    std::vector<std::string> events;
    for_each_delta(out, [&](const engine::CompletionDelta& d) {
      ChatChoice& ch = choices[d.index];
      const bool final = d.finish_reason.has_value();
      ojson delta = delta_json(ch, d.text, final);
      ojson choice = {{"index", d.index}, {"delta", delta}};
      choice["logprobs"] = req.logprobs && !d.logprobs.empty()
                               ? chat_logprobs_json(*model->tokenizer, d.logprobs, req.top_logprobs)
                               : ojson();
      // A stop after tool calls is reported as their finish.
      if (final && *d.finish_reason == FinishReason::kStop && ch.tools && ch.tools->num_calls() > 0)
        finish_reasons[d.index] = "tool_calls";
      add_finish(d, &choice);
      if (!final && delta.empty() && choice["logprobs"].is_null()) return;
      events.push_back(sse_event(chunk(ojson::array({choice}))));
    });
    return events;
  }

  // Accumulates one engine output of a non-streamed request.
  void collect(const RequestOutput& out) {
    for_each_delta(out, [&](const engine::CompletionDelta& d) {
      ChatChoice& ch = choices[d.index];
      ch.text += d.text;
      ch.logprobs.insert(ch.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    });
  }

  // The non-streamed response: each choice's text parsed into reasoning, content and tool calls.
  ojson final_response() const {
    ojson out_choices = ojson::array();
    for (size_t i = 0; i < choices.size(); ++i) {
      const ChatChoice& ch = choices[i];
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
      const bool has_calls = !calls.empty();
      message["tool_calls"] = std::move(calls);
      ojson c = {{"index", i}, {"message", message}};
      c["logprobs"] = req.logprobs
                          ? chat_logprobs_json(*model->tokenizer, ch.logprobs, req.top_logprobs)
                          : ojson();
      c["finish_reason"] =
          finish_reasons[i] == "stop" && has_calls ? ojson("tool_calls") : finish_reasons[i];
      c["stop_reason"] = stop_reasons[i];
      out_choices.push_back(std::move(c));
    }
    return response(std::move(out_choices));
  }
};

// ---- completions ----

struct CompletionJob : Job {
  CompletionJob(const ServingModel* model, Metrics* metrics, CompletionRequest req)
      : Job("text_completion", "text_completion", model, metrics, req.stream_options),
        req(std::move(req)) {}

  CompletionRequest req;
  std::string prompt_text;  // for echo
  std::vector<std::string> texts;
  std::vector<ojson> logprobs;
  std::vector<size_t> offsets;
  std::vector<bool> echoed;
  std::optional<std::vector<PositionLogprobs>> prompt_logprobs;

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

  // Calls `fn(delta, text, logprobs)` for each delta of `out` (see piece).
  template <typename Fn>
  void for_each_piece(const RequestOutput& out, Fn&& fn) {
    if (out.prompt_logprobs) prompt_logprobs = out.prompt_logprobs;
    for_each_delta(out, [&](const engine::CompletionDelta& d) {
      auto [text, lp] = piece(d);
      fn(d, text, lp);
    });
  }

  std::vector<std::string> stream_events(const RequestOutput& out) {
    std::vector<std::string> events;
    for_each_piece(out,
                   [&](const engine::CompletionDelta& d, const std::string& text, const ojson& lp) {
                     ojson choice = {{"index", d.index}, {"text", text}};
                     choice["logprobs"] = req.logprobs ? lp : ojson();
                     add_finish(d, &choice);
                     if (!d.finish_reason && text.empty() && lp["tokens"].empty()) return;
                     events.push_back(sse_event(chunk(ojson::array({choice}))));
                   });
    return events;
  }

  void collect(const RequestOutput& out) {
    for_each_piece(
        out, [&](const engine::CompletionDelta& d, const std::string& text, const ojson& lp) {
          texts[d.index] += text;
          for (const char* k : {"text_offset", "token_logprobs", "tokens", "top_logprobs"}) {
            for (auto& v : lp[k]) logprobs[d.index][k].push_back(v);
          }
        });
  }

  ojson final_response() const {
    ojson choices = ojson::array();
    for (size_t i = 0; i < texts.size(); ++i) {
      ojson c = {{"index", i}, {"text", texts[i]}};
      c["logprobs"] = req.logprobs ? logprobs[i] : ojson();
      c["finish_reason"] = finish_reasons[i];
      c["stop_reason"] = stop_reasons[i];
      choices.push_back(std::move(c));
    }
    return response(std::move(choices));
  }
};

// Streams SSE from the job's `stream_events` (called per engine output) and ends with the usage
// chunk and [DONE]; aborts the request when the client goes away.
template <typename J>
void stream_response(httplib::Response& res, std::shared_ptr<J> job, engine::Engine* eng,
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
      std::vector<std::string> events;
      if (out->error) {
        events.push_back(sse_event_raw(error_json(*out->error)));
      } else {
        events = job->stream_events(*out);
      }
      for (const std::string& e : events) {
        if (!write(e)) return gone();
      }
      if (out->finished) break;  // the engine logs the finished request
    }
    if (job->stream_options.include_usage) {
      ojson u = job->chunk(ojson::array());
      u["usage"] = job->usage();
      if (!write(sse_event(u))) return gone();
    }
    write(kSseDone);
    sink.done();
    return true;
  });
}

// Collects every output of a non-streaming request (the job's `collect`) and answers with its
// `final_response`. While waiting, JSON-insignificant spaces are written so that a client that
// went away is noticed (the write fails) and the request aborted.
template <typename J>
void collect_response(httplib::Response& res, std::shared_ptr<J> job, engine::Engine* eng) {
  // Not plain "application/json": httplib would gzip it, and the compressor holds back the spaces.
  res.set_chunked_content_provider(
      "application/json; charset=utf-8", [job, eng](size_t, httplib::DataSink& sink) {
        auto write = [&](std::string_view s) { return sink.write(s.data(), s.size()); };
        bool client_gone = false;
        std::optional<Error> error;
        while (true) {
          auto out = next_output(
              *job->stream, [&] { return write(" "); }, &client_gone);
          if (client_gone || !out) break;
          if (out->error) error = *out->error;
          job->collect(*out);
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
        std::string body = error ? error_json(*error) : dump_json(job->final_response());
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

template <typename T, typename Parse>
std::optional<T> Routes::parse_body(const httplib::Request& req, httplib::Response& res,
                                    const ServingModel& m, Parse parse) const {
  auto body = parse_json_body(req.body);
  if (!body) {
    send_error(res, body.error());
    return std::nullopt;
  }
  std::string param;
  auto parsed = parse(*body, m.tokenizer->vocab_size(), &param);
  if (!parsed) {
    send_error(res, parsed.error(), param);
    return std::nullopt;
  }
  if (auto st = check_model_name(parsed->model); !st) {
    send_error(res, st.error(), "model");
    return std::nullopt;
  }
  return std::move(*parsed);
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
  auto tr =
      parse_body<TokenizeRequest>(req, res, *m, [](const ojson& body, int64_t, std::string* param) {
        return parse_tokenize_request(body, param);
      });
  if (!tr) return;
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
  auto dr = parse_body<DetokenizeRequest>(req, res, *m, parse_detokenize_request);
  if (!dr) return;
  send_json(res, {{"prompt", m->tokenizer->decode(dr->tokens, /*skip_special_tokens=*/false)}});
}

void Routes::chat_completions(const httplib::Request& req, httplib::Response& res) {
  const ServingModel* m = ready_or_503(res);
  if (!m) return;
  auto parsed = parse_body<ChatRequest>(req, res, *m, parse_chat_request);
  if (!parsed) return;

  auto job = std::make_shared<ChatJob>(m, &metrics_, &config_, std::move(*parsed));
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
  job->thinking = thinking_enabled(template_kwargs(config_, cr.chat_template_kwargs));
  job->schemas = tool_schemas(cr.tools);
  const bool hide_tools =
      cr.tool_choice == ToolChoice::kNone && config_.exclude_tools_when_tool_choice_none;
  auto prompt = render_chat(*m, config_, cr.messages, hide_tools ? ojson() : cr.tools,
                            cr.add_generation_prompt, cr.chat_template_kwargs);
  if (!prompt) return send_error(res, prompt.error(), "messages");
  auto ids = m->tokenizer->encode(*prompt, /*add_special_tokens=*/false);
  if (!ids) return send_error(res, ids.error(), "messages");
  // Tag tokens must survive detokenization for the parsers to see them.
  if (job->tools_active || job->reasoning_active) cr.params.skip_special_tokens = false;
  job->choices.resize(cr.params.n);
  for (ChatChoice& ch : job->choices) {
    if (job->reasoning_active) ch.reasoning.emplace(job->thinking);
    if (job->tools_active) ch.tools.emplace(job->schemas);
  }
  if (!job->start(res, "messages", "chatcmpl-", served_name(cr.model), std::move(*ids), cr.params))
    return;

  if (!cr.stream) return collect_response(res, job, m->engine);
  std::vector<std::string> first;
  for (int i = 0; i < cr.params.n; ++i) {
    ojson choice = {{"index", i},
                    {"delta", {{"role", "assistant"}, {"content", ""}}},
                    {"logprobs", nullptr},
                    {"finish_reason", nullptr}};
    first.push_back(sse_event(job->chunk(ojson::array({choice}))));
  }
  stream_response(res, job, m->engine, std::move(first));
}

void Routes::completions(const httplib::Request& req, httplib::Response& res) {
  const ServingModel* m = ready_or_503(res);
  if (!m) return;
  auto parsed = parse_body<CompletionRequest>(req, res, *m, parse_completion_request);
  if (!parsed) return;
  auto job = std::make_shared<CompletionJob>(m, &metrics_, std::move(*parsed));
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
  job->texts.resize(cr.params.n);
  job->logprobs.assign(cr.params.n, empty_completion_logprobs());
  job->offsets.assign(cr.params.n, 0);
  job->echoed.assign(cr.params.n, false);
  if (!job->start(res, "prompt", "cmpl-", served_name(cr.model), std::move(ids), cr.params)) return;
  if (cr.stream) return stream_response(res, job, m->engine, {});
  collect_response(res, job, m->engine);
}

}  // namespace flint::server
