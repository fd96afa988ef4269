// Prometheus text exposition (format 0.0.4) with vLLM's names and buckets.
#include "server/metrics.h"

#include <fmt/format.h>

namespace flint::server {
namespace {

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string fmt_double(double v) { return fmt::format("{}", v); }

}  // namespace

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, fmt_double(bounds_[i]),
                       cumulative);
  }
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, count_);
  out += fmt::format("{}_sum{{{}}} {}\n", name, labels, fmt_double(sum_));
  out += fmt::format("{}_count{{{}}} {}\n", name, labels, count_);
}

Metrics::Metrics(std::string model_name)
    : model_name_(std::move(model_name)),
      ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
             1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}),
      itl_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
            20.0, 40.0, 80.0}),
      e2e_({0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
            30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}),
      prompt_tokens_(
          {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}),
      generation_tokens_(
          {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}) {}

void Metrics::observe(const engine::LatencySamples& s) {
  std::lock_guard lock(mu_);
  for (double v : s.ttft_s) ttft_.observe(v);
  for (double v : s.itl_s) itl_.observe(v);
  for (double v : s.e2e_s) e2e_.observe(v);
  for (int v : s.prompt_tokens) prompt_tokens_.observe(v);
  for (int v : s.generation_tokens) generation_tokens_.observe(v);
}

void Metrics::count_finished(const std::string& finish_reason) {
  std::lock_guard lock(mu_);
  ++finished_[finish_reason];
}

std::string Metrics::render(const engine::EngineStats& st) const {
  const std::string model = fmt::format("model_name=\"{}\"", escape_label(model_name_));
  std::string out;
  auto gauge = [&](const char* name, const char* help, double v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{}{{{}}} {}\n", name, help, name, name,
                       model, fmt_double(v));
  };
  auto counter = [&](const char* name, const char* help, double v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{}{{{}}} {}\n", name, help, name, name,
                       model, fmt_double(v));
  };
  gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
        st.num_running);
  gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", st.num_waiting);
  gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", st.kv_usage);
  counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.",
          static_cast<double>(st.prompt_tokens_total));
  counter("vllm:generation_tokens_total", "Number of generation tokens processed.",
          static_cast<double>(st.generation_tokens_total));
  counter("vllm:prefix_cache_queries_total",
          "Prefix cache queries, in terms of number of queried tokens.",
          static_cast<double>(st.prefix_cache_queries));
  counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
          static_cast<double>(st.prefix_cache_hits));
  counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
          static_cast<double>(st.num_preemptions));
  std::lock_guard lock(mu_);
  out +=
      "# HELP vllm:request_success_total Count of successfully processed requests.\n"
      "# TYPE vllm:request_success_total counter\n";
  for (const char* reason : {"stop", "length", "abort", "error"}) {
    auto it = finished_.find(reason);
    out += fmt::format("vllm:request_success_total{{{},finished_reason=\"{}\"}} {}\n", model,
                       reason, it == finished_.end() ? 0 : it->second);
  }
  auto histogram = [&](const Histogram& h, const char* name, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
    h.render(out, name, model);
  };
  histogram(ttft_, "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.");
  histogram(itl_, "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.");
  histogram(e2e_, "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.");
  histogram(prompt_tokens_, "vllm:request_prompt_tokens", "Number of prefill tokens processed.");
  histogram(generation_tokens_, "vllm:request_generation_tokens",
            "Number of generation tokens processed.");
  return out;
}

}  // namespace flint::server
