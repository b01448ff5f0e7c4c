// CUDA vector kernels of the backend (see vector_reduce.cuh).
#include "kernels/cuda/vector_reduce.cuh"

#include <string>

#include "kernels/cuda/common.cuh"

namespace shardtrain::cuda {
namespace {

// Block blockIdx.x's share of sum x[i]^2 over [0, n): thread t sums the elements
// blockIdx.x * threads + t + k * gridDim.x * threads in k order, in double, then the
// block's fixed halving tree; written to *partial. The same for every grid shape
// with the same gridDim.x, so the one-launch piece kernel below gives each piece
// the bits the per-piece launch gives it.
template <class T>
__device__ void block_sum_of_squares(const T* __restrict__ x, std::int64_t n, double* __restrict__ partial,
                                     double* sums) {
  double s = 0.0;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double v = load_f32(x[i]);
    s += v * v;
  }
  sums[threadIdx.x] = s;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *partial = sums[0];
}

template <class T>
__global__ void sum_of_squares_kernel(const T* __restrict__ x, std::int64_t n, double* __restrict__ partials) {
  __shared__ double sums[kReduceThreads];
  block_sum_of_squares(x, n, partials + blockIdx.x, sums);
}

// grid (kReduceGrid, pieces): block (b, k) is block b of piece k's launch.
template <class T>
__global__ void sum_of_squares_pieces_kernel(const T* __restrict__ x, const ReducePiece* __restrict__ pieces,
                                             double* __restrict__ partials) {
  __shared__ double sums[kReduceThreads];
  const ReducePiece p = pieces[blockIdx.y];
  block_sum_of_squares(x + p.offset, p.n, partials + static_cast<std::int64_t>(blockIdx.y) * gridDim.x + blockIdx.x,
                       sums);
}

__device__ inline bool finite_f32(float v) { return isfinite(v); }

template <class T>
__global__ void first_non_finite_kernel(const T* __restrict__ x, std::int64_t n, unsigned long long* first) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n && !finite_f32(load_f32(x[i]))) atomicMin(first, static_cast<unsigned long long>(i));
}

template <class T>
__global__ void widen_kernel(const T* __restrict__ x, float* __restrict__ y, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = load_f32(x[i]);
}

template <class T>
__global__ void narrow_kernel(const float* __restrict__ x, T* __restrict__ y, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = store_as<T>(x[i]);
}

}  // namespace

template <class T>
void sum_of_squares_partials(const T* x, std::int64_t n, double* partials, cudaStream_t stream) {
  sum_of_squares_kernel<T><<<kReduceGrid, kReduceThreads, 0, stream>>>(x, n > 0 ? n : 0, partials);
  check_launch("sum_of_squares_kernel");
}

template <class T>
void sum_of_squares_pieces_partials(const T* x, const ReducePiece* pieces, std::int64_t num_pieces, double* partials,
                                    cudaStream_t stream) {
  if (num_pieces <= 0) return;
  SHARDTRAIN_CHECK(num_pieces <= 65535, "cuda::sum_of_squares_pieces_partials: " + std::to_string(num_pieces) +
                                            " pieces, at most 65535 (grid.y)");
  const dim3 grid(kReduceGrid, static_cast<unsigned>(num_pieces));
  sum_of_squares_pieces_kernel<T><<<grid, kReduceThreads, 0, stream>>>(x, pieces, partials);
  check_launch("sum_of_squares_pieces_kernel");
}

template <class T>
void first_non_finite(const T* x, std::int64_t n, unsigned long long* first, cudaStream_t stream) {
  if (n <= 0) return;
  first_non_finite_kernel<T><<<blocks_for(n, kReduceThreads), kReduceThreads, 0, stream>>>(x, n, first);
  check_launch("first_non_finite_kernel");
}

template <class T>
void widen(const T* x, float* y, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  widen_kernel<T><<<blocks_for(n, kReduceThreads), kReduceThreads, 0, stream>>>(x, y, n);
  check_launch("widen_kernel");
}

template <class T>
void narrow(const float* x, T* y, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  narrow_kernel<T><<<blocks_for(n, kReduceThreads), kReduceThreads, 0, stream>>>(x, y, n);
  check_launch("narrow_kernel");
}

#define SHARDTRAIN_CUDA_VECTOR(T)                                                              \
  template void sum_of_squares_partials<T>(const T*, std::int64_t, double*, cudaStream_t);     \
  template void sum_of_squares_pieces_partials<T>(const T*, const ReducePiece*, std::int64_t, double*, cudaStream_t); \
  template void first_non_finite<T>(const T*, std::int64_t, unsigned long long*, cudaStream_t); \
  template void widen<T>(const T*, float*, std::int64_t, cudaStream_t);                        \
  template void narrow<T>(const float*, T*, std::int64_t, cudaStream_t);
SHARDTRAIN_CUDA_VECTOR(float)
SHARDTRAIN_CUDA_VECTOR(__half)
SHARDTRAIN_CUDA_VECTOR(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_VECTOR

}  // namespace shardtrain::cuda
