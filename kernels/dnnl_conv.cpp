// shardtrain/kernels/dnnl_conv.cpp
// Owns the cache of oneDNN convolution primitives (dnnl_conv.hpp). Invariants:
// the cache maps a ConvKey to its entry and is only ever added to; an entry's
// primitive descriptors are made together (backward data and weights take the
// forward one as their hint), its primitives on first execution; a hit costs
// one hash lookup and a few memory-object wraps.
#include "kernels/dnnl_conv.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <unordered_map>

#include "core/error.hpp"
#include "kernels/dnnl_context.hpp"

namespace shardtrain {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
using dims = dnnl::memory::dims;

struct ConvKey {
  std::int64_t n, ic, h, w, oc, kh, kw, stride, pad;
  dt data;
  bool bias;  // forward: the bias is fused; backward weights: db is computed
  bool operator==(const ConvKey&) const = default;
};

ConvKey key_of(const Conv2dShape& s, dt data, bool bias) {
  return {s.batch, s.in_channels, s.height, s.width, s.out_channels, s.kernel_h, s.kernel_w,
          s.stride, s.padding, data, bias};
}

struct KeyHash {
  std::size_t operator()(const ConvKey& k) const {
    std::size_t h = 1469598103934665603ull;
    auto mix = [&h](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    for (std::int64_t v : {k.n, k.ic, k.h, k.w, k.oc, k.kh, k.kw, k.stride, k.pad})
      mix(static_cast<std::uint64_t>(v));
    mix(static_cast<std::uint64_t>(k.data) * 2u + (k.bias ? 1u : 0u));
    return h;
  }
};

struct Entry {
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_backward_data::primitive_desc bwd_data_pd;
  dnnl::convolution_backward_weights::primitive_desc bwd_weights_pd;
  dnnl::convolution_forward fwd;  // empty until first executed
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_weights;
  std::size_t scratchpad = 0;  // bytes, the largest of the three
};

std::unordered_map<ConvKey, Entry, KeyHash>& cache() {
  static std::unordered_map<ConvKey, Entry, KeyHash> c;
  return c;
}

std::string describe(const ConvKey& k) {
  return fmt::format("conv2d N={} IC={} H={} W={} OC={} KH={} KW={} stride={} padding={} {}{}", k.n, k.ic, k.h,
                     k.w, k.oc, k.kh, k.kw, k.stride, k.pad, k.data == dt::bf16 ? "bf16" : "f32",
                     k.bias ? " +bias" : "");
}

Entry make(const ConvKey& k) {
  const std::int64_t oh = (k.h + 2 * k.pad - k.kh) / k.stride + 1;
  const std::int64_t ow = (k.w + 2 * k.pad - k.kw) / k.stride + 1;
  const dnnl::memory::desc x(dims{k.n, k.ic, k.h, k.w}, k.data, tag::nchw);
  const dnnl::memory::desc w(dims{k.oc, k.ic, k.kh, k.kw}, k.data, tag::oihw);
  const dnnl::memory::desc y(dims{k.n, k.oc, oh, ow}, k.data, tag::nchw);
  const dnnl::memory::desc b(dims{k.oc}, k.data, tag::x);
  // Gradients of the parameters in fp32 (accumulated by the caller).
  const dnnl::memory::desc dw(dims{k.oc, k.ic, k.kh, k.kw}, dt::f32, tag::oihw);
  const dnnl::memory::desc db(dims{k.oc}, dt::f32, tag::x);
  // Zero padding on all four sides; oneDNN's output size is floor((H + pl + pr -
  // KH) / stride) + 1 as conv2d.hpp's, so padding_r = padding also when the last
  // window stops short of the padded edge.
  const dims strides{k.stride, k.stride}, pad{k.pad, k.pad};
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::engine& eng = dnnl_engine();
  const auto direct = dnnl::algorithm::convolution_direct;
  Entry e;
  e.fwd_pd = dnnl::convolution_forward::primitive_desc(
      k.bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, direct, x, w, b, y, strides, pad, pad)
             : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, direct, x, w, y, strides, pad, pad),
      attr, eng);
  e.bwd_data_pd = dnnl::convolution_backward_data::primitive_desc(
      dnnl::convolution_backward_data::desc(direct, x, w, y, strides, pad, pad), attr, eng, e.fwd_pd);
  e.bwd_weights_pd = dnnl::convolution_backward_weights::primitive_desc(
      k.bias ? dnnl::convolution_backward_weights::desc(direct, x, dw, db, y, strides, pad, pad)
             : dnnl::convolution_backward_weights::desc(direct, x, dw, y, strides, pad, pad),
      attr, eng, e.fwd_pd);
  e.scratchpad = std::max({e.fwd_pd.scratchpad_desc().get_size(), e.bwd_data_pd.scratchpad_desc().get_size(),
                           e.bwd_weights_pd.scratchpad_desc().get_size()});
  return e;
}

Entry& entry(const ConvKey& k) {
  auto& map = cache();
  auto it = map.find(k);
  if (it == map.end()) it = map.emplace(k, make(k)).first;
  return it->second;
}

// oneDNN takes non-const handles; inputs are only read.
dnnl::memory wrap(const dnnl::memory::desc& d, const void* p) {
  return dnnl::memory(d, dnnl_engine(), const_cast<void*>(p));
}

}  // namespace

std::size_t dnnl_conv_scratchpad_bytes(const Conv2dShape& s, dt data) {
  const ConvKey with = key_of(s, data, true), without = key_of(s, data, false);
  try {
    return std::max(entry(with).scratchpad, entry(without).scratchpad);
  } catch (const dnnl::error& err) {
    dnnl_fail("conv2d (scratchpad size): " + describe(with), err);
  }
}

void dnnl_conv_forward(const Conv2dShape& s, dt data, const void* x, const void* w, const void* b, void* y,
                       void* scratchpad) {
  const ConvKey k = key_of(s, data, b != nullptr);
  try {
    Entry& e = entry(k);
    if (!e.fwd) e.fwd = dnnl::convolution_forward(e.fwd_pd);
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, wrap(e.fwd_pd.src_desc(), x)},
                                                  {DNNL_ARG_WEIGHTS, wrap(e.fwd_pd.weights_desc(), w)},
                                                  {DNNL_ARG_DST, wrap(e.fwd_pd.dst_desc(), y)},
                                                  {DNNL_ARG_SCRATCHPAD, wrap(e.fwd_pd.scratchpad_desc(), scratchpad)}};
    if (b) args.emplace(DNNL_ARG_BIAS, wrap(e.fwd_pd.bias_desc(), b));
    e.fwd.execute(dnnl_stream(), args);
    dnnl_stream().wait();
  } catch (const dnnl::error& err) {
    dnnl_fail("conv2d_forward: " + describe(k), err);
  }
}

void dnnl_conv_backward_data(const Conv2dShape& s, dt data, const void* dy, const void* w, void* dx,
                             void* scratchpad) {
  // Backward data has no bias term: its primitive lives in the no-bias entry.
  const ConvKey k = key_of(s, data, false);
  try {
    Entry& e = entry(k);
    if (!e.bwd_data) e.bwd_data = dnnl::convolution_backward_data(e.bwd_data_pd);
    e.bwd_data.execute(dnnl_stream(),
                       {{DNNL_ARG_DIFF_DST, wrap(e.bwd_data_pd.diff_dst_desc(), dy)},
                        {DNNL_ARG_WEIGHTS, wrap(e.bwd_data_pd.weights_desc(), w)},
                        {DNNL_ARG_DIFF_SRC, wrap(e.bwd_data_pd.diff_src_desc(), dx)},
                        {DNNL_ARG_SCRATCHPAD, wrap(e.bwd_data_pd.scratchpad_desc(), scratchpad)}});
    dnnl_stream().wait();
  } catch (const dnnl::error& err) {
    dnnl_fail("conv2d_backward (dx): " + describe(k), err);
  }
}

void dnnl_conv_backward_weights(const Conv2dShape& s, dt data, const void* x, const void* dy, float* dw,
                                float* db, void* scratchpad) {
  const ConvKey k = key_of(s, data, db != nullptr);
  try {
    Entry& e = entry(k);
    if (!e.bwd_weights) e.bwd_weights = dnnl::convolution_backward_weights(e.bwd_weights_pd);
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, wrap(e.bwd_weights_pd.src_desc(), x)},
        {DNNL_ARG_DIFF_DST, wrap(e.bwd_weights_pd.diff_dst_desc(), dy)},
        {DNNL_ARG_DIFF_WEIGHTS, wrap(e.bwd_weights_pd.diff_weights_desc(), dw)},
        {DNNL_ARG_SCRATCHPAD, wrap(e.bwd_weights_pd.scratchpad_desc(), scratchpad)}};
    if (db) args.emplace(DNNL_ARG_DIFF_BIAS, wrap(e.bwd_weights_pd.diff_bias_desc(), db));
    e.bwd_weights.execute(dnnl_stream(), args);
    dnnl_stream().wait();
  } catch (const dnnl::error& err) {
    dnnl_fail("conv2d_backward (dw): " + describe(k), err);
  }
}

std::string dnnl_conv_impl(const Conv2dShape& s, dt data) {
  const ConvKey k = key_of(s, data, true);
  try {
    const Entry& e = entry(k);
    return fmt::format("{} / {} / {}", e.fwd_pd.impl_info_str(), e.bwd_data_pd.impl_info_str(),
                       e.bwd_weights_pd.impl_info_str());
  } catch (const dnnl::error& err) {
    dnnl_fail("conv2d (implementation): " + describe(k), err);
  }
}

std::size_t dnnl_conv_cache_size() { return cache().size(); }

}  // namespace shardtrain
