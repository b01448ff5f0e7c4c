// CUDA LayerNorm (see layernorm.cuh for the contract).
// Invariants: one warp per row for the row statistics and dx (lanes stride the
// channels, or 16-byte packs of them where c is a whole number of packs and the
// pointers are aligned; the 32 partial sums are combined by a fixed xor-shuffle
// tree, so results do not depend on scheduling); dw/db partial sums per (row chunk,
// channel) land in a workspace and are summed over chunks in chunk order. Every
// output element is rounded to T once.
#include "kernels/cuda/layernorm.cuh"

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <type_traits>
#include <string>

#include "core/error.hpp"

namespace shardtrain::cuda {
namespace {

constexpr unsigned kWarpsPerBlock = 4;
constexpr unsigned kParamThreads = 256;
constexpr std::int64_t kRowChunk = 256;  // rows per partial sum of dw/db

__device__ inline float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;  // every lane holds the same total (same tree on every lane)
}

template <class T>
__global__ void layernorm_forward_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                         const T* __restrict__ b, T* __restrict__ y,
                                         T* __restrict__ mean, T* __restrict__ rstd, float eps,
                                         std::int64_t n, std::int64_t c) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (row >= n) return;  // whole warp leaves together
  const T* xr = x + row * c;
  float s = 0.0f;
  for (std::int64_t j = lane; j < c; j += 32) s += load_f32(xr[j]);
  const float mu = warp_sum(s) / static_cast<float>(c);
  float sq = 0.0f;
  for (std::int64_t j = lane; j < c; j += 32) {
    const float d = load_f32(xr[j]) - mu;
    sq += d * d;
  }
  const float var = warp_sum(sq) / static_cast<float>(c);
  const float rs = 1.0f / sqrtf(var + eps);
  T* yr = y + row * c;
  for (std::int64_t j = lane; j < c; j += 32)
    yr[j] = store_as<T>((load_f32(xr[j]) - mu) * rs * load_f32(w[j]) + load_f32(b[j]));
  if (lane == 0) {
    mean[row] = store_as<T>(mu);
    rstd[row] = store_as<T>(rs);
  }
}

// dx += rs * (g - mean(g) - xhat * mean(g * xhat)),  g = dy * w,  xhat = (x - mu) * rs
template <class T>
__global__ void layernorm_backward_input_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                const T* __restrict__ mean,
                                                const T* __restrict__ rstd,
                                                const T* __restrict__ dy, T* __restrict__ dx,
                                                std::int64_t n, std::int64_t c) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (row >= n) return;
  const T* xr = x + row * c;
  const T* dyr = dy + row * c;
  const float mu = load_f32(mean[row]), rs = load_f32(rstd[row]);
  float sg = 0.0f, sgx = 0.0f;
  for (std::int64_t j = lane; j < c; j += 32) {
    const float g = load_f32(dyr[j]) * load_f32(w[j]);
    sg += g;
    sgx += g * (load_f32(xr[j]) - mu);
  }
  const float mean_g = warp_sum(sg) / static_cast<float>(c);
  const float mean_gx = rs * warp_sum(sgx) / static_cast<float>(c);
  T* dxr = dx + row * c;
  for (std::int64_t j = lane; j < c; j += 32) {
    const float g = load_f32(dyr[j]) * load_f32(w[j]);
    const float xhat = (load_f32(xr[j]) - mu) * rs;
    dxr[j] = store_as<T>(load_f32(dxr[j]) + rs * (g - mean_g - xhat * mean_gx));
  }
}

// The same two kernels over 16-byte packs (c a whole number of packs, every
// pointer aligned): lane l takes packs l, l + 32, ... of the row; the row sums are
// combined by the same xor-shuffle tree.
template <class T>
__global__ void layernorm_forward_pack_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                              const T* __restrict__ b, T* __restrict__ y,
                                              T* __restrict__ mean, T* __restrict__ rstd, float eps,
                                              std::int64_t n, std::int64_t c) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (row >= n) return;  // whole warp leaves together
  const std::int64_t packs = c / kPack<T>;
  const Pack<T>* xr = reinterpret_cast<const Pack<T>*>(x + row * c);
  const Pack<T>* wp = reinterpret_cast<const Pack<T>*>(w);
  const Pack<T>* bp = reinterpret_cast<const Pack<T>*>(b);
  float s = 0.0f;
  for (std::int64_t p = lane; p < packs; p += 32) {
    const Pack<T> a = xr[p];
#pragma unroll
    for (int k = 0; k < kPack<T>; ++k) s += load_f32(a.v[k]);
  }
  const float mu = warp_sum(s) / static_cast<float>(c);
  float sq = 0.0f;
  for (std::int64_t p = lane; p < packs; p += 32) {
    const Pack<T> a = xr[p];
#pragma unroll
    for (int k = 0; k < kPack<T>; ++k) {
      const float d = load_f32(a.v[k]) - mu;
      sq += d * d;
    }
  }
  const float var = warp_sum(sq) / static_cast<float>(c);
  const float rs = 1.0f / sqrtf(var + eps);
  Pack<T>* yr = reinterpret_cast<Pack<T>*>(y + row * c);
  for (std::int64_t p = lane; p < packs; p += 32) {
    const Pack<T> a = xr[p], wv = wp[p], bv = bp[p];
    Pack<T> r;
#pragma unroll
    for (int k = 0; k < kPack<T>; ++k)
      r.v[k] = store_as<T>((load_f32(a.v[k]) - mu) * rs * load_f32(wv.v[k]) + load_f32(bv.v[k]));
    yr[p] = r;
  }
  if (lane == 0) {
    mean[row] = store_as<T>(mu);
    rstd[row] = store_as<T>(rs);
  }
}

template <class T>
__global__ void layernorm_backward_input_pack_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                     const T* __restrict__ mean,
                                                     const T* __restrict__ rstd,
                                                     const T* __restrict__ dy, T* __restrict__ dx,
                                                     std::int64_t n, std::int64_t c) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (row >= n) return;
  const std::int64_t packs = c / kPack<T>;
  const Pack<T>* xr = reinterpret_cast<const Pack<T>*>(x + row * c);
  const Pack<T>* dyr = reinterpret_cast<const Pack<T>*>(dy + row * c);
  const Pack<T>* wp = reinterpret_cast<const Pack<T>*>(w);
  const float mu = load_f32(mean[row]), rs = load_f32(rstd[row]);
  float sg = 0.0f, sgx = 0.0f;
  for (std::int64_t p = lane; p < packs; p += 32) {
    const Pack<T> a = xr[p], g = dyr[p], wv = wp[p];
#pragma unroll
    for (int k = 0; k < kPack<T>; ++k) {
      const float gk = load_f32(g.v[k]) * load_f32(wv.v[k]);
      sg += gk;
      sgx += gk * (load_f32(a.v[k]) - mu);
    }
  }
  const float mean_g = warp_sum(sg) / static_cast<float>(c);
  const float mean_gx = rs * warp_sum(sgx) / static_cast<float>(c);
  Pack<T>* dxr = reinterpret_cast<Pack<T>*>(dx + row * c);
  for (std::int64_t p = lane; p < packs; p += 32) {
    const Pack<T> a = xr[p], g = dyr[p], wv = wp[p], d0 = dxr[p];
    Pack<T> r;
#pragma unroll
    for (int k = 0; k < kPack<T>; ++k) {
      const float gk = load_f32(g.v[k]) * load_f32(wv.v[k]);
      const float xhat = (load_f32(a.v[k]) - mu) * rs;
      r.v[k] = store_as<T>(load_f32(d0.v[k]) + rs * (gk - mean_g - xhat * mean_gx));
    }
    dxr[p] = r;
  }
}

// Rows of c values start 16-byte aligned when every base is and c is a whole number of packs.
template <class T>
bool rows_packed(std::int64_t c, std::initializer_list<const void*> pointers) {
  if (c % kPack<T> != 0) return false;
  for (const void* p : pointers)
    if (!aligned16(p)) return false;
  return true;
}

// Pass 1, grid (ceil(c / kParamThreads), chunks): thread (j, chunk) sums
// dy * xhat and dy over the chunk's rows in order.
template <class T>
__global__ void layernorm_backward_params_partial_kernel(
    const T* __restrict__ x, const T* __restrict__ mean, const T* __restrict__ rstd,
    const T* __restrict__ dy, float* __restrict__ part_w, float* __restrict__ part_b,
    std::int64_t n, std::int64_t c) {
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t chunk = blockIdx.y;
  if (j >= c) return;
  const std::int64_t r0 = chunk * kRowChunk;
  const std::int64_t r1 = (n - r0) < kRowChunk ? n : r0 + kRowChunk;
  float aw = 0.0f, ab = 0.0f;
#pragma unroll 8
  for (std::int64_t i = r0; i < r1; ++i) {
    const float d = load_f32(dy[i * c + j]);
    aw += d * ((load_f32(x[i * c + j]) - load_f32(mean[i])) * load_f32(rstd[i]));
    ab += d;
  }
  part_w[chunk * c + j] = aw;
  part_b[chunk * c + j] = ab;
}

// Pass 2: one thread per channel sums the chunks in order and adds to dw / db.
template <class T>
__global__ void layernorm_backward_params_final_kernel(const float* __restrict__ part_w,
                                                       const float* __restrict__ part_b,
                                                       T* __restrict__ dw, T* __restrict__ db,
                                                       std::int64_t chunks, std::int64_t c) {
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= c) return;
  float aw = 0.0f, ab = 0.0f;
  for (std::int64_t k = 0; k < chunks; ++k) {
    aw += part_w[k * c + j];
    ab += part_b[k * c + j];
  }
  dw[j] = store_as<T>(load_f32(dw[j]) + aw);
  db[j] = store_as<T>(load_f32(db[j]) + ab);
}

// The candidate passes (train.device_kernels = "candidate"; not yet run on a
// device): the same partial layout, more threads. Blocks of 32 channels x 8 row
// groups: in pass 1 thread (j, g) sums the chunk's rows g, g + 8, ... in order,
// and the 8 group sums are added in group order (shared memory); in pass 2 thread
// (j, g) sums chunks g, g + 8, ... in order, and the 8 likewise. 1536 blocks of 256
// threads for GPT-2's (16384, 768) instead of 192, 32 rows a thread instead of 256.
constexpr unsigned kGroups = 8;

template <class T>
__global__ void layernorm_params_partial_grouped_kernel(const T* __restrict__ x, const T* __restrict__ mean,
                                                        const T* __restrict__ rstd, const T* __restrict__ dy,
                                                        float* __restrict__ part_w, float* __restrict__ part_b,
                                                        std::int64_t n, std::int64_t c) {
  __shared__ float sw[kGroups][32], sb[kGroups][32];
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const std::int64_t chunk = blockIdx.y;
  const std::int64_t r0 = chunk * kRowChunk;
  const std::int64_t r1 = (n - r0) < kRowChunk ? n : r0 + kRowChunk;
  float aw = 0.0f, ab = 0.0f;
  if (j < c) {
#pragma unroll 4
    for (std::int64_t i = r0 + threadIdx.y; i < r1; i += kGroups) {
      const float d = load_f32(dy[i * c + j]);
      aw += d * ((load_f32(x[i * c + j]) - load_f32(mean[i])) * load_f32(rstd[i]));
      ab += d;
    }
  }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && j < c) {
    float tw = 0.0f, tb = 0.0f;
    for (unsigned g = 0; g < kGroups; ++g) {
      tw += sw[g][threadIdx.x];
      tb += sb[g][threadIdx.x];
    }
    part_w[chunk * c + j] = tw;
    part_b[chunk * c + j] = tb;
  }
}

template <class T>
__global__ void layernorm_params_final_grouped_kernel(const float* __restrict__ part_w,
                                                      const float* __restrict__ part_b, T* __restrict__ dw,
                                                      T* __restrict__ db, std::int64_t chunks, std::int64_t c) {
  __shared__ float sw[kGroups][32], sb[kGroups][32];
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float aw = 0.0f, ab = 0.0f;
  if (j < c) {
    for (std::int64_t k = threadIdx.y; k < chunks; k += kGroups) {
      aw += part_w[k * c + j];
      ab += part_b[k * c + j];
    }
  }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && j < c) {
    float tw = 0.0f, tb = 0.0f;
    for (unsigned g = 0; g < kGroups; ++g) {
      tw += sw[g][threadIdx.x];
      tb += sb[g][threadIdx.x];
    }
    dw[j] = store_as<T>(load_f32(dw[j]) + tw);
    db[j] = store_as<T>(load_f32(db[j]) + tb);
  }
}

std::int64_t row_chunks(std::int64_t n) { return (n + kRowChunk - 1) / kRowChunk; }

// The candidate row kernels (train.device_kernels = "candidate"; not yet run on a
// device), for packed rows of at most kMaxRowValues values (1..4 packs a lane in
// 16-bit types, 1..8 in fp32; GPT-2's 768 is 3 or 6):
// - forward: the row is read from memory once and kept in registers for its three
//   uses (sum, squared deviations, output); each lane visits the same packs in the
//   same order as layernorm_forward_pack_kernel, so its sums and outputs are the
//   same expressions;
// - backward: dx as layernorm_backward_input_pack_kernel computes it, and in the
//   same pass each lane adds dy * xhat and dy of its channels into registers, so x
//   and dy are read once for dx, dw and db (the default reads them again in the
//   dw/db pass). Block b takes rows [b kFusedRows, (b + 1) kFusedRows); warp w
//   its rows w, w + kFusedWarps, ... in order; the block's kFusedWarps warp sums
//   are added in warp order (shared memory) into the chunk's partial, and the
//   grouped final pass sums the chunks. Deterministic; dw/db in another order
//   than the default passes' (not bitwise theirs).
constexpr int kMaxRowValues = 1024;
template <class T>
inline constexpr int kMaxRowPacks = kMaxRowValues / (32 * kPack<T>);  // per lane
constexpr unsigned kFusedWarps = 4;
constexpr std::int64_t kFusedRows = 32;  // rows per partial sum of the fused backward

template <class T, int K>
__global__ void layernorm_forward_rows_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                              const T* __restrict__ b, T* __restrict__ y,
                                              T* __restrict__ mean, T* __restrict__ rstd, float eps,
                                              std::int64_t n, std::int64_t c) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (row >= n) return;  // whole warp leaves together
  const std::int64_t packs = c / kPack<T>;
  const Pack<T>* xr = reinterpret_cast<const Pack<T>*>(x + row * c);
  Pack<T> a[K];
#pragma unroll
  for (int i = 0; i < K; ++i)
    if (lane + 32 * i < packs) a[i] = xr[lane + 32 * i];
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < K; ++i)
    if (lane + 32 * i < packs) {
#pragma unroll
      for (int k = 0; k < kPack<T>; ++k) s += load_f32(a[i].v[k]);
    }
  const float mu = warp_sum(s) / static_cast<float>(c);
  float sq = 0.0f;
#pragma unroll
  for (int i = 0; i < K; ++i)
    if (lane + 32 * i < packs) {
#pragma unroll
      for (int k = 0; k < kPack<T>; ++k) {
        const float d = load_f32(a[i].v[k]) - mu;
        sq += d * d;
      }
    }
  const float var = warp_sum(sq) / static_cast<float>(c);
  const float rs = 1.0f / sqrtf(var + eps);
  const Pack<T>* wp = reinterpret_cast<const Pack<T>*>(w);
  const Pack<T>* bp = reinterpret_cast<const Pack<T>*>(b);
  Pack<T>* yr = reinterpret_cast<Pack<T>*>(y + row * c);
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const std::int64_t p = lane + 32 * i;
    if (p < packs) {
      const Pack<T> wv = wp[p], bv = bp[p];
      Pack<T> r;
#pragma unroll
      for (int k = 0; k < kPack<T>; ++k)
        r.v[k] = store_as<T>((load_f32(a[i].v[k]) - mu) * rs * load_f32(wv.v[k]) + load_f32(bv.v[k]));
      yr[p] = r;
    }
  }
  if (lane == 0) {
    mean[row] = store_as<T>(mu);
    rstd[row] = store_as<T>(rs);
  }
}

template <class T, int K>
__global__ void __launch_bounds__(kFusedWarps * 32)
    layernorm_backward_fused_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                    const T* __restrict__ mean, const T* __restrict__ rstd,
                                    const T* __restrict__ dy, T* __restrict__ dx, float* __restrict__ part_w,
                                    float* __restrict__ part_b, std::int64_t n, std::int64_t c) {
  constexpr int kRowValues = K * 32 * kPack<T>;
  __shared__ float sw[kFusedWarps][kRowValues], sb[kFusedWarps][kRowValues];
  const unsigned warp = threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const std::int64_t packs = c / kPack<T>;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.x) * kFusedRows;
  const std::int64_t r1 = (n - r0) < kFusedRows ? n : r0 + kFusedRows;
  const Pack<T>* wp = reinterpret_cast<const Pack<T>*>(w);
  Pack<T> wv[K];
  float aw[K][kPack<T>], ab[K][kPack<T>];
#pragma unroll
  for (int i = 0; i < K; ++i) {
    if (lane + 32 * i < packs) wv[i] = wp[lane + 32 * i];
#pragma unroll
    for (int k = 0; k < kPack<T>; ++k) aw[i][k] = ab[i][k] = 0.0f;
  }
  for (std::int64_t row = r0 + warp; row < r1; row += kFusedWarps) {  // no early return: every warp reaches the barrier
    const Pack<T>* xr = reinterpret_cast<const Pack<T>*>(x + row * c);
    const Pack<T>* dyr = reinterpret_cast<const Pack<T>*>(dy + row * c);
    Pack<T>* dxr = reinterpret_cast<Pack<T>*>(dx + row * c);
    Pack<T> a[K], g[K], d0[K];
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (lane + 32 * i < packs) {
        a[i] = xr[lane + 32 * i];
        g[i] = dyr[lane + 32 * i];
        d0[i] = dxr[lane + 32 * i];
      }
    const float mu = load_f32(mean[row]), rs = load_f32(rstd[row]);
    float sg = 0.0f, sgx = 0.0f;
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (lane + 32 * i < packs) {
#pragma unroll
        for (int k = 0; k < kPack<T>; ++k) {
          const float gk = load_f32(g[i].v[k]) * load_f32(wv[i].v[k]);
          sg += gk;
          sgx += gk * (load_f32(a[i].v[k]) - mu);
        }
      }
    const float mean_g = warp_sum(sg) / static_cast<float>(c);
    const float mean_gx = rs * warp_sum(sgx) / static_cast<float>(c);
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (lane + 32 * i < packs) {
        Pack<T> r;
#pragma unroll
        for (int k = 0; k < kPack<T>; ++k) {
          const float dyk = load_f32(g[i].v[k]);
          const float gk = dyk * load_f32(wv[i].v[k]);
          const float xhat = (load_f32(a[i].v[k]) - mu) * rs;
          r.v[k] = store_as<T>(load_f32(d0[i].v[k]) + rs * (gk - mean_g - xhat * mean_gx));
          aw[i][k] += dyk * xhat;
          ab[i][k] += dyk;
        }
        dxr[lane + 32 * i] = r;
      }
  }
#pragma unroll
  for (int i = 0; i < K; ++i)
    if (lane + 32 * i < packs) {
#pragma unroll
      for (int k = 0; k < kPack<T>; ++k) {
        sw[warp][(lane + 32 * i) * kPack<T> + k] = aw[i][k];
        sb[warp][(lane + 32 * i) * kPack<T> + k] = ab[i][k];
      }
    }
  __syncthreads();
  for (std::int64_t j = threadIdx.x; j < c; j += kFusedWarps * 32) {
    float tw = 0.0f, tb = 0.0f;
    for (unsigned v = 0; v < kFusedWarps; ++v) {  // warp order
      tw += sw[v][j];
      tb += sb[v][j];
    }
    part_w[blockIdx.x * c + j] = tw;
    part_b[blockIdx.x * c + j] = tb;
  }
}

// Packs per lane of a packed row of c values, or 0 when the candidate row kernels
// do not take it (c not a whole number of packs, pointers unaligned, or more than
// kMaxRowPacks packs a lane).
template <class T>
int row_packs_per_lane(std::int64_t c, std::initializer_list<const void*> pointers) {
  if (!rows_packed<T>(c, pointers)) return 0;
  const std::int64_t k = (c / kPack<T> + 31) / 32;
  return k <= kMaxRowPacks<T> ? static_cast<int>(k) : 0;
}

// Calls f(std::integral_constant<int, k>) for k in 1..kMaxRowPacks<T> (only those
// are instantiated: a wider row would not fit the fused backward's shared memory).
template <class T, int K = 1, class F>
void with_row_packs(int k, F&& f) {
  if constexpr (K <= kMaxRowPacks<T>) {
    if (k == K) return f(std::integral_constant<int, K>{});
    with_row_packs<T, K + 1>(k, f);
  }
}

std::int64_t fused_chunks(std::int64_t n) { return (n + kFusedRows - 1) / kFusedRows; }

}  // namespace

std::size_t layernorm_backward_workspace_bytes(std::int64_t n, std::int64_t c, bool candidate) {
  if (n <= 0 || c <= 0) return 0;
  const std::int64_t chunks = candidate ? std::max(row_chunks(n), fused_chunks(n)) : row_chunks(n);
  return static_cast<std::size_t>(2 * chunks * c) * sizeof(float);
}

template <class T>
void layernorm_forward(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, float eps,
                       std::int64_t n, std::int64_t c, cudaStream_t stream, bool candidate) {
  SHARDTRAIN_CHECK(c > 0 || n == 0, "cuda::layernorm_forward: zero channels");
  if (n <= 0) return;
  const int k = candidate ? row_packs_per_lane<T>(c, {x, w, b, y}) : 0;
  if (k > 0) {
    const unsigned blocks = blocks_for(n, kWarpsPerBlock), threads = kWarpsPerBlock * 32;
    with_row_packs<T>(k, [&](auto kk) {
      layernorm_forward_rows_kernel<T, decltype(kk)::value>
          <<<blocks, threads, 0, stream>>>(x, w, b, y, mean, rstd, eps, n, c);
    });
    check_launch("LayerNorm::forward (rows in registers)");
    return;
  }
  if (rows_packed<T>(c, {x, w, b, y}))
    layernorm_forward_pack_kernel<T><<<blocks_for(n, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream>>>(
        x, w, b, y, mean, rstd, eps, n, c);
  else
    layernorm_forward_kernel<T><<<blocks_for(n, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream>>>(
        x, w, b, y, mean, rstd, eps, n, c);
  check_launch("LayerNorm::forward");
}

template <class T>
void layernorm_backward(const T* x, const T* w, const T* mean, const T* rstd, const T* dy, T* dx,
                        T* dw, T* db, std::int64_t n, std::int64_t c, void* workspace,
                        std::size_t workspace_bytes, cudaStream_t stream, bool candidate) {
  if (n <= 0 || c <= 0) return;
  const int k = candidate ? row_packs_per_lane<T>(c, {x, w, dy, dx}) : 0;
  const std::size_t need = k > 0 ? static_cast<std::size_t>(2 * fused_chunks(n) * c) * sizeof(float)
                                 : layernorm_backward_workspace_bytes(n, c);
  SHARDTRAIN_CHECK(workspace != nullptr && workspace_bytes >= need,
                   "cuda::layernorm_backward: workspace of " + std::to_string(workspace_bytes) +
                       " bytes, needs " + std::to_string(need));
  if (k > 0) {  // dx and the chunks' dw/db partials in one pass, then the grouped final pass
    const std::int64_t chunks = fused_chunks(n);
    SHARDTRAIN_CHECK(chunks <= INT32_MAX, "cuda::layernorm_backward: more than 2^31 - 1 row chunks");
    float* part_w = static_cast<float*>(workspace);
    float* part_b = part_w + chunks * c;
    const unsigned blocks = static_cast<unsigned>(chunks), threads = kFusedWarps * 32;
    with_row_packs<T>(k, [&](auto kk) {
      layernorm_backward_fused_kernel<T, decltype(kk)::value>
          <<<blocks, threads, 0, stream>>>(x, w, mean, rstd, dy, dx, part_w, part_b, n, c);
    });
    check_launch("LayerNorm::backward (fused dx, dw/db partials)");
    layernorm_params_final_grouped_kernel<T><<<blocks_for(c, 32), dim3(32, kGroups), 0, stream>>>(
        part_w, part_b, dw, db, chunks, c);
    check_launch("LayerNorm::backward_params (grouped, fused partials)");
    return;
  }
  const std::int64_t chunks = row_chunks(n);  // grid.y of the partial-sum pass
  SHARDTRAIN_CHECK(chunks <= 65535, "cuda::layernorm_backward: more than 65535 * 256 rows");
  if (rows_packed<T>(c, {x, w, dy, dx}))
    layernorm_backward_input_pack_kernel<T>
        <<<blocks_for(n, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream>>>(x, w, mean, rstd, dy, dx, n, c);
  else
    layernorm_backward_input_kernel<T>
        <<<blocks_for(n, kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream>>>(x, w, mean, rstd, dy, dx, n, c);
  check_launch("LayerNorm::backward_input");
  float* part_w = static_cast<float*>(workspace);
  float* part_b = part_w + chunks * c;
  if (candidate) {
    const dim3 block(32, kGroups);
    const dim3 grid(blocks_for(c, 32), static_cast<unsigned>(chunks));
    layernorm_params_partial_grouped_kernel<T><<<grid, block, 0, stream>>>(x, mean, rstd, dy, part_w, part_b, n, c);
    check_launch("LayerNorm::backward_params_partial (grouped)");
    layernorm_params_final_grouped_kernel<T><<<blocks_for(c, 32), block, 0, stream>>>(part_w, part_b, dw, db,
                                                                                      chunks, c);
    check_launch("LayerNorm::backward_params (grouped)");
    return;
  }
  const dim3 grid(blocks_for(c, kParamThreads), static_cast<unsigned>(chunks));
  layernorm_backward_params_partial_kernel<T><<<grid, kParamThreads, 0, stream>>>(
      x, mean, rstd, dy, part_w, part_b, n, c);
  check_launch("LayerNorm::backward_params_partial");
  layernorm_backward_params_final_kernel<T><<<blocks_for(c, kParamThreads), kParamThreads, 0,
                                              stream>>>(part_w, part_b, dw, db, chunks, c);
  check_launch("LayerNorm::backward_params");
}

#define SHARDTRAIN_CUDA_INSTANTIATE_LAYERNORM(T)                                                 \
  template void layernorm_forward<T>(const T*, const T*, const T*, T*, T*, T*, float,            \
                                     std::int64_t, std::int64_t, cudaStream_t, bool);            \
  template void layernorm_backward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*,  \
                                      T*, std::int64_t, std::int64_t, void*, std::size_t,        \
                                      cudaStream_t, bool);
SHARDTRAIN_CUDA_INSTANTIATE_LAYERNORM(float)
SHARDTRAIN_CUDA_INSTANTIATE_LAYERNORM(__half)
SHARDTRAIN_CUDA_INSTANTIATE_LAYERNORM(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_INSTANTIATE_LAYERNORM

}  // namespace shardtrain::cuda
