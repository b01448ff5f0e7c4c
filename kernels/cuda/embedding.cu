// CUDA token + position embedding (see embedding.cuh for the contract).
// Invariants: forward overwrites out; backward adds to dwte / dwpe, each element
// loaded once into an fp32 accumulator and rounded once. dwpe and the dwte rows
// of tokens whose positions fall in one block of kChunk sorted positions are
// summed in ascending (b, t) order (the host kernel's order and rounding). A
// token whose positions cross a block boundary (a frequent one) is summed in
// parallel: per chunk (the positions of one block, in order, the first chunk
// starting from dwte), then the chunk sums in block order -- a fixed order too.
// The grouping of positions by token is a stable integer radix sort and there
// are no atomics, so results are bitwise reproducible run to run.
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

// dwte in two passes over the positions in sorted order, on fixed chunks: the
// sorted positions are cut at every start of a run of equal tokens and at every
// multiple of kChunk, so a chunk is at most kChunk positions of one token. Both
// passes run on grid (n, ceil(c / kThreads)), block x = sorted position i; only
// the blocks whose i starts a chunk (pass 1) or a run (pass 2) do work.
constexpr std::int64_t kChunk = 64;

__device__ inline bool starts_run(const std::int32_t* sorted_tok, std::int64_t i) {
  return i == 0 || sorted_tok[i - 1] != sorted_tok[i];
}

// Partial-sum slot of the chunk starting at sorted position i. Only a run that
// crosses a block boundary (block = kChunk sorted positions) has partial sums,
// and a block holds at most two of its chunks: the one starting at the block's
// first position (slot 2 g) and the one starting inside it whose run goes on
// into the next block (slot 2 g + 1; only the block's last run can).
__device__ inline std::int64_t partial_slot(std::int64_t i) {
  return 2 * (i / kChunk) + (i % kChunk == 0 ? 0 : 1);
}

// Pass 1: the thread of chunk [i, e) and channel j adds its positions' dout rows
// in order. A run that is one whole chunk adds them to dwte[token, j] (loaded
// once, stored once: exactly the host's order); otherwise the chunk's sum goes to
// its partial slot, the run's first chunk starting from dwte[token, j].
template <class T>
__global__ void embedding_backward_wte_chunks_kernel(const std::int32_t* __restrict__ sorted_tok,
                                                     const std::int32_t* __restrict__ sorted_pos,
                                                     const T* __restrict__ dout, T* __restrict__ dwte,
                                                     float* __restrict__ partials, std::int64_t n,
                                                     std::int64_t c, std::int64_t vocab) {
  const std::int64_t i = blockIdx.x;
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= c) return;
  const bool first = starts_run(sorted_tok, i);
  if (!first && i % kChunk != 0) return;  // not the start of a chunk
  const std::int32_t tok = sorted_tok[i];
  if (tok < 0 || tok >= vocab) return;    // invalid id: ignored
  const std::int64_t row = static_cast<std::int64_t>(tok) * c + j;
  const std::int64_t block_end = (i / kChunk + 1) * kChunk < n ? (i / kChunk + 1) * kChunk : n;
  float acc = first ? load_f32(dwte[row]) + load_f32(dout[static_cast<std::int64_t>(sorted_pos[i]) * c + j])
                    : load_f32(dout[static_cast<std::int64_t>(sorted_pos[i]) * c + j]);
  std::int64_t e = i + 1;
  for (; e < block_end && sorted_tok[e] == tok; ++e)
    acc += load_f32(dout[static_cast<std::int64_t>(sorted_pos[e]) * c + j]);
  const bool last = e == n || sorted_tok[e] != tok;
  if (first && last)
    dwte[row] = store_as<T>(acc);
  else
    partials[partial_slot(i) * c + j] = acc;
}

// Pass 2: for a run that crosses a block boundary, the thread of its first
// position and channel j sums the run's chunk partials in order (its first
// chunk's slot, then slot 2 g of every later block g the run reaches) and
// stores dwte[token, j] once.
template <class T>
__global__ void embedding_backward_wte_runs_kernel(const std::int32_t* __restrict__ sorted_tok,
                                                   const float* __restrict__ partials, T* __restrict__ dwte,
                                                   std::int64_t n, std::int64_t c, std::int64_t vocab) {
  const std::int64_t i = blockIdx.x;
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= c || !starts_run(sorted_tok, i)) return;
  const std::int32_t tok = sorted_tok[i];
  if (tok < 0 || tok >= vocab) return;
  std::int64_t g = i / kChunk + 1;  // the next block
  if (g * kChunk >= n || sorted_tok[g * kChunk] != tok) return;  // the run ends in its first block: pass 1 stored it
  float acc = partials[partial_slot(i) * c + j];
  for (; g * kChunk < n && sorted_tok[g * kChunk] == tok; ++g) acc += partials[2 * g * c + j];
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

std::int64_t chunk_blocks(std::int64_t n) { return (n + kChunk - 1) / kChunk; }

// Workspace layout: sorted tokens | positions in | positions out | partial sums
// (2 slots per block of kChunk sorted positions, c floats each) | cub temp.
struct EmbeddingWorkspace {
  std::size_t ints, partial_floats, cub_bytes;
  std::size_t ints_bytes() const { return align256(ints * sizeof(std::int32_t)); }
  std::size_t partial_bytes() const { return align256(partial_floats * sizeof(float)); }
  std::size_t total() const { return 3 * ints_bytes() + partial_bytes() + cub_bytes; }
};

// The sort looks at all 32 key bits, so an invalid (negative or too large) id
// still forms its own run and never splits the run of a valid id.
EmbeddingWorkspace embedding_workspace(std::int64_t n, std::int64_t c) {
  std::size_t cub_bytes = 0;
  SHARDTRAIN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, cub_bytes, static_cast<const std::int32_t*>(nullptr),
      static_cast<std::int32_t*>(nullptr), static_cast<const std::int32_t*>(nullptr),
      static_cast<std::int32_t*>(nullptr), static_cast<int>(n)));
  return {static_cast<std::size_t>(n), static_cast<std::size_t>(2 * chunk_blocks(n) * c), cub_bytes};
}

}  // namespace

std::size_t embedding_backward_workspace_bytes(std::int64_t n, std::int64_t c) {
  if (n <= 0 || c <= 0) return 0;
  SHARDTRAIN_CHECK(n <= INT32_MAX, "cuda::embedding_backward: more than 2^31 - 1 positions");
  return embedding_workspace(n, c).total();
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
                   "cuda::embedding_backward: more than 2^31 - 1 positions or vocabulary rows");
  const unsigned col_blocks = blocks_for(c, kThreads);
  SHARDTRAIN_CHECK(col_blocks <= 65535u, "cuda::embedding_backward: more than 65535 * 128 channels");
  const EmbeddingWorkspace ws = embedding_workspace(n, c);
  SHARDTRAIN_CHECK(workspace != nullptr && workspace_bytes >= ws.total(),
                   "cuda::embedding_backward: workspace of " + std::to_string(workspace_bytes) +
                       " bytes, needs " + std::to_string(ws.total()));
  char* p = static_cast<char*>(workspace);
  const std::size_t ints_bytes = ws.ints_bytes();
  auto* sorted_tok = reinterpret_cast<std::int32_t*>(p);
  auto* pos_in = reinterpret_cast<std::int32_t*>(p + ints_bytes);
  auto* pos_out = reinterpret_cast<std::int32_t*>(p + 2 * ints_bytes);
  auto* partials = reinterpret_cast<float*>(p + 3 * ints_bytes);
  void* cub_temp = p + 3 * ints_bytes + ws.partial_bytes();
  std::size_t cub_bytes = ws.cub_bytes;

  iota_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(pos_in, n);
  check_launch("Embedding::backward_iota");
  SHARDTRAIN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(cub_temp, cub_bytes, tokens, sorted_tok,
                                                        pos_in, pos_out, static_cast<int>(n), 0,
                                                        32, stream));
  check_launch("Embedding::backward_sort");
  const dim3 grid(static_cast<unsigned>(n), col_blocks);
  embedding_backward_wte_chunks_kernel<T><<<grid, kThreads, 0, stream>>>(sorted_tok, pos_out, dout, dwte,
                                                                        partials, n, c, vocab);
  check_launch("Embedding::backward_wte_chunks");
  embedding_backward_wte_runs_kernel<T><<<grid, kThreads, 0, stream>>>(sorted_tok, partials, dwte, n, c,
                                                                      vocab);
  check_launch("Embedding::backward_wte_runs");
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
