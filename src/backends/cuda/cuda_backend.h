// CudaBackend: model::Backend on one CUDA GPU (Hopper first). Same contract as the CPU reference
// (backends/cpu), checked against it by tests/gpu/forward_test.cpp. Not thread-safe; one engine
// thread owns it.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <span>

#include "backends/cuda/forward.h"
#include "backends/cuda/weights.h"
#include "model/backend.h"

namespace flint::cuda {

class CudaBackend final : public model::Backend {
 public:
  // Uploads the weights (NVFP4 repacked and checked). Errors: no device, unsupported dtypes, OOM.
  static Result<std::unique_ptr<CudaBackend>> create(const model::FlintWeights& weights);
  ~CudaBackend() override;

  const model::FlintConfig& config() const override { return weights_.config(); }
  // BF16 KV cache only. Running out of memory is reported here, not mid-request.
  Status init_kv_cache(const model::KvCacheSpec& spec) override;
  // Validates the step (kInvalidArgument naming the problem), runs it, copies logits to host.
  Status forward(const model::StepInput& step, std::span<float> logits) override;
  void copy_ring(int32_t src_ring, int32_t dst_ring) override;

 private:
  CudaBackend(DeviceWeights w, cudaStream_t s) : weights_(std::move(w)), stream_(s) {}
  DeviceWeights weights_;
  cudaStream_t stream_;
  std::unique_ptr<CudaForward> fwd_;
};

}  // namespace flint::cuda
