// Prometheus text for GET /metrics with vLLM's metric names (so vLLM dashboards work): gauges from
// the engine's stats, counters, and TTFT / inter-token / end-to-end latency histograms with vLLM's
// buckets. Test: tests/unit/server/metrics_test.cpp
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace flint::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void observe(double v);
  // Appends `name_bucket`, `name_sum` and `name_count` lines with `labels` (e.g. model_name="x").
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // [bounds + 1]; the last is +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

// Thread-safe: HTTP workers record finished requests while /metrics renders.
class Metrics {
 public:
  explicit Metrics(std::string model_name);
  void observe(const engine::LatencySamples& samples);
  void count_finished(const std::string& finish_reason);
  std::string render(const engine::EngineStats& stats) const;

 private:
  std::string model_name_;
  mutable std::mutex mu_;
  Histogram ttft_, itl_, e2e_, prompt_tokens_, generation_tokens_;
  std::map<std::string, uint64_t> finished_;
};

}  // namespace flint::server
