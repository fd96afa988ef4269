// Prefill-size linear layers: cuBLAS for plain BF16 weights, and tensor-core tile kernels (bf16 x
// bf16 -> f32; warpgroup MMAs for 128-row tiles on Hopper, mma.sync m16n8k16 for 32-row tiles and
// on other devices) whose weight tiles are decoded from NVFP4 (exactly: an E2M1 x UE4M3 product
// has at most 6 significant bits) or copied from BF16 into shared memory.
// Reference: backends/cpu/ops/linear.cpp   Test: tests/kernels/prefill_gemm_test.cpp
#include <algorithm>
#include <atomic>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/gemm.h"
#include "backends/cuda/kernels/mma.cuh"
#include "backends/cuda/kernels/wgmma.cuh"

namespace flint::cuda {
namespace {

// 8 floats as bf16 into one 16-byte chunk (dst 16-byte aligned).
__device__ __forceinline__ void store8_bf16(void* dst, const float* v) {
  uint4 o;
  o.x = dev::pack_bf16(v[0], v[1]);
  o.y = dev::pack_bf16(v[2], v[3]);
  o.z = dev::pack_bf16(v[4], v[5]);
  o.w = dev::pack_bf16(v[6], v[7]);
  *reinterpret_cast<uint4*>(dst) = o;
}

// The 16 weights of an NVFP4 sub-block (8 code bytes in w0, w1; d its scale, half the UE4M3
// value, ue4m3_half) in order, without the row scale, by register arithmetic (Chunk::decode16).
// A shared-memory table cost the wgmma kernel's NVFP4 gate/up 38% of its cycles in stalls on
// the table loads (Nsight Compute, 8K-token prefill chunk).
__device__ __forceinline__ void decode_nvfp4_16(uint32_t w0, uint32_t w1, float d, float (&v)[16]) {
  dev::Chunk<DType::kNVFP4>::decode16(w0, w1, 32768.0f * d, v);
}

// A block is 8 warps (256 threads). The mma.sync kernel: 2 warps along the activation rows and 4
// along the weight rows; each warp holds kMT 16-row m-tiles, so a block covers kBM = 32 kMT
// activation rows: kMT = 4 (kGemmTileRows) for dense and large grouped problems where the wgmma
// kernel does not run (devices other than Hopper), kMT = 1 (kGemmSmallTileRows) for experts with
// few rows each.
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
  return 2 * stage_elems<kMT>() * 2;
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
  const int64_t per_row = w.in / 16;
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= rows * per_row) return;
  const int64_t row = i / per_row, sb = i % per_row;
  const float d = dev::ue4m3_half(w.sc[row * per_row + sb]) * dev::row_scale(w, row);
  const uint2 q =
      *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(w.w) + row * (w.in / 2) + sb * 8);
  float v[16];
  decode_nvfp4_16(q.x, q.y, d, v);
  store8_bf16(out + row * w.in + sb * 16, v);
  store8_bf16(out + row * w.in + sb * 16 + 8, v + 8);
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

// What both tile kernels share: which rows a block owns, how its k tiles reach shared memory and
// what its epilogue writes. A tile in shared memory is kRows rows of kBK = 64 bf16, eight 16-byte
// chunks a row; each kernel places chunk (row, kc) where its MMAs read it best (`Dst`: (row, kc)
// -> shared address). Copies go 8 threads to a row (one 128-byte request).

// The block's expert and activation rows [m0, m1) (kBM rows a dense block); false for a grouped
// problem's padding tile.
template <int kBM>
__device__ __forceinline__ bool block_rows(const GemmParams& p, int& expert, int& m0, int& m1) {
  expert = 0;
  if (p.groups.tiles != nullptr) {
    const int4 t = p.groups.tiles[blockIdx.x];
    if (t.x < 0) return false;
    expert = t.x;
    m0 = t.y;
    m1 = t.z;
  } else {
    m0 = blockIdx.x * kBM;
    m1 = min(p.rows, m0 + kBM);
  }
  return true;
}

// Activation rows m0.. (kBM of them, zeros past m1 and past K) of k tile kt.
template <int kBM, class Dst>
__device__ __forceinline__ void copy_x_tile(const GemmParams& p, int m0, int m1, int kt, Dst dst) {
  const int K = static_cast<int>(p.w0.in);
#pragma unroll
  for (int j = 0; j < kBM * (kBK / 8) / kThreads; ++j) {
    const int c = threadIdx.x + j * kThreads;
    const int r = c >> 3, kc = c & 7;
    const int m = m0 + r;
    const int k = kt * kBK + kc * 8;
    const bool ok = m < m1 && k < K;
    const __nv_bfloat16* src = p.x;
    if (ok) {
      const int64_t xr = p.groups.gather != nullptr ? p.groups.gather[m] : m;
      src = p.x + xr * p.x_stride + k;
    }
    dev::cp_async16(dst(r, kc), src, ok);
  }
}

// The block's kBN BF16 weight rows (weight_row) of k tile kt, straight copies.
template <bool kGated, class Dst>
__device__ __forceinline__ void copy_w_tile_bf16(const GemmParams& p, int n0, int expert, int kt,
                                                 Dst dst) {
  const int K = static_cast<int>(p.w0.in);
#pragma unroll
  for (int j = 0; j < kBN * (kBK / 8) / kThreads; ++j) {
    const int c = threadIdx.x + j * kThreads;
    const int i = c >> 3, kc = c & 7;
    bool up;
    const int64_t row = weight_row<kGated>(p, n0, i, expert, up);
    const int k = kt * kBK + kc * 8;
    const bool ok = row >= 0 && k < K;
    const auto* base = static_cast<const __nv_bfloat16*>(up ? p.w1.w : p.w0.w);
    const void* src = ok ? static_cast<const void*>(base + row * K + k) : p.w0.w;
    dev::cp_async16(dst(i, kc), src, ok);
  }
}

// NVFP4 weight tiles: thread t owns 32 weights of smem row t / 2 (k half t % 2: 16 code bytes, two
// sub-block scales; a warp reads 16 whole 32-byte sectors), fetched into registers a tile ahead
// and decoded into shared memory as bf16 (exact: an E2M1 x UE4M3 product has at most 6
// significant bits) after the next products are issued.
struct Nvfp4Slice {
  uint4 q;
  uint32_t sc;
};
template <bool kGated>
__device__ __forceinline__ Nvfp4Slice fetch_nvfp4_slice(const GemmParams& p, int n0, int expert,
                                                        int kt) {
  const int i = threadIdx.x >> 1, half = threadIdx.x & 1;
  bool up;
  const int64_t row = weight_row<kGated>(p, n0, i, expert, up);
  if (row < 0) return {make_uint4(0, 0, 0, 0), 0};
  const int K = static_cast<int>(p.w0.in);
  const int k = kt * kBK + half * 32;
  const auto* codes = static_cast<const uint8_t*>(up ? p.w1.w : p.w0.w);
  const uint8_t* scales = up ? p.w1.sc : p.w0.sc;
  return {__ldg(reinterpret_cast<const uint4*>(codes + row * (K / 2) + k / 2)),
          __ldg(reinterpret_cast<const uint16_t*>(scales + row * (K / 16) + k / 16))};
}
template <class Dst>
__device__ __forceinline__ void store_nvfp4_slice(const Nvfp4Slice& s, Dst dst) {
  const int i = threadIdx.x >> 1, half = threadIdx.x & 1;
  const uint32_t words[4] = {s.q.x, s.q.y, s.q.z, s.q.w};
#pragma unroll
  for (int sb = 0; sb < 2; ++sb) {
    float v[16];
    decode_nvfp4_16(words[2 * sb], words[2 * sb + 1], dev::ue4m3_half((s.sc >> (8 * sb)) & 0xffu),
                    v);
    store8_bf16(dst(i, 4 * half + 2 * sb), v);
    store8_bf16(dst(i, 4 * half + 2 * sb + 1), v + 8);
  }
}

// Output columns n, n + 1 of activation row m < m1 from their dot products: gated (d: gate, u: up
// rows), bf16(silu(d s_gate) u s_up) to the activation; else y (f32) = (y +) d s rw, rw the row's
// routing weight. Columns past W.out are skipped.
template <bool kGated>
__device__ __forceinline__ void store_pair(const GemmParams& p, int expert, int m, int n, float rw,
                                           float d0, float d1, float u0, float u1) {
  const LinearRef& W0 = p.w0;
  const float d[2] = {d0, d1};
  if constexpr (kGated) {
    const float u[2] = {u0, u1};
    float o[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int64_t row = n + e < W0.out ? int64_t(expert) * W0.out + n + e : 0;
      o[e] = dev::silu(d[e] * dev::row_scale(W0, row)) * (u[e] * dev::row_scale(p.w1, row));
    }
    __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(p.y) + int64_t(m) * p.y_stride + n;
    if (n + 1 < W0.out && ((int64_t(m) * p.y_stride + n) & 1) == 0) {
      *reinterpret_cast<uint32_t*>(dst) = dev::pack_bf16(o[0], o[1]);
    } else {
      if (n < W0.out) dst[0] = __float2bfloat16_rn(o[0]);
      if (n + 1 < W0.out) dst[1] = __float2bfloat16_rn(o[1]);
    }
  } else {
    float* dst = static_cast<float*>(p.y) + int64_t(m) * p.y_stride + n;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if (n + e >= W0.out) continue;
      const float v = d[e] * dev::row_scale(W0, int64_t(expert) * W0.out + n + e) * rw;
      dst[e] = p.accumulate ? dst[e] + v : v;
    }
  }
}

__device__ __forceinline__ float row_weight(const GemmParams& p, int m) {
  return p.groups.row_weight != nullptr ? p.groups.row_weight[m] : 1.0f;
}

// The mma.sync kernel: two stages in padded rows (kLd), read by ldmatrix.
template <DType WT, bool kGated, int kMT>
__global__ void __launch_bounds__(kThreads) gemm_kernel(const GemmParams p) {
  constexpr int kBM = tile_rows<kMT>();  // activation rows per block
  constexpr int kStageElems = stage_elems<kMT>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* smem = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int expert, m0, m1;
  if (!block_rows<kBM>(p, expert, m0, m1)) return;
  const int n0 = blockIdx.y * (kGated ? kBN / 2 : kBN);
  const int num_k_tiles = static_cast<int>((p.w0.in + kBK - 1) / kBK);
  auto x_at = [&](int stage) {
    return [xs = smem + stage * kStageElems](int r, int kc) { return xs + r * kLd + kc * 8; };
  };
  auto w_at = [&](int stage) {
    return [ws = smem + stage * kStageElems + kBM * kLd](int r, int kc) {
      return ws + r * kLd + kc * 8;
    };
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

  copy_x_tile<kBM>(p, m0, m1, 0, x_at(0));
  if (WT == DType::kBF16) copy_w_tile_bf16<kGated>(p, n0, expert, 0, w_at(0));
  dev::cp_async_commit();
  Nvfp4Slice slice{};
  if (WT == DType::kNVFP4) store_nvfp4_slice(fetch_nvfp4_slice<kGated>(p, n0, expert, 0), w_at(0));
  dev::cp_async_wait<0>();
  __syncthreads();

  for (int kt = 0; kt < num_k_tiles; ++kt) {
    const int stage = kt & 1;
    const bool more = kt + 1 < num_k_tiles;
    if (more) {
      copy_x_tile<kBM>(p, m0, m1, kt + 1, x_at(stage ^ 1));
      if (WT == DType::kBF16) copy_w_tile_bf16<kGated>(p, n0, expert, kt + 1, w_at(stage ^ 1));
      dev::cp_async_commit();
      if (WT == DType::kNVFP4) slice = fetch_nvfp4_slice<kGated>(p, n0, expert, kt + 1);
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
    if (more && WT == DType::kNVFP4) store_nvfp4_slice(slice, w_at(stage ^ 1));
    dev::cp_async_wait<0>();
    __syncthreads();
  }

  // Epilogue. Thread (g, c) holds rows g and g+8 and columns 2c, 2c+1 of each 16x8 tile (gated:
  // n-tiles 0-1 the gate rows, 2-3 the up rows of the same columns).
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int m = m0 + wm * (kBM / 2) + mt * 16 + g + hr * 8;
      if (m >= m1) continue;
      const float rw = row_weight(p, m);
#pragma unroll
      for (int nt = 0; nt < (kGated ? 2 : 4); ++nt) {
        const float* d = acc[mt][nt] + hr * 2;
        const float* u = acc[mt][kGated ? nt + 2 : nt] + hr * 2;
        store_pair<kGated>(p, expert, m, n0 + wn * (kGated ? 16 : 32) + nt * 8 + 2 * c, rw, d[0],
                           d[1], u[0], u[1]);
      }
    }
  }
}

// The 128-row tiles on Hopper (sm_90a): the same problems, tiles, copies, NVFP4 decode and
// epilogue as gemm_kernel<..., 4>, the products on warpgroup MMAs that read both operands from
// shared memory. Two warpgroups, each 64 activation rows x the block's 128 weight rows
// (m64n128k16); tiles of 64 k in kWgStages stages, each [rows, 64] bf16 in the 128-byte-swizzle
// K-major layout (row after row, chunk kc of row r at chunk kc ^ (r % 8): 8 threads copy one
// row's 128 bytes, one 4-sector request, without bank conflicts; tiles 1024-byte aligned).
// Why (thirty-third session, H200, 8K-token prefill chunk, MoE experts): BF16 94.0 ms against
// 123.0 on mma.sync, NVFP4 126.8 against 130.2 (gemm_kernel: L1/shared memory 77% busy with
// ldmatrix and tile writes, the tensor pipe 36%). Measured and dropped: the no-swizzle layout
// (its conflict-free copy order has each 8-thread phase read 8 rows: L2 94% busy, BF16 182 ms)
// and keeping one batch of products in flight across the next tile's barrier
// (wgmma.wait_group 1, tiles one ahead: BF16 103.6 ms).
constexpr int kWgStages = 3;
constexpr int kWgTileBytes = kGemmTileRows * kBK * 2;  // 16 KB: x tile, then the weight tile
static_assert(kBN == kGemmTileRows, "the wgmma kernel's weight tile has the x tile's shape");
// + 1024: the tiles start at the first 1024-byte boundary (the swizzle's 8-row atoms).
constexpr int kWgSmem = kWgStages * 2 * kWgTileBytes + 1024;

template <DType WT, bool kGated>
__global__ void __launch_bounds__(kThreads, 2) gemm_wgmma_kernel(const GemmParams p) {
#if FLINT_WGMMA
  extern __shared__ __align__(128) unsigned char smem_dyn[];
  unsigned char* smem_raw =
      smem_dyn +
      ((1024 - (static_cast<uint32_t>(__cvta_generic_to_shared(smem_dyn)) & 1023)) & 1023);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wg = warp >> 2;
  int expert, m0, m1;
  if (!block_rows<kGemmTileRows>(p, expert, m0, m1)) return;
  const int n0 = blockIdx.y * (kGated ? kBN / 2 : kBN);
  const int num_k_tiles = static_cast<int>((p.w0.in + kBK - 1) / kBK);
  auto tile_at = [&](int stage, int which) {  // which: 0 the x tile, 1 the weight tile
    return [t = smem_raw + (stage * 2 + which) * kWgTileBytes](int r, int kc) {
      return t + r * 128 + ((kc ^ (r & 7)) << 4);
    };
  };
  auto request = [&](int kt) {  // tile kt's copies (BF16 weights too), into stage kt % kWgStages
    copy_x_tile<kGemmTileRows>(p, m0, m1, kt, tile_at(kt % kWgStages, 0));
    if (WT == DType::kBF16) copy_w_tile_bf16<kGated>(p, n0, expert, kt, tile_at(kt % kWgStages, 1));
  };

  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.0f;

  // Tiles 0 .. kWgStages - 2 in flight before the loop; in iteration kt, once tile kt has landed
  // and both warpgroups' products of tile kt - 1 are done (its stage is refilled), tile
  // kt + kWgStages - 1 is requested. One cp.async group per tile (empty past the end). NVFP4
  // weights: decoded from registers fetched an iteration earlier.
  constexpr int kAhead = kWgStages - 1;
  Nvfp4Slice slice{};
#pragma unroll
  for (int j = 0; j < kAhead; ++j) {
    if (j < num_k_tiles) {
      request(j);
      if (WT == DType::kNVFP4) {
        store_nvfp4_slice(fetch_nvfp4_slice<kGated>(p, n0, expert, j), tile_at(j, 1));
      }
    }
    dev::cp_async_commit();
  }
  if (WT == DType::kNVFP4 && kAhead < num_k_tiles) {
    slice = fetch_nvfp4_slice<kGated>(p, n0, expert, kAhead);
  }
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  for (int kt = 0; kt < num_k_tiles; ++kt) {
    const int stage = kt % kWgStages;
    dev::cp_async_wait<kWgStages - 2>();
    dev::fence_proxy_async_smem();  // this thread's copies and stores, before wgmma reads them
    __syncthreads();
    const int next = kt + kAhead;
    const bool more = next < num_k_tiles;
    if (more) request(next);
    dev::cp_async_commit();
    const uint32_t xa = sbase + uint32_t(stage * 2 * kWgTileBytes + wg * 64 * 128);
    const uint32_t wb = sbase + uint32_t(stage * 2 * kWgTileBytes + kWgTileBytes);
    dev::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {  // k16 steps: 32 bytes further inside the atoms
      dev::wgmma_m64n128k16_ss(acc, dev::wgmma_desc_sw128(xa + ks * 32),
                               dev::wgmma_desc_sw128(wb + ks * 32), true);
    }
    dev::wgmma_commit();
    if (more && WT == DType::kNVFP4) {
      store_nvfp4_slice(slice, tile_at(next % kWgStages, 1));
      if (next + 1 < num_k_tiles) slice = fetch_nvfp4_slice<kGated>(p, n0, expert, next + 1);
    }
    dev::wgmma_wait<0>();
    dev::wgmma_fence_operand(acc);
  }
  dev::cp_async_wait<0>();

  // Epilogue: warp w of warpgroup wg holds rows 64 wg + 16 (w % 4) + g and + 8, and in n8 tile j
  // the columns 8 j + 2 c, + 1 (gated: tiles 0-7 the gate, 8-15 the up rows of the same columns).
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int m = m0 + wg * 64 + (warp & 3) * 16 + g + hr * 8;
    if (m >= m1) continue;
    const float rw = row_weight(p, m);
#pragma unroll
    for (int j = 0; j < (kGated ? 8 : 16); ++j) {
      const float* d = acc + j * 4 + hr * 2;
      const float* u = acc + (kGated ? j + 8 : j) * 4 + hr * 2;
      store_pair<kGated>(p, expert, m, n0 + j * 8 + 2 * c, rw, d[0], d[1], u[0], u[1]);
    }
  }
#endif
}

template <DType WT, bool kGated>
void launch_wgmma(const GemmParams& p, int grid_x, cudaStream_t s) {
  static const bool configured = [] {
    FLINT_CUDA_CHECK(cudaFuncSetAttribute(gemm_wgmma_kernel<WT, kGated>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, kWgSmem));
    return true;
  }();
  (void)configured;
  const int n_per_block = kGated ? kBN / 2 : kBN;
  const dim3 grid(grid_x, static_cast<unsigned>(ceil_div(p.w0.out, n_per_block)));
  gemm_wgmma_kernel<WT, kGated><<<grid, kThreads, kWgSmem, s>>>(p);
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

std::atomic<bool> g_use_wgmma{true};

template <DType WT, bool kGated>
void launch_tiles(const GemmParams& p, int grid_x, cudaStream_t s) {
  if (p.groups.tiles != nullptr && p.groups.tile_rows == kGemmSmallTileRows) {
    launch_kernel<WT, kGated, 1>(p, grid_x, s);
  } else if (device_is_sm90() && g_use_wgmma.load(std::memory_order_relaxed)) {
    launch_wgmma<WT, kGated>(p, grid_x, s);
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

void gemm_use_wgmma(bool on) { g_use_wgmma.store(on, std::memory_order_relaxed); }

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
