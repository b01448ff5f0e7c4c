// shardtrain/kernels/dnnl_conv.cpp
// Owns the cache of oneDNN convolution primitives (dnnl_conv.hpp) and the
// reorders between the caller's plain tensors and the layouts they run on.
// Invariants: the cache maps a ConvKey to its entry and is only ever added to;
// an entry's primitive descriptors are made together (backward data and weights
// take the forward one as their hint; each tensor of each pass gets its own
// reorders, since the passes may want different layouts of the same tensor);
// the workspace of one call is laid out per entry (copies at 64-byte aligned
// offsets, then one scratchpad region every primitive of the call uses in turn).
#include "kernels/dnnl_conv.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <unordered_map>

#include "core/error.hpp"
#include "kernels/dnnl_context.hpp"

// oneDNN's thread count is OpenMP's (dnnl_context.cpp declares these the same way).
extern "C" int omp_get_max_threads(void);

namespace shardtrain {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
using dims = dnnl::memory::dims;
using mdesc = dnnl::memory::desc;

// Elements of the layout copies of x, dx and y / dy one call may hold: 4 MiB of
// fp32. The MNIST LeNet's convs fit 80 and 117 samples (its micro-batch is 64).
constexpr std::int64_t kBlockElems = std::int64_t{1} << 20;

constexpr std::size_t kAlign = 64;

std::size_t align_up(std::size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

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

std::string describe(const ConvKey& k) {
  return fmt::format("conv2d N={} IC={} H={} W={} OC={} KH={} KW={} stride={} padding={} {}{}", k.n, k.ic, k.h,
                     k.w, k.oc, k.kh, k.kw, k.stride, k.pad, k.data == dt::bf16 ? "bf16" : "f32",
                     k.bias ? " +bias" : "");
}

// Whether `want` holds the same bytes as `plain`: equal descriptors, or the same
// dense order once dimensions of size 1 are ignored (NHWC with C = 1 is NCHW).
bool same_bytes(const mdesc& want, const mdesc& plain) {
  if (want == plain) return true;
  const dnnl_memory_desc_t& a = want.data;
  const dnnl_memory_desc_t& b = plain.data;
  if (a.format_kind != dnnl_blocked || b.format_kind != dnnl_blocked || a.ndims != b.ndims ||
      a.data_type != b.data_type || a.offset0 != b.offset0 || a.extra.flags != b.extra.flags ||
      a.format_desc.blocking.inner_nblks != 0 || b.format_desc.blocking.inner_nblks != 0)
    return false;
  for (int i = 0; i < a.ndims; ++i) {
    if (a.dims[i] != b.dims[i] || a.padded_dims[i] != b.padded_dims[i]) return false;
    if (a.dims[i] > 1 && a.format_desc.blocking.strides[i] != b.format_desc.blocking.strides[i]) return false;
  }
  return true;
}

// Byte offsets of the pieces of one call's workspace.
struct Region {
  std::size_t bytes = 0;
  std::size_t take(std::size_t n) {
    const std::size_t at = bytes;
    bytes += align_up(n);
    return at;
  }
};

// One tensor of one pass: the layout the primitive wants, the caller's, and the
// reorders between them through a copy in the workspace (none when the bytes
// are the same).
struct Adapter {
  mdesc want, plain;
  bool copy = false;
  std::size_t offset = 0;
  dnnl::reorder::primitive_desc in_pd, out_pd, out_sum_pd;  // plain -> want, want -> plain (+= with sum)
  dnnl::reorder in, out, out_sum;                          // made on first use
};

enum Reorders : unsigned { kIn = 1, kOut = 2, kOutSum = 4 };

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// Fills `a` for a primitive wanting `want` of a caller tensor `plain`; a copy
// (always made when `always_copy`) takes its bytes from `r`; `scratch` grows to
// the reorders' scratchpads.
void adapt(Adapter& a, const mdesc& want, const mdesc& plain, unsigned reorders, Region& r, std::size_t& scratch,
           bool always_copy = false) {
  a.want = want;
  a.plain = plain;
  a.copy = always_copy || !same_bytes(want, plain);
  if (!a.copy) return;
  a.offset = r.take(want.get_size());
  const dnnl::engine& eng = dnnl_engine();
  if (reorders & kIn) a.in_pd = dnnl::reorder::primitive_desc(eng, plain, eng, want, user_scratchpad());
  if (reorders & kOut) a.out_pd = dnnl::reorder::primitive_desc(eng, want, eng, plain, user_scratchpad());
  if (reorders & kOutSum) {
    dnnl::primitive_attr attr = user_scratchpad();
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
    a.out_sum_pd = dnnl::reorder::primitive_desc(eng, want, eng, plain, attr);
  }
  for (const auto* pd : {&a.in_pd, &a.out_pd, &a.out_sum_pd})
    if (*pd) scratch = std::max(scratch, pd->scratchpad_desc().get_size());
}

struct Entry {
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_backward_data::primitive_desc bwd_data_pd;
  dnnl::convolution_backward_weights::primitive_desc bwd_weights_pd;
  dnnl::convolution_forward fwd;  // made on first execution
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_weights;
  Adapter x_f, w_f, y_f;          // forward: src, weights, dst
  Adapter dy_d, w_d, dx_d;        // backward data: diff_dst, weights, diff_src
  Adapter x_w, dy_w, dw_w, db_w;  // backward weights: src, diff_dst, diff_weights, diff_bias
  bool dy_shared = false;         // dy_w is dy_d's copy (same layout)
  std::size_t fwd_bytes = 0, bwd_bytes = 0;      // workspace of a forward / backward call
  std::size_t fwd_scratch = 0, bwd_scratch = 0;  // offset of the scratchpad in it
};

std::unordered_map<ConvKey, Entry, KeyHash>& cache() {
  static std::unordered_map<ConvKey, Entry, KeyHash> c;
  return c;
}

Entry make(const ConvKey& k) {
  const std::int64_t oh = (k.h + 2 * k.pad - k.kh) / k.stride + 1;
  const std::int64_t ow = (k.w + 2 * k.pad - k.kw) / k.stride + 1;
  const dims xd{k.n, k.ic, k.h, k.w}, wd{k.oc, k.ic, k.kh, k.kw}, yd{k.n, k.oc, oh, ow}, bd{k.oc};
  // The caller's tensors.
  const mdesc x_p(xd, k.data, tag::nchw), w_p(wd, k.data, tag::oihw), y_p(yd, k.data, tag::nchw);
  const mdesc dw_p(wd, dt::f32, tag::oihw), db_p(bd, dt::f32, tag::x);
  // What the primitives are asked for: channels-last activations, weights as
  // oneDNN likes them, parameter gradients in fp32.
  const mdesc x_c(xd, k.data, tag::nhwc), w_c(wd, k.data, tag::any), y_c(yd, k.data, tag::nhwc);
  const mdesc b_c(bd, k.data, tag::x), dw_c(wd, dt::f32, tag::any);
  // Zero padding on all four sides; oneDNN's output size is floor((H + pl + pr -
  // KH) / stride) + 1 as conv2d.hpp's, so padding_r = padding also when the last
  // window stops short of the padded edge.
  const dims strides{k.stride, k.stride}, pad{k.pad, k.pad};
  const dnnl::engine& eng = dnnl_engine();
  const auto direct = dnnl::algorithm::convolution_direct;
  Entry e;
  e.fwd_pd = dnnl::convolution_forward::primitive_desc(
      k.bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, direct, x_c, w_c, b_c, y_c,
                                               strides, pad, pad)
             : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, direct, x_c, w_c, y_c, strides,
                                               pad, pad),
      user_scratchpad(), eng);
  e.bwd_data_pd = dnnl::convolution_backward_data::primitive_desc(
      dnnl::convolution_backward_data::desc(direct, x_c, w_c, y_c, strides, pad, pad), user_scratchpad(), eng,
      e.fwd_pd);
  e.bwd_weights_pd = dnnl::convolution_backward_weights::primitive_desc(
      k.bias ? dnnl::convolution_backward_weights::desc(direct, x_c, dw_c, db_p, y_c, strides, pad, pad)
             : dnnl::convolution_backward_weights::desc(direct, x_c, dw_c, y_c, strides, pad, pad),
      user_scratchpad(), eng, e.fwd_pd);

  Region fwd;
  std::size_t scratch = e.fwd_pd.scratchpad_desc().get_size();
  adapt(e.x_f, e.fwd_pd.src_desc(), x_p, kIn, fwd, scratch);
  adapt(e.w_f, e.fwd_pd.weights_desc(), w_p, kIn, fwd, scratch);
  adapt(e.y_f, e.fwd_pd.dst_desc(), y_p, kOut, fwd, scratch);
  e.fwd_scratch = fwd.take(scratch);
  e.fwd_bytes = fwd.bytes;

  Region bwd;
  scratch = std::max(e.bwd_data_pd.scratchpad_desc().get_size(), e.bwd_weights_pd.scratchpad_desc().get_size());
  adapt(e.dy_d, e.bwd_data_pd.diff_dst_desc(), y_p, kIn, bwd, scratch);
  adapt(e.w_d, e.bwd_data_pd.weights_desc(), w_p, kIn, bwd, scratch);
  adapt(e.dx_d, e.bwd_data_pd.diff_src_desc(), x_p, kOut, bwd, scratch);
  adapt(e.x_w, e.bwd_weights_pd.src_desc(), x_p, kIn, bwd, scratch);
  if (e.bwd_weights_pd.diff_dst_desc() == e.dy_d.want) {
    e.dy_w = e.dy_d;
    e.dy_shared = true;
  } else {
    adapt(e.dy_w, e.bwd_weights_pd.diff_dst_desc(), y_p, kIn, bwd, scratch);
  }
  // Always through a copy: block 0 is reordered into dw_sum, later blocks added.
  adapt(e.dw_w, e.bwd_weights_pd.diff_weights_desc(), dw_p, kOut | kOutSum, bwd, scratch, true);
  if (k.bias) adapt(e.db_w, e.bwd_weights_pd.diff_bias_desc(), db_p, kOut | kOutSum, bwd, scratch, true);
  e.bwd_scratch = bwd.take(scratch);
  e.bwd_bytes = bwd.bytes;
  return e;
}

Entry& entry(const ConvKey& k) {
  auto& map = cache();
  auto it = map.find(k);
  if (it == map.end()) it = map.emplace(k, make(k)).first;
  return it->second;
}

// oneDNN takes non-const handles; inputs are only read.
dnnl::memory wrap(const mdesc& d, const void* p) { return dnnl::memory(d, dnnl_engine(), const_cast<void*>(p)); }

char* aligned(void* p) {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  return static_cast<char*>(p) + (align_up(addr) - addr);
}

void run(dnnl::reorder& prim, const dnnl::reorder::primitive_desc& pd, const dnnl::memory& from,
         const dnnl::memory& to, char* scratch) {
  if (!prim) prim = dnnl::reorder(pd);
  prim.execute(dnnl_stream(), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to},
                               {DNNL_ARG_SCRATCHPAD, wrap(pd.scratchpad_desc(), scratch)}});
}

// The memory a primitive reads for `a`: the caller's bytes, or the copy after
// reordering them into it.
dnnl::memory bring_in(Adapter& a, const void* caller, char* region, char* scratch) {
  if (!a.copy) return wrap(a.want, caller);
  dnnl::memory copy = wrap(a.want, region + a.offset);
  run(a.in, a.in_pd, wrap(a.plain, caller), copy, scratch);
  return copy;
}

// The memory a primitive writes for `a`: the caller's bytes or the copy.
dnnl::memory target(const Adapter& a, void* caller, char* region) {
  return a.copy ? wrap(a.want, region + a.offset) : wrap(a.want, caller);
}

// Copies what a primitive wrote into `copy` back to the caller's layout
// (caller += copy when `sum`).
void bring_out(Adapter& a, const dnnl::memory& copy, void* caller, bool sum, char* scratch) {
  if (!a.copy) return;
  if (sum) run(a.out_sum, a.out_sum_pd, copy, wrap(a.plain, caller), scratch);
  else run(a.out, a.out_pd, copy, wrap(a.plain, caller), scratch);
}

std::size_t elem_bytes(dt data) { return data == dt::bf16 ? 2 : 4; }

}  // namespace

std::int64_t dnnl_conv_samples_per_block(const Conv2dShape& s) {
  const std::int64_t per_sample =
      2 * s.in_channels * s.height * s.width + s.out_channels * s.out_h() * s.out_w();  // x, dx, y / dy
  const std::int64_t nb = std::max<std::int64_t>(1, kBlockElems / per_sample);
  return std::min(nb, s.batch);
}

std::size_t dnnl_conv_workspace_bytes(const Conv2dShape& s, dt data) {
  if (s.batch <= 0) return 0;
  const std::int64_t nb = dnnl_conv_samples_per_block(s);
  const std::int64_t threads = std::max(1, omp_get_max_threads());
  std::size_t bytes = 0;
  Conv2dShape b = s;
  b.batch = nb;
  try {
    for (;;) {
      for (bool bias : {true, false}) {
        const Entry& e = entry(key_of(b, data, bias));
        bytes = std::max({bytes, e.fwd_bytes, e.bwd_bytes});
      }
      b.batch = b.batch == nb ? 1 : b.batch + 1;
      if (b.batch >= nb || b.batch > 2 * threads) break;
    }
  } catch (const dnnl::error& err) {
    dnnl_fail("conv2d (workspace size): " + describe(key_of(b, data, true)), err);
  }
  return bytes + kAlign - 1;  // the caller's pointer is aligned inside
}

void dnnl_conv_forward(const Conv2dShape& s, dt data, const void* x, const void* w, const void* b, void* y,
                       void* workspace) {
  const std::int64_t nb = dnnl_conv_samples_per_block(s);
  const std::size_t x_sample = elem_bytes(data) * static_cast<std::size_t>(s.in_channels * s.height * s.width);
  const std::size_t y_sample = elem_bytes(data) * static_cast<std::size_t>(s.out_channels * s.out_h() * s.out_w());
  char* region = aligned(workspace);
  ConvKey k{};
  try {
    for (std::int64_t n0 = 0; n0 < s.batch; n0 += nb) {
      Conv2dShape blk = s;
      blk.batch = std::min(nb, s.batch - n0);
      k = key_of(blk, data, b != nullptr);
      Entry& e = entry(k);
      char* scratch = region + e.fwd_scratch;
      const char* xb = static_cast<const char*>(x) + static_cast<std::size_t>(n0) * x_sample;
      char* yb = static_cast<char*>(y) + static_cast<std::size_t>(n0) * y_sample;
      const dnnl::memory xm = bring_in(e.x_f, xb, region, scratch);
      const dnnl::memory wm = bring_in(e.w_f, w, region, scratch);
      const dnnl::memory ym = target(e.y_f, yb, region);
      if (!e.fwd) e.fwd = dnnl::convolution_forward(e.fwd_pd);
      std::unordered_map<int, dnnl::memory> args = {
          {DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym},
          {DNNL_ARG_SCRATCHPAD, wrap(e.fwd_pd.scratchpad_desc(), scratch)}};
      if (b) args.emplace(DNNL_ARG_BIAS, wrap(e.fwd_pd.bias_desc(), b));
      e.fwd.execute(dnnl_stream(), args);
      bring_out(e.y_f, ym, yb, false, scratch);
    }
    dnnl_stream().wait();
  } catch (const dnnl::error& err) {
    dnnl_fail("conv2d_forward: " + describe(k), err);
  }
}

void dnnl_conv_backward(const Conv2dShape& s, dt data, const void* x, const void* w, const void* dy, void* dx,
                        float* dw_sum, float* db_sum, void* workspace) {
  const std::int64_t nb = dnnl_conv_samples_per_block(s);
  const std::size_t x_sample = elem_bytes(data) * static_cast<std::size_t>(s.in_channels * s.height * s.width);
  const std::size_t y_sample = elem_bytes(data) * static_cast<std::size_t>(s.out_channels * s.out_h() * s.out_w());
  char* region = aligned(workspace);
  ConvKey k{};
  try {
    for (std::int64_t n0 = 0; n0 < s.batch; n0 += nb) {
      Conv2dShape blk = s;
      blk.batch = std::min(nb, s.batch - n0);
      k = key_of(blk, data, db_sum != nullptr);
      Entry& e = entry(k);
      char* scratch = region + e.bwd_scratch;
      const char* xb = static_cast<const char*>(x) + static_cast<std::size_t>(n0) * x_sample;
      const char* dyb = static_cast<const char*>(dy) + static_cast<std::size_t>(n0) * y_sample;
      dnnl::memory dym;  // dy as backward data read it (reused when backward weights wants the same)
      if (dx) {
        char* dxb = static_cast<char*>(dx) + static_cast<std::size_t>(n0) * x_sample;
        dym = bring_in(e.dy_d, dyb, region, scratch);
        const dnnl::memory wm = bring_in(e.w_d, w, region, scratch);
        const dnnl::memory dxm = target(e.dx_d, dxb, region);
        if (!e.bwd_data) e.bwd_data = dnnl::convolution_backward_data(e.bwd_data_pd);
        e.bwd_data.execute(dnnl_stream(), {{DNNL_ARG_DIFF_DST, dym}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DIFF_SRC, dxm},
                                           {DNNL_ARG_SCRATCHPAD, wrap(e.bwd_data_pd.scratchpad_desc(), scratch)}});
        bring_out(e.dx_d, dxm, dxb, false, scratch);
      }
      const dnnl::memory xm = bring_in(e.x_w, xb, region, scratch);
      if (!(dx && e.dy_shared)) dym = bring_in(e.dy_w, dyb, region, scratch);
      const dnnl::memory dwm = wrap(e.dw_w.want, region + e.dw_w.offset);
      if (!e.bwd_weights) e.bwd_weights = dnnl::convolution_backward_weights(e.bwd_weights_pd);
      std::unordered_map<int, dnnl::memory> args = {
          {DNNL_ARG_SRC, xm}, {DNNL_ARG_DIFF_DST, dym}, {DNNL_ARG_DIFF_WEIGHTS, dwm},
          {DNNL_ARG_SCRATCHPAD, wrap(e.bwd_weights_pd.scratchpad_desc(), scratch)}};
      dnnl::memory dbm;
      if (db_sum) {
        dbm = wrap(e.db_w.want, region + e.db_w.offset);
        args.emplace(DNNL_ARG_DIFF_BIAS, dbm);
      }
      e.bwd_weights.execute(dnnl_stream(), args);
      bring_out(e.dw_w, dwm, dw_sum, n0 > 0, scratch);
      if (db_sum) bring_out(e.db_w, dbm, db_sum, n0 > 0, scratch);
    }
    dnnl_stream().wait();
  } catch (const dnnl::error& err) {
    dnnl_fail("conv2d_backward: " + describe(k), err);
  }
}

std::string dnnl_conv_impl(const Conv2dShape& s, dt data) {
  Conv2dShape blk = s;
  blk.batch = dnnl_conv_samples_per_block(s);
  const ConvKey k = key_of(blk, data, true);
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
