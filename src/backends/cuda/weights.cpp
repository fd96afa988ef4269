// Weight upload (with the NVFP4 repack and its read-back check) and dummy full-size weights.
// Test: tests/gpu/weights_test.cpp
#include "backends/cuda/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "backends/cuda/fill.h"
#include "backends/cuda/kernels/greedy_head.h"
#include "formats/nvfp4.h"

namespace flint::cuda {

void nvfp4_decode_row(const uint8_t* blocks, int64_t in, float scale, float* out) {
  static constexpr float kE2m1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  for (int64_t b = 0; b < in / 64; ++b) {
    const uint8_t* blk = blocks + b * 36;
    for (int s = 0; s < 4; ++s) {
      const uint8_t x = blk[s];
      float d = 0.0f;
      if (x != 0 && x != 0x7f) {
        const int e = (x >> 3) & 0xf, m = x & 7;
        d = (e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7)) *
            0.5f;
      }
      for (int j = 0; j < 8; ++j) {
        const uint8_t q = blk[4 + 8 * s + j];
        out[64 * b + 16 * s + j] = kE2m1x2[q & 0xf] * d * scale;
        out[64 * b + 16 * s + j + 8] = kE2m1x2[q >> 4] * d * scale;
      }
    }
  }
}

namespace {

float element_f32(const ConstTensorView& v, int64_t i) {
  switch (v.dtype()) {
    case DType::kF32:
      return v.data<float>()[i];
    case DType::kBF16:
      return bf16_to_f32(v.data<uint16_t>()[i]);
    case DType::kF16:
      return f16_to_f32(v.data<uint16_t>()[i]);
    default:
      return NAN;
  }
}

// Rows [r0, r1) and columns [c0, c1) of one source matrix.
struct Part {
  const model::Linear* lin;
  int64_t r0, r1, c0, c1;
};

Part whole(const model::Linear& l) { return Part{&l, 0, l.out(), 0, l.in()}; }

}  // namespace

class WeightBuilder {
 public:
  WeightBuilder(DeviceWeights& dw, cudaStream_t s) : dw_(dw), s_(s) {}

  Result<void*> alloc(size_t bytes) {
    auto b = DeviceBuffer::allocate(bytes);
    if (!b) return b.error();
    void* p = b->data();
    dw_.bytes_ += static_cast<int64_t>(bytes);
    dw_.buffers_.push_back(std::move(b).value());
    return p;
  }

  // The greedy LM head's int8 copy, row scales and bound coefficients (kernels/greedy_head.h), for
  // an FP32 head whose values are on the device (stream-ordered before s_). Made after every other
  // weight, so that it never costs a model its load; left out (greedy_head_missing says why, the
  // backend warns) when the device has no room for it, the rows are not a multiple of the I8
  // GEMV's 16-byte chunks, or a weight or bound is not finite: greedy steps then read the whole
  // head, as sampling steps do.
  Status add_greedy_head() {
    const LinearRef& h = dw_.lm_head_;
    if (h.dtype != DType::kF32 || h.num_experts != 1 || h.row_scale != nullptr || h.out == 0) {
      return ok();
    }
    if (h.in % kGreedyChunkElems != 0) {
      dw_.greedy_head_missing_ =
          fmt::format("its rows of {} are not a multiple of {}", h.in, kGreedyChunkElems);
      return ok();
    }
    auto hi = DeviceBuffer::allocate(size_t(h.out * h.in));
    auto nb = DeviceBuffer::allocate(size_t(h.out) * 2 * sizeof(float) + 16);
    if (!hi || !nb) {
      dw_.greedy_head_missing_ = fmt::format("no room for its {} MiB", (h.out * h.in) >> 20);
      return ok();
    }
    float* scales = nb->as<float>();
    float* bounds = scales + h.out;
    int32_t* bad = reinterpret_cast<int32_t*>(bounds + h.out);
    FLINT_CUDA_CHECK(cudaMemsetAsync(bad, 0, sizeof(int32_t), s_));
    greedy_head_prepare(hi->as<int8_t>(), scales, bounds, bad, h, s_);
    int32_t host_bad = 0;
    FLINT_CUDA_CHECK(cudaMemcpyAsync(&host_bad, bad, sizeof host_bad, cudaMemcpyDeviceToHost, s_));
    FLINT_CUDA_CHECK(cudaStreamSynchronize(s_));
    if (host_bad != 0) {
      dw_.greedy_head_missing_ = "the LM head has a value or a row bound that is not finite";
      return ok();
    }
    LinearRef g = h;
    g.dtype = DType::kI8;
    g.w = hi->data();
    g.row_scale = scales;
    dw_.greedy_head_ = g;
    dw_.greedy_bounds_ = bounds;
    dw_.bytes_ += static_cast<int64_t>(hi->size() + nb->size());
    dw_.buffers_.push_back(std::move(hi).value());
    dw_.buffers_.push_back(std::move(nb).value());
    return ok();
  }

  Result<const float*> upload_f32(const std::vector<float>& host) {
    FLINT_ASSIGN_OR_RETURN(void* p, alloc(host.size() * sizeof(float)));
    FLINT_CUDA_CHECK(
        cudaMemcpy(p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    return static_cast<const float*>(p);
  }

  // A vector (norm weight, sinks, bias) as f32 on the device; null for an empty view.
  Result<const float*> vec_f32(const ConstTensorView& v, const std::string& what) {
    if (v.empty()) return static_cast<const float*>(nullptr);
    if (v.dtype() != DType::kF32 && v.dtype() != DType::kBF16 && v.dtype() != DType::kF16) {
      return make_error(ErrorCode::kUnsupported, "cuda: {} has dtype {}, expected f32/bf16/f16",
                        what, v.dtype());
    }
    std::vector<float> host(v.numel());
    for (int64_t i = 0; i < v.numel(); ++i) host[i] = element_f32(v, i);
    return upload_f32(host);
  }

  // Stacks parts (same dtype and column count) row-wise into one device matrix.
  Result<LinearRef> stack(const std::vector<Part>& parts, int64_t num_experts,
                          const std::string& what) {
    LinearRef L;
    L.dtype = parts[0].lin->w.dtype();
    L.in = parts[0].c1 - parts[0].c0;
    int64_t rows = 0;
    for (const Part& p : parts) {
      if (p.lin->w.empty())
        return make_error(ErrorCode::kNotFound, "cuda: {}: missing tensor", what);
      if (p.lin->w.dtype() != L.dtype || p.c1 - p.c0 != L.in) {
        return make_error(ErrorCode::kUnsupported, "cuda: {}: parts differ ({} x {} vs {} x {})",
                          what, p.lin->w.dtype(), p.c1 - p.c0, L.dtype, L.in);
      }
      rows += p.r1 - p.r0;
    }
    L.num_experts = num_experts;
    L.out = rows / num_experts;
    switch (L.dtype) {
      case DType::kF32:
      case DType::kBF16: {
        const int64_t es = L.dtype == DType::kF32 ? 4 : 2;
        if (L.in % (16 / es) != 0) {
          return make_error(ErrorCode::kUnsupported, "cuda: {}: in {} is not a multiple of {}",
                            what, L.in, 16 / es);
        }
        std::vector<uint8_t> host(rows * L.in * es);
        int64_t r = 0;
        for (const Part& p : parts) {
          const auto* base = static_cast<const uint8_t*>(p.lin->w.raw());
          for (int64_t i = p.r0; i < p.r1; ++i, ++r) {
            std::memcpy(host.data() + r * L.in * es, base + (i * p.lin->w.row_stride() + p.c0) * es,
                        L.in * es);
          }
        }
        FLINT_ASSIGN_OR_RETURN(void* d, alloc(host.size()));
        FLINT_CUDA_CHECK(cudaMemcpy(d, host.data(), host.size(), cudaMemcpyHostToDevice));
        L.w = d;
        // Linear::scale multiplies the product for every dtype (as cpu::linear does).
        if (std::any_of(parts.begin(), parts.end(),
                        [](const Part& p) { return p.lin->scale != 1.0f; })) {
          std::vector<float> rs;
          for (const Part& p : parts) rs.insert(rs.end(), p.r1 - p.r0, p.lin->scale);
          FLINT_ASSIGN_OR_RETURN(L.row_scale, upload_f32(rs));
        }
        return L;
      }
      case DType::kNVFP4:
        return stack_nvfp4(parts, L, rows, what);
      default:
        return make_error(ErrorCode::kUnsupported,
                          "cuda: {}: weight dtype {} is not supported (f32, bf16, nvfp4)", what,
                          L.dtype);
    }
  }

 private:
  Result<LinearRef> stack_nvfp4(const std::vector<Part>& parts, LinearRef L, int64_t rows,
                                const std::string& what) {
    for (const Part& p : parts) {
      if (p.c0 % 64 != 0 || L.in % 64 != 0 || p.lin->w.row_stride() % 64 != 0) {
        return make_error(ErrorCode::kUnsupported,
                          "cuda: {}: NVFP4 columns [{}, {}) do not fall on 64-element blocks", what,
                          p.c0, p.c1);
      }
    }
    const int64_t nblk = L.in / 64;
    std::vector<uint8_t> codes(rows * L.in / 2), scales(rows * L.in / 16);
    std::vector<float> row_scale(rows);
    auto src_row = [&](const Part& p, int64_t i) {
      const int64_t src_row_bytes = p.lin->w.row_stride() / 64 * 36;
      return static_cast<const uint8_t*>(p.lin->w.raw()) + i * src_row_bytes + p.c0 / 64 * 36;
    };
    int64_t r = 0;
    for (const Part& p : parts) {
      for (int64_t i = p.r0; i < p.r1; ++i, ++r) {
        const uint8_t* src = src_row(p, i);
        for (int64_t b = 0; b < nblk; ++b) {
          for (int k = 0; k < 4; ++k) {  // the kernels' ue4m3_half reads engine scale bytes
            scales[r * (L.in / 16) + b * 4 + k] = formats::nvfp4_engine_scale_byte(src[b * 36 + k]);
          }
          std::memcpy(&codes[r * (L.in / 2) + b * 32], src + b * 36 + 4, 32);
        }
        row_scale[r] = p.lin->scale;
      }
    }
    FLINT_ASSIGN_OR_RETURN(void* dc, alloc(codes.size()));
    FLINT_ASSIGN_OR_RETURN(void* ds, alloc(scales.size()));
    FLINT_CUDA_CHECK(cudaMemcpy(dc, codes.data(), codes.size(), cudaMemcpyHostToDevice));
    FLINT_CUDA_CHECK(cudaMemcpy(ds, scales.data(), scales.size(), cudaMemcpyHostToDevice));
    FLINT_ASSIGN_OR_RETURN(const float* drs, upload_f32(row_scale));
    L.w = dc;
    L.sc = static_cast<const uint8_t*>(ds);
    L.row_scale = drs;
    // Load-time check: read back the first, middle and last row of every part from the device,
    // rebuild ggml blocks (scale bytes mapped back) and compare their decode with the file's, bit
    // for bit.
    std::vector<uint8_t> c(L.in / 2), sc(L.in / 16), rebuilt(nblk * 36);
    std::vector<float> got(L.in), want(L.in);
    r = 0;
    for (const Part& p : parts) {
      const int64_t n = p.r1 - p.r0;
      for (int64_t i : {int64_t(0), n / 2, n - 1}) {
        const int64_t dr = r + i;
        FLINT_CUDA_CHECK(cudaMemcpy(c.data(), static_cast<const uint8_t*>(dc) + dr * (L.in / 2),
                                    c.size(), cudaMemcpyDeviceToHost));
        FLINT_CUDA_CHECK(cudaMemcpy(sc.data(), static_cast<const uint8_t*>(ds) + dr * (L.in / 16),
                                    sc.size(), cudaMemcpyDeviceToHost));
        bool ok = true;
        for (int64_t b = 0; b < nblk; ++b) {
          for (int k = 0; k < 4; ++k) {
            ok = ok && (sc[b * 4 + k] & 0x80) == 0;
            rebuilt[b * 36 + k] = formats::nvfp4_ggml_scale_byte(sc[b * 4 + k] & 0x7F);
          }
          std::memcpy(&rebuilt[b * 36 + 4], &c[b * 32], 32);
        }
        nvfp4_decode_row(rebuilt.data(), L.in, 1.0f, got.data());
        nvfp4_decode_row(src_row(p, p.r0 + i), L.in, 1.0f, want.data());
        if (!ok || std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) != 0) {
          return make_error(ErrorCode::kInternal, "cuda: {}: NVFP4 repack check failed at row {}",
                            what, p.r0 + i);
        }
        ++dw_.checked_rows_;
      }
      r += n;
    }
    return L;
  }

  DeviceWeights& dw_;
  cudaStream_t s_;
};

Result<LinearRef> DeviceWeights::add_linear(const model::Linear& w, cudaStream_t s) {
  WeightBuilder b(*this, s);
  auto ref = b.stack({whole(w)}, 1, "linear");
  FLINT_CUDA_CHECK(cudaDeviceSynchronize());  // landed before any stream reads it (see upload)
  return ref;
}

Status DeviceWeights::check_attention_shape(const model::FlintConfig& c) {
  const int64_t D = c.head_dim, H = c.num_heads, Hkv = c.num_kv_heads;
  if (D != 16 && D != 32 && D != 64 && D != 128) {
    return make_error(ErrorCode::kUnsupported,
                      "cuda: attention takes head_dim 16, 32, 64 or 128, not {}", D);
  }
  const int64_t G = Hkv > 0 && H % Hkv == 0 ? H / Hkv : 0;
  if (G != 1 && G != 2 && G != 4 && G != 8) {
    return make_error(ErrorCode::kUnsupported,
                      "cuda: attention takes 1, 2, 4 or 8 query heads per KV head, not num_heads "
                      "{} over num_kv_heads {}",
                      H, Hkv);
  }
  return ok();
}

Result<DeviceWeights> DeviceWeights::upload(const model::FlintWeights& w, cudaStream_t s) {
  FLINT_TRY(check_attention_shape(w.config));
  DeviceWeights dw;
  dw.config_ = w.config;
  const model::FlintConfig& c = dw.config_;
  WeightBuilder b(dw, s);
  // Embedding: BF16/F32 as is; anything else is decoded to f32 here.
  if (w.embed.dtype() == DType::kBF16 || w.embed.dtype() == DType::kF32) {
    model::Linear e{w.embed, 1.0f};
    FLINT_ASSIGN_OR_RETURN(LinearRef er, b.stack({whole(e)}, 1, "embed"));
    dw.embed_ = er.w;
    dw.embed_dtype_ = er.dtype;
  } else if (w.embed.dtype() == DType::kNVFP4 || w.embed.dtype() == DType::kF16) {
    const int64_t V = w.embed.dim(0), d = w.embed.dim(1);
    std::vector<float> host(V * d);
    for (int64_t r = 0; r < V; ++r) {
      if (w.embed.dtype() == DType::kNVFP4) {
        nvfp4_decode_row(static_cast<const uint8_t*>(w.embed.raw()) + r * (d / 64) * 36, d, 1.0f,
                         host.data() + r * d);
      } else {
        for (int64_t i = 0; i < d; ++i) host[r * d + i] = element_f32(w.embed, r * d + i);
      }
    }
    FLINT_ASSIGN_OR_RETURN(const float* p, b.upload_f32(host));
    dw.embed_ = p;
    dw.embed_dtype_ = DType::kF32;
  } else {
    return make_error(ErrorCode::kUnsupported, "cuda: embedding dtype {} is not supported",
                      w.embed.dtype());
  }
  FLINT_ASSIGN_OR_RETURN(dw.final_norm_, b.vec_f32(w.final_norm, "final_norm"));
  FLINT_ASSIGN_OR_RETURN(dw.lm_head_, b.stack({whole(w.lm_head)}, 1, "lm_head"));

  const int64_t I = c.moe_intermediate_size, Ish = c.shared_expert_intermediate_size;
  for (int64_t li = 0; li < c.num_hidden_layers; ++li) {
    const model::LayerWeights& L = w.layers[li];
    const std::string at = fmt::format("layer {}", li);
    DeviceLayer d;
    FLINT_ASSIGN_OR_RETURN(d.qkv, b.stack({whole(L.q), whole(L.k), whole(L.v)}, 1, at + " qkv"));
    FLINT_ASSIGN_OR_RETURN(d.o, b.stack({whole(L.o)}, 1, at + " o"));
    FLINT_ASSIGN_OR_RETURN(d.attn_norm, b.vec_f32(L.attn_norm, at + " attn_norm"));
    FLINT_ASSIGN_OR_RETURN(d.ffn_norm, b.vec_f32(L.ffn_norm, at + " ffn_norm"));
    FLINT_ASSIGN_OR_RETURN(d.q_norm, b.vec_f32(L.q_norm, at + " q_norm"));
    FLINT_ASSIGN_OR_RETURN(d.k_norm, b.vec_f32(L.k_norm, at + " k_norm"));
    FLINT_ASSIGN_OR_RETURN(d.sinks, b.vec_f32(L.sinks, at + " sinks"));
    if (c.layer_is_dense[li]) {
      FLINT_ASSIGN_OR_RETURN(d.gate, b.stack({whole(L.gate)}, 1, at + " gate"));
      FLINT_ASSIGN_OR_RETURN(d.up, b.stack({whole(L.up)}, 1, at + " up"));
      FLINT_ASSIGN_OR_RETURN(d.down, b.stack({whole(L.down)}, 1, at + " down"));
    } else {
      FLINT_ASSIGN_OR_RETURN(d.router, b.stack({whole(L.router)}, 1, at + " router"));
      FLINT_ASSIGN_OR_RETURN(d.expert_bias, b.vec_f32(L.expert_bias, at + " expert_bias"));
      const DType ed = L.exp_gate.empty() ? DType::kBF16 : L.exp_gate[0].w.dtype();
      const bool has_shared = Ish > 0 && !L.sh_gate.w.empty();
      const bool slice_shared = has_shared && Ish % I == 0 && L.sh_gate.w.dtype() == ed &&
                                L.sh_up.w.dtype() == ed && L.sh_down.w.dtype() == ed &&
                                (ed != DType::kNVFP4 || I % 64 == 0);
      const int64_t slices = slice_shared ? Ish / I : 0;
      std::vector<Part> g, u, dn;
      for (int64_t e = 0; e < c.num_experts; ++e) {
        g.push_back(whole(L.exp_gate[e]));
        u.push_back(whole(L.exp_up[e]));
        dn.push_back(whole(L.exp_down[e]));
      }
      for (int64_t j = 0; j < slices; ++j) {
        g.push_back(Part{&L.sh_gate, j * I, (j + 1) * I, 0, c.hidden_size});
        u.push_back(Part{&L.sh_up, j * I, (j + 1) * I, 0, c.hidden_size});
        dn.push_back(Part{&L.sh_down, 0, c.hidden_size, j * I, (j + 1) * I});
      }
      const int64_t ne = c.num_experts + slices;
      FLINT_ASSIGN_OR_RETURN(d.exp_gate, b.stack(g, ne, at + " experts gate"));
      FLINT_ASSIGN_OR_RETURN(d.exp_up, b.stack(u, ne, at + " experts up"));
      FLINT_ASSIGN_OR_RETURN(d.exp_down, b.stack(dn, ne, at + " experts down"));
      dw.num_shared_slots_ = static_cast<int>(slices);
      if (has_shared && !slice_shared) {
        d.has_separate_shared = true;
        FLINT_ASSIGN_OR_RETURN(d.sh_gate, b.stack({whole(L.sh_gate)}, 1, at + " shared gate"));
        FLINT_ASSIGN_OR_RETURN(d.sh_up, b.stack({whole(L.sh_up)}, 1, at + " shared up"));
        FLINT_ASSIGN_OR_RETURN(d.sh_down, b.stack({whole(L.sh_down)}, 1, at + " shared down"));
      }
    }
    dw.layers_.push_back(d);
  }
  (void)s;
  // A cudaMemcpy from pageable memory may return before its DMA has landed, and the backend's
  // stream is non-blocking (it does not wait for the legacy stream that copy used): wait for
  // every upload here, before any kernel on that stream reads the weights.
  FLINT_CUDA_CHECK(cudaDeviceSynchronize());
  FLINT_TRY(b.add_greedy_head());  // last: the copy takes only memory the weights left
  return dw;
}

namespace {

// Random matrix stack in the engine layout.
Result<LinearRef> dummy_linear(WeightBuilder& b, DType dt, int64_t num_experts, int64_t out,
                               int64_t in, uint64_t seed, cudaStream_t s) {
  LinearRef L;
  L.dtype = dt;
  L.out = out;
  L.in = in;
  L.num_experts = num_experts;
  const int64_t rows = out * num_experts;
  if (dt == DType::kNVFP4) {
    FLINT_ASSIGN_OR_RETURN(void* codes, b.alloc(rows * in / 2));
    FLINT_ASSIGN_OR_RETURN(void* scales, b.alloc(rows * in / 16));
    fill_random_bytes(static_cast<uint8_t*>(codes), rows * in / 2, 0, 255, seed, s);
    // UE4M3 exponents 2..3: sub-scales ~0.004-0.015, so |w| stays below ~0.1.
    fill_random_bytes(static_cast<uint8_t*>(scales), rows * in / 16, 0x10, 0x1f, seed + 1, s);
    L.w = codes;
    L.sc = static_cast<const uint8_t*>(scales);
    return L;
  }
  const float amp = 1.0f / std::sqrt(static_cast<float>(in));
  if (dt == DType::kF32) {
    FLINT_ASSIGN_OR_RETURN(void* w, b.alloc(rows * in * 4));
    fill_uniform_f32(static_cast<float*>(w), rows * in, -amp, amp, seed, s);
    L.w = w;
    return L;
  }
  FLINT_ASSIGN_OR_RETURN(void* w, b.alloc(rows * in * 2));
  fill_uniform_bf16(w, rows * in, amp, seed, s);
  L.w = w;
  return L;
}

Result<const float*> dummy_vec(WeightBuilder& b, int64_t n, float lo, float hi, uint64_t seed,
                               cudaStream_t s) {
  FLINT_ASSIGN_OR_RETURN(void* p, b.alloc(n * sizeof(float)));
  fill_uniform_f32(static_cast<float*>(p), n, lo, hi, seed, s);
  return static_cast<const float*>(p);
}

}  // namespace

Status DeviceWeights::check_dummy_config(const model::FlintConfig& c, DType dt) {
  if (dt != DType::kBF16 && dt != DType::kNVFP4) {
    return make_error(ErrorCode::kInvalidArgument, "cuda: dummy weights are bf16 or nvfp4, not {}",
                      dt);
  }
  // The same limits upload() applies to a checkpoint's matrices: what the kernels read.
  const int64_t multiple = dt == DType::kNVFP4 ? 64 : 8;
  bool any_dense = false, any_moe = false;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    (c.layer_is_dense[l] ? any_dense : any_moe) = true;
  }
  const std::pair<const char*, int64_t> dims[] = {
      {"hidden_size", c.hidden_size},
      {"num_heads x head_dim", c.num_heads * c.head_dim},
      {"intermediate_size", any_dense ? c.intermediate_size : multiple},
      {"moe_intermediate_size", any_moe ? c.moe_intermediate_size : multiple}};
  for (const auto& [name, in] : dims) {
    if (in <= 0 || in % multiple != 0) {
      return make_error(ErrorCode::kUnsupported,
                        "cuda: dummy {} weights need {} to be a positive multiple of {}, got {}",
                        dt, name, multiple, in);
    }
  }
  const int64_t I = c.moe_intermediate_size, Ish = c.shared_expert_intermediate_size;
  if (any_moe && Ish > 0 && Ish % I != 0) {
    return make_error(ErrorCode::kUnsupported,
                      "cuda: dummy weights need shared_expert_intermediate_size ({}) to be a "
                      "multiple of moe_intermediate_size ({})",
                      Ish, I);
  }
  return check_attention_shape(c);
}

Result<DeviceWeights> DeviceWeights::dummy(const model::FlintConfig& c, DType dt, uint64_t seed,
                                           cudaStream_t s) {
  FLINT_TRY(check_dummy_config(c, dt));
  DeviceWeights dw;
  dw.config_ = c;
  WeightBuilder b(dw, s);
  const int64_t d = c.hidden_size, H = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim;
  uint64_t sd = seed * 1000003u;
  {
    FLINT_ASSIGN_OR_RETURN(void* e, b.alloc(c.vocab_size * d * 2));
    fill_uniform_bf16(e, c.vocab_size * d, 1.0f, ++sd, s);
    dw.embed_ = e;
    dw.embed_dtype_ = DType::kBF16;
  }
  FLINT_ASSIGN_OR_RETURN(dw.final_norm_, dummy_vec(b, d, 0.9f, 1.1f, ++sd, s));
  // FP32, as the model keeps it (the LM head is an FP32 island) and as the CPU's dummy weights
  // make it: its 1.23 GB are about half of what an NVFP4 batch-1 step reads.
  FLINT_ASSIGN_OR_RETURN(dw.lm_head_, dummy_linear(b, DType::kF32, 1, c.vocab_size, d, ++sd, s));
  const int64_t I = c.moe_intermediate_size, Ish = c.shared_expert_intermediate_size;
  const int64_t slices = (Ish > 0 && I > 0 && Ish % I == 0) ? Ish / I : 0;
  dw.num_shared_slots_ = static_cast<int>(slices);
  for (int64_t li = 0; li < c.num_hidden_layers; ++li) {
    DeviceLayer L;
    FLINT_ASSIGN_OR_RETURN(L.qkv, dummy_linear(b, dt, 1, (H + 2 * Hkv) * D, d, ++sd, s));
    FLINT_ASSIGN_OR_RETURN(L.o, dummy_linear(b, dt, 1, d, H * D, ++sd, s));
    FLINT_ASSIGN_OR_RETURN(L.attn_norm, dummy_vec(b, d, 0.9f, 1.1f, ++sd, s));
    FLINT_ASSIGN_OR_RETURN(L.ffn_norm, dummy_vec(b, d, 0.9f, 1.1f, ++sd, s));
    FLINT_ASSIGN_OR_RETURN(L.q_norm, dummy_vec(b, D, 0.9f, 1.1f, ++sd, s));
    FLINT_ASSIGN_OR_RETURN(L.k_norm, dummy_vec(b, D, 0.9f, 1.1f, ++sd, s));
    FLINT_ASSIGN_OR_RETURN(L.sinks, dummy_vec(b, H, -1.0f, 1.0f, ++sd, s));
    if (c.layer_is_dense[li]) {
      FLINT_ASSIGN_OR_RETURN(L.gate, dummy_linear(b, dt, 1, c.intermediate_size, d, ++sd, s));
      FLINT_ASSIGN_OR_RETURN(L.up, dummy_linear(b, dt, 1, c.intermediate_size, d, ++sd, s));
      FLINT_ASSIGN_OR_RETURN(L.down, dummy_linear(b, dt, 1, d, c.intermediate_size, ++sd, s));
    } else {
      FLINT_ASSIGN_OR_RETURN(L.router, dummy_linear(b, DType::kBF16, 1, c.num_experts, d, ++sd, s));
      const int64_t ne = c.num_experts + slices;
      FLINT_ASSIGN_OR_RETURN(L.exp_gate, dummy_linear(b, dt, ne, I, d, ++sd, s));
      FLINT_ASSIGN_OR_RETURN(L.exp_up, dummy_linear(b, dt, ne, I, d, ++sd, s));
      FLINT_ASSIGN_OR_RETURN(L.exp_down, dummy_linear(b, dt, ne, d, I, ++sd, s));
    }
    dw.layers_.push_back(L);
  }
  FLINT_TRY(b.add_greedy_head());  // last: the copy takes only memory the weights left
  FLINT_CUDA_CHECK(cudaStreamSynchronize(s));
  return dw;
}

}  // namespace flint::cuda
