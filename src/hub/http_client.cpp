// libcurl calls for the Hub client.
#include "hub/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace flint::hub {
namespace {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* resp = static_cast<HttpResponse*>(user);
  std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) resp->headers.clear();  // a new response after a redirect
  const auto colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    std::string value = line.substr(colon + 1);
    const auto b = value.find_first_not_of(" \t");
    const auto e = value.find_last_not_of(" \t\r\n");
    value = b == std::string::npos ? std::string() : value.substr(b, e - b + 1);
    resp->headers[name] = value;
  }
  return size * n;
}

size_t on_body_memory(char* data, size_t size, size_t n, void* user) {
  auto* body = static_cast<std::string*>(user);
  if (body->size() + size * n > (64u << 20))
    return 0;  // metadata replies are small: refuse 64 MiB+
  body->append(data, size * n);
  return size * n;
}

struct FileSink {
  FILE* f = nullptr;
  std::atomic<int64_t>* progress = nullptr;
  int write_errno = 0;
};

size_t write_to_sink(FileSink* sink, const char* data, size_t size, size_t n) {
  const size_t written = std::fwrite(data, 1, size * n, sink->f);
  if (written != size * n) {
    sink->write_errno = errno;
    return 0;
  }
  if (sink->progress) sink->progress->fetch_add(static_cast<int64_t>(written));
  return written;
}

struct CurlHandle {
  CURL* h = curl_easy_init();
  curl_slist* headers = nullptr;
  ~CurlHandle() {
    curl_slist_free_all(headers);
    curl_easy_cleanup(h);
  }
};

void configure(CurlHandle& c, const HttpRequest& req, HttpResponse* resp) {
  curl_easy_setopt(c.h, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(c.h, CURLOPT_FOLLOWLOCATION, req.follow_redirects ? 1L : 0L);
  curl_easy_setopt(c.h, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c.h, CURLOPT_CONNECTTIMEOUT, req.connect_timeout_s);
  // A stalled transfer (under 1 byte/s for 60 s) fails instead of hanging forever.
  curl_easy_setopt(c.h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c.h, CURLOPT_LOW_SPEED_TIME, 60L);
  curl_easy_setopt(c.h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c.h, CURLOPT_USERAGENT, "flint-serve/0.1");
  curl_easy_setopt(c.h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c.h, CURLOPT_HEADERDATA, resp);
  if (req.method == "HEAD") curl_easy_setopt(c.h, CURLOPT_NOBODY, 1L);
  for (const auto& h : req.headers) c.headers = curl_slist_append(c.headers, h.c_str());
  c.headers = curl_slist_append(c.headers, "Accept-Encoding: identity");
  curl_easy_setopt(c.h, CURLOPT_HTTPHEADER, c.headers);
}

Error transport_error(CURLcode rc, const std::string& url) {
  return make_error(ErrorCode::kNetwork, "cannot reach {}: {}", url, curl_easy_strerror(rc));
}

}  // namespace

std::string HttpResponse::header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

Result<HttpResponse> http_request(const HttpRequest& req) {
  global_init();
  CurlHandle c;
  if (c.h == nullptr) return make_error(ErrorCode::kInternal, "curl_easy_init failed");
  HttpResponse resp;
  configure(c, req, &resp);
  curl_easy_setopt(c.h, CURLOPT_WRITEFUNCTION, on_body_memory);
  curl_easy_setopt(c.h, CURLOPT_WRITEDATA, &resp.body);
  const CURLcode rc = curl_easy_perform(c.h);
  if (rc != CURLE_OK) return transport_error(rc, req.url);
  curl_easy_getinfo(c.h, CURLINFO_RESPONSE_CODE, &resp.status);
  char* eff = nullptr;
  curl_easy_getinfo(c.h, CURLINFO_EFFECTIVE_URL, &eff);
  if (eff) resp.effective_url = eff;
  return resp;
}

Result<HttpResponse> http_download(const HttpRequest& req, const std::string& path,
                                   std::atomic<int64_t>* progress) {
  global_init();
  FILE* f = std::fopen(path.c_str(), "ab");
  if (f == nullptr)
    return make_error(ErrorCode::kIo, "cannot write {}: {}", path, std::strerror(errno));
  std::fseek(f, 0, SEEK_END);
  const int64_t have = std::ftell(f);

  CurlHandle c;
  HttpResponse resp;
  HttpRequest r = req;
  if (have > 0) r.headers.push_back("Range: bytes=" + std::to_string(have) + "-");
  configure(c, r, &resp);
  FileSink sink{f, progress, 0};
  if (progress && have > 0) progress->fetch_add(have);
  // Check the status before the first body byte: a 200 to a Range request means start over.
  struct Ctx {
    FileSink* sink;
    CURL* h;
    int64_t have;
    std::string path;
    bool checked = false;
  } ctx{&sink, c.h, have, path};
  auto body_cb = +[](char* data, size_t size, size_t n, void* user) -> size_t {
    auto* x = static_cast<Ctx*>(user);
    if (!x->checked) {
      x->checked = true;
      long status = 0;
      curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &status);
      if (x->have > 0 && status == 200) {  // the server ignored the Range: start over
        if (std::freopen(x->path.c_str(), "wb", x->sink->f) == nullptr) return 0;
        if (x->sink->progress) x->sink->progress->fetch_sub(x->have);
      }
      if (status >= 400) return size * n;  // error bodies are dropped, not written
    }
    long status = 0;
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 400) return size * n;
    return write_to_sink(x->sink, data, size, n);
  };
  curl_easy_setopt(c.h, CURLOPT_WRITEFUNCTION, body_cb);
  curl_easy_setopt(c.h, CURLOPT_WRITEDATA, &ctx);
  const CURLcode rc = curl_easy_perform(c.h);
  const bool flush_ok = std::fflush(sink.f) == 0;
  const int flush_errno = errno;
  std::fclose(sink.f);
  curl_easy_getinfo(c.h, CURLINFO_RESPONSE_CODE, &resp.status);
  if (sink.write_errno != 0 || !flush_ok) {
    const int e = sink.write_errno != 0 ? sink.write_errno : flush_errno;
    if (e == ENOSPC) return make_error(ErrorCode::kIo, "disk full while writing {}", path);
    return make_error(ErrorCode::kIo, "cannot write {}: {}", path, std::strerror(e));
  }
  if (rc != CURLE_OK) return transport_error(rc, req.url);
  return resp;
}

std::string url_encode(const std::string& s, bool keep_slash) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace flint::hub
