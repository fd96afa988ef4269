// The OpenAI-compatible HTTP server (cpp-httplib): listens before the model is loaded (GET /health
// answers 503 until set_ready), then serves /v1/chat/completions, /v1/completions, /v1/models,
// /tokenize, /detokenize, /version and /metrics. Workers parse JSON, render the chat template,
// tokenize and stream SSE; the engine thread only sees typed Requests.
// Test: tests/python/server/test_openai_client.py, test_robustness.py
#pragma once

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/result.h"
#include "engine/engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
class Server;
}

namespace flint::server {

struct ServerConfig {
  std::string host = "0.0.0.0";
  int port = 8000;
  std::vector<std::string> served_model_names;  // the first is echoed in responses and metrics
  std::string model_path;                       // /v1/models "root"
  std::vector<std::string> api_keys;            // empty: no auth
  size_t max_body_bytes = 32u << 20;
  int num_http_threads = 128;
  bool enable_auto_tool_choice = false;
  std::string tool_call_parser;  // "" or "glm47"
  std::string reasoning_parser;  // "" or "glm47"
  bool exclude_tools_when_tool_choice_none = false;
  bool emit_reasoning_content = true;  // also send reasoning as `reasoning_content` (see research)
  nlohmann::ordered_json default_chat_template_kwargs = nlohmann::ordered_json::object();
};

// What the routes need once loading finished. Owned by the caller; must outlive the server.
struct ServingModel {
  engine::Engine* engine = nullptr;
  const tokenizer::Tokenizer* tokenizer = nullptr;
  std::optional<tokenizer::ChatTemplate> chat_template;
  std::string bos_token, eos_token;
};

class Routes;

class HttpServer {
 public:
  explicit HttpServer(ServerConfig config);
  ~HttpServer();  // stops
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port and serves on a background thread. Errors when the port cannot be bound.
  Status start();
  // Switches from "loading" to serving `model`. Thread-safe.
  void set_ready(const ServingModel* model);
  // Stops listening; in-flight handlers finish. Thread-safe.
  void stop();
  // Blocks until stop() (called from another thread). Only one thread may wait.
  void wait();
  int port() const { return port_; }

 private:
  ServerConfig config_;
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<Routes> routes_;
  std::thread thread_;
  int port_ = 0;
};

// engine::TokenDecoder over a Tokenizer (which must outlive it).
class TokenizerDecoder final : public engine::TokenDecoder {
 public:
  explicit TokenizerDecoder(const tokenizer::Tokenizer& tok) : tok_(tok) {}
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override {
    return tok_.decode(ids, skip_special_tokens);
  }

 private:
  const tokenizer::Tokenizer& tok_;
};

}  // namespace flint::server
