// A small libcurl wrapper for the Hub: metadata requests into memory and resumable downloads into
// a file. Thread-safe: each call uses its own curl handle (curl_global_init runs once).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/result.h"

namespace flint::hub {

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // lowercase names, last value wins
  std::string body;
  std::string effective_url;
  std::string header(const std::string& name) const;
};

struct HttpRequest {
  std::string method = "GET";  // GET or HEAD
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  bool follow_redirects = true;
  long connect_timeout_s = 10;
};

// Performs a request and keeps the body in memory. A transport failure (no route, DNS, timeout)
// is a kNetwork error; any HTTP status is a value for the caller to judge.
Result<HttpResponse> http_request(const HttpRequest& req);

// GETs `url` into `path`, appending from the file's current size with a Range request when the
// file already holds a prefix (a 200 reply restarts it from zero). `progress` counts bytes written.
// Returns the final response (status, headers); the body is in the file.
Result<HttpResponse> http_download(const HttpRequest& req, const std::string& path,
                                   std::atomic<int64_t>* progress);

// Percent-encodes a path segment (keeps unreserved characters; '/' is encoded too).
std::string url_encode(const std::string& s, bool keep_slash);

}  // namespace flint::hub
