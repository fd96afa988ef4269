// CudaBackend: weights upload, KV cache, and the step -> logits path over CudaForward.
#include "backends/cuda/cuda_backend.h"

namespace flint::cuda {

Result<std::unique_ptr<CudaBackend>> CudaBackend::create(const model::FlintWeights& weights) {
  if (!device_available()) return make_error(ErrorCode::kUnavailable, "cuda: no CUDA device");
  cudaStream_t s;
  FLINT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto w = DeviceWeights::upload(weights, s);
  if (!w) {
    cudaStreamDestroy(s);
    return w.error().with_context("uploading weights");
  }
  return std::unique_ptr<CudaBackend>(new CudaBackend(std::move(w).value(), s));
}

CudaBackend::~CudaBackend() {
  fwd_.reset();
  cudaStreamDestroy(stream_);
}

Status CudaBackend::init_kv_cache(const model::KvCacheSpec& spec) {
  fwd_.reset();
  FLINT_ASSIGN_OR_RETURN(fwd_, CudaForward::create(weights_, spec));
  return ok();
}

Status CudaBackend::forward(const model::StepInput& step, std::span<float> logits) {
  if (!fwd_) return make_error(ErrorCode::kInternal, "cuda: forward before init_kv_cache");
  const int64_t need = int64_t(step.logits_indices.size()) * config().vocab_size;
  if (int64_t(logits.size()) < need) {
    return make_error(ErrorCode::kInvalidArgument, "cuda: logits buffer holds {} floats, need {}",
                      logits.size(), need);
  }
  FLINT_ASSIGN_OR_RETURN(StepPlan plan, fwd_->upload_step(step, stream_));
  fwd_->enqueue(plan, stream_);
  if (need > 0) {
    FLINT_CUDA_CHECK(cudaMemcpyAsync(logits.data(), fwd_->logits(), need * sizeof(float),
                                     cudaMemcpyDeviceToHost, stream_));
  }
  FLINT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return ok();
}

void CudaBackend::copy_ring(int32_t src_ring, int32_t dst_ring) {
  FLINT_CHECK(fwd_ != nullptr, "copy_ring before init_kv_cache");
  fwd_->copy_ring(src_ring, dst_ring, stream_);
  FLINT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace flint::cuda
