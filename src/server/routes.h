// Route handlers behind HttpServer (internal to src/server). One Routes per server; every handler
// is called concurrently from httplib workers and is thread-safe.
#pragma once

#include <httplib.h>

#include <atomic>
#include <optional>
#include <string>

#include "server/http_server.h"
#include "server/metrics.h"

namespace flint::server {

class Routes {
 public:
  explicit Routes(const ServerConfig& config);

  void set_ready(const ServingModel* model) { model_.store(model); }

  void health(const httplib::Request& req, httplib::Response& res);
  void version(const httplib::Request& req, httplib::Response& res);
  void models(const httplib::Request& req, httplib::Response& res);
  void metrics(const httplib::Request& req, httplib::Response& res);
  void tokenize(const httplib::Request& req, httplib::Response& res);
  void detokenize(const httplib::Request& req, httplib::Response& res);
  void chat_completions(const httplib::Request& req, httplib::Response& res);
  void completions(const httplib::Request& req, httplib::Response& res);

  // False (and a 401 in `res`) when API keys are configured and the request has none of them.
  bool authorized(const httplib::Request& req, httplib::Response& res) const;

 private:
  const ServingModel* ready_or_503(httplib::Response& res) const;
  Status check_model_name(const std::string& name) const;
  // The request body parsed by `parse(body, vocab_size, &param)`, its model name checked; empty,
  // with the error sent, otherwise.
  template <typename T, typename Parse>
  std::optional<T> parse_body(const httplib::Request& req, httplib::Response& res,
                              const ServingModel& m, Parse parse) const;
  // The name a response echoes: the requested one, else the first served name.
  std::string served_name(const std::string& requested) const {
    return requested.empty() ? config_.served_model_names.front() : requested;
  }

  const ServerConfig& config_;
  std::atomic<const ServingModel*> model_{nullptr};
  Metrics metrics_;
};

void send_error(httplib::Response& res, const Error& error, std::string_view param = "");

}  // namespace flint::server
