// Cnn: dims check, layout, plan, costs and the forward/backward of the
// convolutional classifier. Every op is a ModelOps kernel; this file only wires
// buffers and groups.
// A pooled stage runs conv -> max-pool -> ReLU, not conv -> ReLU -> max-pool:
// ReLU is monotone, so max(relu(window)) and relu(max(window)) are the same bits
// (NaN: the first NaN either way; a window with nothing above 0 gives +0 either
// way), and ReLU runs on 1/pool^2 of the elements. Backward applies ReLU's mask
// to the pooled gradient (the stage output > 0) before the pool routes it: the
// argmax of a window with a positive maximum is the same element either way and
// its input is that maximum, so every dx element gets the same sum, in the same
// order, of the same kept gradients; where the maximum is not positive both
// give +0. Only the stored argmax of such windows and the conv output (kept
// without ReLU) differ from the textbook order, and nothing reads them but this
// backward. Tested bit for bit against the textbook order (tests/unit/kernels/pool_test.cpp) and
// against the run before the change (losses, gradient norms, weight CRCs).
#include "model/cnn.hpp"

#include <algorithm>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "core/half.hpp"
#include "model/param_init.hpp"

namespace shardtrain {

namespace {

[[noreturn]] void dims_error(const std::string& msg) { throw InputError("cnn: " + msg); }

std::string hw(std::int64_t h, std::int64_t w) { return std::to_string(h) + "x" + std::to_string(w); }

}  // namespace

void cnn_check_dims(const CnnDims& d) {
  if (d.in_channels < 1 || d.height < 1 || d.width < 1)
    dims_error("the input (channels, height, width) = (" + std::to_string(d.in_channels) + ", " +
               std::to_string(d.height) + ", " + std::to_string(d.width) + ") must be >= 1 each");
  if (d.classes < 2) dims_error("classes = " + std::to_string(d.classes) + " must be >= 2");
  if (!(d.dropout >= 0.0 && d.dropout < 1.0)) dims_error("dropout = " + std::to_string(d.dropout) + " must be in [0, 1)");
  if (d.max_batch < 1) dims_error("max_batch = " + std::to_string(d.max_batch) + " must be >= 1");
  std::int64_t h = d.height, w = d.width;
  for (std::size_t i = 0; i < d.convs.size(); ++i) {
    const CnnConv& c = d.convs[i];
    const std::string name = "conv." + std::to_string(i);
    if (c.out_channels < 1 || c.kernel < 1 || c.padding < 0)
      dims_error(name + ": out_channels " + std::to_string(c.out_channels) + " and kernel " +
                 std::to_string(c.kernel) + " must be >= 1, padding " + std::to_string(c.padding) + " >= 0");
    const std::int64_t oh = h + 2 * c.padding - c.kernel + 1, ow = w + 2 * c.padding - c.kernel + 1;
    if (oh < 1 || ow < 1)
      dims_error(name + ": a " + hw(c.kernel, c.kernel) + " kernel with padding " + std::to_string(c.padding) +
                 " does not fit its " + hw(h, w) + " input (output would be " + hw(oh, ow) + ")");
    h = oh;
    w = ow;
    if (d.pool > 1) {
      if (h < d.pool || w < d.pool)
        dims_error("the " + hw(d.pool, d.pool) + " max-pool after " + name + " does not fit its " + hw(h, w) +
                   " input (output would be " + hw(h / d.pool, w / d.pool) + ")");
      h /= d.pool;
      w /= d.pool;
    }
  }
  for (std::size_t j = 0; j < d.hidden.size(); ++j)
    if (d.hidden[j] < 1) dims_error("hidden width fc." + std::to_string(j) + " = " + std::to_string(d.hidden[j]) + " must be >= 1");
}

CnnPlan cnn_plan(const CnnDims& d) {
  cnn_check_dims(d);
  CnnPlan p;
  const std::int64_t n = d.max_batch;
  std::int64_t c = d.in_channels, h = d.height, w = d.width, widest = 0;
  for (const CnnConv& cv : d.convs) {
    CnnStage s;
    s.conv = Conv2dShape{n, c, h, w, cv.out_channels, cv.kernel, cv.kernel, 1, cv.padding};
    c = cv.out_channels;
    h = s.conv.out_h();
    w = s.conv.out_w();
    s.conv_out = c * h * w;
    p.activations += n * s.conv_out;
    s.pooled = d.pool > 1;
    if (s.pooled) {
      s.pool = Pool2dShape{n, c, h, w, d.pool, d.pool};
      h = s.pool.out_h();
      w = s.pool.out_w();
    }
    s.stage_out = c * h * w;
    if (s.pooled) {
      p.activations += n * s.stage_out;
      p.argmax += n * s.stage_out;
    }
    widest = std::max({widest, s.conv_out, s.stage_out});
    p.stages.push_back(s);
  }
  p.features = c * h * w;
  std::int64_t in = p.features;
  for (std::int64_t width : d.hidden) {
    p.fc_in.push_back(in);
    p.fc_out.push_back(width);
    p.activations += n * width;
    widest = std::max(widest, width);
    in = width;
  }
  p.fc_in.push_back(in);
  p.fc_out.push_back(d.classes);
  p.activations += n * d.classes + n;  // logits, losses
  // Gradient buffers hold the gradient of an fc input (features, hidden widths;
  // fc.0's only when convs precede it), a conv output or a stage output.
  p.grad_buffer = n * widest;
  return p;
}

template <class T>
std::int64_t cnn_conv_workspace(const CnnPlan& p) {
  std::int64_t elems = 0;
  for (const CnnStage& s : p.stages) elems = std::max(elems, op_sizes::conv2d_workspace<T>(s.conv));
  return elems;
}

ParamLayout cnn_layout(const CnnDims& d) {
  const CnnPlan p = cnn_plan(d);
  ParamLayout layout;
  int group = 0;
  for (std::size_t i = 0; i < p.stages.size(); ++i, ++group) {
    const Conv2dShape& s = p.stages[i].conv;
    const std::string name = "conv." + std::to_string(i);
    layout.add(name + ".weight", {s.out_channels, s.in_channels, s.kernel_h, s.kernel_w}, true, group);
    layout.add(name + ".bias", {s.out_channels}, false, group);
  }
  for (std::int64_t j = 0; j < p.fc_layers(); ++j, ++group) {
    const std::string name = "fc." + std::to_string(j);
    layout.add(name + ".weight", {p.fc_out[j], p.fc_in[j]}, true, group);
    layout.add(name + ".bias", {p.fc_out[j]}, false, group);
  }
  return layout;
}

template <class T>
void cnn_init_params(const ParamLayout& layout, std::uint64_t seed, T* params, std::int64_t lo, std::int64_t hi) {
  he_normal_init<T>(layout, seed, params, lo, hi);
}

ModelOpsLimits cnn_ops_limits(const CnnDims& d) {
  const CnnPlan p = cnn_plan(d);
  ModelOpsLimits limits;
  limits.max_batch = d.max_batch;
  limits.seq_len = 1;
  // The widest Linear operand bounds the host 16-bit linear / cross-entropy
  // scratch (as the MLP's); the convs' need is half_scratch_elems.
  limits.channels = std::max(p.features, d.classes);
  for (std::int64_t h : d.hidden) limits.channels = std::max(limits.channels, h);
  limits.vocab = d.classes;
  limits.max_input_elems = d.max_batch * d.in_channels * d.height * d.width;
  for (const CnnStage& s : p.stages)
    limits.half_scratch_elems = std::max(limits.half_scratch_elems, op_sizes::conv2d_half_scratch(s.conv));
  return limits;
}

template <class T>
void cnn_warm_up_kernels(const CnnDims& d) {
  for (const CnnStage& s : cnn_plan(d).stages) op_sizes::warm_up_conv2d<T>(s.conv);
}

template <class T>
ClassifierCosts cnn_costs(const CnnDims& d) {
  const CnnPlan p = cnn_plan(d);
  ClassifierCosts c;
  c.activation_bytes = static_cast<std::int64_t>(sizeof(T)) * p.activations +
                       static_cast<std::int64_t>(sizeof(std::int32_t)) * p.argmax;
  c.workspace_bytes = static_cast<std::int64_t>(sizeof(T)) * (cnn_conv_workspace<T>(p) + 2 * p.grad_buffer);
  if constexpr (is_half_v<T>)
    c.workspace_bytes += static_cast<std::int64_t>(sizeof(float)) * host_half_scratch_elems(cnn_ops_limits(d));
  for (const CnnStage& s : p.stages)
    c.forward_flops += 2.0 * static_cast<double>(s.conv_out) * static_cast<double>(s.conv.col_rows());
  for (std::int64_t j = 0; j < p.fc_layers(); ++j)
    c.forward_flops += 2.0 * static_cast<double>(p.fc_in[j]) * static_cast<double>(p.fc_out[j]);
  return c;
}

template <class T>
Cnn<T>::Cnn(const CnnDims& dims, const ParamLayout& layout, MemoryTracker& memory, Backend* backend)
    : m_dims(dims), m_plan(cnn_plan(dims)), m_layout(layout), m_backend(backend ? *backend : host_backend()),
      m_conv_workspace(cnn_conv_workspace<T>(m_plan)) {
  SHARDTRAIN_CHECK(layout.padded_size() > 0, "layout must be finalized before building the model");
  const std::size_t layers = m_plan.stages.size() + static_cast<std::size_t>(m_plan.fc_layers());
  SHARDTRAIN_CHECK(layout.entries().size() == 2 * layers, "layout is not a cnn_layout() of these dims");
  m_ops = make_model_ops<T>(m_backend, cnn_ops_limits(dims), memory);
  MemorySpace* space = m_ops->memory();
  m_acts = TrackedBuffer<T>(memory, MemCategory::Activations, m_plan.activations, space);
  m_argmax = TrackedBuffer<std::int32_t>(memory, MemCategory::Activations, m_plan.argmax, space);
  m_work = TrackedBuffer<T>(memory, MemCategory::Workspace, m_conv_workspace + 2 * m_plan.grad_buffer, space);
  const std::int64_t n = dims.max_batch;
  T* p = m_acts.data();
  std::int32_t* a = m_argmax.data();
  for (const CnnStage& s : m_plan.stages) {
    m_conv_out.push_back(p);
    p += n * s.conv_out;
    if (s.pooled) {
      m_stage_out.push_back(p);
      p += n * s.stage_out;
      m_stage_argmax.push_back(a);
      a += n * s.stage_out;
    } else {
      m_stage_out.push_back(m_conv_out.back());
      m_stage_argmax.push_back(nullptr);
    }
  }
  for (std::int64_t h : dims.hidden) {
    m_hidden_out.push_back(p);
    p += n * h;
  }
  m_logits = p;
  p += n * dims.classes;
  m_losses = p;
}

template <class T>
std::int64_t Cnn<T>::rel(int group, int which) const {
  const auto& e = m_layout.entries()[2 * group + which];
  return e.offset - m_layout.group_range(group).first;
}

template <class T>
Conv2dShape Cnn<T>::conv_at(const CnnStage& s, std::int64_t batch) const {
  Conv2dShape conv = s.conv;
  conv.batch = batch;
  // The workspace was sized at max_batch; oneDNN's scratchpad could in principle
  // need more at a smaller batch (kernels/conv2d.hpp sizes for that): fail loudly
  // rather than let a kernel run past the buffer.
  SHARDTRAIN_CHECK(op_sizes::conv2d_workspace<T>(conv) <= m_conv_workspace,
                   "cnn: conv workspace of " + std::to_string(m_conv_workspace) + " elements sized at micro-batch " +
                       std::to_string(m_dims.max_batch) + " is too small at micro-batch " + std::to_string(batch) +
                       " (needs " + std::to_string(op_sizes::conv2d_workspace<T>(conv)) + ")");
  return conv;
}

template <class T>
DropoutParams Cnn<T>::dropout_params(std::int64_t j) const {
  DropoutParams p;
  p.p = m_dims.dropout;
  p.seed = m_dims.dropout_seed;
  p.stream = kDropoutStream + static_cast<std::uint64_t>(j);
  p.offset = m_first_sample * static_cast<std::uint64_t>(m_dims.hidden[j]);
  p.training = true;
  return p;
}

template <class T>
void Cnn<T>::bind(ParamProvider<T>& provider) { m_provider = &provider; }

template <class T>
void Cnn<T>::bind(T* params, T* grads) {
  m_flat = std::make_unique<FlatParams<T>>(m_layout, params, grads);
  bind(*m_flat);
}

template <class T>
double Cnn<T>::forward(const SampleBatch& b) {
  const std::int64_t batch = b.batch;
  SHARDTRAIN_CHECK(batch >= 0 && batch <= m_dims.max_batch, "micro-batch larger than planned");
  SHARDTRAIN_CHECK(m_provider != nullptr, "Cnn::forward before bind");
  const bool work = batch > 0;
  m_batch = batch;
  m_training = b.training && m_dims.dropout > 0.0;
  m_first_sample = b.first_sample;
  m_forward_done = m_forward_ran = true;
  if (work) {
    m_inputs = m_ops->stage_values(b.values, batch * m_dims.in_channels * m_dims.height * m_dims.width);
    const TokenIndex* no_tokens = nullptr;
    m_ops->stage_tokens(nullptr, b.labels, batch, &no_tokens, &m_labels);
  }
  const int nconv = static_cast<int>(m_plan.stages.size()), groups = nconv + static_cast<int>(m_plan.fc_layers());
  T* ws = m_work.data();
  const T* x = m_inputs;
  for (int i = 0; i < nconv; ++i) {
    const CnnStage& s = m_plan.stages[i];
    T* base = m_provider->acquire_params(i);
    m_provider->prefetch(i + 1);  // an fc group always follows
    if (work) {
      const Conv2dShape conv = conv_at(s, batch);
      m_ops->conv2d_forward(conv, x, base + rel(i, 0), base + rel(i, 1), ws, m_conv_out[i]);
      if (s.pooled) {  // ReLU after the pool, on 1/pool^2 of the elements (see the file's comment)
        Pool2dShape pool = s.pool;
        pool.batch = batch;
        m_ops->max_pool2d_forward(pool, m_conv_out[i], m_stage_out[i], m_stage_argmax[i]);
        m_ops->relu_forward(m_stage_out[i], m_stage_out[i], batch * s.stage_out);
      } else {
        m_ops->relu_forward(m_conv_out[i], m_conv_out[i], batch * s.conv_out);
      }
    }
    m_provider->release_params(i);
    x = m_stage_out[i];
  }
  for (std::int64_t j = 0; j < m_plan.fc_layers(); ++j) {
    const int g = nconv + static_cast<int>(j);
    T* base = m_provider->acquire_params(g);
    if (g + 1 < groups) m_provider->prefetch(g + 1);
    const bool last = g + 1 == groups;
    T* y = last ? m_logits : m_hidden_out[j];
    if (work) {
      m_ops->linear_forward(x, base + rel(g, 0), base + rel(g, 1), y, batch, m_plan.fc_in[j], m_plan.fc_out[j],
                            false);
      if (!last) {
        const std::int64_t elems = batch * m_plan.fc_out[j];
        m_ops->relu_forward(y, y, elems);
        if (m_training) m_ops->dropout_forward(dropout_params(j), y, y, elems);
      }
    }
    m_provider->release_params(g);
    x = y;
  }
  if (!work) return 0.0;
  m_ops->cross_entropy_forward(m_logits, m_labels, m_losses, batch, m_dims.classes);
  return m_ops->sum_losses(m_losses, batch);
}

template <class T>
void Cnn<T>::logits(std::vector<float>& out) const {
  logits_to_host(m_backend, m_logits, m_batch * m_dims.classes, out);
}

template <class T>
void Cnn<T>::backward(T dloss) {
  SHARDTRAIN_CHECK(m_forward_done, "backward without forward");
  const std::int64_t batch = m_batch;
  const bool work = batch > 0;
  const int nconv = static_cast<int>(m_plan.stages.size());
  // dlogits overwrite the logits; then layer by layer, last first, each
  // gradient is written into the gradient buffer the previous one is not in.
  if (work) m_ops->cross_entropy_backward(m_logits, m_labels, dloss, m_logits, batch, m_dims.classes);
  T* ws = m_work.data();
  T* bufs[2] = {ws + m_conv_workspace, ws + m_conv_workspace + m_plan.grad_buffer};
  int next = 0;  // the buffer the next gradient goes to
  auto take = [&] {
    T* b = bufs[next];
    next ^= 1;
    return b;
  };
  T* dy = m_logits;
  for (std::int64_t j = m_plan.fc_layers() - 1; j >= 0; --j) {
    const int g = nconv + static_cast<int>(j);
    T* base = m_provider->acquire_params(g);
    if (g > 0) m_provider->prefetch(g - 1);
    T* gbase = m_provider->acquire_grads(g);
    const T* x = j > 0 ? m_hidden_out[j - 1] : nconv > 0 ? m_stage_out[nconv - 1] : m_inputs;
    T* dx = j > 0 || nconv > 0 ? take() : nullptr;
    if (work) {
      m_ops->linear_backward(x, base + rel(g, 0), dy, dx, gbase + rel(g, 0), gbase + rel(g, 1), batch,
                             m_plan.fc_in[j], m_plan.fc_out[j], /*accumulate=*/!m_provider->grads_zero(g));
      if (j > 0) {
        const std::int64_t elems = batch * m_plan.fc_in[j];
        if (m_training) m_ops->dropout_backward(dropout_params(j - 1), dx, dx, elems);
        // The saved output is the dropped one: positive exactly where the ReLU
        // passed and dropout kept (elsewhere dx is 0 already).
        m_ops->relu_backward(m_hidden_out[j - 1], dx, dx, elems);
      }
    }
    m_provider->grads_ready(g);
    m_provider->release_params(g);
    dy = dx;
  }
  for (int i = nconv - 1; i >= 0; --i) {
    const CnnStage& s = m_plan.stages[i];
    T* base = m_provider->acquire_params(i);
    if (i > 0) m_provider->prefetch(i - 1);
    T* gbase = m_provider->acquire_grads(i);
    T* dconv = s.pooled ? take() : dy;  // gradient of the conv's (ReLU) output
    T* dx = i > 0 ? take() : nullptr;
    if (work) {
      if (s.pooled) {  // ReLU's backward on the pooled gradient, then the pool's
        Pool2dShape pool = s.pool;
        pool.batch = batch;
        m_ops->relu_backward(m_stage_out[i], dy, dy, batch * s.stage_out);
        m_ops->max_pool2d_backward(pool, dy, m_stage_argmax[i], dconv);
      } else {
        m_ops->relu_backward(m_conv_out[i], dconv, dconv, batch * s.conv_out);
      }
      const Conv2dShape conv = conv_at(s, batch);
      m_ops->conv2d_backward(conv, i > 0 ? m_stage_out[i - 1] : m_inputs, base + rel(i, 0), dconv, ws, dx,
                             gbase + rel(i, 0), gbase + rel(i, 1));
    }
    m_provider->grads_ready(i);
    m_provider->release_params(i);
    dy = dx;
  }
  m_forward_done = false;
}

template class Cnn<float>;
template class Cnn<double>;
template class Cnn<f16>;
template class Cnn<bf16>;
#define SHARDTRAIN_INSTANTIATE_CNN(T)                                                                      \
  template std::int64_t cnn_conv_workspace<T>(const CnnPlan&);                                            \
  template void cnn_warm_up_kernels<T>(const CnnDims&);                                                  \
  template void cnn_init_params<T>(const ParamLayout&, std::uint64_t, T*, std::int64_t, std::int64_t); \
  template ClassifierCosts cnn_costs<T>(const CnnDims&);
SHARDTRAIN_INSTANTIATE_CNN(float)
SHARDTRAIN_INSTANTIATE_CNN(double)
SHARDTRAIN_INSTANTIATE_CNN(f16)
SHARDTRAIN_INSTANTIATE_CNN(bf16)
#undef SHARDTRAIN_INSTANTIATE_CNN

}  // namespace shardtrain
