// The CPU backend's KV cache, laid out as model/step.h's KvCacheSpec describes: per full layer K
// and V are [num_pages * page_size, num_kv_heads * head_dim]; per sliding layer K and V are
// [num_rings * sliding_window, num_kv_heads * head_dim]. Element type F32 or BF16.
// Test partner: tests/unit/cpu/forward_test.cpp (incremental == full).
#pragma once

#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "core/result.h"
#include "model/config.h"
#include "model/step.h"

namespace flint::cpu {

class KvCache {
 public:
  Status init(const model::FlintConfig& cfg, const model::KvCacheSpec& spec);
  bool ready() const { return !layers_.empty(); }
  const model::KvCacheSpec& spec() const { return spec_; }
  // Rows per layer: num_pages * page_size for full layers, num_rings * sliding_window for sliding.
  int64_t num_rows(int64_t layer) const { return layers_[layer].num_rows; }
  int64_t row_size() const { return row_size_; }  // num_kv_heads * head_dim elements

  // Row `row` of layer `layer`'s K (kv = 0) or V (kv = 1) as FP32 into out[row_size()].
  void read(int64_t layer, int kv, int64_t row, float* out) const;
  void write(int64_t layer, int kv, int64_t row, const float* in);
  // Copies every sliding layer's ring `src` onto ring `dst`.
  void copy_ring(int32_t src, int32_t dst);

 private:
  struct Layer {
    int64_t num_rows = 0;
    bool sliding = false;
    HostBuffer k, v;
  };
  model::KvCacheSpec spec_;
  int64_t row_size_ = 0;
  int64_t window_ = 0;
  std::vector<Layer> layers_;
};

}  // namespace flint::cpu
