// Prefill-size linear layers: cuBLAS for plain BF16 weights, and a tensor-core tile kernel
// (mma.sync m16n8k16, bf16 x bf16 -> f32) whose weight tiles are decoded from NVFP4 (exactly: an
// E2M1 x UE4M3 product has at most 6 significant bits) or copied from BF16 into shared memory.
// Reference: backends/cpu/ops/linear.cpp   Test: tests/kernels/prefill_gemm_test.cpp
#include <algorithm>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/gemm.h"
#include "backends/cuda/kernels/mma.cuh"

namespace flint::cuda {
namespace {

// Stores 16 floats as bf16 with two 16-byte writes (dst 16-byte aligned).
__device__ __forceinline__ void store16_bf16(__nv_bfloat16* dst, const float* v) {
  uint4 o0, o1;
  o0.x = dev::pack_bf16(v[0], v[1]);
  o0.y = dev::pack_bf16(v[2], v[3]);
  o0.z = dev::pack_bf16(v[4], v[5]);
  o0.w = dev::pack_bf16(v[6], v[7]);
  o1.x = dev::pack_bf16(v[8], v[9]);
  o1.y = dev::pack_bf16(v[10], v[11]);
  o1.z = dev::pack_bf16(v[12], v[13]);
  o1.w = dev::pack_bf16(v[14], v[15]);
  *reinterpret_cast<uint4*>(dst) = o0;
  *reinterpret_cast<uint4*>(dst + 8) = o1;
}

// A block is 8 warps, 2 along the activation rows and 4 along the weight rows; each warp holds
// kMT 16-row m-tiles, so a block covers kBM = 32 kMT activation rows: kMT = 4 (kGemmTileRows) for
// dense and large grouped problems, kMT = 1 (kGemmSmallTileRows) for experts with few rows each.
constexpr int kBN = 128;  // weight rows per block (gated: 64 gate + 64 up)
constexpr int kBK = 64;
constexpr int kLd = kBK + 8;  // padded smem row (144 bytes): ldmatrix rows hit distinct banks
constexpr int kThreads = 256;
template <int kMT>
constexpr int tile_rows() {
  return 32 * kMT;
}
template <int kMT>
constexpr int stage_elems() {
  return (tile_rows<kMT>() + kBN) * kLd;
}
template <int kMT>
constexpr int smem_bytes() {
  return 2 * stage_elems<kMT>() * 2 + 16 * 4;
}
static_assert(tile_rows<4>() == kGemmTileRows && tile_rows<1>() == kGemmSmallTileRows);

struct GemmParams {
  const __nv_bfloat16* x;
  int64_t x_stride;
  int rows;  // dense problems: rows of x and y
  GemmGroups groups;
  LinearRef w0, w1;  // w1: the up half when gated
  void* y;
  int64_t y_stride;
  bool accumulate;
};

__global__ void cast_to_bf16_kernel(__nv_bfloat16* out, int64_t out_stride, const float* x,
                                    int64_t x_stride, int64_t cols) {
  const float* xr = x + int64_t(blockIdx.x) * x_stride;
  __nv_bfloat16* o = out + int64_t(blockIdx.x) * out_stride;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) o[i] = __float2bfloat16_rn(xr[i]);
}

// hi[r, c] = bf16(x[r, c]), lo[r, c] = bf16(x[r, c] - hi[r, c]); hi and lo: [rows, cols] dense.
__global__ void split_bf16_kernel(__nv_bfloat16* hi, __nv_bfloat16* lo, const float* x,
                                  int64_t x_stride, int64_t cols) {
  const float* xr = x + int64_t(blockIdx.x) * x_stride;
  const int64_t o = int64_t(blockIdx.x) * cols;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const float v = xr[i];
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    hi[o + i] = h;
    lo[o + i] = __float2bfloat16_rn(v - __bfloat162float(h));
  }
}

__global__ void widen_bf16_kernel(float* out, const __nv_bfloat16* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = __bfloat162float(in[i]);
  }
}

// One thread per 16-element NVFP4 sub-block: 8 code bytes and one UE4M3 scale -> 16 bf16.
__global__ void dequantize_nvfp4_kernel(__nv_bfloat16* out, const LinearRef w, int64_t rows) {
  __shared__ float lut[16];
  dev::init_e2m1_lut(lut);
  __syncthreads();
  const int64_t per_row = w.in / 16;
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= rows * per_row) return;
  const int64_t row = i / per_row, sb = i % per_row;
  const float d = dev::ue4m3_half(w.sc[row * per_row + sb]) * dev::row_scale(w, row);
  const uint2 q =
      *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(w.w) + row * (w.in / 2) + sb * 8);
  const uint32_t words[2] = {q.x, q.y};
  float v[16];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint32_t b = (words[j >> 2] >> (8 * (j & 3))) & 0xffu;
    v[j] = lut[b & 15u] * d;
    v[j + 8] = lut[b >> 4] * d;
  }
  store16_bf16(out + row * w.in + sb * 16, v);
}

// The weight row behind smem row i of the tile (gated: rows 0-63 gate, 64-127 up), or -1.
// `up` says whether it is a row of w1.
template <bool kGated>
__device__ __forceinline__ int64_t weight_row(const GemmParams& p, int n0, int i, int expert,
                                              bool& up) {
  int n = n0 + i;
  up = false;
  if (kGated) {
    n = n0 + (i & 63);
    up = i >= 64;
  }
  if (n >= p.w0.out) return -1;
  return int64_t(expert) * p.w0.out + n;
}

template <DType WT, bool kGated, int kMT>
__global__ void __launch_bounds__(kThreads) gemm_kernel(const GemmParams p) {
  constexpr int kBM = tile_rows<kMT>();  // activation rows per block
  constexpr int kStageElems = stage_elems<kMT>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* smem = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  float* lut = reinterpret_cast<float*>(smem_raw + 2 * kStageElems * 2);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int expert = 0, m0, m1;
  if (p.groups.tiles != nullptr) {
    const int4 t = p.groups.tiles[blockIdx.x];
    if (t.x < 0) return;
    expert = t.x;
    m0 = t.y;
    m1 = t.z;
  } else {
    m0 = blockIdx.x * kBM;
    m1 = min(p.rows, m0 + kBM);
  }
  const int n0 = blockIdx.y * (kGated ? kBN / 2 : kBN);
  const int K = static_cast<int>(p.w0.in);
  const int num_k_tiles = (K + kBK - 1) / kBK;
  if (WT == DType::kNVFP4) dev::init_e2m1_lut(lut);

  // Activation tile: kBM rows x 64 bf16 = 8 kBM 16-byte chunks, kMT per thread.
  auto load_x = [&](int stage, int kt) {
    __nv_bfloat16* xs = smem + stage * kStageElems;
#pragma unroll
    for (int j = 0; j < kBM * (kBK / 8) / kThreads; ++j) {
      const int c = tid + j * kThreads;
      const int r = c >> 3, kc = (c & 7) * 8;
      const int m = m0 + r;
      const int k = kt * kBK + kc;
      const bool ok = m < m1 && k < K;
      const __nv_bfloat16* src = p.x;
      if (ok) {
        const int64_t xr = p.groups.gather != nullptr ? p.groups.gather[m] : m;
        src = p.x + xr * p.x_stride + k;
      }
      dev::cp_async16(xs + r * kLd + kc, src, ok);
    }
  };
  // BF16 weight tile: the same shape, straight copies.
  auto load_w_bf16 = [&](int stage, int kt) {
    __nv_bfloat16* ws = smem + stage * kStageElems + kBM * kLd;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = tid + j * kThreads;
      const int i = c >> 3, kc = (c & 7) * 8;
      bool up;
      const int64_t row = weight_row<kGated>(p, n0, i, expert, up);
      const int k = kt * kBK + kc;
      const bool ok = row >= 0 && k < K;
      const auto* base = static_cast<const __nv_bfloat16*>(up ? p.w1.w : p.w0.w);
      const void* src = ok ? static_cast<const void*>(base + row * K + k) : p.w0.w;
      dev::cp_async16(ws + i * kLd + kc, src, ok);
    }
  };
  // NVFP4 weight tile: each thread owns 32 elements of one row (16 code bytes, 2 scales), loaded
  // into registers one tile ahead and decoded into shared memory after the compute.
  uint4 q4 = make_uint4(0, 0, 0, 0);
  uint32_t sc2 = 0;
  auto fetch_w_nvfp4 = [&](int kt) {
    const int i = tid >> 1, half = tid & 1;
    bool up;
    const int64_t row = weight_row<kGated>(p, n0, i, expert, up);
    if (row < 0) {
      q4 = make_uint4(0, 0, 0, 0);
      sc2 = 0;
      return;
    }
    const int k = kt * kBK + half * 32;
    const auto* codes = static_cast<const uint8_t*>(up ? p.w1.w : p.w0.w);
    const uint8_t* scales = up ? p.w1.sc : p.w0.sc;
    q4 = __ldg(reinterpret_cast<const uint4*>(codes + row * (K / 2) + k / 2));
    sc2 = __ldg(reinterpret_cast<const uint16_t*>(scales + row * (K / 16) + k / 16));
  };
  auto store_w_nvfp4 = [&](int stage) {
    const int i = tid >> 1, half = tid & 1;
    __nv_bfloat16* dst = smem + stage * kStageElems + kBM * kLd + i * kLd + half * 32;
    const uint32_t words[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
    for (int sb = 0; sb < 2; ++sb) {
      const float d = dev::ue4m3_half((sc2 >> (8 * sb)) & 0xffu);
      float v[16];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint32_t b = (words[sb * 2 + (j >> 2)] >> (8 * (j & 3))) & 0xffu;
        v[j] = lut[b & 15u] * d;
        v[j + 8] = lut[b >> 4] * d;
      }
      store16_bf16(dst + sb * 16, v);
    }
  };

  float acc[kMT][4][4];
#pragma unroll
  for (int a = 0; a < kMT; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[a][b][c] = 0.0f;

  const int wm = warp >> 2, wn = warp & 3;
  // Smem weight rows of this warp's two 16-row pairs of n-tiles.
  const int wrow0 = kGated ? wn * 16 : wn * 32;
  const int wrow1 = kGated ? 64 + wn * 16 : wn * 32 + 16;

  load_x(0, 0);
  if (WT == DType::kBF16) load_w_bf16(0, 0);
  dev::cp_async_commit();
  if (WT == DType::kNVFP4) {
    __syncthreads();  // the LUT
    fetch_w_nvfp4(0);
    store_w_nvfp4(0);
  }
  dev::cp_async_wait<0>();
  __syncthreads();

  for (int kt = 0; kt < num_k_tiles; ++kt) {
    const int stage = kt & 1;
    const bool more = kt + 1 < num_k_tiles;
    if (more) {
      load_x(stage ^ 1, kt + 1);
      if (WT == DType::kBF16) load_w_bf16(stage ^ 1, kt + 1);
      dev::cp_async_commit();
      if (WT == DType::kNVFP4) fetch_w_nvfp4(kt + 1);
    }
    const __nv_bfloat16* xs = smem + stage * kStageElems;
    const __nv_bfloat16* ws = xs + kBM * kLd;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        const int r = wm * (kBM / 2) + mt * 16 + (lane & 15);
        dev::ldmatrix_x4(a[mt], xs + r * kLd + kk + (lane >> 4) * 8);
      }
      uint32_t b[2][4];
#pragma unroll
      for (int jp = 0; jp < 2; ++jp) {
        const int r = (jp == 0 ? wrow0 : wrow1) + (lane & 7) + ((lane >> 4) << 3);
        dev::ldmatrix_x4(b[jp], ws + r * kLd + kk + ((lane >> 3) & 1) * 8);
      }
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const uint32_t* bb = b[nt >> 1];
          dev::mma_bf16(acc[mt][nt], a[mt], bb[(nt & 1) * 2], bb[(nt & 1) * 2 + 1]);
        }
      }
    }
    if (more && WT == DType::kNVFP4) store_w_nvfp4(stage ^ 1);
    dev::cp_async_wait<0>();
    __syncthreads();
  }

  // Epilogue. Thread (g, c) holds rows g and g+8 and columns 2c, 2c+1 of each 16x8 tile.
  const int g = lane >> 2, c = lane & 3;
  const LinearRef& W0 = p.w0;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int m = m0 + wm * (kBM / 2) + mt * 16 + g + hr * 8;
      if (m >= m1) continue;
      const float rw = p.groups.row_weight != nullptr ? p.groups.row_weight[m] : 1.0f;
      if (kGated) {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const int n = n0 + wn * 16 + nt * 8 + 2 * c;
          float o[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int64_t row = int64_t(expert) * W0.out + n + e;
            const float gv = acc[mt][nt][hr * 2 + e] * dev::row_scale(W0, n + e < W0.out ? row : 0);
            const float uv =
                acc[mt][nt + 2][hr * 2 + e] * dev::row_scale(p.w1, n + e < W0.out ? row : 0);
            o[e] = dev::silu(gv) * uv;
          }
          __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(p.y) + int64_t(m) * p.y_stride + n;
          if (n + 1 < W0.out && ((int64_t(m) * p.y_stride + n) & 1) == 0) {
            *reinterpret_cast<uint32_t*>(dst) = dev::pack_bf16(o[0], o[1]);
          } else {
            if (n < W0.out) dst[0] = __float2bfloat16_rn(o[0]);
            if (n + 1 < W0.out) dst[1] = __float2bfloat16_rn(o[1]);
          }
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const int n = n0 + wn * 32 + nt * 8 + 2 * c;
          float* dst = static_cast<float*>(p.y) + int64_t(m) * p.y_stride + n;
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            if (n + e >= W0.out) continue;
            const float v =
                acc[mt][nt][hr * 2 + e] * dev::row_scale(W0, int64_t(expert) * W0.out + n + e) * rw;
            dst[e] = p.accumulate ? dst[e] + v : v;
          }
        }
      }
    }
  }
}

template <DType WT, bool kGated, int kMT>
void launch_kernel(const GemmParams& p, int grid_x, cudaStream_t s) {
  constexpr int kSmem = smem_bytes<kMT>();
  static const bool configured = [] {
    FLINT_CUDA_CHECK(cudaFuncSetAttribute(gemm_kernel<WT, kGated, kMT>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)configured;
  const int n_per_block = kGated ? kBN / 2 : kBN;
  const dim3 grid(grid_x, static_cast<unsigned>(ceil_div(p.w0.out, n_per_block)));
  gemm_kernel<WT, kGated, kMT><<<grid, kThreads, kSmem, s>>>(p);
}

template <DType WT, bool kGated>
void launch_tiles(const GemmParams& p, int grid_x, cudaStream_t s) {
  if (p.groups.tiles != nullptr && p.groups.tile_rows == kGemmSmallTileRows) {
    launch_kernel<WT, kGated, 1>(p, grid_x, s);
  } else {
    launch_kernel<WT, kGated, 4>(p, grid_x, s);
  }
}

void check_weight(const LinearRef& w, const char* what) {
  FLINT_CHECK(w.w != nullptr && (w.dtype == DType::kBF16 || w.dtype == DType::kNVFP4),
              "{}: weight dtype {} (bf16 or nvfp4)", what, w.dtype);
  FLINT_CHECK(w.in % (w.dtype == DType::kNVFP4 ? 64 : 8) == 0, "{}: in {} not a multiple of {}",
              what, w.in, w.dtype == DType::kNVFP4 ? 64 : 8);
  FLINT_CHECK(w.dtype != DType::kNVFP4 || w.sc != nullptr, "{}: NVFP4 weight without scales", what);
}

void dispatch(const GemmParams& p, bool gated, int grid_x, cudaStream_t s) {
  if (grid_x <= 0) return;
  FLINT_CHECK(p.groups.tiles == nullptr || p.groups.tile_rows == kGemmTileRows ||
                  p.groups.tile_rows == kGemmSmallTileRows,
              "gemm: grouped tiles of {} rows ({} or {})", p.groups.tile_rows, kGemmTileRows,
              kGemmSmallTileRows);
  if (p.w0.dtype == DType::kNVFP4) {
    gated ? launch_tiles<DType::kNVFP4, true>(p, grid_x, s)
          : launch_tiles<DType::kNVFP4, false>(p, grid_x, s);
  } else {
    gated ? launch_tiles<DType::kBF16, true>(p, grid_x, s)
          : launch_tiles<DType::kBF16, false>(p, grid_x, s);
  }
  FLINT_CUDA_CHECK(cudaGetLastError());
}

void check_gated(const LinearRef& gate, const LinearRef& up, const char* what) {
  check_weight(gate, what);
  check_weight(up, what);
  FLINT_CHECK(gate.dtype == up.dtype && gate.out == up.out && gate.in == up.in &&
                  gate.num_experts == up.num_experts,
              "{}: gate [{}, {}] {} vs up [{}, {}] {}", what, gate.out, gate.in, gate.dtype, up.out,
              up.in, up.dtype);
}

}  // namespace

void cast_to_bf16(__nv_bfloat16* out, int64_t out_stride, const float* x, int64_t x_stride,
                  int rows, int64_t cols, cudaStream_t s) {
  if (rows <= 0) return;
  cast_to_bf16_kernel<<<rows, 256, 0, s>>>(out, out_stride, x, x_stride, cols);
  FLINT_CUDA_CHECK(cudaGetLastError());
}

void widen_bf16(float* out, const __nv_bfloat16* in, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  widen_bf16_kernel<<<static_cast<unsigned>(std::min<int64_t>(ceil_div(n, 256), 4096)), 256, 0,
                      s>>>(out, in, n);
  FLINT_CUDA_CHECK(cudaGetLastError());
}

void dequantize_bf16(__nv_bfloat16* out, const LinearRef& w, cudaStream_t s) {
  FLINT_CHECK(w.dtype == DType::kNVFP4 && w.sc != nullptr && w.in % 64 == 0,
              "dequantize_bf16: weight [{}, {}] {} is not NVFP4", w.out, w.in, w.dtype);
  const int64_t rows = w.out * w.num_experts;
  const int64_t n = rows * (w.in / 16);
  dequantize_nvfp4_kernel<<<static_cast<unsigned>(ceil_div(n, 256)), 256, 0, s>>>(out, w, rows);
  FLINT_CUDA_CHECK(cudaGetLastError());
}

void gemm_f32(cublasHandle_t cublas, float* y, int64_t y_stride, const float* x, int64_t x_stride,
              int rows, const float* w, int64_t out, int64_t in, cudaStream_t s) {
  if (rows <= 0) return;
  const float alpha = 1.0f, beta = 0.0f;
  FLINT_CHECK(cublasSetStream(cublas, s) == CUBLAS_STATUS_SUCCESS, "gemm_f32: cublasSetStream");
  const cublasStatus_t st = cublasSgemm(
      cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), rows, static_cast<int>(in), &alpha,
      w, static_cast<int>(in), x, static_cast<int>(x_stride), &beta, y, static_cast<int>(y_stride));
  FLINT_CHECK(st == CUBLAS_STATUS_SUCCESS, "gemm_f32: cublasSgemm failed ({})",
              static_cast<int>(st));
}

bool gemm_f32_activations(cublasHandle_t cublas, float* y, int64_t y_stride, const float* x,
                          int64_t x_stride, int rows, const LinearRef& w, __nv_bfloat16* scratch,
                          cudaStream_t s) {
  if (cublas == nullptr || w.w == nullptr || w.num_experts != 1 || w.row_scale != nullptr) {
    return false;
  }
  if (w.dtype == DType::kF32) {
    gemm_f32(cublas, y, y_stride, x, x_stride, rows, static_cast<const float*>(w.w), w.out, w.in,
             s);
    return true;
  }
  if (w.dtype != DType::kBF16 || w.in % 8 != 0 || scratch == nullptr) return false;
  if (rows <= 0) return true;
  __nv_bfloat16* hi = scratch;
  __nv_bfloat16* lo = scratch + int64_t(rows) * w.in;
  split_bf16_kernel<<<rows, 256, 0, s>>>(hi, lo, x, x_stride, w.in);
  FLINT_CUDA_CHECK(cudaGetLastError());
  gemm(cublas, y, y_stride, hi, w.in, rows, w, false, s);
  gemm(cublas, y, y_stride, lo, w.in, rows, w, true, s);
  return true;
}

void gemm(cublasHandle_t cublas, float* y, int64_t y_stride, const __nv_bfloat16* x,
          int64_t x_stride, int rows, const LinearRef& w, bool accumulate, cudaStream_t s) {
  check_weight(w, "gemm");
  FLINT_CHECK(x_stride % 8 == 0, "gemm: activation row stride {} is not 16-byte aligned", x_stride);
  FLINT_CHECK(w.num_experts == 1, "gemm: expert stack passed to the dense gemm");
  if (rows <= 0) return;
  if (w.dtype == DType::kBF16 && w.row_scale == nullptr && cublas != nullptr) {
    // Row-major y[rows, out] is column-major y^T[out, rows] = W[out, in] x^T: A = W (transposed
    // view of the column-major [in, out]), B = x^T (column-major [in, rows]).
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    FLINT_CHECK(cublasSetStream(cublas, s) == CUBLAS_STATUS_SUCCESS, "gemm: cublasSetStream");
    const cublasStatus_t st =
        cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.out), rows,
                     static_cast<int>(w.in), &alpha, w.w, CUDA_R_16BF, static_cast<int>(w.in), x,
                     CUDA_R_16BF, static_cast<int>(x_stride), &beta, y, CUDA_R_32F,
                     static_cast<int>(y_stride), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    FLINT_CHECK(st == CUBLAS_STATUS_SUCCESS, "gemm: cublasGemmEx failed ({})",
                static_cast<int>(st));
    return;
  }
  GemmParams p{x, x_stride, rows, GemmGroups{}, w, w, y, y_stride, accumulate};
  dispatch(p, false, static_cast<int>(ceil_div(rows, kGemmTileRows)), s);
}

void gemm_gated(__nv_bfloat16* act, int64_t act_stride, const __nv_bfloat16* x, int64_t x_stride,
                int rows, const LinearRef& gate, const LinearRef& up, cudaStream_t s) {
  check_gated(gate, up, "gemm_gated");
  FLINT_CHECK(x_stride % 8 == 0, "gemm_gated: activation row stride {} is not 16-byte aligned",
              x_stride);
  FLINT_CHECK(gate.num_experts == 1, "gemm_gated: expert stack passed to the dense gemm");
  GemmParams p{x, x_stride, rows, GemmGroups{}, gate, up, act, act_stride, false};
  dispatch(p, true, static_cast<int>(ceil_div(rows, kGemmTileRows)), s);
}

void grouped_gemm_gated(__nv_bfloat16* act, int64_t act_stride, const __nv_bfloat16* x,
                        int64_t x_stride, const GemmGroups& g, const LinearRef& gate,
                        const LinearRef& up, cudaStream_t s) {
  check_gated(gate, up, "grouped_gemm_gated");
  FLINT_CHECK(g.tiles != nullptr, "grouped_gemm_gated: no tiles");
  GemmParams p{x, x_stride, 0, g, gate, up, act, act_stride, false};
  dispatch(p, true, g.num_tiles, s);
}

void grouped_gemm(float* y, int64_t y_stride, const __nv_bfloat16* x, int64_t x_stride,
                  const GemmGroups& g, const LinearRef& w, cudaStream_t s) {
  check_weight(w, "grouped_gemm");
  FLINT_CHECK(g.tiles != nullptr, "grouped_gemm: no tiles");
  GemmParams p{x, x_stride, 0, g, w, w, y, y_stride, false};
  dispatch(p, false, g.num_tiles, s);
}

}  // namespace flint::cuda
