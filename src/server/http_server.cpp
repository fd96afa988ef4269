// cpp-httplib wiring: worker pool, body limit, API key check, error envelopes for httplib's own
// errors (413, 404), and the background listening thread.
#include "server/http_server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <thread>

#include "server/errors.h"
#include "server/routes.h"

namespace flint::server {

HttpServer::HttpServer(ServerConfig config) : config_(std::move(config)) {
  if (config_.served_model_names.empty()) config_.served_model_names.push_back(config_.model_path);
  routes_ = std::make_unique<Routes>(config_);
  http_ = std::make_unique<httplib::Server>();
  const int threads = std::max(4, config_.num_http_threads);
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(config_.max_body_bytes);
  http_->set_read_timeout(30, 0);
  http_->set_write_timeout(30, 0);
  http_->set_keep_alive_max_count(1000);

  Routes* r = routes_.get();
  // Guarded routes check the API key first (health, version and metrics stay public).
  auto guarded = [r](void (Routes::*fn)(const httplib::Request&, httplib::Response&)) {
    return [r, fn](const httplib::Request& req, httplib::Response& res) {
      if (!r->authorized(req, res)) return;
      (r->*fn)(req, res);
    };
  };
  auto open = [r](void (Routes::*fn)(const httplib::Request&, httplib::Response&)) {
    return [r, fn](const httplib::Request& req, httplib::Response& res) { (r->*fn)(req, res); };
  };
  http_->Get("/health", open(&Routes::health));
  http_->Get("/ping", open(&Routes::health));
  http_->Get("/version", open(&Routes::version));
  http_->Get("/metrics", open(&Routes::metrics));
  http_->Get("/v1/models", guarded(&Routes::models));
  http_->Post("/tokenize", guarded(&Routes::tokenize));
  http_->Post("/detokenize", guarded(&Routes::detokenize));
  http_->Post("/v1/chat/completions", guarded(&Routes::chat_completions));
  http_->Post("/v1/completions", guarded(&Routes::completions));

  // httplib answers some failures itself with an empty body: give them the OpenAI envelope.
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    Error e;
    if (res.status == 413) {
      e = make_error(ErrorCode::kInvalidArgument, "request body too large");
    } else if (res.status == 404) {
      e = make_error(ErrorCode::kNotFound, "no route {} {}", req.method, req.path);
    } else if (res.status == 405) {
      e = make_error(ErrorCode::kInvalidArgument, "method {} not allowed on {}", req.method,
                     req.path);
    } else {
      e = make_error(ErrorCode::kInvalidArgument, "bad request ({})", res.status);
    }
    const int status = res.status;
    HttpError he = to_http_error(e);
    res.set_content(he.body, "application/json");
    res.status = status;
  });
  http_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        // Our code throws nothing; this catches library surprises so a worker never dies.
        send_error(res, make_error(ErrorCode::kInternal, "internal error"));
      });
}

HttpServer::~HttpServer() {
  stop();
  wait();
}

Status HttpServer::start() {
  if (config_.port == 0) {
    port_ = http_->bind_to_any_port(config_.host);
    if (port_ <= 0) return make_error(ErrorCode::kIo, "server: cannot bind {}:<any>", config_.host);
  } else {
    if (!http_->bind_to_port(config_.host, config_.port)) {
      return make_error(ErrorCode::kIo, "server: cannot bind {}:{} (in use or not permitted)",
                        config_.host, config_.port);
    }
    port_ = config_.port;
  }
  thread_ = std::thread([this] { http_->listen_after_bind(); });
  // httplib's stop() is a no-op until the accept loop runs: wait for it, so that a stop() right
  // after start() (a model that fails to load at once) cannot leave the loop running forever.
  for (int i = 0; i < 5000 && !http_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  spdlog::info("listening on http://{}:{}", config_.host, port_);
  return ok();
}

void HttpServer::set_ready(const ServingModel* model) { routes_->set_ready(model); }

void HttpServer::stop() {
  if (http_) http_->stop();
}

void HttpServer::wait() {
  if (thread_.joinable()) thread_.join();
}

}  // namespace flint::server
