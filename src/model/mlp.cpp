// Mlp: layout, initialisation and the forward/backward of the MLP classifier.
// Every op is a ModelOps kernel; this file only wires buffers and groups.
#include "model/mlp.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "model/param_init.hpp"
#include "core/half.hpp"

namespace shardtrain {

ParamLayout mlp_layout(const MlpDims& d) {
  SHARDTRAIN_CHECK(d.inputs >= 1 && d.classes >= 2, "an MLP needs inputs >= 1 and classes >= 2");
  ParamLayout layout;
  for (std::int64_t l = 0; l < d.layers(); ++l) {
    SHARDTRAIN_CHECK(d.out_of(l) >= 1, "MLP layer widths must be >= 1");
    const std::string name = "fc." + std::to_string(l);
    layout.add(name + ".weight", {d.out_of(l), d.in_of(l)}, true, static_cast<int>(l));
    layout.add(name + ".bias", {d.out_of(l)}, false, static_cast<int>(l));
  }
  return layout;
}

MlpActivationPlan mlp_activation_plan(const MlpDims& d) {
  MlpActivationPlan p;
  std::int64_t widest = d.inputs;
  for (std::int64_t h : d.hidden) {
    p.activations += d.max_batch * h;
    widest = std::max(widest, h);
  }
  widest = std::max(widest, d.classes);
  p.activations += d.max_batch * d.classes + d.max_batch;
  p.workspace = 2 * d.max_batch * widest;
  return p;
}

ModelOpsLimits mlp_ops_limits(const MlpDims& d) {
  ModelOpsLimits limits;
  limits.max_batch = d.max_batch;
  limits.seq_len = 1;
  // The widest layer bounds every Linear's operands (the host 16-bit kernels'
  // scratch is sized from it: ModelOpsLimits' channels and 4x channels).
  limits.channels = std::max(d.inputs, d.classes);
  for (std::int64_t h : d.hidden) limits.channels = std::max(limits.channels, h);
  limits.vocab = d.classes;
  limits.max_input_elems = d.max_batch * d.inputs;
  return limits;
}

template <class T>
ClassifierCosts mlp_costs(const MlpDims& d) {
  const MlpActivationPlan plan = mlp_activation_plan(d);
  ClassifierCosts c;
  c.activation_bytes = plan.activations * static_cast<std::int64_t>(sizeof(T));
  c.workspace_bytes = plan.workspace * static_cast<std::int64_t>(sizeof(T));
  if constexpr (is_half_v<T>)
    c.workspace_bytes += host_half_scratch_elems(mlp_ops_limits(d)) * static_cast<std::int64_t>(sizeof(float));
  for (std::int64_t l = 0; l < d.layers(); ++l)
    c.forward_flops += 2.0 * static_cast<double>(d.in_of(l)) * static_cast<double>(d.out_of(l));
  return c;
}

template <class T>
void mlp_init_params(const ParamLayout& layout, std::uint64_t seed, T* params, std::int64_t lo, std::int64_t hi) {
  he_normal_init(layout, seed, params, lo, hi);  // fan_in of fc.i.weight (out, in) = in
}

template <class T>
Mlp<T>::Mlp(const MlpDims& dims, const ParamLayout& layout, MemoryTracker& memory, Backend* backend)
    : m_dims(dims), m_layout(layout), m_backend(backend ? *backend : host_backend()) {
  SHARDTRAIN_CHECK(layout.padded_size() > 0, "layout must be finalized before building the model");
  SHARDTRAIN_CHECK(static_cast<std::int64_t>(layout.entries().size()) == 2 * dims.layers(),
                   "layout is not an mlp_layout() of these dims");
  const ModelOpsLimits limits = mlp_ops_limits(dims);
  m_ops = make_model_ops<T>(m_backend, limits, memory);
  const auto plan = mlp_activation_plan(dims);
  m_acts = TrackedBuffer<T>(memory, MemCategory::Activations, plan.activations, m_ops->memory());
  m_work = TrackedBuffer<T>(memory, MemCategory::Workspace, plan.workspace, m_ops->memory());
  T* p = m_acts.data();
  for (std::int64_t h : dims.hidden) {
    m_hidden_out.push_back(p);
    p += dims.max_batch * h;
  }
  m_logits = p;
  p += dims.max_batch * dims.classes;
  m_losses = p;
}

template <class T>
std::int64_t Mlp<T>::rel(std::int64_t layer, int which) const {
  const auto& e = m_layout.entries()[2 * layer + which];
  return e.offset - m_layout.group_range(static_cast<int>(layer)).first;
}

template <class T>
void Mlp<T>::bind(ParamProvider<T>& provider) { m_provider = &provider; }

template <class T>
void Mlp<T>::bind(T* params, T* grads) {
  m_flat = std::make_unique<FlatParams<T>>(m_layout, params, grads);
  bind(*m_flat);
}

template <class T>
double Mlp<T>::forward(const float* inputs, const TokenIndex* labels, std::int64_t batch) {
  SHARDTRAIN_CHECK(batch >= 0 && batch <= m_dims.max_batch, "micro-batch larger than planned");
  SHARDTRAIN_CHECK(m_provider != nullptr, "Mlp::forward before bind");
  const bool work = batch > 0;
  m_batch = batch;
  m_forward_done = m_forward_ran = true;
  if (work) {
    m_inputs = m_ops->stage_values(inputs, batch * m_dims.inputs);
    const TokenIndex* no_tokens = nullptr;
    m_ops->stage_tokens(nullptr, labels, batch, &no_tokens, &m_labels);
  }
  const std::int64_t n = m_dims.layers();
  const T* x = m_inputs;
  for (std::int64_t l = 0; l < n; ++l) {
    T* base = m_provider->acquire_params(static_cast<int>(l));
    if (l + 1 < n) m_provider->prefetch(static_cast<int>(l + 1));
    const bool last = l + 1 == n;
    T* y = last ? m_logits : m_hidden_out[l];
    if (work) {
      m_ops->linear_forward(x, base + rel(l, 0), base + rel(l, 1), y, batch, m_dims.in_of(l), m_dims.out_of(l), false);
      if (!last) m_ops->relu_forward(y, y, batch * m_dims.out_of(l));
    }
    m_provider->release_params(static_cast<int>(l));
    x = y;
  }
  if (!work) return 0.0;
  m_ops->cross_entropy_forward(m_logits, m_labels, m_losses, batch, m_dims.classes);
  return m_ops->sum_losses(m_losses, batch);
}

template <class T>
void Mlp<T>::logits(std::vector<float>& out) const {
  logits_to_host(m_backend, m_logits, m_batch * m_dims.classes, out);
}

template <class T>
void Mlp<T>::backward(T dloss) {
  SHARDTRAIN_CHECK(m_forward_done, "backward without forward");
  const std::int64_t batch = m_batch, n = m_dims.layers();
  const bool work = batch > 0;
  // dlogits overwrite the logits; then layer by layer, last first, the gradient
  // of the layer's output ping-pongs between the two workspace buffers.
  if (work) m_ops->cross_entropy_backward(m_logits, m_labels, dloss, m_logits, batch, m_dims.classes);
  T* dy = m_logits;
  T* bufs[2] = {m_work.data(), m_work.data() + m_work.size() / 2};
  for (std::int64_t l = n - 1; l >= 0; --l) {
    T* base = m_provider->acquire_params(static_cast<int>(l));
    if (l > 0) m_provider->prefetch(static_cast<int>(l - 1));
    T* gbase = m_provider->acquire_grads(static_cast<int>(l));
    const T* x = l == 0 ? m_inputs : m_hidden_out[l - 1];
    T* dx = l == 0 ? nullptr : bufs[l % 2];
    if (work) {
      m_ops->linear_backward(x, base + rel(l, 0), dy, dx, gbase + rel(l, 0), gbase + rel(l, 1), batch,
                             m_dims.in_of(l), m_dims.out_of(l),
                             /*accumulate=*/!m_provider->grads_zero(static_cast<int>(l)));
      if (l > 0) m_ops->relu_backward(m_hidden_out[l - 1], dx, dx, batch * m_dims.in_of(l));
    }
    m_provider->grads_ready(static_cast<int>(l));
    m_provider->release_params(static_cast<int>(l));
    dy = dx;
  }
  m_forward_done = false;
}

template class Mlp<float>;
template class Mlp<double>;
template class Mlp<f16>;
template class Mlp<bf16>;
template ClassifierCosts mlp_costs<float>(const MlpDims&);
template ClassifierCosts mlp_costs<double>(const MlpDims&);
template ClassifierCosts mlp_costs<f16>(const MlpDims&);
template ClassifierCosts mlp_costs<bf16>(const MlpDims&);
template void mlp_init_params<float>(const ParamLayout&, std::uint64_t, float*, std::int64_t, std::int64_t);
template void mlp_init_params<double>(const ParamLayout&, std::uint64_t, double*, std::int64_t, std::int64_t);
template void mlp_init_params<f16>(const ParamLayout&, std::uint64_t, f16*, std::int64_t, std::int64_t);
template void mlp_init_params<bf16>(const ParamLayout&, std::uint64_t, bf16*, std::int64_t, std::int64_t);

}  // namespace shardtrain
