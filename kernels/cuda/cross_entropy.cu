// CUDA softmax cross-entropy (see cross_entropy.cuh).
// Invariants: one block of kThreads threads per row. Thread k visits columns
// k, k + kThreads, ... in order (or 16-byte packs k, k + kThreads, ... where the
// rows are aligned), keeping a running max and sum of exp(x - max) (one pass), then
// the block combines the kThreads partials by a fixed tree (xor shuffles, then the
// warps' results): max and sum are deterministic. In the backward every column is
// read (the statistics pass) before any is written, and the write pass reads and
// writes each column (or pack) in the same thread, so dlogits == logits (in place)
// is safe; no pointer is __restrict__ for that reason.
// The onehot term is folded into the one store of dlogits[target] (rounded once).
#include "kernels/cuda/cross_entropy.cuh"

#include <cstdint>

#include "core/error.hpp"

namespace shardtrain::cuda {
namespace {

constexpr unsigned kThreads = 256;  // power of two (the reduction tree halves it)

__device__ inline float nan_f32() { return __int_as_float(0x7fc00000); }

// A row's running (max, sum of exp(x - max)): one pass over the row instead of a
// max pass and a sum pass. add() takes one value; combine() merges two partials
// and is commutative bitwise (max, and a sum of two products), so the xor-shuffle
// tree below gives every lane the same result.
struct MaxSum {
  float m = -INFINITY, s = 0.0f;
  __device__ void add(float x) {
    if (x > m) {  // a NaN never is: it lands in the sum below and makes it NaN
      s = s * expf(m - x) + 1.0f;  // expf(-inf) = 0 for the first value
      m = x;
    } else if (m != -INFINITY) {
      s += expf(x - m);
    }
  }
  __device__ void combine(const MaxSum& o) {
    const float mm = fmaxf(m, o.m);
    const float a = m == -INFINITY ? 0.0f : s * expf(m - mm);
    const float b = o.m == -INFINITY ? 0.0f : o.s * expf(o.m - mm);
    m = mm;
    s = a + b;
  }
};

constexpr unsigned kWarps = kThreads / 32;

// Combines one partial per thread by a fixed tree (xor shuffles in each warp, then
// the kWarps warp results in warp 0); every thread gets the result. `buf` holds
// 2 * kWarps floats; starts and ends with a barrier so it can be reused.
__device__ MaxSum block_max_sum(MaxSum v, float* buf) {
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) {
    MaxSum o;
    o.m = __shfl_xor_sync(0xffffffffu, v.m, offset);
    o.s = __shfl_xor_sync(0xffffffffu, v.s, offset);
    v.combine(o);
  }
  __syncthreads();
  if (lane == 0) {
    buf[warp] = v.m;
    buf[kWarps + warp] = v.s;
  }
  __syncthreads();
  MaxSum r;
  if (lane < kWarps) {
    r.m = buf[lane];
    r.s = buf[kWarps + lane];
  }
  for (int offset = kWarps / 2; offset > 0; offset /= 2) {  // every warp computes it: no third barrier
    MaxSum o;
    o.m = __shfl_xor_sync(0xffffffffu, r.m, offset);
    o.s = __shfl_xor_sync(0xffffffffu, r.s, offset);
    r.combine(o);
  }
  MaxSum out;
  out.m = __shfl_sync(0xffffffffu, r.m, 0);
  out.s = __shfl_sync(0xffffffffu, r.s, 0);
  __syncthreads();
  return out;
}

// Row max and sum_j exp(x_j - max), computed by the whole block in one pass: 16-byte
// packs (thread k takes packs k, k + kThreads, ...) when `packed` (row start aligned,
// v a multiple of the pack), else single values.
template <class T>
__device__ MaxSum row_stats(const T* x, std::int64_t v, bool packed, float* buf) {
  MaxSum acc;
  if (packed) {
    const Pack<T>* xp = reinterpret_cast<const Pack<T>*>(x);
    const std::int64_t packs = v / kPack<T>;
    for (std::int64_t p = threadIdx.x; p < packs; p += kThreads) {
      const Pack<T> a = xp[p];
#pragma unroll
      for (int k = 0; k < kPack<T>; ++k) acc.add(load_f32(a.v[k]));
    }
  } else {
    for (std::int64_t j = threadIdx.x; j < v; j += kThreads) acc.add(load_f32(x[j]));
  }
  return block_max_sum(acc, buf);
}

template <class T>
__global__ void cross_entropy_forward_kernel(const T* logits, const std::int32_t* targets,
                                             T* losses, std::int64_t v, bool packed, float* stats) {
  __shared__ float buf[2 * kWarps];
  const std::int64_t row = blockIdx.x;
  const std::int32_t target = targets[row];
  if (target < 0 || target >= v) {  // uniform over the block: nobody reaches a barrier
    if (threadIdx.x == 0) losses[row] = store_as<T>(target < 0 ? 0.0f : nan_f32());
    return;
  }
  const T* x = logits + row * v;
  const MaxSum st = row_stats(x, v, packed, buf);
  if (threadIdx.x == 0) {
    losses[row] = store_as<T>(logf(st.s) - (load_f32(x[target]) - st.m));
    if (stats != nullptr) {
      stats[2 * row] = st.m;
      stats[2 * row + 1] = st.s;
    }
  }
}

// stats (or nullptr): the forward's (max, sum) per row, read instead of the
// statistics pass; each thread then reads and writes only its own columns.
template <class T>
__global__ void cross_entropy_backward_kernel(const T* logits, const std::int32_t* targets,
                                              float scale, T* dlogits, std::int64_t v, bool packed,
                                              const float* stats) {
  __shared__ float buf[2 * kWarps];
  const std::int64_t row = blockIdx.x;
  const std::int32_t target = targets[row];
  T* dl = dlogits + row * v;
  if (target < 0 || target >= v) {  // uniform over the block
    const float fillv = target < 0 ? 0.0f : nan_f32();
    for (std::int64_t j = threadIdx.x; j < v; j += kThreads) dl[j] = store_as<T>(fillv);
    return;
  }
  const T* x = logits + row * v;
  MaxSum st;
  if (stats != nullptr) {  // uniform over the block (a kernel argument): no barrier skipped by some threads only
    st.m = stats[2 * row];
    st.s = stats[2 * row + 1];
  } else {
    st = row_stats(x, v, packed, buf);  // ends with a barrier: all reads of x done before writes
  }
  const float factor = scale / st.s;
  if (packed) {
    const Pack<T>* xp = reinterpret_cast<const Pack<T>*>(x);
    Pack<T>* dp = reinterpret_cast<Pack<T>*>(dl);
    const std::int64_t packs = v / kPack<T>;
    for (std::int64_t p = threadIdx.x; p < packs; p += kThreads) {
      const Pack<T> a = xp[p];
      Pack<T> r;
#pragma unroll
      for (int k = 0; k < kPack<T>; ++k) {
        float q = expf(load_f32(a.v[k]) - st.m) * factor;
        if (p * kPack<T> + k == target) q -= scale;
        r.v[k] = store_as<T>(q);
      }
      dp[p] = r;
    }
  } else {
    for (std::int64_t j = threadIdx.x; j < v; j += kThreads) {
      float q = expf(load_f32(x[j]) - st.m) * factor;
      if (j == target) q -= scale;
      dl[j] = store_as<T>(q);
    }
  }
}

// Rows of v values start 16-byte aligned when the base is and v is a whole number of packs.
template <class T>
bool rows_packed(const void* a, const void* b, std::int64_t v) {
  return aligned16(a) && aligned16(b) && v % kPack<T> == 0;
}

}  // namespace

template <class T>
void cross_entropy_forward(const T* logits, const std::int32_t* targets, T* losses,
                           std::int64_t n, std::int64_t v, cudaStream_t stream, float* row_stats) {
  if (n <= 0) return;
  SHARDTRAIN_CHECK(n <= INT32_MAX, "cuda::cross_entropy_forward: more than 2^31 - 1 rows");
  cross_entropy_forward_kernel<T><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
      logits, targets, losses, v, rows_packed<T>(logits, logits, v), row_stats);
  check_launch("CrossEntropy::forward");
}

template <class T>
void cross_entropy_backward(const T* logits, const std::int32_t* targets, float scale,
                            T* dlogits, std::int64_t n, std::int64_t v, cudaStream_t stream,
                            const float* row_stats) {
  if (n <= 0) return;
  SHARDTRAIN_CHECK(n <= INT32_MAX, "cuda::cross_entropy_backward: more than 2^31 - 1 rows");
  const bool packed = rows_packed<T>(logits, dlogits, v);
  // The forward's statistics are the bits this pass would compute only where it
  // would visit the row the same way (packs, or single values) as the forward did.
  if (packed != rows_packed<T>(logits, logits, v)) row_stats = nullptr;
  cross_entropy_backward_kernel<T><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
      logits, targets, scale, dlogits, v, packed, row_stats);
  check_launch(row_stats != nullptr ? "CrossEntropy::backward (forward's row statistics)" : "CrossEntropy::backward");
}

#define SHARDTRAIN_CUDA_INSTANTIATE_CROSS_ENTROPY(T)                                          \
  template void cross_entropy_forward<T>(const T*, const std::int32_t*, T*, std::int64_t,     \
                                         std::int64_t, cudaStream_t, float*);                 \
  template void cross_entropy_backward<T>(const T*, const std::int32_t*, float, T*,           \
                                          std::int64_t, std::int64_t, cudaStream_t, const float*);
SHARDTRAIN_CUDA_INSTANTIATE_CROSS_ENTROPY(float)
SHARDTRAIN_CUDA_INSTANTIATE_CROSS_ENTROPY(__half)
SHARDTRAIN_CUDA_INSTANTIATE_CROSS_ENTROPY(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_INSTANTIATE_CROSS_ENTROPY

}  // namespace shardtrain::cuda
