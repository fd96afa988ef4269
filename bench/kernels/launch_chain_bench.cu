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
//   count      the chain's work in N kernels as flag, but with no election: each block adds itself
//              to the kernel's count (release) once its slice is written, and the next kernel's
//              blocks wait (acquire) for the whole count, with no griddepcontrol.wait.
//   persist    the chain's N steps in one resident kernel: each block adds itself to a counter
//              (release) when its slice is written, and waits (acquire) until every block of the
//              step before has: what a persistent decode kernel's dependency between two phases
//              costs, without a launch, an election or a barrier's second round trip.
//   barrier    as persist, with the persistent decode kernel's grid barrier between the steps
//              (persistent::grid_sync, decode_persistent.cuh: the last block to arrive resets the
//              count and publishes the next generation, which the others spin on).
// --vec V: each thread of the chain variants requests V x 16 weight bytes a kernel (a step) before
// its wait (V 8 at 528 blocks: 17 MB a kernel, so that the bytes' stream overlaps the hand-offs as
// a decode step's weights do).
// --threads T: threads a block (256, 512 or 1024; 256 unless given).
// Usage: launch_chain_bench [--kernels 294] [--reps 30] [--grids 1,132,528] [--vec 1]
//                           [--threads 256]
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
#include "backends/cuda/kernels/decode_persistent.cuh"

namespace {

constexpr int kThreads = 256;  // threads a block, unless --threads says otherwise
constexpr int kRow = 2048;     // activation row: Flint's hidden size

__global__ void plain_kernel(int* counter, int i) {
  if (blockIdx.x == 0 && threadIdx.x == 0) counter[i + 1] = counter[i] + 1;
}

template <bool kEarly>
__global__ void pdl_kernel(int* counter, int i) {
  if constexpr (kEarly) flint::cuda::dev::pdl_launch_dependents();
  flint::cuda::dev::pdl_wait();
  if (blockIdx.x == 0 && threadIdx.x == 0) counter[i + 1] = counter[i] + 1;
}

// A thread's weights of one step: `vec` (--vec, <= kMaxVec) 16-byte loads, requested before the
// step's wait, the v-th of them at w + v * stride + the thread's index in the grid (coalesced).
constexpr int kMaxVec = 8;
struct Wv {
  uint4 q[kMaxVec];
};
__device__ __forceinline__ Wv load_w(const uint4* w, size_t stride, int vec) {
  Wv r;
  const size_t t = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
#pragma unroll
  for (int v = 0; v < kMaxVec; ++v) {
    if (v < vec) r.q[v] = __ldg(w + v * stride + t);
  }
  return r;
}

// One step of the chain, once the input row is ready: reduce x_in (read through L2) and write
// this block's slice of x_out. wv: the weights the thread requested earlier; they feed the result
// (they never hold the compared value), so their loads are not dropped.
__device__ __forceinline__ void chain_step(const float* x_in, float* x_out, const Wv& wv, int vec) {
  __shared__ float red[32];
  float s = 0.0f;
  for (int k = threadIdx.x; k < kRow; k += blockDim.x) s += __ldcg(x_in + k);
  s = flint::cuda::dev::warp_sum(s);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
  __syncthreads();
  float tot = 0.0f;
  for (int j = 0; j < int(blockDim.x / 32); ++j) tot += red[j];
  unsigned key = 0;
#pragma unroll
  for (int j = 0; j < kMaxVec; ++j) {
    if (j < vec) key ^= wv.q[j].x;
  }
  const float v = tot * 1e-9f + (key == 0x9e3779b9u ? 1.0f : 0.0f);
  const int per_block = (kRow + gridDim.x - 1) / gridDim.x;
  for (int j = threadIdx.x; j < per_block; j += blockDim.x) {
    const int k = blockIdx.x * per_block + j;
    if (k < kRow) x_out[k] = v + 1.0f;
  }
}

// x_in, x_out: [kRow] f32; w: this kernel's weights, vec x 16 bytes per thread of the grid, the
// v-th `stride` uint4 after the first.
__global__ void chain_kernel(const float* x_in, float* x_out, const uint4* w, size_t stride,
                             int vec) {
  flint::cuda::dev::pdl_launch_dependents();
  const Wv wv = load_w(w, stride, vec);
  flint::cuda::dev::pdl_wait();
  chain_step(x_in, x_out, wv, vec);
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
__global__ void flag_kernel(const float* x_in, float* x_out, const uint4* w, size_t stride, int vec,
                            unsigned* flags, unsigned* done, int i) {
  flint::cuda::dev::pdl_launch_dependents();
  const Wv wv = load_w(w, stride, vec);
  if (threadIdx.x == 0) {
    while (ld_acquire(flags + i) == 0) __nanosleep(20);
  }
  __syncthreads();
  chain_step(x_in, x_out, wv, vec);
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(done + i, 1u) == gridDim.x - 1) {
      __threadfence();
      st_release(flags + i + 1, 1u);
    }
  }
}

// A count spread over kLines 128-byte lines (block b adds to line b % kLines), so that the
// blocks' atomics do not queue at one line's L2 slice; a waiter's warp reads every line at once.
constexpr int kLines = 16;
constexpr int kLineWords = 32;
constexpr int kSetWords = kLines * kLineWords;

// Warp 0 polls the count `set` until it reaches `target` (acquire); then the block goes on.
__device__ __forceinline__ void wait_count(const unsigned* set, unsigned target) {
  if (threadIdx.x < 32) {
    for (;;) {
      const unsigned v = threadIdx.x < kLines ? ld_acquire(set + threadIdx.x * kLineWords) : 0u;
      if (__reduce_add_sync(0xffffffffu, v) >= target) break;
    }
  }
  __syncthreads();
}

// After the block's writes: adds the block to the count `set` (release).
__device__ __forceinline__ void add_count(unsigned* set) {
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* p = set + (blockIdx.x % kLines) * kLineWords;
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p) : "memory");
  }
}

// counts: n + 1 sets; set i counts the blocks of kernel i - 1 that have written their slice (set
// 0 is preset to the grid). Both the count and the flag kernels need both grids resident together.
__global__ void count_kernel(const float* x_in, float* x_out, const uint4* w, size_t stride,
                             int vec, unsigned* counts, int i) {
  flint::cuda::dev::pdl_launch_dependents();
  const Wv wv = load_w(w, stride, vec);
  wait_count(counts + size_t(i) * kSetWords, gridDim.x);
  chain_step(x_in, x_out, wv, vec);
  add_count(counts + size_t(i + 1) * kSetWords);
}

// Sets 0..n of counts zeroed, then set 0 preset to `first`.
__global__ void reset_counts(unsigned* counts, int n, unsigned first) {
  for (int i = threadIdx.x; i < (n + 1) * kSetWords; i += blockDim.x) {
    counts[i] = i == 0 ? first : 0u;
  }
}

// The chain's n steps in one kernel of resident blocks. count: one set, arrivals so far (zero
// before the launch); step i waits for i * gridDim.x of them. w: n x w_per_step uint4.
__global__ void persist_kernel(float* rows, const uint4* w, size_t w_per_step, size_t stride,
                               int vec, unsigned* count, int n) {
  for (int i = 0; i < n; ++i) {
    const Wv wv = load_w(w + size_t(i) * w_per_step, stride, vec);
    wait_count(count, unsigned(i) * gridDim.x);
    chain_step(rows + size_t(i) * kRow, rows + size_t(i + 1) * kRow, wv, vec);
    add_count(count);
  }
}

// persist_kernel with the persistent decode kernel's own grid barrier (persistent::grid_sync):
// sync[0] counts arrivals, sync[1] the generation (both zero before the launch).
__global__ void barrier_kernel(float* rows, const uint4* w, size_t w_per_step, size_t stride,
                               int vec, unsigned* sync, int n) {
  flint::cuda::persistent::Grid g{sync, sync + 1, 0, 0, 0, nullptr, 0};
  for (int i = 0; i < n; ++i) {
    const Wv wv = load_w(w + size_t(i) * w_per_step, stride, vec);
    chain_step(rows + size_t(i) * kRow, rows + size_t(i + 1) * kRow, wv, vec);
    flint::cuda::persistent::grid_sync(g);
  }
}

// A table cell: microseconds with two decimals.
std::string cell(double us) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", us);
  return buf;
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
  int n = 294, reps = 30, vec = 1, threads = kThreads;
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
    } else if (k == "--threads") {
      threads = std::atoi(argv[i + 1]);
    } else if (k == "--vec") {
      vec = std::atoi(argv[i + 1]);
    } else if (k == "--grids") {
      grids = ints(argv[i + 1]);
    } else {
      std::fprintf(stderr, "launch_chain_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (threads != 256 && threads != 512 && threads != 1024) {
    std::fprintf(stderr, "launch_chain_bench: --threads must be 256, 512 or 1024\n");
    return 2;
  }
  if (n < 1 || n > 100000 || reps < 1 || vec < 1 || vec > kMaxVec || grids.empty() ||
      std::any_of(grids.begin(), grids.end(), [](int g) { return g < 1 || g > 4096; })) {
    std::fprintf(stderr,
                 "launch_chain_bench: need 1 <= kernels <= 100000, reps >= 1, vec 1..%d, grids "
                 "1..4096\n",
                 kMaxVec);
    return 2;
  }
  cudaStream_t s;
  FLINT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* counter;
  float* rows;
  uint4* w;
  const int max_grid = *std::max_element(grids.begin(), grids.end());
  const size_t stride = size_t(max_grid) * threads;  // uint4 per load of the whole grid
  const size_t w_per_kernel = stride * vec;          // uint4 per kernel
  FLINT_CUDA_CHECK(cudaMalloc(&counter, sizeof(int) * (n + 1)));
  FLINT_CUDA_CHECK(cudaMalloc(&rows, sizeof(float) * kRow * (n + 1)));
  FLINT_CUDA_CHECK(cudaMalloc(&w, sizeof(uint4) * w_per_kernel * n));
  FLINT_CUDA_CHECK(cudaMemset(counter, 0, sizeof(int) * (n + 1)));
  FLINT_CUDA_CHECK(cudaMemset(rows, 0, sizeof(float) * kRow * (n + 1)));
  FLINT_CUDA_CHECK(cudaMemset(w, 0, sizeof(uint4) * w_per_kernel * n));
  unsigned *flags, *done, *counts;
  FLINT_CUDA_CHECK(cudaMalloc(&counts, sizeof(unsigned) * (n + 1) * kSetWords));
  FLINT_CUDA_CHECK(cudaMalloc(&flags, sizeof(unsigned) * (n + 1)));
  FLINT_CUDA_CHECK(cudaMalloc(&done, sizeof(unsigned) * (n + 1)));
  int sms = 0, dev = 0, flag_per_sm = 0, resident_per_sm = 0;
  FLINT_CUDA_CHECK(cudaGetDevice(&dev));
  FLINT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  FLINT_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&flag_per_sm, flag_kernel, threads, 0));
  FLINT_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident_per_sm, persist_kernel, threads, 0));
  int barrier_per_sm = 0;
  FLINT_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&barrier_per_sm, barrier_kernel, threads, 0));
  resident_per_sm = std::min(resident_per_sm, barrier_per_sm);  // persist and barrier spin
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

  std::printf(
      "%d dependent kernels per graph, %d x 16 weight bytes a thread a kernel, median of %d "
      "replays, us per kernel\n\n",
      n, vec, reps);
  std::printf(
      "| grid (blocks of %d) | plain | pdl | pdl+early | chain | flag | count | persist | barrier "
      "|\n"
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
      threads);
  for (int grid : grids) {
    const double plain = time_graph([&] {
      for (int i = 0; i < n; ++i) plain_kernel<<<grid, threads, 0, s>>>(counter, i);
    });
    const double pdl = time_graph([&] {
      for (int i = 0; i < n; ++i) {
        launch_pdl(pdl_kernel<false>, dim3(grid), dim3(threads), 0, s, counter, i);
      }
    });
    const double early = time_graph([&] {
      for (int i = 0; i < n; ++i) {
        launch_pdl(pdl_kernel<true>, dim3(grid), dim3(threads), 0, s, counter, i);
      }
    });
    const double chain = time_graph([&] {
      for (int i = 0; i < n; ++i) {
        launch_pdl(chain_kernel, dim3(grid), dim3(threads), 0, s,
                   static_cast<const float*>(rows + size_t(i) * kRow), rows + size_t(i + 1) * kRow,
                   static_cast<const uint4*>(w + size_t(i) * w_per_kernel), stride, vec);
      }
    });
    // Spinning is safe only if a kernel's blocks and the next one's fit on the GPU together.
    std::string flag = "n/a (grid too large)", count = flag;
    if (2 * grid <= flag_per_sm * sms) {
      count = cell(time_graph([&] {
        reset_counts<<<1, kThreads, 0, s>>>(counts, n, unsigned(grid));
        for (int i = 0; i < n; ++i) {
          launch_pdl(
              count_kernel, dim3(grid), dim3(threads), 0, s,
              static_cast<const float*>(rows + size_t(i) * kRow), rows + size_t(i + 1) * kRow,
              static_cast<const uint4*>(w + size_t(i) * w_per_kernel), stride, vec, counts, i);
        }
      }));
      flag = cell(time_graph([&] {
        FLINT_CUDA_CHECK(cudaMemsetAsync(flags, 0, sizeof(unsigned) * (n + 1), s));
        FLINT_CUDA_CHECK(cudaMemsetAsync(flags, 1, sizeof(unsigned), s));  // 0x01010101: raised
        FLINT_CUDA_CHECK(cudaMemsetAsync(done, 0, sizeof(unsigned) * n, s));
        for (int i = 0; i < n; ++i) {
          launch_pdl(
              flag_kernel, dim3(grid), dim3(threads), 0, s,
              static_cast<const float*>(rows + size_t(i) * kRow), rows + size_t(i + 1) * kRow,
              static_cast<const uint4*>(w + size_t(i) * w_per_kernel), stride, vec, flags, done, i);
        }
      }));
    }
    // The persistent chain needs every block resident at once (it spins on the others).
    std::string persist = "n/a (grid too large)", barrier = persist;
    if (grid <= resident_per_sm * sms) {
      persist = cell(time_graph([&] {
        FLINT_CUDA_CHECK(cudaMemsetAsync(counts, 0, sizeof(unsigned) * kSetWords, s));
        persist_kernel<<<grid, threads, 0, s>>>(rows, w, w_per_kernel, stride, vec, counts, n);
      }));
      barrier = cell(time_graph([&] {
        FLINT_CUDA_CHECK(cudaMemsetAsync(done, 0, 2 * sizeof(unsigned), s));
        barrier_kernel<<<grid, threads, 0, s>>>(rows, w, w_per_kernel, stride, vec, done, n);
      }));
    }
    FLINT_CUDA_CHECK(cudaGetLastError());
    std::printf("| %d | %.2f | %.2f | %.2f | %.2f | %s | %s | %s | %s |\n", grid, plain, pdl, early,
                chain, flag.c_str(), count.c_str(), persist.c_str(), barrier.c_str());
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
