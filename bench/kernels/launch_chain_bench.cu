// The floor under a layered decode step: a CUDA graph of N dependent kernels (N = 294, Flint's
// layered step) that move almost no bytes, timed per kernel. Variants:
//   plain      kernels launched without PDL (each starts when the previous one has finished)
//   pdl        PDL launch, griddepcontrol.wait, then the dependent read/write
//   pdl+early  as pdl, and each kernel lets the next one launch at its start
//   chain      a GEMV-shaped step: each thread requests 16 weight bytes before the wait, then the
//              block reads a 2048-float activation row written by the previous kernel (L2),
//              reduces it and writes its slice of the next row: the latency chain of our GEMVs
//              without their bytes.
//   flag       the chain's work, but each kernel waits for a flag that the previous kernel's last
//              block raises (release/acquire) instead of griddepcontrol.wait: what a hand-off
//              inside the step costs without waiting for a whole grid to finish and flush.
// Usage: launch_chain_bench [--kernels 294] [--reps 30] [--grids 1,132,528]
// Output: a markdown table of microseconds per kernel (median of the graph replays, events).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kRow = 2048;  // activation row: Flint's hidden size

__global__ void plain_kernel(int* counter, int i) {
  if (blockIdx.x == 0 && threadIdx.x == 0) counter[i + 1] = counter[i] + 1;
}

template <bool kEarly>
__global__ void pdl_kernel(int* counter, int i) {
  if constexpr (kEarly) flint::cuda::dev::pdl_launch_dependents();
  flint::cuda::dev::pdl_wait();
  if (blockIdx.x == 0 && threadIdx.x == 0) counter[i + 1] = counter[i] + 1;
}

// One step of the chain, once the input row is ready: reduce x_in (read through L2) and write
// this block's slice of x_out. wv: the 16 weight bytes the thread requested earlier; they feed the
// result (they never hold the compared value), so their load is not dropped.
__device__ __forceinline__ void chain_step(const float* x_in, float* x_out, const uint4& wv) {
  __shared__ float red[kThreads / 32];
  float s = 0.0f;
  for (int k = threadIdx.x; k < kRow; k += blockDim.x) s += __ldcg(x_in + k);
  s = flint::cuda::dev::warp_sum(s);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
  __syncthreads();
  float tot = 0.0f;
  for (int j = 0; j < kThreads / 32; ++j) tot += red[j];
  const float v = tot * 1e-9f + (wv.x == 0x9e3779b9u ? 1.0f : 0.0f);
  const int per_block = (kRow + gridDim.x - 1) / gridDim.x;
  for (int j = threadIdx.x; j < per_block; j += blockDim.x) {
    const int k = blockIdx.x * per_block + j;
    if (k < kRow) x_out[k] = v + 1.0f;
  }
}

// x_in, x_out: [kRow] f32; w: this kernel's weights, 16 bytes per thread of the grid.
__global__ void chain_kernel(const float* x_in, float* x_out, const uint4* w) {
  flint::cuda::dev::pdl_launch_dependents();
  const uint4 wv = __ldg(w + blockIdx.x * blockDim.x + threadIdx.x);
  flint::cuda::dev::pdl_wait();
  chain_step(x_in, x_out, wv);
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// flags[i] != 0: kernel i's input row is complete (flags[0] is set by the graph's first nodes);
// done[i]: blocks of kernel i that have written their slice. Both are reset before each replay.
__global__ void flag_kernel(const float* x_in, float* x_out, const uint4* w, unsigned* flags,
                            unsigned* done, int i) {
  flint::cuda::dev::pdl_launch_dependents();
  const uint4 wv = __ldg(w + blockIdx.x * blockDim.x + threadIdx.x);
  if (threadIdx.x == 0) {
    while (ld_acquire(flags + i) == 0) __nanosleep(20);
  }
  __syncthreads();
  chain_step(x_in, x_out, wv);
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(done + i, 1u) == gridDim.x - 1) {
      __threadfence();
      st_release(flags + i + 1, 1u);
    }
  }
}

std::vector<int> ints(const char* s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::atoi(item.c_str()));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using flint::cuda::launch_pdl;
  int n = 294, reps = 30;
  std::vector<int> grids = {1, 132, 528};
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 == argc) {
      std::fprintf(stderr, "launch_chain_bench: %s needs a value\n", k.c_str());
      return 2;
    }
    if (k == "--kernels") {
      n = std::atoi(argv[i + 1]);
    } else if (k == "--reps") {
      reps = std::atoi(argv[i + 1]);
    } else if (k == "--grids") {
      grids = ints(argv[i + 1]);
    } else {
      std::fprintf(stderr, "launch_chain_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (n < 1 || n > 100000 || reps < 1 || grids.empty() ||
      std::any_of(grids.begin(), grids.end(), [](int g) { return g < 1 || g > 4096; })) {
    std::fprintf(stderr,
                 "launch_chain_bench: need 1 <= kernels <= 100000, reps >= 1, grids 1..4096\n");
    return 2;
  }
  cudaStream_t s;
  FLINT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* counter;
  float* rows;
  uint4* w;
  const int max_grid = *std::max_element(grids.begin(), grids.end());
  const size_t w_per_kernel = size_t(max_grid) * kThreads;  // uint4 per kernel
  FLINT_CUDA_CHECK(cudaMalloc(&counter, sizeof(int) * (n + 1)));
  FLINT_CUDA_CHECK(cudaMalloc(&rows, sizeof(float) * kRow * (n + 1)));
  FLINT_CUDA_CHECK(cudaMalloc(&w, sizeof(uint4) * w_per_kernel * n));
  FLINT_CUDA_CHECK(cudaMemset(counter, 0, sizeof(int) * (n + 1)));
  FLINT_CUDA_CHECK(cudaMemset(rows, 0, sizeof(float) * kRow * (n + 1)));
  FLINT_CUDA_CHECK(cudaMemset(w, 0, sizeof(uint4) * w_per_kernel * n));
  unsigned *flags, *done;
  FLINT_CUDA_CHECK(cudaMalloc(&flags, sizeof(unsigned) * (n + 1)));
  FLINT_CUDA_CHECK(cudaMalloc(&done, sizeof(unsigned) * n));
  int sms = 0, dev = 0, flag_per_sm = 0;
  FLINT_CUDA_CHECK(cudaGetDevice(&dev));
  FLINT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  FLINT_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&flag_per_sm, flag_kernel, kThreads, 0));
  cudaEvent_t e0, e1;
  FLINT_CUDA_CHECK(cudaEventCreate(&e0));
  FLINT_CUDA_CHECK(cudaEventCreate(&e1));

  auto time_graph = [&](auto&& enqueue) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    FLINT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    enqueue();
    FLINT_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    FLINT_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < 3; ++i) FLINT_CUDA_CHECK(cudaGraphLaunch(ge, s));
    std::vector<float> ms;
    for (int r = 0; r < reps; ++r) {
      FLINT_CUDA_CHECK(cudaEventRecord(e0, s));
      FLINT_CUDA_CHECK(cudaGraphLaunch(ge, s));
      FLINT_CUDA_CHECK(cudaEventRecord(e1, s));
      FLINT_CUDA_CHECK(cudaEventSynchronize(e1));
      float t = 0;
      FLINT_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    FLINT_CUDA_CHECK(cudaGraphExecDestroy(ge));
    FLINT_CUDA_CHECK(cudaGraphDestroy(g));
    std::sort(ms.begin(), ms.end());
    return 1000.0 * ms[ms.size() / 2] / n;  // microseconds per kernel
  };

  std::printf("%d dependent kernels per graph, median of %d replays, us per kernel\n\n", n, reps);
  std::printf(
      "| grid (blocks of %d) | plain | pdl | pdl+early | chain | flag |\n"
      "|---:|---:|---:|---:|---:|---:|\n",
      kThreads);
  for (int grid : grids) {
    const double plain = time_graph([&] {
      for (int i = 0; i < n; ++i) plain_kernel<<<grid, kThreads, 0, s>>>(counter, i);
    });
    const double pdl = time_graph([&] {
      for (int i = 0; i < n; ++i) {
        launch_pdl(pdl_kernel<false>, dim3(grid), dim3(kThreads), 0, s, counter, i);
      }
    });
    const double early = time_graph([&] {
      for (int i = 0; i < n; ++i) {
        launch_pdl(pdl_kernel<true>, dim3(grid), dim3(kThreads), 0, s, counter, i);
      }
    });
    const double chain = time_graph([&] {
      for (int i = 0; i < n; ++i) {
        launch_pdl(chain_kernel, dim3(grid), dim3(kThreads), 0, s,
                   static_cast<const float*>(rows + size_t(i) * kRow), rows + size_t(i + 1) * kRow,
                   static_cast<const uint4*>(w + size_t(i) * w_per_kernel));
      }
    });
    // Spinning is safe only if a kernel's blocks and the next one's fit on the GPU together.
    std::string flag = "n/a (grid too large)";
    if (2 * grid <= flag_per_sm * sms) {
      const double us = time_graph([&] {
        FLINT_CUDA_CHECK(cudaMemsetAsync(flags, 0, sizeof(unsigned) * (n + 1), s));
        FLINT_CUDA_CHECK(cudaMemsetAsync(flags, 1, sizeof(unsigned), s));  // 0x01010101: raised
        FLINT_CUDA_CHECK(cudaMemsetAsync(done, 0, sizeof(unsigned) * n, s));
        for (int i = 0; i < n; ++i) {
          launch_pdl(flag_kernel, dim3(grid), dim3(kThreads), 0, s,
                     static_cast<const float*>(rows + size_t(i) * kRow),
                     rows + size_t(i + 1) * kRow,
                     static_cast<const uint4*>(w + size_t(i) * w_per_kernel), flags, done, i);
        }
      });
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.2f", us);
      flag = buf;
    }
    FLINT_CUDA_CHECK(cudaGetLastError());
    std::printf("| %d | %.2f | %.2f | %.2f | %.2f | %s |\n", grid, plain, pdl, early, chain,
                flag.c_str());
  }
  int last = 0;
  FLINT_CUDA_CHECK(cudaMemcpy(&last, counter + n, sizeof(int), cudaMemcpyDeviceToHost));
  // Every variant rewrites counter[1..n] from counter[0] = 0, so the chain must end at n.
  if (last != n) {
    std::fprintf(stderr, "launch_chain_bench: the chain ended at %d, expected %d\n", last, n);
    return 1;
  }
  return 0;
}
