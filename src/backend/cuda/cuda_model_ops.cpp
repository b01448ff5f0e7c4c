// The CUDA backend's op table (backend/model_ops.hpp) over the layer kernels of
// kernels/cuda: every op on the backend's compute stream and cuBLAS handle, with
// one device scratch buffer sized for the largest op (attention, LayerNorm and
// embedding backward) at the model's limits, and device copies of the token
// ids. The Linear layers run through cuBLAS (kernels/cuda/linear.cuh), or through
// the backend's cuBLASLt context when it has one (model.gemm = "cublaslt",
// kernels/cuda/lt_linear.cuh; with it, the MLP's GELU in the epilogues of its
// GEMMs where the model asks: linear_gelu_forward / linear_dgelu_backward). The
// CNN's convolutions run through cuDNN: one CudnnConv2d per distinct shape (batch
// included), made on first use with its own Workspace buffer, all on one cuDNN
// handle of this object.
// Host arrays the kernels need (token ids and targets, sequence lengths) go
// through pinned staging buffers (PinnedStage): the caller's arrays are free
// to reuse as soon as the call returns, and the copies stay asynchronous.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/device_types.hpp"
#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cross_entropy.cuh"
#include "kernels/cuda/cudnn_conv.cuh"  // CNN ops
#include "kernels/cuda/cudnn_sdpa.cuh"  // fused attention (model.attention = "fused")
#include "kernels/cuda/flash_attention.cuh"  // our tiled attention (model.attention = "flash")
#include "kernels/cuda/dropout.cuh"
#include "kernels/cuda/pool.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/layernorm.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/lt_linear.cuh"  // model.gemm = "cublaslt"
#include "kernels/cuda/relu.cuh"
#include "kernels/cuda/tanh.cuh"  // the BERT pooler
#include "kernels/cuda/seq_pool.cuh"  // encoder classifier ops

namespace shardtrain {

namespace {

// A pinned (cudaMallocHost) host buffer that host arrays are copied into before
// an asynchronous copy to the device on the compute stream, and an event
// recorded after that copy, which the next acquire() waits for before the
// buffer is overwritten. Why not cudaMemcpyAsync straight from the caller's
// pageable array: the CUDA runtime's "API synchronization behavior" only says
// such a copy *might* be synchronous with respect to the host, and that for a
// pageable source the driver *may* stage it and synchronize with the stream --
// neither promises the source was read when the call returns (and when the
// driver does synchronize, the host stalls behind every queued kernel). From
// pinned memory the copy is truly asynchronous and reads the source when the
// stream reaches it, which the event covers.
class PinnedStage {
 public:
  explicit PinnedStage(std::size_t bytes) : m_bytes(bytes) {
    SHARDTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&m_copied, cudaEventDisableTiming));
    try {
      SHARDTRAIN_CUDA_CHECK(cudaMallocHost(&m_host, std::max<std::size_t>(bytes, 1)));
    } catch (...) {
      SHARDTRAIN_CUDA_WARN(cudaEventDestroy(m_copied));
      throw;
    }
  }
  ~PinnedStage() {
    SHARDTRAIN_CUDA_WARN(cudaEventSynchronize(m_copied));  // no DMA may still read m_host
    SHARDTRAIN_CUDA_WARN(cudaEventDestroy(m_copied));
    SHARDTRAIN_CUDA_WARN(cudaFreeHost(m_host));
  }
  PinnedStage(const PinnedStage&) = delete;
  PinnedStage& operator=(const PinnedStage&) = delete;

  // The buffer, once the last copy out of it has run (returns at once when none
  // is pending; an event never recorded counts as complete).
  void* acquire() {
    SHARDTRAIN_CUDA_CHECK(cudaEventSynchronize(m_copied));
    return m_host;
  }
  // Queues the copy of [offset, offset + bytes) of the buffer to device `dst` on
  // `stream`, then the event that guards the buffer's reuse.
  void send(void* dst, std::size_t offset, std::size_t bytes, cudaStream_t stream) {
    SHARDTRAIN_CHECK(offset + bytes <= m_bytes, "PinnedStage: copy beyond the staging buffer");
    if (bytes > 0)
      SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, static_cast<unsigned char*>(m_host) + offset, bytes,
                                            cudaMemcpyHostToDevice, stream));
    SHARDTRAIN_CUDA_CHECK(cudaEventRecord(m_copied, stream));
  }

 private:
  std::size_t m_bytes;
  void* m_host = nullptr;
  cudaEvent_t m_copied = nullptr;
};

template <class T>
float as_float(T x) { return static_cast<float>(static_cast<compute_t<T>>(x)); }

// The methods behind the table's SHARDTRAIN_MODEL_OP entries, and what every
// op shares: the stream, the handles, the scratch and the staging buffers.
template <class T>
class CudaModelOps {
  using D = device_t<T>;

 public:
  CudaModelOps(CudaBackend& backend, const ModelOpsLimits& l, MemoryTracker& memory)
      : m_backend(backend), m_stream(backend.stream()), m_cublas(backend.cublas()), m_lt(backend.lt()),
        m_candidate(backend.candidate_kernels()), m_limits(l), m_memory(memory) {
    const std::int64_t rows = l.max_batch * l.seq_len;
    const cuda::AttentionShape att{l.max_batch, l.seq_len, l.channels, l.n_head};
    // Fused attention: cuDNN's graphs for the largest micro-batch are built now, and
    // the scratch holds their workspace instead of the unfused kernels' scores.
    std::size_t attention_bytes = 0;
    if (l.n_head > 0 && l.fused_attention) {
      AttnShape largest{l.max_batch, l.seq_len, l.channels, l.n_head};
      largest.fused = true;
      attention_bytes = build_sdpa(largest).workspace_bytes();
    } else if (l.n_head > 0 && l.flash_attention) {
      attention_bytes = cuda::flash_attention_workspace_bytes(att);
    } else if (l.n_head > 0) {
      attention_bytes = cuda::attention_workspace_bytes<D>(att);
    }
    // Models without attention (n_head 0) or embeddings (vocab only classes) size less.
    m_scratch_bytes = std::max({attention_bytes,
                                cuda::layernorm_backward_workspace_bytes(rows, l.channels, m_candidate),
                                cuda::embedding_backward_workspace_bytes(rows, l.channels), std::size_t{256}});
    m_scratch = TrackedBuffer<unsigned char>(memory, MemCategory::Workspace, m_scratch_bytes, backend.memory());
    m_tokens = TrackedBuffer<TokenIndex>(memory, MemCategory::Data, static_cast<std::size_t>(2 * rows),
                                         backend.memory());
    m_values = TrackedBuffer<T>(memory, MemCategory::Data, static_cast<std::size_t>(l.max_input_elems),
                                backend.memory());
    // Encoder classifier: device copy of the per-sequence lengths (attention mask, pooling).
    m_lengths = TrackedBuffer<std::int32_t>(memory, MemCategory::Data, static_cast<std::size_t>(l.max_batch),
                                            backend.memory());
    m_token_stage = std::make_unique<PinnedStage>(static_cast<std::size_t>(2 * rows) * sizeof(TokenIndex));
    m_lengths_stage = std::make_unique<PinnedStage>(static_cast<std::size_t>(l.max_batch) * sizeof(std::int32_t));
    if (m_candidate)  // the cross-entropy rows: tokens (GPT) or sequences / samples (classifiers)
      m_ce_stats = TrackedBuffer<float>(memory, MemCategory::Workspace,
                                        static_cast<std::size_t>(2 * std::max(rows, l.max_batch)), backend.memory());
  }
  ~CudaModelOps() {
    m_convs.clear();  // their descriptors before the handle they were made with
    m_sdpa.clear();
    // Cannot throw here; cudnnDestroy fails only on an invalid handle.
    if (m_cudnn != nullptr) cudnnDestroy(m_cudnn);
  }
  // A pointwise op (model_ops.def, SHARDTRAIN_POINTWISE_OP): kernel(args...) with
  // every T array as its device type, a T value by its bits, and the stream last.
  template <class Kernel, class... A>
  void pointwise(Kernel kernel, const A&... args) {
    kernel(pointwise_arg(args)..., m_stream);
  }

  void stage_tokens(const TokenIndex* tokens, const TokenIndex* targets, std::int64_t n, const TokenIndex** kt,
                    const TokenIndex** kg) {
    SHARDTRAIN_CHECK(n <= m_limits.max_batch * m_limits.seq_len, "more tokens than the model was sized for");
    TokenIndex* d = m_tokens.data();
    if (n > 0) {
      // Staged as the device buffer is laid out: tokens | targets, n each; the
      // caller's arrays are not read after this returns.
      const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(TokenIndex);
      auto* staged = static_cast<TokenIndex*>(m_token_stage->acquire());
      if (tokens) std::memcpy(staged, tokens, bytes);
      std::memcpy(staged + n, targets, bytes);
      if (tokens)
        m_token_stage->send(d, 0, 2 * bytes, m_stream);
      else
        m_token_stage->send(d + n, bytes, bytes, m_stream);
    }
    *kt = tokens ? d : nullptr;
    *kg = d + n;
  }
  const T* stage_values(const float* values, std::int64_t n) {
    SHARDTRAIN_CHECK(n <= static_cast<std::int64_t>(m_values.size()), "more input values than the model was sized for");
    m_rounded.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) m_rounded[i] = static_cast<T>(values[i]);
    m_backend.copy_from_host(m_values.data(), m_rounded.data(), static_cast<std::size_t>(n) * sizeof(T));
    return m_values.data();
  }
  double sum_losses(const T* losses, std::int64_t n) {
    m_losses.resize(static_cast<std::size_t>(n));
    m_backend.copy_to_host(m_losses.data(), losses, static_cast<std::size_t>(n) * sizeof(T));
    double sum = 0.0;
    for (const T& x : m_losses) sum += static_cast<double>(static_cast<compute_t<T>>(x));
    return sum;
  }
  void embedding_forward(const TokenIndex* tokens, const T* wte, const T* wpe, T* out, std::int64_t b,
                         std::int64_t t, std::int64_t c, std::int64_t v) {
    cuda::embedding_forward(tokens, dev(wte), dev(wpe), dev(out), b, t, c, v, m_stream);
  }
  void embedding_backward(const TokenIndex* tokens, const T* dout, T* dwte, T* dwpe, std::int64_t b,
                          std::int64_t t, std::int64_t c, std::int64_t v) {
    cuda::embedding_backward(tokens, dev(dout), dev(dwte), dev(dwpe), b, t, c, v, m_scratch.data(),
                             m_scratch_bytes, m_stream);
  }
  void layernorm_forward(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, std::int64_t n,
                         std::int64_t c, T eps) {
    cuda::layernorm_forward(dev(x), dev(w), dev(b), dev(y), dev(mean), dev(rstd), as_float(eps), n, c, m_stream,
                            m_candidate);
  }
  void layernorm_backward(const T* x, const T* w, const T* mean, const T* rstd, const T* dy, T* dx, T* dw,
                          T* db, std::int64_t n, std::int64_t c) {
    cuda::layernorm_backward(dev(x), dev(w), dev(mean), dev(rstd), dev(dy), dev(dx), dev(dw), dev(db), n, c,
                             m_scratch.data(), m_scratch_bytes, m_stream, m_candidate);
  }
  void linear_forward(const T* x, const T* w, const T* b, T* y, std::int64_t n, std::int64_t k, std::int64_t m,
                      bool accumulate) {
    if (y == m_ce_key.logits) m_ce_key = {};  // new logits: the kept statistics are not theirs
    if (m_lt != nullptr)
      return cuda::lt_linear_forward(*m_lt, m_cublas, m_stream, dev(x), dev(w), dev(b), dev(y), n, k, m, accumulate);
    cuda::linear_forward(m_cublas, m_stream, dev(x), dev(w), dev(b), dev(y), n, k, m, accumulate);
  }
  void linear_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, std::int64_t n, std::int64_t k,
                       std::int64_t m, bool accumulate) {
    if (m_lt != nullptr)
      return cuda::lt_linear_backward(*m_lt, m_cublas, m_stream, dev(x), dev(w), dev(dy), dev(dx), dev(dw), dev(db), n,
                                      k, m, accumulate);
    cuda::linear_backward(m_cublas, m_stream, dev(x), dev(w), dev(dy), dev(dx), dev(dw), dev(db), n, k, m,
                          accumulate);
  }
  // The fused MLP entries (model.gelu = "epilogue"): the GELU in the cuBLASLt
  // matmul's epilogue where the backend has a cuBLASLt context; without one,
  // exactly the two ops they stand for.
  void linear_gelu_forward(const T* x, const T* w, const T* b, T* pre, T* act, std::int64_t n, std::int64_t k,
                           std::int64_t m) {
    if (m_lt != nullptr)
      return cuda::lt_linear_gelu_forward(*m_lt, m_cublas, m_stream, dev(x), dev(w), dev(b), dev(pre), dev(act), n,
                                          k, m);
    linear_forward(x, w, b, pre, n, k, m, false);
    cuda::gelu_forward(dev(pre), dev(act), n * m, m_stream);
  }
  void linear_dgelu_backward(const T* x, const T* w, const T* dy, const T* pre, T* dpre, T* dw, T* db,
                             T* dx_scratch, std::int64_t n, std::int64_t k, std::int64_t m, bool accumulate) {
    if (m_lt != nullptr)
      return cuda::lt_linear_dgelu_backward(*m_lt, m_cublas, m_stream, dev(x), dev(w), dev(dy), dev(pre), dev(dpre),
                                            dev(dw), dev(db), n, k, m, accumulate);
    linear_backward(x, w, dy, dx_scratch, dw, db, n, k, m, accumulate);
    cuda::gelu_backward(dev(pre), dev(dx_scratch), dev(dpre), n * k, m_stream);
  }
  void attention_forward(const AttnShape& s, const T* qkv, T* saved, T*, T* out) {
    if (s.fused) return fused_attention_forward(s, qkv, saved, out);
    if (s.flash) return flash_attention_forward(s, qkv, saved, out);
    cuda::attention_forward(m_cublas, m_stream, shape(s), dev(qkv), dev(saved), m_scratch.data(), m_scratch_bytes,
                            dev(out), device_lengths(s.lengths, s.batch));
  }
  void attention_backward(const AttnShape& s, const T* out, const T* dout, const T* saved, T*, T* dqkv) {
    if (s.fused) return fused_attention_backward(s, out, dout, saved, dqkv);
    if (s.flash) return flash_attention_backward(s, out, dout, saved, dqkv);
    cuda::attention_backward(m_cublas, m_stream, shape(s), dev(dout), dev(saved), m_scratch.data(),
                             m_scratch_bytes, dev(dqkv), device_lengths(s.lengths, s.batch));
  }
  // Candidate: the forward keeps its row statistics, and the backward of the same
  // (logits, targets, n, v) uses them (cuda::cross_entropy_backward: the same bits,
  // one read of the logits fewer). Anything else that writes those logits (the
  // Linear that makes them) forgets them first; the backward forgets them after
  // (it overwrites the logits in place).
  void cross_entropy_forward(const T* logits, const TokenIndex* targets, T* losses, std::int64_t n,
                             std::int64_t v) {
    float* stats = nullptr;
    m_ce_key = {};
    if (m_candidate && 2 * n <= static_cast<std::int64_t>(m_ce_stats.size())) {
      stats = m_ce_stats.data();
      m_ce_key = {logits, targets, n, v};
    }
    cuda::cross_entropy_forward(dev(logits), targets, dev(losses), n, v, m_stream, stats);
  }
  void cross_entropy_backward(const T* logits, const TokenIndex* targets, T scale, T* dlogits, std::int64_t n,
                              std::int64_t v) {
    const bool reuse = m_ce_key.logits != nullptr && m_ce_key == CeKey{logits, targets, n, v};
    m_ce_key = {};
    cuda::cross_entropy_backward(dev(logits), targets, as_float(scale), dev(dlogits), n, v, m_stream,
                                 reuse ? m_ce_stats.data() : nullptr);
  }
  // --- CNN ops: conv through cuDNN (kernels/cuda/cudnn_conv.cuh; the model's
  // workspace argument is sized for the host kernels (conv2d_workspace_elems:
  // oneDNN's layout copies, scratchpad and dw / db staging), unused here), max-pool
  // kernels bitwise as the host's (kernels/cuda/pool.cuh; dropout is pointwise) ---
  void conv2d_forward(const Conv2dShape& s, const T* x, const T* w, const T* b, T*, T* y) {
    if (s.batch <= 0) return;
    Conv& c = conv(s);
    c.op->forward(m_stream, dev(x), dev(w), dev(b), dev(y), c.workspace.data());
  }
  void conv2d_backward(const Conv2dShape& s, const T* x, const T* w, const T* dy, T*, T* dx, T* dw,
                       T* db) {
    if (s.batch <= 0) return;
    Conv& c = conv(s);
    c.op->backward(m_stream, dev(x), dev(w), dev(dy), dev(dx), dev(dw), dev(db), c.workspace.data());
  }
  void max_pool2d_forward(const Pool2dShape& s, const T* x, T* y, std::int32_t* argmax) {
    cuda::max_pool2d_forward(s, dev(x), dev(y), argmax, m_stream);
  }
  void max_pool2d_backward(const Pool2dShape& s, const T* dy, const std::int32_t* argmax, T* dx) {
    cuda::max_pool2d_backward(s, dev(dy), argmax, dev(dx), m_stream);
  }
  // --- end CNN ops ---
  // --- encoder classifier ops ---
  void seq_mean_pool_forward(const T* x, const std::int32_t* lengths, T* y, std::int64_t b, std::int64_t t,
                             std::int64_t c) {
    cuda::seq_mean_pool_forward(dev(x), device_lengths(lengths, b), dev(y), b, t, c, m_stream);
  }
  void seq_mean_pool_backward(const T* dy, const std::int32_t* lengths, T* dx, std::int64_t b, std::int64_t t,
                              std::int64_t c) {
    cuda::seq_mean_pool_backward(dev(dy), device_lengths(lengths, b), dev(dx), b, t, c, m_stream);
  }
  // --- end encoder classifier ops ---

 private:
  // CNN: a cuDNN convolution of one shape (batch included: a smaller last
  // micro-batch gets its own) and the device scratch only it uses.
  struct Conv {
    std::unique_ptr<cuda::CudnnConv2d<D>> op;
    TrackedBuffer<unsigned char> workspace;  // Workspace: op->workspace_bytes()
  };
  // The convolution of shape s, made (with the cuDNN handle) on first use.
  Conv& conv(const Conv2dShape& s) {
    const std::array<std::int64_t, 9> key{s.batch,    s.in_channels, s.height, s.width, s.out_channels,
                                          s.kernel_h, s.kernel_w,    s.stride, s.padding};
    auto it = m_convs.find(key);
    if (it != m_convs.end()) return it->second;
    if (m_cudnn == nullptr) SHARDTRAIN_CUDNN_CHECK(cudnnCreate(&m_cudnn));
    Conv c;
    c.op = std::make_unique<cuda::CudnnConv2d<D>>(
        m_cudnn, cuda::ConvShape{s.batch, s.in_channels, s.height, s.width, s.out_channels, s.kernel_h, s.kernel_w,
                                 s.stride, s.padding});
    c.workspace = TrackedBuffer<unsigned char>(m_memory, MemCategory::Workspace, c.op->workspace_bytes(),
                                               m_backend.memory());
    return m_convs.emplace(key, std::move(c)).first->second;
  }

  // --- fused attention (model.attention = "fused"): cuDNN's flash-attention graphs,
  // one CudnnSdpa per micro-batch size, the largest built with the ops (its
  // workspace sizes m_scratch). `saved` (op_sizes::attention_saved) holds a copy of
  // qkv (the model's qkv is the blocks' shared workspace, rewritten by the next
  // block) and the rows' fp32 statistics, each started on a 16-byte boundary inside
  // the 32 spare elements. backward reads the forward's `out`. ---
  struct FusedSaved {
    D* qkv;
    float* stats;
  };
  static void* align16(const void* p) {
    const auto u = reinterpret_cast<std::uintptr_t>(p);
    return reinterpret_cast<void*>((u + 15) & ~std::uintptr_t{15});
  }
  static FusedSaved fused_saved(const AttnShape& s, const T* saved) {
    D* qkv = static_cast<D*>(align16(saved));
    auto* stats = static_cast<float*>(align16(qkv + 3 * s.batch * s.seq_len * s.channels));
    return {qkv, stats};
  }
  static void check_aligned(const void* p, const char* what) {
    SHARDTRAIN_CHECK(reinterpret_cast<std::uintptr_t>(p) % 16 == 0,
                     fmt::format("model.attention = \"fused\": the attention's {} is not 16-byte aligned, which "
                                 "cuDNN needs (this shape's buffer offsets: use model.attention = \"unfused\")",
                                 what));
  }
  const cuda::CudnnSdpa& build_sdpa(const AttnShape& s) {
    if constexpr (std::is_same_v<D, float>) {
      SHARDTRAIN_FAIL("model.attention = \"fused\" needs fp16 or bf16 storage: cuDNN has no fp32 flash attention");
    } else {
      SHARDTRAIN_CHECK(s.causal && s.lengths == nullptr,
                       "fused attention takes causal, unpadded sequences only (the GPT's)");
      auto it = m_sdpa.find(s.batch);
      if (it != m_sdpa.end()) return *it->second;
      if (m_cudnn == nullptr) SHARDTRAIN_CUDNN_CHECK(cudnnCreate(&m_cudnn));
      cudnn::SdpaShape shape;
      shape.batch = s.batch;
      shape.seq_len = s.seq_len;
      shape.channels = s.channels;
      shape.n_head = s.n_head;
      shape.dtype = cuda::cudnn_sdpa_dtype<D>();
      shape.causal = true;
      shape.training = true;  // the statistics are always written: saved has room for them
      auto op = std::make_unique<cuda::CudnnSdpa>(m_cudnn, shape);
      // The largest micro-batch's graphs sized the scratch; a smaller one needing more is refused.
      if (m_scratch_bytes > 0)
        SHARDTRAIN_CHECK(op->workspace_bytes() <= m_scratch_bytes,
                         fmt::format("fused attention for {} sequences needs {} bytes of workspace, more than the {} "
                                     "bytes sized for the largest micro-batch",
                                     s.batch, op->workspace_bytes(), m_scratch_bytes));
      return *m_sdpa.emplace(s.batch, std::move(op)).first->second;
    }
  }
  // What both directions start with: the graphs for this micro-batch size (fp32 is
  // refused there), the saved pieces, and the forward's output checked aligned.
  std::pair<const cuda::CudnnSdpa*, FusedSaved> fused_call(const AttnShape& s, const T* saved, const T* out) {
    const cuda::CudnnSdpa& op = build_sdpa(s);
    check_aligned(out, "output");
    return {&op, fused_saved(s, saved)};
  }
  void fused_attention_forward(const AttnShape& s, const T* qkv, T* saved, T* out) {
    if (s.batch == 0) return;
    const auto [op, f] = fused_call(s, saved, out);
    if constexpr (!std::is_same_v<D, float>) {  // (fp32 was refused by fused_call)
      const std::size_t bytes = static_cast<std::size_t>(3 * s.batch * s.seq_len * s.channels) * sizeof(T);
      SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(f.qkv, qkv, bytes, cudaMemcpyDeviceToDevice, m_stream));
      op->template forward<D>(m_stream, f.qkv, dev(out), f.stats, m_scratch.data());
    }
  }
  void fused_attention_backward(const AttnShape& s, const T* out, const T* dout, const T* saved, T* dqkv) {
    if (s.batch == 0) return;
    const auto [op, f] = fused_call(s, saved, out);
    check_aligned(dout, "output gradient");
    check_aligned(dqkv, "qkv gradient");
    if constexpr (!std::is_same_v<D, float>)
      op->template backward<D>(m_stream, f.qkv, dev(out), dev(dout), f.stats, dev(dqkv), m_scratch.data());
  }

  // --- our tiled attention (model.attention = "flash"): `saved` has the fused
  // layout (fused_saved: a copy of qkv, then the rows' fp32 log-sum-exp); the
  // backward's rowsum(dO * O) lives in m_scratch (sized for the largest micro-batch
  // by the constructor). Any storage type; causal or not; no lengths. ---
  void check_flash(const AttnShape& s) const {
    SHARDTRAIN_CHECK(s.lengths == nullptr, "flash attention takes unpadded sequences only (model.attention = "
                                           "\"flash\" is the GPT's)");
  }
  void flash_attention_forward(const AttnShape& s, const T* qkv, T* saved, T* out) {
    check_flash(s);
    if (s.batch == 0) return;
    const FusedSaved f = fused_saved(s, saved);
    const std::size_t bytes = static_cast<std::size_t>(3 * s.batch * s.seq_len * s.channels) * sizeof(T);
    SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(f.qkv, qkv, bytes, cudaMemcpyDeviceToDevice, m_stream));
    cuda::flash_attention_forward<D>(m_stream, shape(s), f.qkv, dev(out), f.stats);
  }
  void flash_attention_backward(const AttnShape& s, const T* out, const T* dout, const T* saved, T* dqkv) {
    check_flash(s);
    if (s.batch == 0) return;
    const FusedSaved f = fused_saved(s, saved);
    cuda::flash_attention_backward<D>(m_stream, shape(s), f.qkv, dev(out), dev(dout), f.stats, m_scratch.data(),
                                      m_scratch_bytes, dev(dqkv));
  }

  template <class A>
  static decltype(auto) pointwise_arg(const A& arg) {
    if constexpr (std::is_same_v<A, const T*> || std::is_same_v<A, T*>) {
      return dev(arg);
    } else if constexpr (std::is_same_v<A, T>) {
      D bits;
      std::memcpy(static_cast<void*>(&bits), &arg, sizeof bits);  // the same bits
      return bits;
    } else {
      return (arg);
    }
  }
  static cuda::AttentionShape shape(const AttnShape& s) {
    return {s.batch, s.seq_len, s.channels, s.n_head, s.causal};
  }
  // The host lengths (nullptr: all valid) copied to the device buffer, in stream
  // order; skipped when the same values are already there (every block of a
  // micro-batch passes the same array).
  const std::int32_t* device_lengths(const std::int32_t* host, std::int64_t b) {
    if (host == nullptr || b <= 0) return nullptr;
    SHARDTRAIN_CHECK(b <= static_cast<std::int64_t>(m_lengths.size()), "more sequences than the model was sized for");
    if (m_lengths_host.size() != static_cast<std::size_t>(b) ||
        !std::equal(host, host + b, m_lengths_host.begin())) {
      m_lengths_host.assign(host, host + b);
      const std::size_t bytes = static_cast<std::size_t>(b) * sizeof(std::int32_t);
      std::memcpy(m_lengths_stage->acquire(), host, bytes);  // the caller's array is not read after this
      m_lengths_stage->send(m_lengths.data(), 0, bytes, m_stream);
    }
    return m_lengths.data();
  }

  CudaBackend& m_backend;
  cudaStream_t m_stream;
  cublasHandle_t m_cublas;
  cuda::LtContext* m_lt;  // the backend's cuBLASLt Linear (model.gemm = "cublaslt"), or nullptr: cuBLAS
  // train.device_kernels = "candidate": LayerNorm's row kernels and grouped dw/db
  // passes, cross-entropy's backward on the forward's row statistics
  bool m_candidate;
  ModelOpsLimits m_limits;
  TrackedBuffer<unsigned char> m_scratch;  // Workspace: the largest op's scratch
  std::size_t m_scratch_bytes = 0;
  TrackedBuffer<TokenIndex> m_tokens;      // Data: tokens | targets of the current micro-batch
  std::vector<T> m_losses;                 // host copy of a micro-batch's losses
  TrackedBuffer<T> m_values;               // Data: stage_values' device copy
  std::vector<T> m_rounded;                // stage_values' host rounding
  TrackedBuffer<std::int32_t> m_lengths;   // Data: device copy of the current lengths
  std::vector<std::int32_t> m_lengths_host;  // what m_lengths holds
  std::unique_ptr<PinnedStage> m_token_stage;    // pinned staging of tokens | targets
  std::unique_ptr<PinnedStage> m_lengths_stage;  // pinned staging of the lengths
  // Candidate: the last cross-entropy forward's row statistics and what they are of.
  struct CeKey {
    const T* logits = nullptr;
    const TokenIndex* targets = nullptr;
    std::int64_t n = 0, v = 0;
    bool operator==(const CeKey&) const = default;
  };
  TrackedBuffer<float> m_ce_stats;  // Workspace: 2 floats per row (candidate only)
  CeKey m_ce_key;
  MemoryTracker& m_memory;                 // where the CNN's cuDNN workspaces are counted
  cudnnHandle_t m_cudnn = nullptr;         // CNN: made with the first convolution
  std::map<std::array<std::int64_t, 9>, Conv> m_convs;  // CNN: one per distinct Conv2dShape
  std::map<std::int64_t, std::unique_ptr<cuda::CudnnSdpa>> m_sdpa;  // fused attention: one per micro-batch size
};

}  // namespace

template <class T>
std::unique_ptr<ModelOps<T>> make_cuda_model_ops(Backend& backend, const ModelOpsLimits& limits,
                                                 MemoryTracker& memory) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  SHARDTRAIN_CHECK(cuda != nullptr, "make_cuda_model_ops needs a CudaBackend");
  auto object = std::make_unique<CudaModelOps<T>>(*cuda, limits, memory);
  CudaModelOps<T>& self = *object;
  auto ops = std::make_unique<ModelOps<T>>(std::move(object), cuda->memory());
  // Every line of model_ops.def: a method of CudaModelOps, or (pointwise) the kernel cuda::name.
#define SHARDTRAIN_MODEL_OP(name, profile_op, signature) SHARDTRAIN_BIND_MODEL_OP_METHOD(*ops, self, name);
#define SHARDTRAIN_POINTWISE_OP(name, profile_op, signature)                             \
  ops->name.bind(self, [](CudaModelOps<T>& o, const auto&... args) {                     \
    o.pointwise([](const auto&... kernel_args) { cuda::name(kernel_args...); }, args...); \
  });
#include "backend/model_ops.def"
  return ops;
}

template std::unique_ptr<ModelOps<float>> make_cuda_model_ops<float>(Backend&, const ModelOpsLimits&, MemoryTracker&);
template std::unique_ptr<ModelOps<f16>> make_cuda_model_ops<f16>(Backend&, const ModelOpsLimits&, MemoryTracker&);
template std::unique_ptr<ModelOps<bf16>> make_cuda_model_ops<bf16>(Backend&, const ModelOpsLimits&, MemoryTracker&);

}  // namespace shardtrain
