// shardtrain/kernels/cuda/flash_attention.cu
// Our tiled ("flash") attention (see flash_attention.cuh), on CUDA cores in fp32.
// Layout of the work: one warp per row, kRows rows (warps) per block; the keys
// (forward, dQ) or the queries (dK/dV) go by in tiles of kTile = 32, one per lane,
// staged as fp32 in shared memory (rows padded to kMaxD + 1 floats so that lane j
// reading row j is free of bank conflicts). Per tile, lane j computes the one score
// of its key (or query) with its warp's row; the warp then combines the 32 scores
// with shuffles in a fixed order. hd <= kMaxD = 128: each lane keeps
// kMaxD / 32 = 4 accumulators, the channels lane, lane + 32, lane + 64, lane + 96.
//   forward   grid (ceil(T / kRows), H, B): block = kRows query rows; key tiles
//             [0, flash::key_tiles(last row + 1)) (causal: the tiles above the
//             diagonal are never loaded); online softmax (flash::rescale / weight);
//             writes out and lse.
//   backward  d_row: D_t = rowsum(dO_t * O_t), one warp per (b, h, t), into the
//             workspace;
//             dq: as the forward (same grid and key tiles); per key
//             P = exp(s - lse_t), dP = dO_t . v_u, dS = P (dP - D_t); dQ_t += dS k_u;
//             writes dQ * scale;
//             dkv: grid (ceil(T / kRows), H, B): block = kRows key rows; query tiles
//             [flash::first_query_tile(first key), ceil(T / kTile)); dV_u += P dO_t,
//             dK_u += dS q_t; writes dK * scale and dV.
// No atomics; every sum has one order, so two runs are bitwise identical.
// Not tuned: no tensor cores and no cp.async; it is the reference of the tiled
// algorithm on the device and the fp32 path (share/doc/gpu.md).
#include "kernels/cuda/flash_attention.cuh"

#include <cmath>
#include <string>

#include "core/error.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/flash_tile.hpp"

namespace shardtrain::cuda {
namespace {

using I = std::int64_t;
constexpr int kWarp = 32;
constexpr int kRows = 8;     // warps (rows) per block
constexpr int kTile = 32;    // keys (or queries) per tile: one per lane
constexpr int kMaxD = static_cast<int>(kFlashMaxHeadDim);
constexpr int kPerLane = kMaxD / kWarp;
constexpr int kPad = kMaxD + 1;  // shared row stride of lane-indexed tiles
constexpr unsigned kFull = 0xffffffffu;
static_assert(kTile == kWarp, "one key (query) of a tile per lane");

__device__ inline float warp_max(float x) {
  for (int o = kWarp / 2; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(kFull, x, o));
  return x;
}
__device__ inline float warp_sum(float x) {
  for (int o = kWarp / 2; o > 0; o /= 2) x += __shfl_xor_sync(kFull, x, o);
  return x;
}

struct Dims {
  I b, t, c, h, hd;
  bool causal;
};

Dims check_shape(const char* what, const AttentionShape& s) {
  SHARDTRAIN_CHECK(s.batch >= 0 && s.seq_len >= 0 && s.channels > 0 && s.n_head > 0,
                   std::string(what) + ": negative size, channels or n_head <= 0");
  SHARDTRAIN_CHECK(s.channels % s.n_head == 0, std::string(what) + ": n_head " + std::to_string(s.n_head) +
                                                   " does not divide channels " + std::to_string(s.channels));
  const I hd = s.channels / s.n_head;
  SHARDTRAIN_CHECK(hd <= kFlashMaxHeadDim, std::string(what) + ": head width " + std::to_string(hd) +
                                               " is above the flash kernels' " +
                                               std::to_string(kFlashMaxHeadDim));
  SHARDTRAIN_CHECK(s.seq_len / kRows < INT32_MAX && s.n_head <= 65535 && s.batch <= 65535,
                   std::string(what) + ": grid too large");
  return {s.batch, s.seq_len, s.channels, s.n_head, hd, s.causal};
}

dim3 row_grid(const Dims& d) {
  return dim3(static_cast<unsigned>(flash::tile_count(d.t, kRows)), static_cast<unsigned>(d.h),
              static_cast<unsigned>(d.b));
}

// Lane j's dot product of a lane-indexed shared row with a broadcast one.
__device__ inline float dot_rows(const float* lane_row, const float* warp_row, I hd) {
  float s = 0.0f;
  for (I d = 0; d < hd; ++d) s += warp_row[d] * lane_row[d];
  return s;
}

template <class T>
__global__ void __launch_bounds__(kRows* kWarp)
    flash_forward_kernel(const T* qkv, T* out, float* lse, I nt, I nc, I nh, I hd, float scale, bool causal) {
  __shared__ float ks[kTile][kPad];
  __shared__ float vs[kTile][kMaxD];
  __shared__ float qs[kRows][kMaxD];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const I b = blockIdx.z, h = blockIdx.y;
  const I q0 = static_cast<I>(blockIdx.x) * kRows;
  const I q1 = q0 + kRows < nt ? q0 + kRows : nt;
  const I t = q0 + warp;
  const bool row = t < nt;
  const I stride = 3 * nc;
  const T* base = qkv + b * nt * stride + h * hd;  // q of (b, 0, head h)
  if (row)
    for (I d = lane; d < hd; d += kWarp) qs[warp][d] = load_f32(base[t * stride + d]);
  flash::RowState st = flash::row_start();
  float acc[kPerLane];
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0.0f;
  const I tiles = flash::key_tiles(q1, nt, causal, kTile);
  for (I kt = 0; kt < tiles; ++kt) {
    const I k0 = kt * kTile;
    __syncthreads();  // the previous tile is consumed (and qs written)
    for (I e = threadIdx.x; e < kTile * hd; e += blockDim.x) {
      const I j = e / hd, d = e % hd, u = k0 + j;
      ks[j][d] = u < nt ? load_f32(base[u * stride + nc + d]) : 0.0f;
      vs[j][d] = u < nt ? load_f32(base[u * stride + 2 * nc + d]) : 0.0f;
    }
    __syncthreads();
    if (row) {  // the whole warp takes this branch or none of it
      const I u = k0 + lane;
      const bool m = u >= nt || flash::masked(t, u, nt, causal);
      const float s = scale * dot_rows(ks[lane], qs[warp], hd);
      const float alpha = flash::rescale(st, warp_max(m ? flash::neg_inf() : s));
      const float w = flash::weight(st, s, m);
      st.l += warp_sum(w);
      for (int i = 0; i < kPerLane; ++i) acc[i] *= alpha;
      for (int j = 0; j < kTile; ++j) {
        const float wj = __shfl_sync(kFull, w, j);
        for (int i = 0; i < kPerLane; ++i) {
          const I d = lane + i * kWarp;
          if (d < hd) acc[i] += wj * vs[j][d];
        }
      }
    }
  }
  if (!row) return;
  const float f = flash::out_factor(st);
  for (int i = 0; i < kPerLane; ++i) {
    const I d = lane + i * kWarp;
    if (d < hd) out[(b * nt + t) * nc + h * hd + d] = store_as<T>(acc[i] * f);
  }
  if (lane == 0) lse[(b * nh + h) * nt + t] = flash::logsumexp(st);
}

// D_t = rowsum(dO_t * O_t) for every (b, h, t): one warp per row.
template <class T>
__global__ void flash_d_row_kernel(const T* out, const T* dout, float* d_row, I nb, I nt, I nc, I nh, I hd) {
  const I r = (static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;  // (b, h, t)
  const int lane = threadIdx.x % kWarp;
  if (r >= nb * nh * nt) return;  // whole warps leave together
  const I t = r % nt, h = (r / nt) % nh, b = r / (nt * nh);
  const I off = (b * nt + t) * nc + h * hd;
  float a = 0.0f;
  for (I d = lane; d < hd; d += kWarp) a = flash::d_row_add(a, load_f32(dout[off + d]), load_f32(out[off + d]));
  a = warp_sum(a);
  if (lane == 0) d_row[r] = a;
}

template <class T>
__global__ void __launch_bounds__(kRows* kWarp)
    flash_dq_kernel(const T* qkv, const T* dout, const float* lse, const float* d_row, T* dqkv, I nt, I nc, I nh,
                    I hd, float scale, bool causal) {
  __shared__ float ks[kTile][kPad];
  __shared__ float vs[kTile][kPad];
  __shared__ float qs[kRows][kMaxD];
  __shared__ float dos[kRows][kMaxD];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const I b = blockIdx.z, h = blockIdx.y;
  const I q0 = static_cast<I>(blockIdx.x) * kRows;
  const I q1 = q0 + kRows < nt ? q0 + kRows : nt;
  const I t = q0 + warp;
  const bool row = t < nt;
  const I stride = 3 * nc;
  const T* base = qkv + b * nt * stride + h * hd;
  float lse_t = 0.0f, d_t = 0.0f;
  if (row) {
    for (I d = lane; d < hd; d += kWarp) {
      qs[warp][d] = load_f32(base[t * stride + d]);
      dos[warp][d] = load_f32(dout[(b * nt + t) * nc + h * hd + d]);
    }
    lse_t = lse[(b * nh + h) * nt + t];
    d_t = d_row[(b * nh + h) * nt + t];
  }
  float acc[kPerLane];
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0.0f;
  const I tiles = flash::key_tiles(q1, nt, causal, kTile);
  for (I kt = 0; kt < tiles; ++kt) {
    const I k0 = kt * kTile;
    __syncthreads();
    for (I e = threadIdx.x; e < kTile * hd; e += blockDim.x) {
      const I j = e / hd, d = e % hd, u = k0 + j;
      ks[j][d] = u < nt ? load_f32(base[u * stride + nc + d]) : 0.0f;
      vs[j][d] = u < nt ? load_f32(base[u * stride + 2 * nc + d]) : 0.0f;
    }
    __syncthreads();
    if (row) {
      const I u = k0 + lane;
      const bool m = u >= nt || flash::masked(t, u, nt, causal);
      const float p = flash::prob(scale * dot_rows(ks[lane], qs[warp], hd), lse_t, m);
      const float ds = flash::score_grad(p, dot_rows(vs[lane], dos[warp], hd), d_t);
      for (int j = 0; j < kTile; ++j) {
        const float dsj = __shfl_sync(kFull, ds, j);
        for (int i = 0; i < kPerLane; ++i) {
          const I d = lane + i * kWarp;
          if (d < hd) acc[i] += dsj * ks[j][d];
        }
      }
    }
  }
  if (!row) return;
  for (int i = 0; i < kPerLane; ++i) {
    const I d = lane + i * kWarp;
    if (d < hd) dqkv[(b * nt + t) * stride + h * hd + d] = store_as<T>(acc[i] * scale);
  }
}

template <class T>
__global__ void __launch_bounds__(kRows* kWarp)
    flash_dkv_kernel(const T* qkv, const T* dout, const float* lse, const float* d_row, T* dqkv, I nt, I nc, I nh,
                     I hd, float scale, bool causal) {
  __shared__ float qs[kTile][kPad];
  __shared__ float dos[kTile][kPad];
  __shared__ float ks[kRows][kMaxD];
  __shared__ float vs[kRows][kMaxD];
  __shared__ float lse_s[kTile];
  __shared__ float d_s[kTile];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const I b = blockIdx.z, h = blockIdx.y;
  const I k0 = static_cast<I>(blockIdx.x) * kRows;
  const I u = k0 + warp;
  const bool row = u < nt;
  const I stride = 3 * nc;
  const T* base = qkv + b * nt * stride + h * hd;
  const T* dbase = dout + b * nt * nc + h * hd;
  const float* lse_bh = lse + (b * nh + h) * nt;
  const float* d_bh = d_row + (b * nh + h) * nt;
  if (row)
    for (I d = lane; d < hd; d += kWarp) {
      ks[warp][d] = load_f32(base[u * stride + nc + d]);
      vs[warp][d] = load_f32(base[u * stride + 2 * nc + d]);
    }
  float dk[kPerLane], dv[kPerLane];
  for (int i = 0; i < kPerLane; ++i) dk[i] = dv[i] = 0.0f;
  const I tiles = flash::tile_count(nt, kTile);
  for (I qt = flash::first_query_tile(k0, causal, kTile); qt < tiles; ++qt) {
    const I t0 = qt * kTile;
    __syncthreads();
    for (I e = threadIdx.x; e < kTile * hd; e += blockDim.x) {
      const I j = e / hd, d = e % hd, t = t0 + j;
      qs[j][d] = t < nt ? load_f32(base[t * stride + d]) : 0.0f;
      dos[j][d] = t < nt ? load_f32(dbase[t * nc + d]) : 0.0f;
    }
    if (threadIdx.x < kTile) {
      const I t = t0 + threadIdx.x;
      lse_s[threadIdx.x] = t < nt ? lse_bh[t] : 0.0f;
      d_s[threadIdx.x] = t < nt ? d_bh[t] : 0.0f;
    }
    __syncthreads();
    if (row) {
      const I t = t0 + lane;
      const bool m = t >= nt || flash::masked(t, u, nt, causal);
      const float p = flash::prob(scale * dot_rows(qs[lane], ks[warp], hd), lse_s[lane], m);
      const float ds = flash::score_grad(p, dot_rows(dos[lane], vs[warp], hd), d_s[lane]);
      for (int j = 0; j < kTile; ++j) {
        const float pj = __shfl_sync(kFull, p, j);
        const float dsj = __shfl_sync(kFull, ds, j);
        for (int i = 0; i < kPerLane; ++i) {
          const I d = lane + i * kWarp;
          if (d < hd) {
            dv[i] += pj * dos[j][d];
            dk[i] += dsj * qs[j][d];
          }
        }
      }
    }
  }
  if (!row) return;
  for (int i = 0; i < kPerLane; ++i) {
    const I d = lane + i * kWarp;
    if (d < hd) {
      dqkv[(b * nt + u) * stride + nc + h * hd + d] = store_as<T>(dk[i] * scale);
      dqkv[(b * nt + u) * stride + 2 * nc + h * hd + d] = store_as<T>(dv[i]);
    }
  }
}

}  // namespace

std::int64_t flash_attention_lse_elems(const AttentionShape& s) { return s.batch * s.n_head * s.seq_len; }

std::size_t flash_attention_workspace_bytes(const AttentionShape& s) {
  const std::size_t bytes = static_cast<std::size_t>(flash_attention_lse_elems(s)) * sizeof(float);
  return (bytes + 255) / 256 * 256;
}

template <class T>
void flash_attention_forward(cudaStream_t stream, const AttentionShape& s, const T* qkv, T* out, float* lse) {
  const Dims d = check_shape("cuda::flash_attention_forward", s);
  if (d.b == 0 || d.t == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.hd));
  flash_forward_kernel<T><<<row_grid(d), kRows * kWarp, 0, stream>>>(qkv, out, lse, d.t, d.c, d.h, d.hd, scale,
                                                                      d.causal);
  check_launch("cuda::flash_attention_forward");
}

template <class T>
void flash_attention_backward(cudaStream_t stream, const AttentionShape& s, const T* qkv, const T* out,
                              const T* dout, const float* lse, void* workspace, std::size_t workspace_bytes,
                              T* dqkv) {
  const Dims d = check_shape("cuda::flash_attention_backward", s);
  const std::size_t need = flash_attention_workspace_bytes(s);
  SHARDTRAIN_CHECK(workspace_bytes >= need && (need == 0 || workspace != nullptr),
                   "cuda::flash_attention_backward: workspace of " + std::to_string(workspace_bytes) +
                       " bytes, needs " + std::to_string(need));
  if (d.b == 0 || d.t == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.hd));
  auto* d_row = static_cast<float*>(workspace);
  const I rows = d.b * d.h * d.t;
  constexpr unsigned kThreads = 256;
  flash_d_row_kernel<T><<<blocks_for(rows * kWarp, kThreads), kThreads, 0, stream>>>(out, dout, d_row, d.b, d.t,
                                                                                      d.c, d.h, d.hd);
  check_launch("cuda::flash_attention_backward d_row");
  flash_dq_kernel<T><<<row_grid(d), kRows * kWarp, 0, stream>>>(qkv, dout, lse, d_row, dqkv, d.t, d.c, d.h, d.hd,
                                                                 scale, d.causal);
  check_launch("cuda::flash_attention_backward dq");
  flash_dkv_kernel<T><<<row_grid(d), kRows * kWarp, 0, stream>>>(qkv, dout, lse, d_row, dqkv, d.t, d.c, d.h, d.hd,
                                                                  scale, d.causal);
  check_launch("cuda::flash_attention_backward dkv");
}

#define SHARDTRAIN_CUDA_DEFINE_FLASH_ATTENTION(T)                                                              \
  template void flash_attention_forward<T>(cudaStream_t, const AttentionShape&, const T*, T*, float*);         \
  template void flash_attention_backward<T>(cudaStream_t, const AttentionShape&, const T*, const T*, const T*, \
                                            const float*, void*, std::size_t, T*);
SHARDTRAIN_CUDA_DEFINE_FLASH_ATTENTION(float)
SHARDTRAIN_CUDA_DEFINE_FLASH_ATTENTION(__half)
SHARDTRAIN_CUDA_DEFINE_FLASH_ATTENTION(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_DEFINE_FLASH_ATTENTION

}  // namespace shardtrain::cuda
