// KV cache storage and element conversion.
#include "backends/cpu/kv_cache.h"

#include <cstring>

namespace flint::cpu {

Status KvCache::init(const model::FlintConfig& cfg, const model::KvCacheSpec& spec) {
  if (spec.dtype != DType::kF32 && spec.dtype != DType::kBF16)
    return make_error(ErrorCode::kUnsupported,
                      "cpu kv cache: dtype {} unsupported, expected f32 or bf16", spec.dtype);
  if (spec.page_size <= 0 || spec.num_pages < 0 || spec.num_rings < 0)
    return make_error(ErrorCode::kInvalidArgument,
                      "cpu kv cache: page_size {}, num_pages {}, num_rings {} must be positive",
                      spec.page_size, spec.num_pages, spec.num_rings);
  spec_ = spec;
  row_size_ = cfg.num_kv_heads * cfg.head_dim;
  window_ = cfg.sliding_window;
  const int64_t elem = spec.dtype == DType::kF32 ? 4 : 2;
  layers_.clear();
  layers_.resize(static_cast<size_t>(cfg.num_hidden_layers));
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    Layer& L = layers_[l];
    L.sliding = cfg.is_sliding(l);
    L.num_rows = L.sliding ? spec.num_rings * cfg.sliding_window : spec.num_pages * spec.page_size;
    const size_t bytes = static_cast<size_t>(L.num_rows * row_size_ * elem);
    L.k = HostBuffer(bytes);
    L.v = HostBuffer(bytes);
    L.k.zero();
    L.v.zero();
  }
  return ok();
}

void KvCache::read(int64_t layer, int kv, int64_t row, float* out) const {
  const Layer& L = layers_[layer];
  FLINT_CHECK(row >= 0 && row < L.num_rows, "kv cache: row {} of {}", row, L.num_rows);
  const HostBuffer& b = kv == 0 ? L.k : L.v;
  if (spec_.dtype == DType::kF32) {
    std::memcpy(out, b.as<float>() + row * row_size_, static_cast<size_t>(row_size_) * 4);
  } else {
    const uint16_t* src = b.as<uint16_t>() + row * row_size_;
    for (int64_t i = 0; i < row_size_; ++i) out[i] = bf16_to_f32(src[i]);
  }
}

void KvCache::write(int64_t layer, int kv, int64_t row, const float* in) {
  Layer& L = layers_[layer];
  FLINT_CHECK(row >= 0 && row < L.num_rows, "kv cache: row {} of {}", row, L.num_rows);
  HostBuffer& b = kv == 0 ? L.k : L.v;
  if (spec_.dtype == DType::kF32) {
    std::memcpy(b.as<float>() + row * row_size_, in, static_cast<size_t>(row_size_) * 4);
  } else {
    uint16_t* dst = b.as<uint16_t>() + row * row_size_;
    for (int64_t i = 0; i < row_size_; ++i) dst[i] = f32_to_bf16(in[i]);
  }
}

void KvCache::copy_ring(int32_t src, int32_t dst) {
  FLINT_CHECK(src >= 0 && src < spec_.num_rings && dst >= 0 && dst < spec_.num_rings,
              "kv cache: copy_ring {} -> {} of {}", src, dst, spec_.num_rings);
  const int64_t elem = spec_.dtype == DType::kF32 ? 4 : 2;
  const size_t ring_bytes = static_cast<size_t>(window_ * row_size_ * elem);
  for (Layer& L : layers_) {
    if (!L.sliding || src == dst) continue;
    for (HostBuffer* b : {&L.k, &L.v}) {
      auto* base = b->as<uint8_t>();
      std::memmove(base + dst * ring_bytes, base + src * ring_bytes, ring_bytes);
    }
  }
}

}  // namespace flint::cpu
