// The host backend: host memory, the Kokkos kernels of kernels/, and no stream
// to order (every kernel has finished when it returns).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "backend/model_ops.hpp"
#include "backend/profiled_model_ops.hpp"
#include "core/error.hpp"
#include "kernels/attention.hpp"
#include "kernels/conv2d.hpp"  // CNN ops
#include "kernels/core_peak.hpp"
#include "kernels/cpu_compute.hpp"
#include "kernels/dropout.hpp"
#include "kernels/pool.hpp"
#include "kernels/adamw.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gelu.hpp"
#include "core/half.hpp"
#include "kernels/half_scratch.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/linear.hpp"
#include "kernels/relu.hpp"
#include "kernels/tanh.hpp"  // the BERT pooler
#include "kernels/seq_pool.hpp"  // encoder classifier ops

#ifdef SHARDTRAIN_WITH_CUDA
#include "backend/cuda/cuda_backend.hpp"
#endif

namespace shardtrain {

namespace {

template <class P>
class HostVectorOps final : public VectorOps<P> {
 public:
  void fill_zero(P* x, std::int64_t n) override { std::fill(x, x + n, P(0.0f)); }
  // dst = P(compute(dst) + compute(src)), rounded once: the vectorised kernel.
  void accumulate(const P* src, P* dst, std::int64_t n) override {
    const std::size_t len = static_cast<std::size_t>(n);
    shardtrain::accumulate<P>(CView1<P>(src, len), View1<P>(dst, len));
  }
  void copy(const P* src, P* dst, std::int64_t n) override { std::copy(src, src + n, dst); }
  void set_inf(P* x) override { x[0] = P(std::numeric_limits<float>::infinity()); }
  double sum_of_squares(const ParamLayout& layout, const P* g, std::int64_t lo, std::int64_t hi) override {
    // Tensor by tensor (kernels/adamw.hpp): lane sums within a tensor, tensors in layout order.
    double total = 0.0;
    for (const auto& e : layout.entries()) {
      const std::int64_t a = std::max(lo, e.offset), b = std::min(hi, e.offset + e.numel);
      if (a < b) total += shardtrain::sum_of_squares<P>(CView1<P>(g + (a - lo), static_cast<std::size_t>(b - a)));
    }
    return total;
  }
  std::int64_t first_non_finite(const P* x, std::int64_t n) override {
    if constexpr (std::is_same_v<P, double>) {
      for (std::int64_t i = 0; i < n; ++i)
        if (!std::isfinite(x[i])) return i;
      return -1;
    } else {
      return shardtrain::first_non_finite(x, static_cast<std::size_t>(n));
    }
  }
  // 16 bits <-> fp32 through the vectorised bulk conversions of core/half.hpp.
  void widen(const P* x, float* y, std::int64_t n) override {
    if constexpr (is_half_v<P>) {
      shardtrain::convert(x, y, static_cast<std::size_t>(n));
    } else {
      for (std::int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i]);
    }
  }
  void narrow(const float* x, P* y, std::int64_t n) override {
    if constexpr (is_half_v<P>) {
      shardtrain::convert(x, y, static_cast<std::size_t>(n));
    } else {
      for (std::int64_t i = 0; i < n; ++i) y[i] = P(x[i]);
    }
  }
  void adamw(const ParamLayout& layout, const AdamWUpdate& u, P* params, const P* grads, float* master,
             float* m, float* v) override {
    if constexpr (std::is_same_v<P, double>) {
      SHARDTRAIN_FAIL("AdamW keeps fp32 state; a double model has no AdamW");
    } else {
      SHARDTRAIN_CHECK(master != nullptr || (std::is_same_v<P, float>), "a 16-bit model needs AdamW master weights");
      const double t = static_cast<double>(u.step + 1);
      AdamWCoeffs c;
      c.beta1 = static_cast<float>(u.beta1);
      c.beta2 = static_cast<float>(u.beta2);
      c.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(u.beta2, t)));
      c.step_size = static_cast<float>(u.lr) / static_cast<float>(1.0 - std::pow(u.beta1, t));
      c.eps = static_cast<float>(u.eps);
      c.grad_scale = u.grad_scale;
      const float decay = static_cast<float>(1.0 - u.lr * u.weight_decay);
      for (const auto& e : layout.entries()) {
        const std::int64_t a = std::max(u.lo, e.offset), b = std::min(u.hi, e.offset + e.numel);
        if (a >= b) continue;
        c.decay = e.weight_decay ? decay : 1.0f;
        const std::size_t off = static_cast<std::size_t>(a - u.lo), len = static_cast<std::size_t>(b - a);
        shardtrain::adamw_update<P>(c, View1<P>(params + off, len), CView1<P>(grads + off, len),
                                    master ? View1<float>(master + off, len) : View1<float>(),
                                    View1<float>(m + off, len), View1<float>(v + off, len));
      }
    }
  }
};

class HostBackend final : public Backend {
 public:
  BackendKind kind() const override { return BackendKind::Host; }
  std::string describe() const override { return "host (" + host_kokkos_describe() + "; " + cpu_compute_describe() + ")"; }
  ComputePeak compute_peak(PrecisionMode precision, int threads) override {
    // bf16: the unit oneDNN runs bf16 GEMMs on (AMX, AVX512-BF16, or the fp32 FMA
    // unit on converted tiles); fp32 and fp16 (fp32 GEMMs on converted tiles): the
    // fp32 FMA unit (kernels/core_peak.hpp).
    const CorePeak p = measure_core_peak();
    const bool bf16 = precision == PrecisionMode::Bf16;
    const double per_core = bf16 ? p.bf16_floor_gflops : p.fp32_gflops;
    const std::string unit = bf16 ? p.bf16_floor_label()
                             : precision == PrecisionMode::Fp16
                                 ? floor_unit_label("fp16", p.units.fp32, true) +
                                       " (fp16 GEMMs run in fp32 on converted tiles)"
                                 : p.fp32_floor_label();
    return {per_core * threads, fmt::format("{} {:.1f} GFLOP/s per core x {} thread{}; oneDNN ISA {}", unit, per_core,
                                            threads, threads == 1 ? "" : "s", p.onednn_isa)};
  }
  MemorySpace* memory() override { return nullptr; }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
  }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
  }
  void synchronize() override {}

 protected:
  VectorOps<float>& ops_for(float*) override { return m_f32; }
  VectorOps<double>& ops_for(double*) override { return m_f64; }
  VectorOps<f16>& ops_for(f16*) override { return m_f16; }
  VectorOps<bf16>& ops_for(bf16*) override { return m_bf16; }

 private:
  HostVectorOps<float> m_f32;
  HostVectorOps<double> m_f64;
  HostVectorOps<f16> m_f16;
  HostVectorOps<bf16> m_bf16;
};

AttentionShape host_shape(const AttnShape& s) { return {s.batch, s.seq_len, s.channels, s.n_head, s.causal}; }

// Fused attention is cuDNN's and flash attention our CUDA kernels' (the device ops);
// the trainer refuses model.attention = "fused" and "flash" on the host before a model
// exists, so reaching this is a bug.
void refuse_fused(const AttnShape& s) {
  SHARDTRAIN_CHECK(!s.fused, "fused attention runs on a CUDA device only (model.attention = \"fused\")");
  SHARDTRAIN_CHECK(!s.flash, "flash attention runs on a CUDA device only (model.attention = \"flash\")");
}

// AttnShape's / the pooling ops' host lengths as a view (empty: all valid).
CView1<std::int32_t> lengths_view(const std::int32_t* lengths, std::int64_t b) {
  return lengths ? CView1<std::int32_t>(lengths, b) : CView1<std::int32_t>();
}

// A pointwise op's argument as its host kernel takes it (model_ops.def,
// SHARDTRAIN_POINTWISE_OP): a T array as a view of n elements, anything else as is.
template <class T, class A>
decltype(auto) host_pointwise_arg(const A& arg, std::int64_t n) {
  if constexpr (std::is_same_v<A, const T*>)
    return CView1<T>(arg, n);
  else if constexpr (std::is_same_v<A, T*>)
    return View1<T>(arg, n);
  else
    return (arg);
}

// kernel(args...) over views, for args = (..., n): n sizes the views and is not passed on.
template <class T, class Kernel, class Args, std::size_t... I>
void host_pointwise(Kernel kernel, const Args& args, std::index_sequence<I...>) {
  const std::int64_t n = std::get<sizeof...(I)>(args);
  kernel(host_pointwise_arg<T>(std::get<I>(args), n)...);
}

// The methods behind the table's SHARDTRAIN_MODEL_OP entries: the Kokkos
// kernels over unmanaged views of the caller's pointers. A 16-bit model's tiled
// kernels (GEMMs without native bf16, attention, embedding dwte) convert tiles into
// fp32 scratch (kernels/half_scratch.hpp), owned here and bound while this object
// lives; the row kernels run directly on 16-bit memory.
template <class T>
class HostModelOps {
 public:
  HostModelOps(const ModelOpsLimits& l, MemoryTracker& memory) {
    if constexpr (is_half_v<T>) {
      const std::int64_t need = host_half_scratch_elems(l);
      m_half_scratch = TrackedBuffer<float>(memory, MemCategory::Workspace, static_cast<std::size_t>(need));
      half_scratch_bind(m_half_scratch.data(), m_half_scratch.size());
    }
  }
  ~HostModelOps() {
    if (m_half_scratch.size() > 0 && half_scratch_size() == m_half_scratch.size()) half_scratch_bind(nullptr, 0);
  }
  void stage_tokens(const TokenIndex* tokens, const TokenIndex* targets, std::int64_t,
                    const TokenIndex** kt, const TokenIndex** kg) {
    *kt = tokens;
    *kg = targets;
  }
  const T* stage_values(const float* values, std::int64_t n) {
    if constexpr (std::is_same_v<T, float>) {
      return values;
    } else {
      m_values.resize(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) m_values[i] = static_cast<T>(values[i]);
      return m_values.data();
    }
  }
  double sum_losses(const T* losses, std::int64_t n) {
    double sum = 0.0;
    for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(static_cast<compute_t<T>>(losses[i]));
    return sum;
  }
  void embedding_forward(const TokenIndex* tokens, const T* wte, const T* wpe, T* out, std::int64_t b,
                         std::int64_t t, std::int64_t c, std::int64_t v) {
    shardtrain::embedding_forward<T>(CView2<TokenIndex>(tokens, b, t), CView2<T>(wte, v, c), CView2<T>(wpe, t, c),
                                     View3<T>(out, b, t, c));
  }
  void embedding_backward(const TokenIndex* tokens, const T* dout, T* dwte, T* dwpe, std::int64_t b,
                          std::int64_t t, std::int64_t c, std::int64_t v) {
    shardtrain::embedding_backward<T>(CView2<TokenIndex>(tokens, b, t), CView3<T>(dout, b, t, c),
                                      View2<T>(dwte, v, c), View2<T>(dwpe, t, c));
  }
  void layernorm_forward(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, std::int64_t n,
                         std::int64_t c, T eps) {
    shardtrain::layernorm_forward<T>(CView2<T>(x, n, c), CView1<T>(w, c), CView1<T>(b, c), View2<T>(y, n, c),
                                     View1<T>(mean, n), View1<T>(rstd, n), eps);
  }
  void layernorm_backward(const T* x, const T* w, const T* mean, const T* rstd, const T* dy, T* dx, T* dw,
                          T* db, std::int64_t n, std::int64_t c) {
    shardtrain::layernorm_backward<T>(CView2<T>(x, n, c), CView1<T>(w, c), CView1<T>(mean, n),
                                      CView1<T>(rstd, n), CView2<T>(dy, n, c), View2<T>(dx, n, c),
                                      View1<T>(dw, c), View1<T>(db, c));
  }
  void linear_forward(const T* x, const T* w, const T* b, T* y, std::int64_t n, std::int64_t k, std::int64_t m,
                      bool accumulate) {
    shardtrain::linear_forward<T>(CView2<T>(x, n, k), CView2<T>(w, m, k), b ? CView1<T>(b, m) : CView1<T>(),
                                  View2<T>(y, n, m), accumulate);
  }
  void linear_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, std::int64_t n, std::int64_t k,
                       std::int64_t m, bool accumulate) {
    shardtrain::linear_backward<T>(CView2<T>(x, n, k), CView2<T>(w, m, k), CView2<T>(dy, n, m),
                                   dx ? View2<T>(dx, n, k) : View2<T>(), View2<T>(dw, m, k),
                                   db ? View1<T>(db, m) : View1<T>(), accumulate);
  }
  // The fused MLP entries: the host has no epilogues, so each is exactly its two ops.
  void linear_gelu_forward(const T* x, const T* w, const T* b, T* pre, T* act, std::int64_t n, std::int64_t k,
                           std::int64_t m) {
    linear_forward(x, w, b, pre, n, k, m, false);
    const std::size_t len = static_cast<std::size_t>(n * m);
    shardtrain::gelu_forward<T>(CView1<T>(pre, len), View1<T>(act, len));
  }
  void linear_dgelu_backward(const T* x, const T* w, const T* dy, const T* pre, T* dpre, T* dw, T* db,
                             T* dx_scratch, std::int64_t n, std::int64_t k, std::int64_t m, bool accumulate) {
    linear_backward(x, w, dy, dx_scratch, dw, db, n, k, m, accumulate);
    const std::size_t len = static_cast<std::size_t>(n * k);
    shardtrain::gelu_backward<T>(CView1<T>(pre, len), CView1<T>(dx_scratch, len), View1<T>(dpre, len));
  }
  void attention_forward(const AttnShape& s, const T* qkv, T* saved, T* workspace, T* out) {
    refuse_fused(s);
    const AttentionShape h = host_shape(s);
    shardtrain::attention_forward<T>(h, CView3<T>(qkv, s.batch, s.seq_len, 3 * s.channels),
                                     View1<T>(saved, attention_saved_elems(h)),
                                     View1<T>(workspace, attention_workspace_elems(h)),
                                     View3<T>(out, s.batch, s.seq_len, s.channels), lengths_view(s.lengths, s.batch));
  }
  void attention_backward(const AttnShape& s, const T*, const T* dout, const T* saved, T* workspace,
                          T* dqkv) {
    refuse_fused(s);
    const AttentionShape h = host_shape(s);
    shardtrain::attention_backward<T>(h, CView3<T>(dout, s.batch, s.seq_len, s.channels),
                                      CView1<T>(saved, attention_saved_elems(h)),
                                      View1<T>(workspace, attention_workspace_elems(h)),
                                      View3<T>(dqkv, s.batch, s.seq_len, 3 * s.channels),
                                      lengths_view(s.lengths, s.batch));
  }
  void cross_entropy_forward(const T* logits, const TokenIndex* targets, T* losses, std::int64_t n,
                             std::int64_t v) {
    shardtrain::cross_entropy_forward<T>(CView2<T>(logits, n, v), CView1<TokenIndex>(targets, n),
                                         View1<T>(losses, n));
  }
  void cross_entropy_backward(const T* logits, const TokenIndex* targets, T scale, T* dlogits, std::int64_t n,
                              std::int64_t v) {
    shardtrain::cross_entropy_backward<T>(CView2<T>(logits, n, v), CView1<TokenIndex>(targets, n), scale,
                                          View2<T>(dlogits, n, v));
  }
  // --- CNN ops (conv2d, max-pool; dropout is pointwise) ---
  void conv2d_forward(const Conv2dShape& s, const T* x, const T* w, const T* b, T* workspace, T* y) {
    shardtrain::conv2d_forward<T>(s, conv_x(s, x), conv_w(s, w), b ? CView1<T>(b, s.out_channels) : CView1<T>(),
                                  View1<T>(workspace, conv2d_workspace_elems<T>(s)),
                                  View4<T>(y, s.batch, s.out_channels, s.out_h(), s.out_w()));
  }
  void conv2d_backward(const Conv2dShape& s, const T* x, const T* w, const T* dy, T* workspace, T* dx, T* dw,
                       T* db) {
    shardtrain::conv2d_backward<T>(
        s, conv_x(s, x), conv_w(s, w), CView4<T>(dy, s.batch, s.out_channels, s.out_h(), s.out_w()),
        View1<T>(workspace, conv2d_workspace_elems<T>(s)),
        dx ? View4<T>(dx, s.batch, s.in_channels, s.height, s.width) : View4<T>(),
        View4<T>(dw, s.out_channels, s.in_channels, s.kernel_h, s.kernel_w),
        db ? View1<T>(db, s.out_channels) : View1<T>());
  }
  void max_pool2d_forward(const Pool2dShape& s, const T* x, T* y, std::int32_t* argmax) {
    shardtrain::max_pool2d_forward<T>(s, CView4<T>(x, s.batch, s.channels, s.height, s.width),
                                      View4<T>(y, s.batch, s.channels, s.out_h(), s.out_w()),
                                      View4<std::int32_t>(argmax, s.batch, s.channels, s.out_h(), s.out_w()));
  }
  void max_pool2d_backward(const Pool2dShape& s, const T* dy, const std::int32_t* argmax, T* dx) {
    shardtrain::max_pool2d_backward<T>(
        s, CView4<T>(dy, s.batch, s.channels, s.out_h(), s.out_w()),
        CView4<std::int32_t>(argmax, s.batch, s.channels, s.out_h(), s.out_w()),
        View4<T>(dx, s.batch, s.channels, s.height, s.width));
  }
  static CView4<T> conv_x(const Conv2dShape& s, const T* x) {
    return CView4<T>(x, s.batch, s.in_channels, s.height, s.width);
  }
  static CView4<T> conv_w(const Conv2dShape& s, const T* w) {
    return CView4<T>(w, s.out_channels, s.in_channels, s.kernel_h, s.kernel_w);
  }
  // --- end CNN ops ---
  // --- encoder classifier ops ---
  void seq_mean_pool_forward(const T* x, const std::int32_t* lengths, T* y, std::int64_t b, std::int64_t t,
                             std::int64_t c) {
    shardtrain::seq_mean_pool_forward<T>(CView3<T>(x, b, t, c), lengths_view(lengths, b), View2<T>(y, b, c));
  }
  void seq_mean_pool_backward(const T* dy, const std::int32_t* lengths, T* dx, std::int64_t b, std::int64_t t,
                              std::int64_t c) {
    shardtrain::seq_mean_pool_backward<T>(CView2<T>(dy, b, c), lengths_view(lengths, b), View3<T>(dx, b, t, c));
  }
  // --- end encoder classifier ops ---

 private:
  TrackedBuffer<float> m_half_scratch;  // Workspace
  std::vector<T> m_values;              // stage_values of a non-float model
};

// The host's op table: every line of model_ops.def bound, to a method of
// HostModelOps or (pointwise) to the kernel shardtrain::name<T>.
template <class T>
std::unique_ptr<ModelOps<T>> make_host_model_ops(const ModelOpsLimits& limits, MemoryTracker& memory) {
  auto object = std::make_unique<HostModelOps<T>>(limits, memory);
  HostModelOps<T>& self = *object;
  auto ops = std::make_unique<ModelOps<T>>(std::move(object), nullptr);
#define SHARDTRAIN_MODEL_OP(name, profile_op, signature) SHARDTRAIN_BIND_MODEL_OP_METHOD(*ops, self, name);
#define SHARDTRAIN_POINTWISE_OP(name, profile_op, signature)                                      \
  ops->name.bind(self, [](HostModelOps<T>&, const auto&... args) {                                \
    host_pointwise<T>([](const auto&... kernel_args) { shardtrain::name<T>(kernel_args...); },    \
                      std::forward_as_tuple(args...), std::make_index_sequence<sizeof...(args) - 1>()); \
  });
#include "backend/model_ops.def"
  return ops;
}

}  // namespace

std::int64_t host_half_scratch_elems(const ModelOpsLimits& l) {
  const std::int64_t bt = l.max_batch * l.seq_len, c = l.channels, v = l.vocab;
  const AttentionShape att{l.max_batch, l.seq_len, c, l.n_head};
  std::int64_t need = l.half_scratch_elems;
  for (std::int64_t n :
       {layernorm_half_scratch_elems(c), linear_half_scratch_elems(bt, c, 3 * c), linear_half_scratch_elems(bt, c, c),
        linear_half_scratch_elems(bt, c, 4 * c), linear_half_scratch_elems(bt, 4 * c, c),
        linear_half_scratch_elems(bt, c, v), l.n_head > 0 ? attention_half_scratch_elems(att) : 0,
        gelu_half_scratch_elems(),
        embedding_half_scratch_elems(v, c), cross_entropy_half_scratch_elems(v), elementwise_half_scratch_elems()})
    need = std::max(need, n);
  return need;
}

void set_host_compute_threads(int threads) { set_compute_threads(threads); }
void warm_up_host_compute(DType storage) {
  warm_up_compute();
  gelu_prepare_tables(storage == DType::F16, storage == DType::BF16);
}
bool host_bf16_native() { return cpu_bf16_native(); }
std::string host_libraries_describe() { return cpu_libraries_describe(); }

std::string host_kokkos_describe() {
  constexpr int v = KOKKOS_VERSION;  // e.g. 30401
  std::string s = fmt::format("Kokkos {}.{}.{} {}", v / 10000, v / 100 % 100, v % 100,
                              ExecSpace::name());
  if (Kokkos::is_initialized()) {
    const int n = ExecSpace().concurrency();
    s += fmt::format(", {} thread{}", n, n == 1 ? "" : "s");
  }
  return s;
}

Backend& host_backend() {
  static HostBackend backend;
  return backend;
}

template <class T>
std::unique_ptr<ModelOps<T>> make_backend_ops(Backend& backend, const ModelOpsLimits& limits, MemoryTracker& memory) {
  switch (backend.kind()) {
    case BackendKind::Host:
      return make_host_model_ops<T>(limits, memory);
    case BackendKind::Cuda:
#ifdef SHARDTRAIN_WITH_CUDA
      if constexpr (std::is_same_v<T, double>)
        SHARDTRAIN_FAIL("the CUDA backend has no fp64 kernels (fp64 is for gradient checks on the host)");
      else
        return make_cuda_model_ops<T>(backend, limits, memory);
#else
      SHARDTRAIN_FAIL("this trainer was built without CUDA (configure with -DSHARDTRAIN_ENABLE_CUDA=ON)");
#endif
  }
  SHARDTRAIN_FAIL("unknown backend");
}

template <class T>
std::unique_ptr<ModelOps<T>> make_model_ops(Backend& backend, const ModelOpsLimits& limits, MemoryTracker& memory) {
  auto ops = make_backend_ops<T>(backend, limits, memory);
  if (backend.profiler() == nullptr) return ops;
  return profiled_model_ops<T>(std::move(ops), backend.profiler());
}

template std::unique_ptr<ModelOps<float>> make_model_ops<float>(Backend&, const ModelOpsLimits&, MemoryTracker&);
template std::unique_ptr<ModelOps<double>> make_model_ops<double>(Backend&, const ModelOpsLimits&, MemoryTracker&);
template std::unique_ptr<ModelOps<f16>> make_model_ops<f16>(Backend&, const ModelOpsLimits&, MemoryTracker&);
template std::unique_ptr<ModelOps<bf16>> make_model_ops<bf16>(Backend&, const ModelOpsLimits&, MemoryTracker&);

namespace op_sizes {

std::int64_t attention_saved(const AttnShape& s) {
  if (s.fused || s.flash) return 3 * s.batch * s.seq_len * s.channels + 2 * s.batch * s.n_head * s.seq_len + 32;
  return attention_saved_elems(AttentionShape{s.batch, s.seq_len, s.channels, s.n_head});
}
std::int64_t attention_workspace(const AttnShape& s) {
  if (s.fused || s.flash) return 0;
  return attention_workspace_elems(AttentionShape{s.batch, s.seq_len, s.channels, s.n_head});
}
template <class T>
std::int64_t conv2d_workspace(const Conv2dShape& s) {
  return conv2d_workspace_elems<T>(s);
}
std::int64_t conv2d_half_scratch(const Conv2dShape& s) { return conv2d_half_scratch_elems(s); }
std::int64_t linear_half_scratch(std::int64_t rows, std::int64_t in, std::int64_t out) {
  return linear_half_scratch_elems(rows, in, out);
}
std::int64_t cross_entropy_half_scratch(std::int64_t vocab) { return cross_entropy_half_scratch_elems(vocab); }
template <class T>
void warm_up_conv2d(const Conv2dShape& s) {
  conv2d_warm_up<T>(s);
}

#define SHARDTRAIN_INSTANTIATE(T)                                   \
  template std::int64_t conv2d_workspace<T>(const Conv2dShape&); \
  template void warm_up_conv2d<T>(const Conv2dShape&);
SHARDTRAIN_INSTANTIATE(float)
SHARDTRAIN_INSTANTIATE(double)
SHARDTRAIN_INSTANTIATE(f16)
SHARDTRAIN_INSTANTIATE(bf16)
#undef SHARDTRAIN_INSTANTIATE

}  // namespace op_sizes

}  // namespace shardtrain
