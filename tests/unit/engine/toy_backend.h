// ToyBackend: a model::Backend whose "model" is a stack of integer-hash attention layers (full and
// sliding) that keeps its per-layer state in exactly the KV layout of model/step.h: full layers in
// pages addressed by slot_mapping/block_table, sliding layers in rings (slot = position % window).
// Every cache read checks the position it expects, so a wrong page, ring or slot fails loudly, and
// toy_reference() recomputes the same function from scratch without any cache: an engine that
// manages KV correctly gets bit-identical logits. It also checks the StepInput contract.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "model/backend.h"

namespace flint::engine::testing {

inline uint64_t toy_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline uint64_t toy_embed(int32_t token) { return toy_mix(static_cast<uint64_t>(token) * 7919u); }
inline uint64_t toy_key(uint64_t x, int64_t pos) {
  return toy_mix(x ^ (static_cast<uint64_t>(pos) << 32));
}
inline uint64_t toy_layer_out(uint64_t x, uint64_t acc, int layer) {
  return toy_mix(x * 31 + acc + static_cast<uint64_t>(layer));
}
inline float toy_logit(uint64_t x, int64_t v) {
  return static_cast<float>(
             (toy_mix(x ^ (static_cast<uint64_t>(v) * 0x2545f4914f6cdd1dull)) >> 40) % 1000) /
         100.0f;
}

inline model::FlintConfig toy_config(std::vector<model::LayerType> layers, int64_t window,
                                     int64_t vocab = 64) {
  model::FlintConfig c;
  c.vocab_size = vocab;
  c.num_hidden_layers = static_cast<int64_t>(layers.size());
  c.layer_types = std::move(layers);
  c.num_heads = 1;
  c.num_kv_heads = 1;
  c.head_dim = 4;
  c.hidden_size = 4;
  c.sliding_window = window;
  c.max_position_embeddings = 4096;
  c.eos_token_ids = {2};
  return c;
}

// Final hidden value per position, computed from scratch (no cache).
inline std::vector<uint64_t> toy_reference(const model::FlintConfig& c,
                                           const std::vector<int32_t>& tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<uint64_t> x(n);
  for (int64_t p = 0; p < n; ++p) x[p] = toy_embed(tokens[p]);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    std::vector<uint64_t> y(n);
    for (int64_t p = 0; p < n; ++p) {
      const int64_t lo = c.is_sliding(l) ? std::max<int64_t>(0, p - c.sliding_window + 1) : 0;
      uint64_t acc = 0;
      for (int64_t j = lo; j <= p; ++j) acc += toy_key(x[j], j);
      y[p] = toy_layer_out(x[p], acc, static_cast<int>(l));
    }
    x = std::move(y);
  }
  return x;
}

struct ToyLimits {
  int max_num_tokens = 1 << 30;
  int max_num_seqs = 1 << 30;
};

class ToyBackend : public model::Backend {
 public:
  using Limits = ToyLimits;
  explicit ToyBackend(model::FlintConfig c, Limits limits = Limits())
      : cfg_(std::move(c)), limits_(limits) {}

  const model::FlintConfig& config() const override { return cfg_; }

  Status init_kv_cache(const model::KvCacheSpec& spec) override {
    spec_ = spec;
    full_.assign(cfg_.num_hidden_layers, {});
    ring_.assign(cfg_.num_hidden_layers, {});
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
      if (cfg_.is_sliding(l))
        ring_[l].assign(spec.num_rings * cfg_.sliding_window, Entry{});
      else
        full_[l].assign(spec.num_pages * spec.page_size, Entry{});
    }
    return ok();
  }

  Status forward(const model::StepInput& s, std::span<float> logits) override {
    steps.push_back(s);
    if (step_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_delay_ms));
    if (fail_next) {
      fail_next = false;
      return Error{ErrorCode::kInternal, "toy: injected failure"};
    }
    check_contract(s);
    if (::testing::Test::HasFatalFailure() || broken_)
      return Error{ErrorCode::kInternal, "toy: contract"};
    std::vector<uint64_t> final_x(s.num_tokens());
    for (int32_t q = 0; q < s.num_seqs(); ++q) {
      for (int32_t t = s.query_start_loc[q]; t < s.query_start_loc[q + 1]; ++t) {
        const int64_t p = s.positions[t];
        uint64_t x = toy_embed(s.token_ids[t]);
        for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
          entry(l, s, q, t, p) = Entry{p, x};
          const int64_t lo =
              cfg_.is_sliding(l) ? std::max<int64_t>(0, p - cfg_.sliding_window + 1) : 0;
          uint64_t acc = 0;
          for (int64_t j = lo; j <= p; ++j) {
            const Entry& e = entry(l, s, q, -1, j);
            if (e.pos != j) {
              ADD_FAILURE() << "toy: layer " << l << " seq " << q << " reads position " << j
                            << " but finds " << e.pos;
              return Error{ErrorCode::kInternal, "toy: stale cache read"};
            }
            acc += toy_key(e.val, j);
          }
          x = toy_layer_out(x, acc, static_cast<int>(l));
        }
        final_x[t] = x;
      }
    }
    const int64_t v = cfg_.vocab_size;
    for (size_t r = 0; r < s.logits_indices.size(); ++r)
      for (int64_t i = 0; i < v; ++i)
        logits[r * v + i] = toy_logit(final_x[s.logits_indices[r]], i);
    return ok();
  }

  void copy_ring(int32_t src, int32_t dst) override {
    ++num_ring_copies;
    const int64_t w = cfg_.sliding_window;
    for (auto& r : ring_)
      if (!r.empty())
        std::copy(r.begin() + src * w, r.begin() + (src + 1) * w, r.begin() + dst * w);
  }

  std::vector<model::StepInput> steps;
  bool fail_next = false;
  int num_ring_copies = 0;
  int step_delay_ms = 0;  // makes steps slow enough to act between them from another thread

 private:
  struct Entry {
    int64_t pos = -1;
    uint64_t val = 0;
  };
  // Cache entry of layer l for position p of step sequence q. Writes (t >= 0) go through
  // slot_mapping; reads through block_table.
  Entry& entry(int64_t l, const model::StepInput& s, int32_t q, int32_t t, int64_t p) {
    if (cfg_.is_sliding(l))
      return ring_[l][s.ring_ids[q] * cfg_.sliding_window + p % cfg_.sliding_window];
    if (t >= 0) return full_[l][s.slot_mapping[t]];
    const int32_t page = s.block_table[q * s.max_blocks_per_seq + p / spec_.page_size];
    return full_[l][page * spec_.page_size + p % spec_.page_size];
  }

  void check_contract(const model::StepInput& s) {
    const int32_t n = s.num_tokens(), ns = s.num_seqs();
    auto fail = [&](const std::string& m) {
      ADD_FAILURE() << "toy contract: " << m;
      broken_ = true;
    };
    if (n == 0 || ns == 0) return fail("empty step");
    if (n > limits_.max_num_tokens) fail("too many tokens");
    if (ns > limits_.max_num_seqs) fail("too many seqs");
    if (static_cast<int32_t>(s.positions.size()) != n ||
        static_cast<int32_t>(s.slot_mapping.size()) != n)
      return fail("token arrays differ in size");
    if (static_cast<int32_t>(s.query_start_loc.size()) != ns + 1 || s.query_start_loc[0] != 0 ||
        s.query_start_loc[ns] != n)
      return fail("query_start_loc");
    if (static_cast<int32_t>(s.ring_ids.size()) != ns ||
        static_cast<int64_t>(s.block_table.size()) != int64_t{ns} * s.max_blocks_per_seq)
      return fail("per-seq arrays");
    std::set<int32_t> rings, slots;
    for (int32_t q = 0; q < ns; ++q) {
      const int32_t a = s.query_start_loc[q], b = s.query_start_loc[q + 1];
      if (b <= a) return fail("sequence without tokens");
      if (!rings.insert(s.ring_ids[q]).second) fail("ring shared by two sequences");
      if (s.ring_ids[q] < 0 || s.ring_ids[q] >= spec_.num_rings) fail("ring id out of range");
      for (int32_t t = a; t < b; ++t) {
        const int32_t p = s.positions[t];
        if (p != s.seq_lens[q] - (b - t)) return fail("positions do not end at seq_len");
        const int32_t page = s.block_table[q * s.max_blocks_per_seq + p / spec_.page_size];
        if (page < 0 || page >= spec_.num_pages) return fail("page out of range");
        if (s.slot_mapping[t] != page * spec_.page_size + p % spec_.page_size)
          return fail("slot_mapping disagrees with block_table");
        if (!slots.insert(s.slot_mapping[t]).second) fail("two tokens write one slot");
      }
    }
    for (int32_t r : s.logits_indices)
      if (r < 0 || r >= n) fail("logits index out of range");
  }

  model::FlintConfig cfg_;
  Limits limits_;
  model::KvCacheSpec spec_;
  std::vector<std::vector<Entry>> full_;
  std::vector<std::vector<Entry>> ring_;
  bool broken_ = false;
};

}  // namespace flint::engine::testing
