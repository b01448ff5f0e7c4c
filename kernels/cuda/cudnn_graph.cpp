// shardtrain/kernels/cuda/cudnn_graph.cpp
// This file is long because both SDPA graphs are spelled node by node as cudnn-frontend lowers them.
// Builds and validates the cuDNN SDPA operation graphs described in
// cudnn_graph.hpp. Pure host code: no cuDNN or CUDA header.
//
// Reference: NVIDIA/cudnn-frontend, include/cudnn_frontend/. Which frontend node
// produces each of our ops (names are the frontend's Pointwise/Reduction/Matmul/
// Reshape_attributes names):
//   node/scaled_dot_product_flash_attention.h (stored copies at commits 0b73d066
//   and 01a727ea; the composite nodes are the same in both for our case; the
//   copy at v1.19.0 = df73764 itself is not in the index I could read):
//     CompositeSDPANode::expand_node         bmm1, attn_scale, [mask], softmax, bmm2
//     CompositeSDPABackwardNode::expand_node mul_dO_O .. identity_dQ (see below)
//     ::collect_tensors_in_workspace_node     dQ_accum at offset 0, then softmax_sum
//   node/softmax.h CompositeSoftmaxNode (cuDNN < 9.21): Max, sub, exp, sum, log, add, div
//   node/diagonal_band_mask.h at df73764, CompositeDiagonalBandMaskNode (cuDNN < 9.20):
//     gen_row_index, gen_col_index (GEN_INDEX, int32 out, compute left to the
//     graph's compute type = float), "row>col" (CMP_GE, boolean), binary_select
//   utils/attn_score_modifiers.h sliding_window_mask (causal = right bound 0,
//     top-left, no shift) and get_negative_inf_value (-inf from cuDNN 9.10).
// Routing: for cuDNN 9.19 the frontend's AUTO implementation picks the composite
// nodes: v1.19.0's unified SDPA forward takes no left/right bound (causal), and
// the unified backward needs cuDNN 9.27 (sdpa_support_surface.h,
// verify_sdpa_(backward_)support_surface_for_implementation).
// Tensor types follow the frontend's fill_from_context: a virtual tensor whose
// type a node does not set gets the graph's intermediate type (float), an op's
// unset compute type the graph's compute type (float); by-value scalars are
// float (1,1,1,1), every tensor is 16-byte aligned. Virtual strides are the
// frontend's too, including mul_dO_O's (H*T*D, T*D, H*D, 1).
// What was NOT settled from the sources: whether the dQ_accum reordering was
// dropped exactly at some release (F16x16 is set in the old SDPABackwardNode,
// e.g. commit b607105d, and absent from every CompositeSDPABackwardNode copy);
// and whether engines accept this graph on a given GPU -- only a device run says.
//
// Head-size limit. cuDNN's fused flash attention needs the head size d to be a
// multiple of 8 on every architecture and version (cudnn-frontend
// node/sdpa_support_surface.h: "hidden_dim should be multiple of 8"). The upper
// bound depends on version, architecture and direction: cuDNN 8.9 / 9.0 take
// d <= 128 for forward and backward (cudnn-frontend <= 1.2:
// "hidden_dim shoud be less than 128", lifted to 256 only for backend >= 9.1.1);
// the support matrix for cuDNN 9.18 (docs.nvidia.com/cudnn, operations/Attention,
// "Support Matrix") lists d <= 256 for the forward on Ampere/Ada and Hopper, with
// d > 128 backward only on some architectures. We cannot ask an engine without a
// device, so validate() enforces the bound that holds for forward AND backward on
// sm_80 and sm_90 in every cuDNN 9 release: d % 8 == 0 and d <= 128 (GPT-2's
// d = 64 is inside it). Engines can still refuse a graph at run time; CudnnSdpa
// then throws with this graph's describe() in the message.
// Length (~770 lines): the forward and backward SDPA graphs follow the frontend's
// composite nodes node by node (listed above), and validate() shares their tensor
// helpers; splitting the two graphs would separate each from the checks it must pass.
#include "kernels/cuda/cudnn_graph.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

#include "core/error.hpp"
#include "core/text.hpp"

namespace shardtrain::cudnn {

namespace {

std::vector<std::int64_t> packed_strides(const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> s(dims.size(), 1);
  for (std::size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

// "[2,4,8]": a tensor's dims or strides in messages and dumps.
std::string dims_text(const std::vector<std::int64_t>& v) {
  std::string s = "[";  // appended, not "[" + ...: GCC 12's -Wrestrict misfires on that operator+
  s += join(v, ",");
  s += ']';
  return s;
}

const char* direction_name(Direction d) { return d == Direction::Forward ? "forward" : "backward"; }

// Appends tensors and ops in order; every op's output is a new virtual tensor
// unless an existing (non-virtual) one is named.
class GraphBuilder {
 public:
  GraphBuilder(const SdpaShape& shape, Direction direction) {
    m_graph.shape = shape;
    m_graph.direction = direction;
  }

  std::int64_t view(std::int64_t uid, std::string name, DataType dtype,
                    std::vector<std::int64_t> dims, std::vector<std::int64_t> strides,
                    Buffer buffer, std::int64_t offset, std::int64_t buffer_elems) {
    TensorDesc t;
    t.uid = uid;
    t.name = std::move(name);
    t.dtype = dtype;
    t.dims = std::move(dims);
    t.strides = std::move(strides);
    t.buffer = buffer;
    t.offset = offset;
    t.buffer_elems = buffer_elems;
    m_graph.tensors.push_back(std::move(t));
    return uid;
  }

  std::int64_t scalar(std::int64_t uid, std::string name, float value) {
    TensorDesc t;
    t.uid = uid;
    t.name = std::move(name);
    t.dtype = DataType::Float;
    t.dims = {1, 1, 1, 1};
    t.strides = {1, 1, 1, 1};
    t.is_by_value = true;
    t.value = value;
    m_graph.tensors.push_back(std::move(t));
    return uid;
  }

  std::int64_t virt(std::string name, DataType dtype, std::vector<std::int64_t> dims,
                    std::vector<std::int64_t> strides = {}) {
    TensorDesc t;
    t.uid = m_next_virtual++;
    t.name = std::move(name);
    t.dtype = dtype;
    t.strides = strides.empty() ? packed_strides(dims) : std::move(strides);
    t.dims = std::move(dims);
    t.is_virtual = true;
    m_graph.tensors.push_back(std::move(t));
    return m_graph.tensors.back().uid;
  }

  const TensorDesc& tensor(std::int64_t uid) const { return m_graph.tensor(uid); }

  void op(Operation o) { m_graph.ops.push_back(std::move(o)); }

  // C = A B into `out`.
  void matmul_into(std::string name, std::int64_t a, std::int64_t b, std::int64_t out) {
    Operation o;
    o.kind = OpKind::Matmul;
    o.name = std::move(name);
    o.compute_type = DataType::Float;
    o.inputs = {a, b};
    o.output = out;
    op(std::move(o));
  }
  std::int64_t matmul(std::string name, std::string out_name, std::int64_t a, std::int64_t b) {
    const auto& ta = tensor(a);
    const auto& tb = tensor(b);
    std::vector<std::int64_t> dims = ta.dims;
    dims.back() = tb.dims.back();
    const std::int64_t out = virt(std::move(out_name), DataType::Float, std::move(dims));
    matmul_into(std::move(name), a, b, out);
    return out;
  }

  void pointwise_into(std::string name, PointwiseMode mode, std::vector<std::int64_t> inputs,
                      std::int64_t out, DataType compute = DataType::Float, std::int64_t axis = -1) {
    Operation o;
    o.kind = OpKind::Pointwise;
    o.name = std::move(name);
    o.pointwise_mode = mode;
    o.compute_type = compute;
    o.axis = axis;
    o.inputs = std::move(inputs);
    o.output = out;
    op(std::move(o));
  }
  // Output has the dims of the first input.
  std::int64_t pointwise(std::string name, std::string out_name, PointwiseMode mode,
                         std::vector<std::int64_t> inputs, DataType out_type = DataType::Float,
                         DataType compute = DataType::Float, std::int64_t axis = -1) {
    const std::int64_t out = virt(std::move(out_name), out_type, tensor(inputs.front()).dims);
    pointwise_into(std::move(name), mode, std::move(inputs), out, compute, axis);
    return out;
  }

  // Reduces the last dimension to 1.
  std::int64_t reduction(std::string name, std::string out_name, ReductionMode mode,
                         std::int64_t x) {
    std::vector<std::int64_t> dims = tensor(x).dims;
    dims.back() = 1;
    const std::int64_t out = virt(std::move(out_name), DataType::Float, std::move(dims));
    Operation o;
    o.kind = OpKind::Reduction;
    o.name = std::move(name);
    o.reduction_mode = mode;
    o.compute_type = DataType::Float;
    o.inputs = {x};
    o.output = out;
    op(std::move(o));
    return out;
  }

  std::int64_t reshape(std::string name, std::string out_name, std::int64_t x, DataType out_type,
                       std::vector<std::int64_t> dims, std::vector<std::int64_t> strides) {
    const std::int64_t out = virt(std::move(out_name), out_type, std::move(dims), std::move(strides));
    Operation o;
    o.kind = OpKind::Reshape;
    o.name = std::move(name);
    o.inputs = {x};
    o.output = out;
    op(std::move(o));
    return out;
  }

  // S -> row >= col ? S : -inf: the frontend's causal mask, a right-bound
  // diagonal band with no shift (CompositeDiagonalBandMaskNode): GEN_INDEX on
  // axes 2 and 3 (int32 outputs, float compute: the frontend leaves it to the
  // graph's compute type), "row>col" = CMP_GE(row, col) to a boolean (boolean
  // compute), BINARY_SELECT(S, -inf, mask) with a by-value float -inf.
  std::int64_t causal_mask(std::int64_t s, std::int64_t neg_inf) {
    const std::int64_t row = pointwise("gen_row_index", "row_index", PointwiseMode::GenIndex, {s},
                                       DataType::Int32, DataType::Float, 2);
    const std::int64_t col = pointwise("gen_col_index", "col_index", PointwiseMode::GenIndex, {s},
                                       DataType::Int32, DataType::Float, 3);
    const std::int64_t mask = pointwise("row>col", "causal_mask", PointwiseMode::CmpGe,
                                        {row, col}, DataType::Boolean, DataType::Boolean);
    return pointwise("binary_select", "S_masked", PointwiseMode::BinarySelect, {s, neg_inf, mask});
  }

  SdpaGraph& graph() { return m_graph; }

 private:
  SdpaGraph m_graph;
  std::int64_t m_next_virtual = uid::FirstVirtual;
};

// Shape checks shared by the builders (run first, so they never build from a
// nonsense shape) and validate().
void check_shape(const SdpaShape& s, Direction d) {
  const std::string where = std::string("cuDNN SDPA ") + direction_name(d) + " graph: ";
  if (s.batch <= 0 || s.seq_len <= 0 || s.channels <= 0 || s.n_head <= 0)
    SHARDTRAIN_FAIL(where + "batch, seq_len, channels and n_head must be positive (got B=" +
                    std::to_string(s.batch) + " T=" + std::to_string(s.seq_len) +
                    " C=" + std::to_string(s.channels) + " H=" + std::to_string(s.n_head) + ")");
  if (s.channels % s.n_head != 0)
    SHARDTRAIN_FAIL(where + "channels " + std::to_string(s.channels) +
                    " is not divisible by n_head " + std::to_string(s.n_head));
  const std::int64_t d_head = s.head_dim();
  if (d_head % kHeadDimMultiple != 0)
    SHARDTRAIN_FAIL(where + "head size D = C/H = " + std::to_string(d_head) +
                    " is not a multiple of 8 (cuDNN flash attention needs D % 8 == 0)");
  if (d_head > kMaxHeadDim)
    SHARDTRAIN_FAIL(where + "head size D = C/H = " + std::to_string(d_head) +
                    " exceeds 128 (the cuDNN 9 flash-attention limit for forward and backward "
                    "on sm_80 and sm_90)");
  if (s.dtype != DataType::Half && s.dtype != DataType::BFloat16)
    SHARDTRAIN_FAIL(where + "unsupported data type " + to_string(s.dtype) +
                    " for Q, K, V, O: cuDNN flash attention takes half or bfloat16 only");
  if (d == Direction::Backward && !s.training)
    SHARDTRAIN_FAIL(where + "the backward graph needs the forward's Stats: shape.training must be true");
}

struct Dims {
  std::int64_t b, t, c, h, d;
};
Dims dims_of(const SdpaShape& s) { return {s.batch, s.seq_len, s.channels, s.n_head, s.head_dim()}; }

}  // namespace

// ---------------------------------------------------------------- accessors

const TensorDesc* SdpaGraph::find(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorDesc& SdpaGraph::tensor(std::string_view name) const {
  const TensorDesc* t = find(name);
  if (t == nullptr) SHARDTRAIN_FAIL("cuDNN SDPA graph has no tensor named '" + std::string(name) + "'");
  return *t;
}

TensorDesc& SdpaGraph::tensor_mut(std::string_view name) {
  for (auto& t : tensors)
    if (t.name == name) return t;
  SHARDTRAIN_FAIL("cuDNN SDPA graph has no tensor named '" + std::string(name) + "'");
}

const TensorDesc& SdpaGraph::tensor(std::int64_t id) const {
  for (const auto& t : tensors)
    if (t.uid == id) return t;
  SHARDTRAIN_FAIL("cuDNN SDPA graph has no tensor with uid " + std::to_string(id));
}

// ---------------------------------------------------------------- builders

SdpaGraph make_sdpa_forward_graph(const SdpaShape& shape) {
  check_shape(shape, Direction::Forward);
  const auto [B, T, C, H, D] = dims_of(shape);
  const DataType io = shape.dtype;
  const std::int64_t qkv_elems = B * T * 3 * C, out_elems = B * T * C, stats_elems = B * H * T;
  GraphBuilder gb(shape, Direction::Forward);

  // Q, K^T, V: views into qkv (B, T, 3C). cuDNN's bmm1 takes K transposed,
  // (B, H, D, T): the (B, H, T, D) view of K with the last two dims swapped.
  const std::int64_t q = gb.view(uid::Q, "Q", io, {B, H, T, D}, {T * 3 * C, D, 3 * C, 1},
                                 Buffer::Qkv, 0, qkv_elems);
  const std::int64_t kt = gb.view(uid::K, "K^T", io, {B, H, D, T}, {T * 3 * C, D, 1, 3 * C},
                                  Buffer::Qkv, C, qkv_elems);
  const std::int64_t v = gb.view(uid::V, "V", io, {B, H, T, D}, {T * 3 * C, D, 3 * C, 1},
                                 Buffer::Qkv, 2 * C, qkv_elems);
  const std::int64_t o = gb.view(uid::O, "O", io, {B, H, T, D}, {T * C, D, C, 1}, Buffer::Out, 0,
                                 out_elems);
  std::int64_t stats = 0;
  if (shape.training)
    stats = gb.view(uid::Stats, "Stats", DataType::Float, {B, H, T, 1}, {H * T, T, 1, 1},
                    Buffer::Stats, 0, stats_elems);
  const std::int64_t scale = gb.scalar(uid::AttnScale, "attn_scale",
                                       static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))));
  std::int64_t neg_inf = 0;
  if (shape.causal)
    neg_inf = gb.scalar(uid::NegInf, "neg_inf", -std::numeric_limits<float>::infinity());

  // CompositeSDPANode::expand_node.
  std::int64_t s = gb.matmul("bmm1", "S", q, kt);
  s = gb.pointwise("attn_scale", "S_scaled", PointwiseMode::Mul, {s, scale});
  if (shape.causal) s = gb.causal_mask(s, neg_inf);
  // CompositeSoftmaxNode::expand_node with a Stats output.
  const std::int64_t m = gb.reduction("Max", "M", ReductionMode::Max, s);
  const std::int64_t sm = gb.pointwise("sub", "S_minus_M", PointwiseMode::Sub, {s, m});
  const std::int64_t e = gb.pointwise("exp", "E", PointwiseMode::Exp, {sm});
  const std::int64_t z = gb.reduction("sum", "Z", ReductionMode::Add, e);
  if (shape.training) {
    const std::int64_t log_z = gb.pointwise("log", "log_Z", PointwiseMode::Log, {z});
    gb.pointwise_into("add", PointwiseMode::Add, {m, log_z}, stats);
  }
  // The softmax output enters bmm2 in the I/O type (the frontend sets it: "Requirement
  // by cudnn backend to take in bmm2 aType as i/o type").
  const std::int64_t p = gb.pointwise("div", "P", PointwiseMode::Div, {e, z}, io);
  gb.matmul_into("bmm2", p, v, o);

  SdpaGraph& g = gb.graph();
  g.inputs = {q, kt, v, scale};
  if (shape.causal) g.inputs.push_back(neg_inf);
  g.outputs = {o};
  if (shape.training) g.outputs.push_back(stats);
  g.workspace_prefix_bytes = 0;
  g.validate();
  return std::move(g);
}

SdpaGraph make_sdpa_backward_graph(const SdpaShape& shape) {
  check_shape(shape, Direction::Backward);
  const auto [B, T, C, H, D] = dims_of(shape);
  const DataType io = shape.dtype;
  const std::int64_t qkv_elems = B * T * 3 * C, out_elems = B * T * C, stats_elems = B * H * T;
  GraphBuilder gb(shape, Direction::Backward);

  // Q, K^T, V^T into qkv; O, dO into the (B, T, C) output and its gradient;
  // dQ, dK, dV into dqkv, packed like qkv.
  const std::vector<std::int64_t> bhtd = {B, H, T, D}, bhdt = {B, H, D, T}, bht1 = {B, H, T, 1};
  const std::vector<std::int64_t> qkv_str = {T * 3 * C, D, 3 * C, 1};
  const std::vector<std::int64_t> qkv_str_t = {T * 3 * C, D, 1, 3 * C};
  const std::vector<std::int64_t> out_str = {T * C, D, C, 1};
  const std::int64_t q = gb.view(uid::Q, "Q", io, bhtd, qkv_str, Buffer::Qkv, 0, qkv_elems);
  const std::int64_t kt = gb.view(uid::K, "K^T", io, bhdt, qkv_str_t, Buffer::Qkv, C, qkv_elems);
  const std::int64_t vt = gb.view(uid::V, "V^T", io, bhdt, qkv_str_t, Buffer::Qkv, 2 * C, qkv_elems);
  const std::int64_t o = gb.view(uid::O, "O", io, bhtd, out_str, Buffer::Out, 0, out_elems);
  const std::int64_t d_o = gb.view(uid::dO, "dO", io, bhtd, out_str, Buffer::DOut, 0, out_elems);
  const std::int64_t stats = gb.view(uid::Stats, "Stats", DataType::Float, bht1, packed_strides(bht1),
                                     Buffer::Stats, 0, stats_elems);
  const std::int64_t d_q = gb.view(uid::dQ, "dQ", io, bhtd, qkv_str, Buffer::DQkv, 0, qkv_elems);
  const std::int64_t d_k = gb.view(uid::dK, "dK", io, bhtd, qkv_str, Buffer::DQkv, C, qkv_elems);
  const std::int64_t d_v = gb.view(uid::dV, "dV", io, bhtd, qkv_str, Buffer::DQkv, 2 * C, qkv_elems);

  // The graph's workspace tensor (CompositeSDPABackwardNode::
  // collect_tensors_in_workspace_node): softmax_sum (B,H,T,1) packed at offset 0.
  // The DETERMINISTIC graph: with set_deterministic_algorithm(true) the frontend
  // sets use_dp_workspace on Hopper and earlier, and then makes no dQ_accum --
  // matmul_dS_K writes dQ itself (the "dP workspace" engines, which do not sum dQ
  // in fp32 across key blocks in a varying order). Without determinism it would
  // put a non-virtual fp32 dQ_accum (B,H,T,D) at offset 0, matmul_dS_K into it and
  // identity_dQ from it to dQ; this graph never does (validate() refuses a
  // Workspace dQ_accum). Not reordered.
  const std::int64_t sum_elems = B * H * T;
  const std::int64_t prefix_bytes = (sum_elems * 4 + 255) / 256 * 256;
  const std::int64_t softmax_sum = gb.view(uid::SoftmaxSum, "softmax_sum", DataType::Float, bht1,
                                           packed_strides(bht1), Buffer::Workspace, 0, prefix_bytes / 4);
  const std::int64_t scale = gb.scalar(uid::AttnScale, "attn_scale",
                                       static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))));
  std::int64_t neg_inf = 0;
  if (shape.causal)
    neg_inf = gb.scalar(uid::NegInf, "neg_inf", -std::numeric_limits<float>::infinity());
  // The frontend's one_tensor: the dropout_scale_inv slot of scale_dropout_inv.
  const std::int64_t one = gb.scalar(uid::One, "one", 1.0f);

  // CompositeSDPABackwardNode::expand_node, in its order.
  // "dO * O => softmax_sum" chain. mul_dO_O's output strides are the frontend's
  // as written, (H*T*D, T*D, H*D, 1) for dims (B,H,T,D).
  const std::int64_t do_o = gb.virt("dO_times_O", DataType::Float, bhtd, {H * T * D, T * D, H * D, 1});
  gb.pointwise_into("mul_dO_O", PointwiseMode::Mul, {d_o, o}, do_o);
  const std::int64_t dsum_raw = gb.reduction("reduce_dO_o", "softmax_sum_raw", ReductionMode::Add, do_o);
  gb.pointwise_into("scale_dropout_inv", PointwiseMode::Mul, {dsum_raw, one}, softmax_sum);
  // "Q @ KT => exp_softmax => dV" chain: the Stats subtraction comes BEFORE the mask.
  std::int64_t s = gb.matmul("matmul_Q_KT", "S", q, kt);
  s = gb.pointwise("mul_s_attn_scale", "S_scaled", PointwiseMode::Mul, {s, scale});
  s = gb.pointwise("sub_s_m", "S_minus_stats", PointwiseMode::Sub, {s, stats});
  if (shape.causal) s = gb.causal_mask(s, neg_inf);
  const std::int64_t p = gb.pointwise("exp_s", "P", PointwiseMode::Exp, {s});
  const std::int64_t pt = gb.reshape("reshape_p", "P^T", p, io, {B, H, T, T}, {H * T * T, T * T, 1, T});
  gb.matmul_into("matmul_pT_dO", pt, d_o, d_v);
  // "dO @ VT => dS_output => dK" chain.
  const std::int64_t dp = gb.matmul("matmul_dO_VT", "dP", d_o, vt);
  const std::int64_t dp_sum = gb.pointwise("sub_dP_softmax_sum", "dP_minus_sum", PointwiseMode::Sub,
                                           {dp, softmax_sum});
  const std::int64_t ds0 = gb.pointwise("mul_dP_exp_s", "dS_unscaled", PointwiseMode::Mul, {dp_sum, p});
  const std::int64_t ds = gb.pointwise("mul_dS_attn_scale", "dS", PointwiseMode::Mul, {ds0, scale});
  const std::int64_t dst = gb.reshape("reshape_dS", "dS^T", ds, io, {B, H, T, T}, {H * T * T, T * T, 1, T});
  gb.matmul_into("matmul_dST_Q", dst, q, d_k);
  // "dp_scaled @ K => dQ" chain. reshape_k's output type is not set by the
  // frontend, so fill_from_context gives it the intermediate type: float.
  const std::int64_t k = gb.reshape("reshape_k", "K", kt, DataType::Float, bhtd, qkv_str);
  gb.matmul_into("matmul_dS_K", ds, k, d_q);

  SdpaGraph& g = gb.graph();
  g.inputs = {q, kt, vt, o, d_o, stats, scale};
  if (shape.causal) g.inputs.push_back(neg_inf);
  g.inputs.push_back(one);
  g.outputs = {d_q, d_k, d_v, softmax_sum};
  g.workspace_prefix_bytes = prefix_bytes;
  // Nothing to zero: softmax_sum is written by the graph before it is read (the
  // non-deterministic graph's dQ_accum was the only tensor zeroed before a run).
  g.zero_before_execute = {};
  g.validate();
  return std::move(g);
}

// ---------------------------------------------------------------- validate

void SdpaGraph::validate() const {
  const std::string where = std::string("cuDNN SDPA ") + direction_name(direction) + " graph: ";
  auto fail = [&](const std::string& msg) { SHARDTRAIN_FAIL(where + msg); };
  check_shape(shape, direction);

  auto is_in = [](const std::vector<std::int64_t>& v, std::int64_t x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  auto label = [](const TensorDesc& t) { return "tensor '" + t.name + "' (uid " + std::to_string(t.uid) + ")"; };

  // Tensors.
  std::set<std::int64_t> uids;
  for (const auto& t : tensors) {
    if (!uids.insert(t.uid).second) fail("uid " + std::to_string(t.uid) + " repeats ('" + t.name + "')");
    if (t.dims.empty() || t.dims.size() != t.strides.size())
      fail(label(t) + ": dims " + dims_text(t.dims) + " and strides " + dims_text(t.strides) +
           " have different ranks (or are empty)");
    for (std::size_t i = 0; i < t.dims.size(); ++i)
      if (t.dims[i] < 1 || t.strides[i] < 0)
        fail(label(t) + ": dims " + dims_text(t.dims) + " / strides " + dims_text(t.strides) +
             " must be positive / non-negative");
    switch (t.dtype) {
      case DataType::Half:
      case DataType::BFloat16:
      case DataType::Float:
      case DataType::Int32:
      case DataType::Boolean:
        break;
      default:
        fail(label(t) + ": unsupported data type " + to_string(t.dtype) +
             " (the SDPA graph uses half/bfloat16 I/O, float statistics and intermediates, "
             "int32 indices and boolean masks)");
    }
    const bool io_buffer = t.buffer == Buffer::Qkv || t.buffer == Buffer::Out ||
                           t.buffer == Buffer::DOut || t.buffer == Buffer::DQkv;
    if (io_buffer && t.dtype != shape.dtype)
      fail(label(t) + ": data type " + to_string(t.dtype) + " differs from the graph's I/O type " +
           to_string(shape.dtype));
    if ((t.buffer == Buffer::Stats || t.buffer == Buffer::Workspace || t.is_by_value) &&
        t.dtype != DataType::Float)
      fail(label(t) + ": unsupported data type " + to_string(t.dtype) + " (must be float)");
    if (t.is_virtual && (t.is_by_value || t.buffer != Buffer::None))
      fail(label(t) + " is virtual but also by-value or bound to a buffer");
    if (!t.is_virtual && !t.is_by_value && t.buffer == Buffer::None)
      fail(label(t) + " is neither virtual, by-value nor bound to a buffer");

    if (t.buffer != Buffer::None) {
      const std::int64_t eb = element_bytes(t.dtype);
      if (t.alignment < eb || (t.alignment & (t.alignment - 1)) != 0)
        fail(label(t) + ": byte alignment " + std::to_string(t.alignment) +
             " is not a power of two >= the element size " + std::to_string(eb));
      if ((t.offset * eb) % t.alignment != 0)
        fail(label(t) + ": alignment not met: its start, " + std::to_string(t.offset) +
             " elements (" + std::to_string(t.offset * eb) + " bytes) into " + to_string(t.buffer) +
             ", is not a multiple of " + std::to_string(t.alignment) + " bytes");
      // In bounds: the last element reached lies inside the buffer.
      std::int64_t reach = 0;
      for (std::size_t i = 0; i < t.dims.size(); ++i) reach += (t.dims[i] - 1) * t.strides[i];
      if (t.offset < 0 || t.offset + reach >= t.buffer_elems)
        fail(label(t) + ": dims " + dims_text(t.dims) + " strides " + dims_text(t.strides) + " at offset " +
             std::to_string(t.offset) + " reach element " + std::to_string(t.offset + reach) +
             ", past the end of " + to_string(t.buffer) + " (" + std::to_string(t.buffer_elems) +
             " elements)");
      // No two indices on one element: sorted by stride, each stride must exceed
      // the farthest offset the smaller dimensions reach.
      std::vector<std::pair<std::int64_t, std::int64_t>> sd;  // (stride, dim)
      for (std::size_t i = 0; i < t.dims.size(); ++i)
        if (t.dims[i] > 1) sd.emplace_back(t.strides[i], t.dims[i]);
      std::sort(sd.begin(), sd.end());
      std::int64_t inner_reach = 0;
      for (const auto& [stride, dim] : sd) {
        if (stride <= inner_reach)
          fail(label(t) + ": strides " + dims_text(t.strides) + " over dims " + dims_text(t.dims) +
               " let two elements overlap");
        inner_reach += (dim - 1) * stride;
      }
    }
  }

  // The graph's workspace tensors: inside the prefix, extents pairwise disjoint.
  if (workspace_prefix_bytes < 0 || workspace_prefix_bytes % 256 != 0)
    fail("workspace prefix of " + std::to_string(workspace_prefix_bytes) +
         " bytes is not a non-negative multiple of 256");
  std::vector<const TensorDesc*> in_workspace;
  for (const auto& t : tensors) {
    if (t.buffer != Buffer::Workspace) continue;
    const std::int64_t begin = t.offset * element_bytes(t.dtype), end = begin + extent_bytes(t);
    if (end > workspace_prefix_bytes)
      fail(label(t) + ": workspace bytes [" + std::to_string(begin) + ", " + std::to_string(end) +
           ") reach past the graph's workspace prefix of " + std::to_string(workspace_prefix_bytes) +
           " bytes");
    for (const TensorDesc* other : in_workspace) {
      const std::int64_t ob = other->offset * element_bytes(other->dtype), oe = ob + extent_bytes(*other);
      if (begin < oe && ob < end)
        fail(label(t) + ": workspace bytes [" + std::to_string(begin) + ", " + std::to_string(end) +
             ") overlap " + label(*other) + "'s [" + std::to_string(ob) + ", " + std::to_string(oe) + ")");
    }
    in_workspace.push_back(&t);
  }
  for (std::int64_t id : zero_before_execute) {
    if (!uids.count(id)) fail("zero_before_execute uid " + std::to_string(id) + " is not a tensor of the graph");
    if (tensor(id).buffer != Buffer::Workspace)
      fail(label(tensor(id)) + " is in zero_before_execute but not in the graph's workspace");
  }

  // Graph inputs and outputs.
  for (std::int64_t id : inputs) {
    if (!uids.count(id)) fail("graph input uid " + std::to_string(id) + " is not a tensor of the graph");
    if (tensor(id).is_virtual) fail(label(tensor(id)) + " is virtual but listed as a graph input");
  }
  for (std::int64_t id : outputs) {
    if (!uids.count(id)) fail("graph output uid " + std::to_string(id) + " is not a tensor of the graph");
    if (tensor(id).is_virtual) fail(label(tensor(id)) + " is virtual but listed as a graph output");
    if (tensor(id).is_by_value) fail(label(tensor(id)) + " is by-value but listed as a graph output");
    if (is_in(inputs, id)) fail(label(tensor(id)) + " is both a graph input and a graph output");
  }
  for (const auto& t : tensors)
    if (!t.is_virtual && !is_in(inputs, t.uid) && !is_in(outputs, t.uid))
      fail(label(t) + " is not virtual but neither a graph input nor a graph output");

  // Operations, in order.
  std::set<std::int64_t> available(inputs.begin(), inputs.end());
  std::set<std::int64_t> written, read;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Operation& op = ops[i];
    const std::string opl = "op " + std::to_string(i) + " '" + op.name + "' (" + to_string(op.kind) + ")";
    std::size_t want = 1;
    switch (op.kind) {
      case OpKind::Matmul: want = 2; break;
      case OpKind::Reduction:
      case OpKind::Reshape: want = 1; break;
      case OpKind::Pointwise:
        switch (op.pointwise_mode) {
          case PointwiseMode::Exp:
          case PointwiseMode::Log:
          case PointwiseMode::Identity:
          case PointwiseMode::GenIndex: want = 1; break;
          case PointwiseMode::BinarySelect: want = 3; break;
          default: want = 2; break;
        }
        break;
    }
    if (op.inputs.size() != want)
      fail(opl + " has " + std::to_string(op.inputs.size()) + " inputs, expected " + std::to_string(want));
    for (std::int64_t id : op.inputs) {
      if (!uids.count(id)) fail(opl + " reads uid " + std::to_string(id) + ", which is not a tensor of the graph");
      if (!available.count(id))
        fail(opl + " reads " + label(tensor(id)) +
             ", which no earlier op produced and which is not a graph input");
      read.insert(id);
    }
    if (!uids.count(op.output)) fail(opl + " writes uid " + std::to_string(op.output) + ", which is not a tensor of the graph");
    const TensorDesc& out = tensor(op.output);
    if (is_in(inputs, op.output)) fail(opl + " writes graph input " + label(out));
    if (!written.insert(op.output).second) fail(opl + " writes " + label(out) + ", which an earlier op already wrote");
    available.insert(op.output);

    // Operand shapes.
    const TensorDesc& x = tensor(op.inputs[0]);
    switch (op.kind) {
      case OpKind::Matmul: {
        const TensorDesc& b = tensor(op.inputs[1]);
        const std::size_t r = out.dims.size();
        const bool ok = r >= 3 && x.dims.size() == r && b.dims.size() == r &&
                        std::equal(x.dims.begin(), x.dims.end() - 2, out.dims.begin()) &&
                        std::equal(b.dims.begin(), b.dims.end() - 2, out.dims.begin()) &&
                        x.dims[r - 2] == out.dims[r - 2] && b.dims[r - 1] == out.dims[r - 1] &&
                        x.dims[r - 1] == b.dims[r - 2];
        if (!ok)
          fail(opl + ": operand dims " + dims_text(x.dims) + " x " + dims_text(b.dims) + " -> " +
               dims_text(out.dims) + " do not form a batched matrix product");
        break;
      }
      case OpKind::Pointwise: {
        if (out.dims != x.dims)
          fail(opl + ": output dims " + dims_text(out.dims) + " differ from input dims " + dims_text(x.dims));
        for (std::size_t j = 1; j < op.inputs.size(); ++j) {
          const TensorDesc& y = tensor(op.inputs[j]);
          bool ok = y.dims.size() == x.dims.size();
          for (std::size_t a = 0; ok && a < y.dims.size(); ++a)
            ok = y.dims[a] == x.dims[a] || y.dims[a] == 1;
          if (!ok) fail(opl + ": operand dims " + dims_text(y.dims) + " do not broadcast to " + dims_text(x.dims));
        }
        if (op.pointwise_mode == PointwiseMode::GenIndex &&
            (op.axis < 0 || op.axis >= static_cast<std::int64_t>(x.dims.size())))
          fail(opl + ": GEN_INDEX axis " + std::to_string(op.axis) + " outside the input's rank");
        break;
      }
      case OpKind::Reduction: {
        bool ok = out.dims.size() == x.dims.size();
        for (std::size_t a = 0; ok && a < x.dims.size(); ++a) ok = out.dims[a] == x.dims[a] || out.dims[a] == 1;
        if (!ok) fail(opl + ": output dims " + dims_text(out.dims) + " are not a reduction of " + dims_text(x.dims));
        break;
      }
      case OpKind::Reshape: {
        std::int64_t nx = 1, no = 1;
        for (auto v : x.dims) nx *= v;
        for (auto v : out.dims) no *= v;
        if (nx != no) fail(opl + ": reshapes " + std::to_string(nx) + " elements into " + std::to_string(no));
        break;
      }
    }
  }
  for (std::int64_t id : outputs)
    if (!written.count(id)) fail("graph output " + label(tensor(id)) + " is written by no op");
  for (std::int64_t id : inputs)
    if (!read.count(id)) fail("graph input " + label(tensor(id)) + " is read by no op");
  for (const auto& t : tensors)
    if (t.is_virtual && !read.count(t.uid))
      fail("virtual " + label(t) + " is never consumed by an op");

  // Determinism (backward): dQ is the product of matmul_dS_K written straight into
  // dQ, never summed in fp32 across key blocks through a workspace accumulator
  // (the frontend's non-deterministic dQ_accum graph): no matmul writes a
  // Workspace tensor, and the op that writes dQ is a matmul.
  if (direction == Direction::Backward) {
    for (const Operation& op : ops) {
      const TensorDesc& out = tensor(op.output);
      if (op.kind == OpKind::Matmul && out.buffer == Buffer::Workspace)
        fail("op '" + op.name + "' (matmul) writes " + label(out) +
             " in the workspace: an fp32 accumulator across key blocks is the non-deterministic backward");
      if (op.output == uid::dQ && op.kind != OpKind::Matmul)
        fail("op '" + op.name + "' (" + to_string(op.kind) + ") writes dQ: the deterministic backward writes dQ "
             "from the dS K matmul itself");
    }
  }
}

void check_cudnn_version(std::int64_t version) {
  auto text = [](std::int64_t v) {
    return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  };
  if (version < kMinCudnnVersion)
    SHARDTRAIN_FAIL("cuDNN SDPA: the cuDNN library loaded is " + text(version) + " (" + std::to_string(version) +
                    "), older than " + text(kMinCudnnVersion) +
                    ", the oldest for which these graphs are the ones cudnn-frontend builds (it adds a "
                    "padding-mask workaround up to 9.15.0 and masks with the lowest float before 9.10); "
                    "use model.attention = \"unfused\" or \"flash\"");
  if (version >= kEndCudnnVersion)
    SHARDTRAIN_FAIL("cuDNN SDPA: the cuDNN library loaded is " + text(version) + " (" + std::to_string(version) +
                    "), not older than " + text(kEndCudnnVersion) +
                    ", from which newer cudnn-frontends lower the mask, the softmax and the causal forward "
                    "to other backend operations than these graphs (not checked against it); use "
                    "model.attention = \"unfused\" or \"flash\"");
}

std::string engine_refusal(const std::vector<NumericalNote>& notes) {
  for (NumericalNote n : notes)
    if (n == NumericalNote::Nondeterministic)
      return "its engine carries the numerical note NONDETERMINISTIC (results may differ between runs)";
  return {};
}

// ---------------------------------------------------------------- names

std::int64_t extent_elems(const TensorDesc& t) {
  std::int64_t reach = 0;
  for (std::size_t i = 0; i < t.dims.size() && i < t.strides.size(); ++i)
    reach += (t.dims[i] - 1) * t.strides[i];
  return reach + 1;
}

std::int64_t extent_bytes(const TensorDesc& t) { return extent_elems(t) * element_bytes(t.dtype); }

std::int64_t element_bytes(DataType t) {
  switch (t) {
    case DataType::Float: return 4;
    case DataType::Double: return 8;
    case DataType::Half: return 2;
    case DataType::BFloat16: return 2;
    case DataType::Int8: return 1;
    case DataType::Int32: return 4;
    case DataType::Int64: return 8;
    case DataType::Boolean: return 1;
  }
  return 0;
}

const char* to_string(DataType t) {
  switch (t) {
    case DataType::Float: return "float";
    case DataType::Double: return "double";
    case DataType::Half: return "half";
    case DataType::BFloat16: return "bfloat16";
    case DataType::Int8: return "int8";
    case DataType::Int32: return "int32";
    case DataType::Int64: return "int64";
    case DataType::Boolean: return "boolean";
  }
  return "?";
}

const char* to_string(PointwiseMode m) {
  switch (m) {
    case PointwiseMode::Add: return "add";
    case PointwiseMode::Mul: return "mul";
    case PointwiseMode::Div: return "div";
    case PointwiseMode::Sub: return "sub";
    case PointwiseMode::Exp: return "exp";
    case PointwiseMode::Log: return "log";
    case PointwiseMode::Identity: return "identity";
    case PointwiseMode::CmpGe: return "cmp_ge";
    case PointwiseMode::GenIndex: return "gen_index";
    case PointwiseMode::BinarySelect: return "binary_select";
  }
  return "?";
}

const char* to_string(ReductionMode m) { return m == ReductionMode::Add ? "add" : "max"; }

const char* to_string(OpKind k) {
  switch (k) {
    case OpKind::Matmul: return "matmul";
    case OpKind::Pointwise: return "pointwise";
    case OpKind::Reduction: return "reduction";
    case OpKind::Reshape: return "reshape";
  }
  return "?";
}

const char* to_string(Buffer b) {
  switch (b) {
    case Buffer::None: return "none";
    case Buffer::Qkv: return "qkv";
    case Buffer::Out: return "out";
    case Buffer::Stats: return "stats";
    case Buffer::DOut: return "dout";
    case Buffer::DQkv: return "dqkv";
    case Buffer::Workspace: return "workspace";
  }
  return "?";
}

std::string describe(const SdpaGraph& g) {
  std::ostringstream os;
  const SdpaShape& s = g.shape;
  os << "cuDNN SDPA " << direction_name(g.direction) << " graph: B=" << s.batch << " T=" << s.seq_len
     << " C=" << s.channels << " H=" << s.n_head << " D=" << s.head_dim() << " " << to_string(s.dtype)
     << (s.causal ? " causal" : " non-causal") << (s.training ? " training" : " inference") << ", "
     << g.tensors.size() << " tensors, " << g.ops.size() << " ops, workspace prefix "
     << g.workspace_prefix_bytes << " bytes\n";
  auto name_of = [&](std::int64_t id) {
    for (const auto& t : g.tensors)
      if (t.uid == id) return t.name;
    return "uid" + std::to_string(id);
  };
  auto role = [&](std::int64_t id) {
    if (std::find(g.inputs.begin(), g.inputs.end(), id) != g.inputs.end()) return " input";
    if (std::find(g.outputs.begin(), g.outputs.end(), id) != g.outputs.end()) return " output";
    return "";
  };
  for (const auto& t : g.tensors) {
    os << "  tensor " << t.uid << " " << t.name << ": " << to_string(t.dtype) << " dims " << dims_text(t.dims)
       << " strides " << dims_text(t.strides);
    if (t.is_virtual) os << " virtual";
    if (t.is_by_value) os << " by-value " << t.value;
    if (t.buffer != Buffer::None)
      os << " align " << t.alignment << " " << to_string(t.buffer) << "+" << t.offset;
    if (t.reordering == Reordering::F16x16) os << " reordered F16x16";
    os << role(t.uid);
    if (std::find(g.zero_before_execute.begin(), g.zero_before_execute.end(), t.uid) !=
        g.zero_before_execute.end())
      os << " zeroed-before-execute";
    os << "\n";
  }
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    const Operation& op = g.ops[i];
    os << "  op " << i << " " << op.name << ": " << to_string(op.kind);
    if (op.kind == OpKind::Pointwise) os << " " << to_string(op.pointwise_mode);
    if (op.kind == OpKind::Reduction) os << " " << to_string(op.reduction_mode);
    if (op.axis >= 0) os << " axis " << op.axis;
    os << " (";
    for (std::size_t j = 0; j < op.inputs.size(); ++j) os << (j ? ", " : "") << name_of(op.inputs[j]);
    os << ") -> " << name_of(op.output);
    if (op.kind != OpKind::Reshape) os << " compute " << to_string(op.compute_type);
    os << "\n";
  }
  return os.str();
}

}  // namespace shardtrain::cudnn
