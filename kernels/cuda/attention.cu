// shardtrain/kernels/cuda/attention.cu
// Multi-head self-attention on the device, causal or bidirectional, with an
// optional key padding mask (see attention.cuh).
//
// saved (attention_saved_elems, T), written by forward, read by backward, as the host:
//   [ q (B,H,T,hd) | k (B,H,T,hd) | v (B,H,T,hd) | probs (B,H,T,T) ]
// workspace (attention_workspace_bytes<T>), three regions, each starting on a
// 256-byte boundary, for ONE sequence b at a time:
//   f32   (H,T,T) float : scores S (forward) / dP (backward), kept in fp32;
//   grad  (H,T,T) T     : dS (backward only; a GEMM operand, so stored in T);
//   heads 3 x (H,T,hd) T: out per head (forward) / dq, dk, dv per head (backward).
//
// Forward:  split qkv into q, k, v (B,H,T,hd) in saved; then per sequence b:
//   S = (1/sqrt(hd)) Q K^T          one strided batched GEMM over the H heads, fp32 out;
//   probs = causal softmax(S)       one warp per row, fp32 max / sum, stored in T;
//   Y = P V                         strided batched GEMM into `heads`;
//   out[b, t, h*hd + i] = Y[h, t, i] (merge kernel).
// Backward: per sequence b:
//   dV = P^T dY, dP = dY V^T (fp32 out), dS = P * (dP - rowsum(dP * P)) / sqrt(hd)
//   (0 where masked; one warp per row), dQ = dS K, dK = dS^T Q, each a strided
//   batched GEMM over H; then a merge kernel writes dq, dk, dv into dqkv[b].
//   dY is read in place from dout (row stride C, head stride hd).
// The GEMMs run over the whole (T,T) block: masked entries are exact zeros in
// probs and dS, so they add nothing (the host skips the blocks above the diagonal;
// the result is the same, the GEMMs here do up to 2x the necessary FLOPs).
// Outputs of the batched GEMMs are contiguous per head (never interleaved with
// another head's columns), as cuBLAS requires of the C_i of one batch; inputs
// may interleave (dY is read in place from dout).
// Precision for f16 / bf16: scores and dP are fp32, softmax math is fp32, but P and
// dS are rounded to T before the next GEMM (the host keeps them in fp32 within a
// head). Both are well inside the 16-bit tolerances of the tests.
#include "kernels/cuda/attention.cuh"

#include <cmath>
#include <string>

#include "core/error.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm.cuh"

namespace shardtrain::cuda {
namespace {

constexpr unsigned kThreads = 256;
constexpr unsigned kWarp = 32;
constexpr unsigned kRowsPerBlock = 4;  // one warp per softmax row
constexpr std::size_t kAlign = 256;

struct Dims {
  std::int64_t b, t, c, h, hd;
  bool causal;
};

Dims check_shape(const AttentionShape& s) {
  SHARDTRAIN_CHECK(s.batch >= 0 && s.seq_len >= 0 && s.channels >= 0 && s.n_head > 0,
                   "cuda::attention: negative size or n_head <= 0");
  SHARDTRAIN_CHECK(s.channels % s.n_head == 0,
                   "cuda::attention: n_head " + std::to_string(s.n_head) +
                       " does not divide channels " + std::to_string(s.channels));
  return {s.batch, s.seq_len, s.channels, s.n_head, s.channels / s.n_head, s.causal};
}

std::size_t round_up(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Byte offsets of the workspace regions (see the top of this file).
template <class T>
struct Workspace {
  std::size_t f32, grad, heads, total;
  explicit Workspace(const Dims& d) {
    const std::size_t tt = static_cast<std::size_t>(d.h * d.t * d.t);
    const std::size_t thd = static_cast<std::size_t>(d.h * d.t * d.hd);
    f32 = 0;
    grad = round_up(tt * sizeof(float));
    heads = grad + round_up(tt * sizeof(T));
    total = heads + round_up(3 * thd * sizeof(T));
  }
};

__device__ inline float warp_max(float x) {
  for (unsigned o = kWarp / 2; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ inline float warp_sum(float x) {
  for (unsigned o = kWarp / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// qkv(b, t, part*C + h*hd + i) -> saved[part](b, h, t, i), part = q, k, v.
template <class T>
__global__ void split_heads_kernel(const T* qkv, T* saved, std::int64_t nb, std::int64_t nt,
                                   std::int64_t nc, std::int64_t nh, std::int64_t hd) {
  const std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= nb * nt * 3 * nc) return;
  const std::int64_t bt = idx / (3 * nc), c3 = idx % (3 * nc);
  const std::int64_t b = bt / nt, t = bt % nt;
  const std::int64_t part = c3 / nc, c = c3 % nc;
  const std::int64_t h = c / hd, i = c % hd;
  saved[part * nb * nt * nc + ((b * nh + h) * nt + t) * hd + i] = qkv[idx];
}

// heads[part](h, t, i) -> dst(t, part*C + h*hd + i) for t < T, part < parts; dst has
// row stride parts*C (out: parts = 1; dqkv: parts = 3).
template <class T>
__global__ void merge_heads_kernel(const T* heads, T* dst, std::int64_t parts, std::int64_t nt,
                                   std::int64_t nc, std::int64_t nh, std::int64_t hd) {
  const std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t row = parts * nc;
  if (idx >= nt * row) return;
  const std::int64_t t = idx / row, c3 = idx % row;
  const std::int64_t part = c3 / nc, c = c3 % nc;
  const std::int64_t h = c / hd, i = c % hd;
  dst[idx] = heads[part * nh * nt * hd + (h * nt + t) * hd + i];
}

// Unmasked keys [0, len) of row t: s <= t when causal, s < *valid (the
// sequence's length; nullptr: T).
__device__ inline std::int64_t row_len(std::int64_t t, std::int64_t nt, bool causal, const std::int32_t* valid) {
  const std::int64_t keys = valid ? static_cast<std::int64_t>(*valid) : nt;
  return causal && t + 1 < keys ? t + 1 : keys;
}

// Row r of `rows` (H*T of them, t = r % T): p[0..len) = softmax(s[0..len)), 0 after.
template <class T>
__global__ void causal_softmax_kernel(const float* scores, T* probs, std::int64_t rows,
                                      std::int64_t nt, bool causal, const std::int32_t* valid) {
  const std::int64_t r = blockIdx.x * static_cast<std::int64_t>(kRowsPerBlock) + threadIdx.y;
  if (r >= rows) return;  // whole warp leaves together: threadIdx.y is per warp
  const unsigned lane = threadIdx.x;
  const std::int64_t len = row_len(r % nt, nt, causal, valid);
  const float* s = scores + r * nt;
  T* p = probs + r * nt;
  float m = -INFINITY;
  for (std::int64_t j = lane; j < len; j += kWarp) m = fmaxf(m, s[j]);
  m = warp_max(m);
  float sum = 0.0f;
  for (std::int64_t j = lane; j < len; j += kWarp) sum += expf(s[j] - m);
  const float inv = 1.0f / warp_sum(sum);
  for (std::int64_t j = lane; j < nt; j += kWarp)
    p[j] = store_as<T>(j < len ? expf(s[j] - m) * inv : 0.0f);
}

// Row r: ds[j] = scale * p[j] * (dp[j] - sum_{i < len} dp[i] p[i]) for j < len, 0 after.
template <class T>
__global__ void causal_softmax_grad_kernel(const T* probs, const float* dp, T* ds,
                                           std::int64_t rows, std::int64_t nt, float scale,
                                           bool causal, const std::int32_t* valid) {
  const std::int64_t r = blockIdx.x * static_cast<std::int64_t>(kRowsPerBlock) + threadIdx.y;
  if (r >= rows) return;
  const unsigned lane = threadIdx.x;
  const std::int64_t len = row_len(r % nt, nt, causal, valid);
  const T* p = probs + r * nt;
  const float* g = dp + r * nt;
  T* out = ds + r * nt;
  float dot = 0.0f;
  for (std::int64_t j = lane; j < len; j += kWarp) dot += g[j] * load_f32(p[j]);
  dot = warp_sum(dot);
  for (std::int64_t j = lane; j < nt; j += kWarp)
    out[j] = store_as<T>(j < len ? scale * load_f32(p[j]) * (g[j] - dot) : 0.0f);
}

unsigned row_blocks(std::int64_t rows) {
  return blocks_for(rows, kRowsPerBlock);
}

void check_workspace(const char* op, std::size_t have, std::size_t need, const void* ws) {
  SHARDTRAIN_CHECK(have >= need, std::string(op) + ": workspace has " + std::to_string(have) +
                                     " bytes, needs " + std::to_string(need));
  SHARDTRAIN_CHECK(reinterpret_cast<std::uintptr_t>(ws) % kAlign == 0,
                   std::string(op) + ": workspace is not 256-byte aligned");
}

template <class T>
T* region(void* ws, std::size_t offset) {
  return reinterpret_cast<T*>(static_cast<unsigned char*>(ws) + offset);
}

}  // namespace

std::int64_t attention_saved_elems(const AttentionShape& s) {
  const Dims d = check_shape(s);
  return 3 * d.b * d.t * d.c + d.b * d.h * d.t * d.t;
}

template <class T>
std::size_t attention_workspace_bytes(const AttentionShape& s) {
  return Workspace<T>(check_shape(s)).total;
}

template <class T>
void attention_forward(cublasHandle_t handle, cudaStream_t stream, const AttentionShape& s,
                       const T* qkv, T* saved, void* workspace, std::size_t workspace_bytes,
                       T* out, const std::int32_t* lengths) {
  const Dims d = check_shape(s);
  const Workspace<T> ws(d);
  check_workspace("cuda::attention_forward", workspace_bytes, ws.total, workspace);
  if (d.b == 0 || d.t == 0 || d.c == 0) return;
  const std::int64_t nt = d.t, nc = d.c, nh = d.h, hd = d.hd;
  const std::int64_t qkv_elems = d.b * nt * nc;  // one of q, k, v: (B,H,T,hd)
  T* q = saved;
  T* k = q + qkv_elems;
  T* v = k + qkv_elems;
  T* probs = v + qkv_elems;
  float* scores = region<float>(workspace, ws.f32);
  T* heads = region<T>(workspace, ws.heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  split_heads_kernel<T><<<blocks_for(d.b * nt * 3 * nc, kThreads), kThreads, 0, stream>>>(
      qkv, saved, d.b, nt, nc, nh, hd);
  check_launch("cuda::attention_forward split_heads");
  for (std::int64_t b = 0; b < d.b; ++b) {
    const std::int64_t off = b * nh * nt * hd;  // (b, 0, 0, 0) in q / k / v
    T* pb = probs + b * nh * nt * nt;
    // S(h) = scale Q(h) K(h)^T, (T,T) per head, fp32.
    gemm_strided_batched<T, float>(handle, stream, Trans::N, Trans::T, nt, nt, hd, scale,
                                   q + off, hd, nt * hd, k + off, hd, nt * hd, 0.0f, scores, nt,
                                   nt * nt, nh);
    causal_softmax_kernel<T><<<row_blocks(nh * nt), dim3(kWarp, kRowsPerBlock), 0, stream>>>(
        scores, pb, nh * nt, nt, d.causal, lengths ? lengths + b : nullptr);
    check_launch("cuda::attention_forward softmax");
    // Y(h) = P(h) V(h), (T,hd) per head, contiguous.
    gemm_strided_batched<T>(handle, stream, Trans::N, Trans::N, nt, hd, nt, 1.0f, pb, nt,
                            nt * nt, v + off, hd, nt * hd, 0.0f, heads, hd, nt * hd, nh);
    merge_heads_kernel<T><<<blocks_for(nt * nc, kThreads), kThreads, 0, stream>>>(
        heads, out + b * nt * nc, 1, nt, nc, nh, hd);
    check_launch("cuda::attention_forward merge_heads");
  }
}

template <class T>
void attention_backward(cublasHandle_t handle, cudaStream_t stream, const AttentionShape& s,
                        const T* dout, const T* saved, void* workspace,
                        std::size_t workspace_bytes, T* dqkv, const std::int32_t* lengths) {
  const Dims d = check_shape(s);
  const Workspace<T> ws(d);
  check_workspace("cuda::attention_backward", workspace_bytes, ws.total, workspace);
  if (d.b == 0 || d.t == 0 || d.c == 0) return;
  const std::int64_t nt = d.t, nc = d.c, nh = d.h, hd = d.hd;
  const std::int64_t qkv_elems = d.b * nt * nc;
  const T* q = saved;
  const T* k = q + qkv_elems;
  const T* v = k + qkv_elems;
  const T* probs = v + qkv_elems;
  float* dp = region<float>(workspace, ws.f32);
  T* ds = region<T>(workspace, ws.grad);
  T* dq = region<T>(workspace, ws.heads);  // (H,T,hd) each
  T* dk = dq + nh * nt * hd;
  T* dv = dk + nh * nt * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  for (std::int64_t b = 0; b < d.b; ++b) {
    const std::int64_t off = b * nh * nt * hd;
    const T* pb = probs + b * nh * nt * nt;
    const T* dy = dout + b * nt * nc;  // dY(h) = dy + h*hd, row stride C
    // dV(h) = P(h)^T dY(h)
    gemm_strided_batched<T>(handle, stream, Trans::T, Trans::N, nt, hd, nt, 1.0f, pb, nt,
                            nt * nt, dy, nc, hd, 0.0f, dv, hd, nt * hd, nh);
    // dP(h) = dY(h) V(h)^T, fp32
    gemm_strided_batched<T, float>(handle, stream, Trans::N, Trans::T, nt, nt, hd, 1.0f, dy, nc,
                                   hd, v + off, hd, nt * hd, 0.0f, dp, nt, nt * nt, nh);
    causal_softmax_grad_kernel<T>
        <<<row_blocks(nh * nt), dim3(kWarp, kRowsPerBlock), 0, stream>>>(
            pb, dp, ds, nh * nt, nt, scale, d.causal, lengths ? lengths + b : nullptr);
    check_launch("cuda::attention_backward softmax_grad");
    // dQ(h) = dS(h) K(h);  dK(h) = dS(h)^T Q(h)
    gemm_strided_batched<T>(handle, stream, Trans::N, Trans::N, nt, hd, nt, 1.0f, ds, nt,
                            nt * nt, k + off, hd, nt * hd, 0.0f, dq, hd, nt * hd, nh);
    gemm_strided_batched<T>(handle, stream, Trans::T, Trans::N, nt, hd, nt, 1.0f, ds, nt,
                            nt * nt, q + off, hd, nt * hd, 0.0f, dk, hd, nt * hd, nh);
    merge_heads_kernel<T><<<blocks_for(nt * 3 * nc, kThreads), kThreads, 0, stream>>>(
        dq, dqkv + b * nt * 3 * nc, 3, nt, nc, nh, hd);
    check_launch("cuda::attention_backward merge_heads");
  }
}

#define SHARDTRAIN_CUDA_INSTANTIATE_ATTENTION(T)                                               \
  template std::size_t attention_workspace_bytes<T>(const AttentionShape&);                   \
  template void attention_forward<T>(cublasHandle_t, cudaStream_t, const AttentionShape&,     \
                                     const T*, T*, void*, std::size_t, T*, const std::int32_t*); \
  template void attention_backward<T>(cublasHandle_t, cudaStream_t, const AttentionShape&,    \
                                      const T*, const T*, void*, std::size_t, T*,             \
                                      const std::int32_t*);
SHARDTRAIN_CUDA_INSTANTIATE_ATTENTION(float)
SHARDTRAIN_CUDA_INSTANTIATE_ATTENTION(__half)
SHARDTRAIN_CUDA_INSTANTIATE_ATTENTION(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_INSTANTIATE_ATTENTION

}  // namespace shardtrain::cuda
