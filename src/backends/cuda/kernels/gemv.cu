// Small-batch GEMV: one warp per output row, 16-byte weight loads, up to 8 activation rows per
// pass; NVFP4 is decoded in registers. Reference: a plain dot product per row.
// Test: tests/kernels/gemv_test.cu   Bench: flint bench (decode step).
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/gemv.h"

namespace flint::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int64_t kMaxSmemBytes = 200 * 1024;

struct GemvArgs {
  LinearRef a, b;  // b is used by the gated kernel only
  const float* x;
  int64_t x_stride;
  float* y;
  int64_t y_stride;
  int num_rows;               // activation rows in total (dense mode)
  int pairs_per_token;        // expert mode: x row of group g is g / pairs_per_token
  const int32_t* expert_ids;  // expert mode when non-null; then NB == 1 and group == pair
  bool accumulate;
};

// One warp per output row; the block's activation rows are staged in shared memory first.
template <DType W, int NB, bool kGated>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(GemvArgs args) {
  using C = dev::Chunk<W>;
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);  // [NB, padded_len(in)]
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int g = blockIdx.y;
  int64_t x_row0, y_row0, e = 0;
  int nb;
  if (args.expert_ids != nullptr) {
    e = args.expert_ids[g];
    x_row0 = g / args.pairs_per_token;
    y_row0 = g;
    nb = 1;
  } else {
    x_row0 = int64_t(g) * NB;
    y_row0 = x_row0;
    nb = min(NB, args.num_rows - g * NB);
  }
  const int64_t K = args.a.in, PK = dev::padded_len(K);
  for (int i = 0; i < nb; ++i) {
    const float* xr = args.x + (x_row0 + i) * args.x_stride;
    for (int64_t k = threadIdx.x; k < K; k += kWarps * 32) xs[i * PK + dev::pad_idx(k)] = xr[k];
  }
  __syncthreads();
  if (r >= args.a.out) return;
  const int64_t row = e * args.a.out + r;
  float acc_a[NB], acc_b[NB];
#pragma unroll
  for (int i = 0; i < NB; ++i) acc_a[i] = acc_b[i] = 0.0f;
  const int64_t num_chunks = K / C::kElems;
  for (int64_t c = lane; c < num_chunks; c += 32) {
    C wa, wb;
    wa.load(args.a, row, c);
    if constexpr (kGated) wb.load(args.b, row, c);
    const int64_t xo = dev::pad_idx(c * C::kElems);
#pragma unroll
    for (int i = 0; i < NB; ++i) {
      if (i < nb) {
        const float* xp = xs + i * PK + xo;
        acc_a[i] += wa.dot(xp, nullptr);
        if constexpr (kGated) acc_b[i] += wb.dot(xp, nullptr);
      }
    }
  }
  const float sa = dev::row_scale(args.a, row);
  const float sb = kGated ? dev::row_scale(args.b, row) : 1.0f;
#pragma unroll
  for (int i = 0; i < NB; ++i) {
    const float va = dev::warp_sum(acc_a[i]) * sa;
    float v = va;
    if constexpr (kGated) v = dev::silu(va) * (dev::warp_sum(acc_b[i]) * sb);
    if (lane == i && i < nb) {
      float* yp = args.y + (y_row0 + i) * args.y_stride + r;
      *yp = args.accumulate ? *yp + v : v;
    }
  }
}

template <DType W, int NB, bool kGated>
void launch_nb(const GemvArgs& a, int groups, cudaStream_t s) {
  static const bool configured = [] {
    FLINT_CUDA_CHECK(cudaFuncSetAttribute(gemv_kernel<W, NB, kGated>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kMaxSmemBytes)));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>(ceil_div(a.a.out, kWarps)), static_cast<unsigned>(groups));
  const size_t smem = NB * dev::padded_len(a.a.in) * sizeof(float);
  gemv_kernel<W, NB, kGated><<<grid, kWarps * 32, smem, s>>>(a);
}

template <DType W, bool kGated>
void launch_w(const GemvArgs& a, int nb_template, int groups, cudaStream_t s) {
  switch (nb_template) {
    case 1:
      launch_nb<W, 1, kGated>(a, groups, s);
      break;
    case 2:
      launch_nb<W, 2, kGated>(a, groups, s);
      break;
    case 4:
      launch_nb<W, 4, kGated>(a, groups, s);
      break;
    default:
      launch_nb<W, 8, kGated>(a, groups, s);
      break;
  }
}

template <bool kGated>
void launch(const GemvArgs& a, int nb_template, int groups, cudaStream_t s) {
  if (groups == 0 || a.a.out == 0) return;
  switch (a.a.dtype) {
    case DType::kF32:
      launch_w<DType::kF32, kGated>(a, nb_template, groups, s);
      break;
    case DType::kBF16:
      launch_w<DType::kBF16, kGated>(a, nb_template, groups, s);
      break;
    case DType::kNVFP4:
      launch_w<DType::kNVFP4, kGated>(a, nb_template, groups, s);
      break;
    default:
      FLINT_FAIL("gemv: unsupported weight dtype {}", a.a.dtype);
  }
  FLINT_CUDA_CHECK(cudaGetLastError());
}

int chunk_elems(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 8;
    case DType::kNVFP4:
      return 64;
    default:
      FLINT_FAIL("gemv: unsupported weight dtype {}", t);
  }
}

void check_weight(const LinearRef& w) {
  FLINT_CHECK(dev::padded_len(w.in) * int64_t(sizeof(float)) <= kMaxSmemBytes,
              "gemv: in {} is too long to stage in shared memory", w.in);
  FLINT_CHECK(w.w != nullptr && w.in % chunk_elems(w.dtype) == 0,
              "gemv: weight [{}, {}] {} needs in % {} == 0", w.out, w.in, w.dtype,
              chunk_elems(w.dtype));
  FLINT_CHECK(w.dtype != DType::kNVFP4 || w.sc != nullptr, "gemv: NVFP4 weight without scales");
}

// Rows per pass: up to 8, fewer when the staged activations would not fit in shared memory.
int nb_for(int n, int64_t in) {
  int nb = n >= 8 ? 8 : n > 2 ? 4 : n;
  while (nb > 1 && nb * dev::padded_len(in) * int64_t(sizeof(float)) > kMaxSmemBytes) nb /= 2;
  return nb;
}

}  // namespace

void gemv(float* y, int64_t y_stride, const float* x, int64_t x_stride, int num_rows,
          const LinearRef& w, bool accumulate, cudaStream_t s) {
  check_weight(w);
  FLINT_CHECK(w.num_experts == 1, "gemv: expert stack passed to the dense gemv");
  GemvArgs a{w, {}, x, x_stride, y, y_stride, num_rows, 1, nullptr, accumulate};
  const int nb = nb_for(num_rows, w.in);
  launch<false>(a, nb, static_cast<int>(ceil_div(num_rows, nb)), s);
}

void gemv_gated(float* y, int64_t y_stride, const float* x, int64_t x_stride, int num_rows,
                const LinearRef& gate, const LinearRef& up, cudaStream_t s) {
  check_weight(gate);
  check_weight(up);
  FLINT_CHECK(gate.dtype == up.dtype && gate.out == up.out && gate.in == up.in,
              "gemv_gated: gate [{}, {}] {} vs up [{}, {}] {}", gate.out, gate.in, gate.dtype,
              up.out, up.in, up.dtype);
  GemvArgs a{gate, up, x, x_stride, y, y_stride, num_rows, 1, nullptr, false};
  const int nb = nb_for(num_rows, gate.in);
  launch<true>(a, nb, static_cast<int>(ceil_div(num_rows, nb)), s);
}

void gemv_gated_experts(float* act, const float* x, int64_t x_stride, int num_pairs,
                        int pairs_per_token, const int32_t* expert_ids, const LinearRef& gate,
                        const LinearRef& up, cudaStream_t s) {
  check_weight(gate);
  check_weight(up);
  FLINT_CHECK(gate.dtype == up.dtype && gate.out == up.out && gate.in == up.in &&
                  gate.num_experts == up.num_experts && pairs_per_token > 0,
              "gemv_gated_experts: gate/up mismatch");
  GemvArgs a{gate, up, x, x_stride, act, gate.out, num_pairs, pairs_per_token, expert_ids, false};
  launch<true>(a, 1, num_pairs, s);
}

}  // namespace flint::cuda
