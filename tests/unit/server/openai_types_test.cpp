// Request validation (every bad field named in the error), the error envelope, SSE framing and
// the Prometheus text. Expectations follow vLLM's documented shapes and OpenAI's field names.
#include "server/openai_types.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/errors.h"
#include "server/metrics.h"
#include "server/sse.h"

namespace flint::server {
namespace {

using ojson = nlohmann::ordered_json;

ojson chat_body() {
  return ojson::parse(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})");
}

// Parses `body` as a chat request and returns the error's param ("" when it parsed).
std::string chat_error_param(const ojson& body) {
  std::string param;
  auto r = parse_chat_request(body, 1000, &param);
  return r ? std::string("<ok>") : param;
}

TEST(ChatRequest, ParsesSamplingFields) {
  ojson b = chat_body();
  b["temperature"] = 0.5;
  b["top_p"] = 0.9;
  b["top_k"] = 5;
  b["seed"] = 42;
  b["n"] = 2;
  b["max_tokens"] = 10;
  b["max_completion_tokens"] = 7;
  b["stop"] = "x";
  b["logit_bias"] = {{"17", -3.5}};
  b["logprobs"] = true;
  b["top_logprobs"] = 4;
  b["stream"] = true;
  b["stream_options"] = {{"include_usage", true}};
  std::string param;
  auto r = parse_chat_request(b, 1000, &param);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FLOAT_EQ(*r->params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(*r->params.top_p, 0.9f);
  EXPECT_EQ(*r->params.top_k, 5);
  EXPECT_EQ(*r->params.seed, 42u);
  EXPECT_EQ(r->params.n, 2);
  EXPECT_EQ(*r->params.max_tokens, 7);  // max_completion_tokens wins, as in vLLM
  EXPECT_EQ(r->params.stop, std::vector<std::string>{"x"});
  ASSERT_EQ(r->params.logit_bias.size(), 1u);
  EXPECT_EQ(r->params.logit_bias[0].first, 17);
  EXPECT_FLOAT_EQ(r->params.logit_bias[0].second, -3.5f);
  EXPECT_EQ(*r->params.logprobs, 4);
  EXPECT_TRUE(r->stream_options.include_usage);
  EXPECT_EQ(r->tool_choice, ToolChoice::kNone);
}

TEST(ChatRequest, RejectsBadValuesNamingTheParam) {
  const std::vector<std::pair<std::string, ojson>> cases = {
      {"temperature", -0.1},
      {"temperature", "1"},
      {"top_p", 0.0},
      {"top_p", 1.01},
      {"max_tokens", 0},
      {"max_tokens", -3},
      {"max_tokens", 1.5},
      {"n", 0},
      {"n", 129},
      {"presence_penalty", 2.5},
      {"seed", 1.5},
      {"stop", ojson::array({1})},
      {"logit_bias", {{"1000", 1}}},
      {"logit_bias", {{"abc", 1}}},
      {"logit_bias", {{"3", 101}}},
      {"stream", 1},
      {"best_of", 2},
      {"functions", ojson::array()},
      {"foo", 1},
      {"tools", ojson::array()},
      {"tool_choice", "always"},
      {"response_format", {{"type", "json_object"}}},
      {"echo", true},
      {"reasoning_effort", "extreme"},
      {"messages", ojson::array()},
  };
  for (const auto& [key, value] : cases) {
    ojson b = chat_body();
    b[key] = value;
    EXPECT_EQ(chat_error_param(b), key) << key << "=" << value.dump();
  }
}

TEST(ChatRequest, StreamOptionsNeedStream) {
  ojson b = chat_body();
  b["stream_options"] = {{"include_usage", true}};
  std::string param;
  auto r = parse_chat_request(b, 1000, &param);
  ASSERT_FALSE(r);
  EXPECT_EQ(param, "stream_options");
  EXPECT_EQ(r.error().message, "Stream options can only be defined when `stream=True`.");
}

TEST(ChatRequest, TopLogprobsNeedLogprobs) {
  ojson b = chat_body();
  b["top_logprobs"] = 2;
  EXPECT_EQ(chat_error_param(b), "top_logprobs");
  b["logprobs"] = true;
  EXPECT_EQ(chat_error_param(b), "<ok>");
  b["top_logprobs"] = 21;
  EXPECT_EQ(chat_error_param(b), "top_logprobs");
}

TEST(ChatRequest, NormalisesMessagesForTheTemplate) {
  ojson b = ojson::parse(R"({"messages": [
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    {"role": "assistant", "content": null, "reasoning": "r",
     "tool_calls": [{"id": "1", "type": "function",
                     "function": {"name": "f", "arguments": "{\"x\": 1, \"a\": \"s\"}"}}]},
    {"role": "tool", "tool_call_id": "1", "content": "ok"}]})");
  std::string param;
  auto r = parse_chat_request(b, 1000, &param);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->messages[0]["content"], "a\nb");
  EXPECT_EQ(r->messages[1]["reasoning_content"], "r");
  EXPECT_FALSE(r->messages[1].contains("reasoning"));
  EXPECT_EQ(r->messages[1]["tool_calls"][0]["function"]["arguments"].dump(), R"({"x":1,"a":"s"})");
  EXPECT_EQ(r->messages[2]["tool_call_id"], "1");
}

TEST(ChatRequest, ToolChoiceDefaultsAndNamedChecks) {
  ojson b = chat_body();
  b["tools"] =
      ojson::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {}}}])");
  std::string param;
  auto r = parse_chat_request(b, 1000, &param);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->tool_choice, ToolChoice::kAuto);
  b["tool_choice"] = ojson::parse(R"({"type": "function", "function": {"name": "g"}})");
  EXPECT_EQ(chat_error_param(b), "tool_choice");
  b["tool_choice"] = ojson::parse(R"({"type": "function", "function": {"name": "f"}})");
  r = parse_chat_request(b, 1000, &param);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(r->tool_choice_name, "f");
}

TEST(ChatRequest, ReasoningEffortNoneDisablesThinking) {
  ojson b = chat_body();
  b["reasoning_effort"] = "none";
  std::string param;
  auto r = parse_chat_request(b, 1000, &param);
  ASSERT_TRUE(r);
  EXPECT_FALSE(thinking_enabled(r->chat_template_kwargs));
  EXPECT_TRUE(thinking_enabled(ojson::object()));
  EXPECT_FALSE(thinking_enabled(ojson{{"thinking", false}}));
}

TEST(CompletionRequest, PromptFormsAndDefaults) {
  std::string param;
  auto r = parse_completion_request(ojson{{"prompt", "hi"}}, 100, &param);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r->prompt_text, "hi");
  EXPECT_EQ(*r->params.max_tokens, 16);
  r = parse_completion_request(ojson{{"prompt", {1, 2, 3}}}, 100, &param);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->prompt_token_ids, (std::vector<int32_t>{1, 2, 3}));
  r = parse_completion_request(ojson{{"prompt", {{4, 5}}}, {"logprobs", 2}, {"echo", true}}, 100,
                               &param);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->prompt_token_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(*r->params.prompt_logprobs, 2);
  for (const ojson& bad : {ojson{{"prompt", {100}}}, ojson{{"prompt", ""}}, ojson::object(),
                           ojson{{"prompt", {"a", "b"}}}, ojson{{"prompt", 3}}}) {
    EXPECT_FALSE(parse_completion_request(bad, 100, &param)) << bad.dump();
    EXPECT_EQ(param, "prompt") << bad.dump();
  }
}

TEST(JsonBody, RejectsInvalidUtf8AndNonObjects) {
  EXPECT_TRUE(parse_json_body(R"({"a": "caf\u00e9 ok"})"));
  EXPECT_FALSE(parse_json_body("{\"a\": \"\xff\"}"));
  EXPECT_FALSE(parse_json_body("[1]"));
  EXPECT_FALSE(parse_json_body("{"));
  EXPECT_FALSE(parse_json_body("{\"t\": NaN}"));
}

TEST(Errors, OpenAiEnvelopeWithHttpStatusAsCode) {
  HttpError e = to_http_error(make_error(ErrorCode::kInvalidArgument, "bad 'n'"), "n");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.body,
            R"({"error":{"message":"bad 'n'","type":"BadRequestError","param":"n","code":400}})");
  EXPECT_EQ(to_http_error(make_error(ErrorCode::kNotFound, "x")).status, 404);
  EXPECT_EQ(to_http_error(make_error(ErrorCode::kPermissionDenied, "x")).status, 401);
  EXPECT_EQ(to_http_error(make_error(ErrorCode::kUnavailable, "x")).status, 503);
  auto j = nlohmann::json::parse(to_http_error(make_error(ErrorCode::kInternal, "\xff")).body);
  EXPECT_EQ(j["error"]["param"], nullptr);
  EXPECT_EQ(j["error"]["code"], 500);
}

TEST(Sse, FramesEventsAndDone) {
  EXPECT_EQ(sse_event(ojson{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(std::string(kSseDone), "data: [DONE]\n\n");
}

TEST(Metrics, PrometheusTextWithVllmNames) {
  Metrics m("tiny");
  engine::LatencySamples s;
  s.ttft_s = {0.003, 0.2, 3000.0};
  s.e2e_s = {1.0};
  m.observe(s);
  m.count_finished("stop");
  engine::EngineStats st;
  st.num_running = 2;
  st.kv_usage = 0.25;
  st.generation_tokens_total = 7;
  const std::string text = m.render(st);
  auto has = [&](const std::string& line) { return text.find(line + "\n") != std::string::npos; };
  EXPECT_TRUE(has(R"(vllm:num_requests_running{model_name="tiny"} 2)"));
  EXPECT_TRUE(has(R"(vllm:kv_cache_usage_perc{model_name="tiny"} 0.25)"));
  EXPECT_TRUE(has(R"(vllm:generation_tokens_total{model_name="tiny"} 7)"));
  EXPECT_TRUE(has(R"(vllm:request_success_total{model_name="tiny",finished_reason="stop"} 1)"));
  // Cumulative buckets: 0.003 falls in le=0.005, 0.2 in le=0.25, 3000 only in +Inf.
  EXPECT_TRUE(has(R"(vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.001"} 0)"));
  EXPECT_TRUE(has(R"(vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.005"} 1)"));
  EXPECT_TRUE(has(R"(vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.25"} 2)"));
  EXPECT_TRUE(has(R"(vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="2560"} 2)"));
  EXPECT_TRUE(has(R"(vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="+Inf"} 3)"));
  EXPECT_TRUE(has(R"(vllm:time_to_first_token_seconds_count{model_name="tiny"} 3)"));
  EXPECT_TRUE(has(R"(vllm:e2e_request_latency_seconds_sum{model_name="tiny"} 1)"));
  EXPECT_TRUE(has("# TYPE vllm:inter_token_latency_seconds histogram"));
}

}  // namespace
}  // namespace flint::server
