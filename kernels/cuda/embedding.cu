// CUDA token + position embedding (see embedding.cuh for the contract).
// Invariants: forward overwrites out; backward adds to dwte / dwpe, each element
// loaded once into an fp32 accumulator, summed over its positions in ascending
// (b, t) order and rounded once (the host kernel's order and rounding). The only
// order-dependent step, the grouping of positions by token, is a stable integer
// radix sort, so results are bitwise reproducible run to run.
#include "kernels/cuda/embedding.cuh"

#include <cub/device/device_radix_sort.cuh>

#include <string>

#include "core/error.hpp"
#include "core/cuda_check.hpp"

namespace shardtrain::cuda {
namespace {

constexpr unsigned kThreads = 128;

__device__ inline float nan_f32() { return __int_as_float(0x7fc00000); }

// One thread per output element (bt, j).
template <class T>
__global__ void embedding_forward_kernel(const std::int32_t* __restrict__ tokens,
                                         const T* __restrict__ wte, const T* __restrict__ wpe,
                                         T* __restrict__ out, std::int64_t n, std::int64_t nt,
                                         std::int64_t c, std::int64_t vocab) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * c) return;
  const std::int64_t bt = i / c, j = i % c, t = bt % nt;
  const std::int64_t tok = tokens[bt];
  const float e = (tok >= 0 && tok < vocab) ? load_f32(wte[tok * c + j]) : nan_f32();
  out[i] = store_as<T>(e + load_f32(wpe[t * c + j]));
}

__global__ void iota_kernel(std::int32_t* __restrict__ out, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<std::int32_t>(i);
}

// Grid (n, ceil(c / kThreads)): block x = position i in sorted order. Only the
// first position of each run of equal tokens does work: it walks its run (the
// positions holding that token, ascending because the sort is stable) and adds
// their dout rows to dwte[token, j].
template <class T>
__global__ void embedding_backward_wte_kernel(const std::int32_t* __restrict__ sorted_tok,
                                              const std::int32_t* __restrict__ sorted_pos,
                                              const T* __restrict__ dout, T* __restrict__ dwte,
                                              std::int64_t n, std::int64_t c,
                                              std::int64_t vocab) {
  const std::int64_t i = blockIdx.x;
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= c) return;
  const std::int32_t tok = sorted_tok[i];
  if (i > 0 && sorted_tok[i - 1] == tok) return;  // not the start of a run
  if (tok < 0 || tok >= vocab) return;            // invalid id: ignored
  float acc = load_f32(dwte[static_cast<std::int64_t>(tok) * c + j]);
  for (std::int64_t k = i; k < n && sorted_tok[k] == tok; ++k)
    acc += load_f32(dout[static_cast<std::int64_t>(sorted_pos[k]) * c + j]);
  dwte[static_cast<std::int64_t>(tok) * c + j] = store_as<T>(acc);
}

// One thread per (t, j); b in order.
template <class T>
__global__ void embedding_backward_wpe_kernel(const T* __restrict__ dout, T* __restrict__ dwpe,
                                              std::int64_t nb, std::int64_t nt, std::int64_t c) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= nt * c) return;
  float acc = load_f32(dwpe[i]);
  for (std::int64_t b = 0; b < nb; ++b) acc += load_f32(dout[b * nt * c + i]);
  dwpe[i] = store_as<T>(acc);
}

std::size_t align256(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

// Workspace layout: sorted tokens | positions in | positions out | cub temp.
struct EmbeddingWorkspace {
  std::size_t ints, cub_bytes;
  std::size_t total() const { return 3 * align256(ints * sizeof(std::int32_t)) + cub_bytes; }
};

// The sort looks at all 32 key bits, so an invalid (negative or too large) id
// still forms its own run and never splits the run of a valid id.
EmbeddingWorkspace embedding_workspace(std::int64_t n) {
  std::size_t cub_bytes = 0;
  SHARDTRAIN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, cub_bytes, static_cast<const std::int32_t*>(nullptr),
      static_cast<std::int32_t*>(nullptr), static_cast<const std::int32_t*>(nullptr),
      static_cast<std::int32_t*>(nullptr), static_cast<int>(n)));
  return {static_cast<std::size_t>(n), cub_bytes};
}

}  // namespace

std::size_t embedding_backward_workspace_bytes(std::int64_t n, std::int64_t /*vocab*/) {
  if (n <= 0) return 0;
  return embedding_workspace(n).total();
}

template <class T>
void embedding_forward(const std::int32_t* tokens, const T* wte, const T* wpe, T* out,
                       std::int64_t b, std::int64_t t, std::int64_t c, std::int64_t vocab,
                       cudaStream_t stream) {
  const std::int64_t total = b * t * c;
  if (total <= 0) return;
  embedding_forward_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
      tokens, wte, wpe, out, b * t, t, c, vocab);
  check_launch("Embedding::forward");
}

template <class T>
void embedding_backward(const std::int32_t* tokens, const T* dout, T* dwte, T* dwpe,
                        std::int64_t b, std::int64_t t, std::int64_t c, std::int64_t vocab,
                        void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  const std::int64_t n = b * t;
  if (n <= 0 || c <= 0) return;
  SHARDTRAIN_CHECK(n <= INT32_MAX && vocab <= INT32_MAX,
                   "cuda::embedding_backward: more than 2^31 positions or vocabulary rows");
  const EmbeddingWorkspace ws = embedding_workspace(n);
  SHARDTRAIN_CHECK(workspace != nullptr && workspace_bytes >= ws.total(),
                   "cuda::embedding_backward: workspace of " + std::to_string(workspace_bytes) +
                       " bytes, needs " + std::to_string(ws.total()));
  char* p = static_cast<char*>(workspace);
  const std::size_t ints_bytes = align256(ws.ints * sizeof(std::int32_t));
  auto* sorted_tok = reinterpret_cast<std::int32_t*>(p);
  auto* pos_in = reinterpret_cast<std::int32_t*>(p + ints_bytes);
  auto* pos_out = reinterpret_cast<std::int32_t*>(p + 2 * ints_bytes);
  void* cub_temp = p + 3 * ints_bytes;
  std::size_t cub_bytes = ws.cub_bytes;

  iota_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(pos_in, n);
  check_launch("Embedding::backward_iota");
  SHARDTRAIN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(cub_temp, cub_bytes, tokens, sorted_tok,
                                                        pos_in, pos_out, static_cast<int>(n), 0,
                                                        32, stream));
  check_launch("Embedding::backward_sort");
  const dim3 grid(static_cast<unsigned>(n), blocks_for(c, kThreads));
  embedding_backward_wte_kernel<T><<<grid, kThreads, 0, stream>>>(sorted_tok, pos_out, dout, dwte,
                                                                 n, c, vocab);
  check_launch("Embedding::backward_wte");
  embedding_backward_wpe_kernel<T><<<blocks_for(t * c, kThreads), kThreads, 0, stream>>>(
      dout, dwpe, b, t, c);
  check_launch("Embedding::backward_wpe");
}

#define SHARDTRAIN_CUDA_INSTANTIATE_EMBEDDING(T)                                              \
  template void embedding_forward<T>(const std::int32_t*, const T*, const T*, T*, std::int64_t, \
                                     std::int64_t, std::int64_t, std::int64_t, cudaStream_t);   \
  template void embedding_backward<T>(const std::int32_t*, const T*, T*, T*, std::int64_t,      \
                                      std::int64_t, std::int64_t, std::int64_t, void*,          \
                                      std::size_t, cudaStream_t);
SHARDTRAIN_CUDA_INSTANTIATE_EMBEDDING(float)
SHARDTRAIN_CUDA_INSTANTIATE_EMBEDDING(__half)
SHARDTRAIN_CUDA_INSTANTIATE_EMBEDDING(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_INSTANTIATE_EMBEDDING

}  // namespace shardtrain::cuda
