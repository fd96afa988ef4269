// FlintWeights::dummy: random weights of a config's shape, for `--load-format dummy` on the CPU
// (the CUDA backend generates its own on the device). Test partner:
// tests/unit/model/dummy_weights_test.cpp.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "core/buffer.h"
#include "model/weights.h"

namespace flint::model {
namespace {

// splitmix64: a fast, well-mixed generator; values in [-a, a).
struct Random {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform(float a) {
    return (static_cast<float>(next() >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * a;
  }
};

class Builder {
 public:
  Builder(FlintWeights& w, DType dtype, uint64_t seed) : w_(w), dtype_(dtype), rng_{seed} {}

  ConstTensorView filled(Shape shape, float value) {
    auto buf = std::make_shared<HostBuffer>(shape.numel() * sizeof(float));
    float* p = buf->as<float>();
    for (int64_t i = 0; i < shape.numel(); ++i) p[i] = value;
    return keep(std::move(buf), DType::kF32, shape);
  }

  // Uniform with the variance of N(0, 1/in): activations keep their scale through the layers.
  ConstTensorView random(Shape shape, DType dtype, float amplitude) {
    const int64_t n = shape.numel();
    auto buf = std::make_shared<HostBuffer>(static_cast<size_t>(dtype_bytes_for(dtype, n)));
    if (dtype == DType::kBF16) {
      uint16_t* p = buf->as<uint16_t>();
      for (int64_t i = 0; i < n; ++i) p[i] = f32_to_bf16(rng_.uniform(amplitude));
    } else {
      float* p = buf->as<float>();
      for (int64_t i = 0; i < n; ++i) p[i] = rng_.uniform(amplitude);
    }
    return keep(std::move(buf), dtype, shape);
  }

  Linear linear(int64_t out, int64_t in) {
    return Linear{random({out, in}, dtype_, std::sqrt(3.0f / static_cast<float>(in))), 1.0f};
  }

 private:
  ConstTensorView keep(std::shared_ptr<HostBuffer> buf, DType dtype, Shape shape) {
    ConstTensorView v(buf->data(), dtype, shape);
    w_.storage.push_back(std::shared_ptr<const void>(buf, buf->data()));
    return v;
  }

  FlintWeights& w_;
  DType dtype_;
  Random rng_;
};

int64_t linear_params(const FlintConfig& c) {
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  int64_t n = 2 * c.vocab_size * h;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    n += h * q * 2 + h * kv * 2;
    if (c.layer_is_dense[l]) {
      n += 3 * h * c.intermediate_size;
    } else {
      n += c.num_experts * h + 3 * h * c.moe_intermediate_size * c.num_experts +
           3 * h * c.shared_expert_intermediate_size;
    }
  }
  return n;
}

}  // namespace

Result<FlintWeights> FlintWeights::dummy(const FlintConfig& config, DType dtype, uint64_t seed) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    return make_error(ErrorCode::kUnsupported, "dummy weights: dtype {} (use F32 or BF16)", dtype);
  }
  FlintConfig cfg = config;
  FLINT_TRY(cfg.validate());
  const double need =
      static_cast<double>(linear_params(cfg)) * static_cast<double>(dtype_bytes_for(dtype, 1));
  const double have =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  if (need > 0.8 * have) {
    return make_error(
        ErrorCode::kOutOfMemory,
        "dummy weights: this model needs {:.1f} GB of {} weights, but this machine has "
        "{:.1f} GB of memory",
        need / 1e9, dtype, have / 1e9);
  }
  FlintWeights w;
  w.config = cfg;
  Builder b(w, dtype, seed);
  const int64_t h = cfg.hidden_size, q = cfg.num_heads * cfg.head_dim,
                kv = cfg.num_kv_heads * cfg.head_dim;
  w.embed = b.random({cfg.vocab_size, h}, dtype, 1.0f);
  w.final_norm = b.filled({h}, 1.0f);
  w.lm_head = Linear{
      b.random({cfg.vocab_size, h}, DType::kF32, std::sqrt(3.0f / static_cast<float>(h))), 1.0f};
  w.layers.resize(static_cast<size_t>(cfg.num_hidden_layers));
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    LayerWeights& L = w.layers[static_cast<size_t>(l)];
    L.attn_norm = b.filled({h}, 1.0f);
    L.ffn_norm = b.filled({h}, 1.0f);
    L.q = b.linear(q, h);
    L.k = b.linear(kv, h);
    L.v = b.linear(kv, h);
    L.o = b.linear(h, q);
    L.q_norm = b.filled({cfg.head_dim}, 1.0f);
    L.k_norm = b.filled({cfg.head_dim}, 1.0f);
    L.sinks = b.random({cfg.num_heads}, DType::kF32, 1.0f);
    if (cfg.layer_is_dense[static_cast<size_t>(l)]) {
      L.gate = b.linear(cfg.intermediate_size, h);
      L.up = b.linear(cfg.intermediate_size, h);
      L.down = b.linear(h, cfg.intermediate_size);
      continue;
    }
    L.router = Linear{
        b.random({cfg.num_experts, h}, DType::kF32, std::sqrt(3.0f / static_cast<float>(h))), 1.0f};
    if (cfg.has_expert_bias) L.expert_bias = b.random({cfg.num_experts}, DType::kF32, 0.1f);
    for (int64_t e = 0; e < cfg.num_experts; ++e) {
      L.exp_gate.push_back(b.linear(cfg.moe_intermediate_size, h));
      L.exp_up.push_back(b.linear(cfg.moe_intermediate_size, h));
      L.exp_down.push_back(b.linear(h, cfg.moe_intermediate_size));
    }
    if (cfg.shared_expert_intermediate_size > 0) {
      L.sh_gate = b.linear(cfg.shared_expert_intermediate_size, h);
      L.sh_up = b.linear(cfg.shared_expert_intermediate_size, h);
      L.sh_down = b.linear(h, cfg.shared_expert_intermediate_size);
    }
  }
  return w;
}

}  // namespace flint::model
