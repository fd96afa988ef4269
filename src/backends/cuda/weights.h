// Flint weights on the GPU: uploaded from FlintWeights (BF16/F32 as they are, NVFP4 repacked
// losslessly into the engine layout of kernels/linear_ref.h, with a bit-exact read-back check),
// or generated on the GPU at full size for `flint bench --load-format dummy`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/device.h"
#include "backends/cuda/kernels/linear_ref.h"
#include "model/config.h"
#include "model/weights.h"

namespace flint::cuda {

struct DeviceLayer {
  LinearRef qkv;                     // [(H + 2 Hkv) * D, hidden]: q, k, v rows stacked
  LinearRef o;                       // [hidden, H * D]
  const float* attn_norm = nullptr;  // [hidden]
  const float* ffn_norm = nullptr;   // [hidden]
  const float* q_norm = nullptr;     // [D]
  const float* k_norm = nullptr;     // [D]
  const float* sinks = nullptr;      // [H] or null
  // Dense layers.
  LinearRef gate, up, down;
  // MoE layers. The expert stacks hold the routed experts, then (num_shared_slots > 0) the shared
  // expert cut into slices of moe_intermediate_size rows of gate/up and columns of down.
  LinearRef router;                    // [E, hidden]
  const float* expert_bias = nullptr;  // [E] or null
  LinearRef exp_gate, exp_up;          // [E + slices] x [I_moe, hidden]
  LinearRef exp_down;                  // [E + slices] x [hidden, I_moe]
  // The shared expert on its own, when it could not be sliced into the stacks.
  LinearRef sh_gate, sh_up, sh_down;
  bool has_separate_shared = false;
};

class DeviceWeights {
 public:
  // Uploads a bound checkpoint. Unsupported dtypes and failed repack checks are errors.
  static Result<DeviceWeights> upload(const model::FlintWeights& w, cudaStream_t s);
  // Random weights of the config's full shape; linear layers in `linear_dtype` (BF16 or NVFP4),
  // router BF16, LM head F32 (as the model keeps it), norms and sinks F32.
  static Result<DeviceWeights> dummy(const model::FlintConfig& c, DType linear_dtype, uint64_t seed,
                                     cudaStream_t s);
  // Why dummy() would refuse `c` (kUnsupported / kInvalidArgument naming the dimension): a dtype
  // other than BF16/NVFP4, input dims the kernels cannot read (BF16: multiples of 8, NVFP4: of 64),
  // or a shared expert that is not a whole number of moe_intermediate_size slices. Needs no device.
  static Status check_dummy_config(const model::FlintConfig& c, DType linear_dtype);
  // Why the attention kernels could not run `c` (kUnsupported naming the value): head_dim other
  // than 16, 32, 64 or 128, or num_heads not 1, 2, 4 or 8 times num_kv_heads. upload() and
  // dummy() refuse such a model before anything reaches the device. Needs no device.
  static Status check_attention_shape(const model::FlintConfig& c);

  // Uploads one more matrix into this object (kernel tests); the same path as upload().
  Result<LinearRef> add_linear(const model::Linear& w, cudaStream_t s);

  const model::FlintConfig& config() const { return config_; }
  const std::vector<DeviceLayer>& layers() const { return layers_; }
  const void* embed() const { return embed_; }
  DType embed_dtype() const { return embed_dtype_; }
  const float* final_norm() const { return final_norm_; }
  const LinearRef& lm_head() const { return lm_head_; }
  // The greedy head (kernels/greedy_head.h): the FP32 LM head's int8 copy (I8, its row scales in
  // row_scale) and its rows' bound coefficients, or null (a head of another dtype, or one made
  // without them).
  const LinearRef* greedy_head() const {
    return greedy_bounds_ != nullptr ? &greedy_head_ : nullptr;
  }
  const float* greedy_bounds() const { return greedy_bounds_; }
  // Why an FP32 head has no greedy copy (empty when it has one, or the head is not FP32).
  const std::string& greedy_head_missing() const { return greedy_head_missing_; }
  int num_shared_slots() const { return num_shared_slots_; }
  // Device bytes held.
  int64_t bytes() const { return bytes_; }
  // Rows whose repacked bytes were read back and compared with the source (NVFP4 tensors only).
  int64_t checked_rows() const { return checked_rows_; }

 private:
  friend class WeightBuilder;
  model::FlintConfig config_;
  std::vector<DeviceBuffer> buffers_;
  std::vector<DeviceLayer> layers_;
  const void* embed_ = nullptr;
  DType embed_dtype_ = DType::kBF16;
  const float* final_norm_ = nullptr;
  LinearRef lm_head_;
  LinearRef greedy_head_;
  const float* greedy_bounds_ = nullptr;
  std::string greedy_head_missing_;
  int num_shared_slots_ = 0;
  int64_t bytes_ = 0;
  int64_t checked_rows_ = 0;
};

// Host NVFP4 (ggml block) decode of one row of `in` elements: E2M1 x UE4M3 x scale, as the file
// defines it. Used for embeddings and by tests.
void nvfp4_decode_row(const uint8_t* blocks, int64_t in, float scale, float* out);

}  // namespace flint::cuda
