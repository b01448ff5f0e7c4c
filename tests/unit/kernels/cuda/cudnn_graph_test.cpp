// tests/unit/kernels/cuda/cudnn_graph_test.cpp
// This file is long because both graphs are compared node by node with cudnn-frontend's lowering.
// The cuDNN SDPA graph description (kernels/cuda/cudnn_graph.hpp), on the host:
// the exact views of Q, K, V, O, Stats, dO, dQ, dK, dV into our packed buffers
// for a shape whose numbers do not coincide (B=3, T=5, C=48, H=3, D=16); both
// graphs node by node against what cudnn-frontend v1.19.0 lowers its SDPA nodes
// to for our case (CompositeSDPANode / CompositeSDPABackwardNode, composite
// softmax and diagonal band mask: names, kinds, modes, inputs, outputs, output
// types, compute types); the backward is the DETERMINISTIC graph (matmul_dS_K
// straight into dQ, no fp32 dQ_accum, as the frontend builds it with
// set_deterministic_algorithm(true)), and validate() refuses the non-deterministic
// one rebuilt by hand; the backward's workspace tensor (the stored softmax_sum:
// layout, no reordering, nothing zeroed); uids; the causal mask only when causal;
// the by-value scalars; every validate() refusal on a mutated graph, checked by its
// message; the cuDNN version range at both ends; and the refusal of engine configs
// noted NONDETERMINISTIC.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "kernels/cuda/cudnn_graph.hpp"
#include "core/error.hpp"

namespace shardtrain::cudnn {
namespace {

using V64 = std::vector<std::int64_t>;

// B=3, T=5, C=48, H=3 -> D=16, 3C=144, T*3C=720, T*C=240, H*T=15.
SdpaShape test_shape(DataType dtype = DataType::Half, bool causal = true, bool training = true) {
  SdpaShape s;
  s.batch = 3;
  s.seq_len = 5;
  s.channels = 48;
  s.n_head = 3;
  s.dtype = dtype;
  s.causal = causal;
  s.training = training;
  return s;
}

// The message of the shardtrain::Error that f throws, or "<no error>".
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

#define EXPECT_ERROR_HAS(stmt, text)                                                  \
  do {                                                                                \
    const std::string msg_ = error_of([&] { stmt; });                                 \
    EXPECT_NE(msg_.find(text), std::string::npos) << "message: " << msg_;             \
  } while (0)

std::vector<std::string> op_names(const SdpaGraph& g) {
  std::vector<std::string> names;
  for (const auto& op : g.ops) names.push_back(op.name);
  return names;
}

const Operation& op_named(const SdpaGraph& g, const std::string& name) {
  for (const auto& op : g.ops)
    if (op.name == name) return op;
  throw std::runtime_error("no op " + name);
}

void expect_view(const SdpaGraph& g, const std::string& name, std::int64_t uid_value, DataType dtype,
                 const V64& dims, const V64& strides, Buffer buffer, std::int64_t offset,
                 std::int64_t buffer_elems) {
  SCOPED_TRACE(name);
  const TensorDesc& t = g.tensor(name);
  EXPECT_EQ(t.uid, uid_value);
  EXPECT_EQ(t.dtype, dtype);
  EXPECT_EQ(t.dims, dims);
  EXPECT_EQ(t.strides, strides);
  EXPECT_EQ(t.buffer, buffer);
  EXPECT_EQ(t.offset, offset);
  EXPECT_EQ(t.buffer_elems, buffer_elems);
  EXPECT_EQ(t.alignment, 16);
  EXPECT_FALSE(t.is_virtual);
  EXPECT_FALSE(t.is_by_value);
}

// One frontend node as lowered: its name, kind, pointwise or reduction mode,
// input and output tensors (by our names), the output's type and virtualness,
// the op's compute type (not checked for reshapes, which have none) and the
// GEN_INDEX axis.
struct Node {
  std::string name;
  OpKind kind;
  int mode;  // PointwiseMode or ReductionMode value; -1 for matmul / reshape
  std::vector<std::string> in;
  std::string out;
  DataType out_type;
  bool out_virtual = true;
  DataType compute = DataType::Float;
  std::int64_t axis = -1;
};

constexpr int kNoMode = -1;
int pw(PointwiseMode m) { return static_cast<int>(m); }
int red(ReductionMode m) { return static_cast<int>(m); }

// g's ops, in order, are exactly `want`.
void expect_nodes(const SdpaGraph& g, const std::vector<Node>& want) {
  ASSERT_EQ(g.ops.size(), want.size()) << describe(g);
  for (std::size_t i = 0; i < want.size(); ++i) {
    const Operation& op = g.ops[i];
    const Node& w = want[i];
    SCOPED_TRACE("op " + std::to_string(i) + " (want '" + w.name + "')");
    EXPECT_EQ(op.name, w.name);
    EXPECT_EQ(op.kind, w.kind);
    if (op.kind == OpKind::Pointwise) {
      EXPECT_EQ(static_cast<int>(op.pointwise_mode), w.mode);
    }
    if (op.kind == OpKind::Reduction) {
      EXPECT_EQ(static_cast<int>(op.reduction_mode), w.mode);
    }
    std::vector<std::string> in;
    for (std::int64_t id : op.inputs) in.push_back(g.tensor(id).name);
    EXPECT_EQ(in, w.in);
    const TensorDesc& out = g.tensor(op.output);
    EXPECT_EQ(out.name, w.out);
    EXPECT_EQ(out.dtype, w.out_type) << out.name;
    EXPECT_EQ(out.is_virtual, w.out_virtual) << out.name;
    if (op.kind != OpKind::Reshape) {
      EXPECT_EQ(op.compute_type, w.compute);
    }
    EXPECT_EQ(op.axis, w.axis);
  }
}

// The frontend's causal mask (CompositeDiagonalBandMaskNode, right bound 0, no
// shift) applied to `score`.
std::vector<Node> causal_nodes(const std::string& score) {
  return {
      {"gen_row_index", OpKind::Pointwise, pw(PointwiseMode::GenIndex), {score}, "row_index", DataType::Int32,
       true, DataType::Float, 2},
      {"gen_col_index", OpKind::Pointwise, pw(PointwiseMode::GenIndex), {score}, "col_index", DataType::Int32,
       true, DataType::Float, 3},
      {"row>col", OpKind::Pointwise, pw(PointwiseMode::CmpGe), {"row_index", "col_index"}, "causal_mask",
       DataType::Boolean, true, DataType::Boolean},
      {"binary_select", OpKind::Pointwise, pw(PointwiseMode::BinarySelect), {score, "neg_inf", "causal_mask"},
       "S_masked", DataType::Float},
  };
}

// CompositeSDPANode + CompositeSoftmaxNode (with Stats) for I/O type `io`.
std::vector<Node> frontend_forward(DataType io, bool causal) {
  std::vector<Node> n = {
      {"bmm1", OpKind::Matmul, kNoMode, {"Q", "K^T"}, "S", DataType::Float},
      {"attn_scale", OpKind::Pointwise, pw(PointwiseMode::Mul), {"S", "attn_scale"}, "S_scaled", DataType::Float},
  };
  std::string s = "S_scaled";
  if (causal) {
    for (auto& c : causal_nodes(s)) n.push_back(c);
    s = "S_masked";
  }
  const std::vector<Node> softmax = {
      {"Max", OpKind::Reduction, red(ReductionMode::Max), {s}, "M", DataType::Float},
      {"sub", OpKind::Pointwise, pw(PointwiseMode::Sub), {s, "M"}, "S_minus_M", DataType::Float},
      {"exp", OpKind::Pointwise, pw(PointwiseMode::Exp), {"S_minus_M"}, "E", DataType::Float},
      {"sum", OpKind::Reduction, red(ReductionMode::Add), {"E"}, "Z", DataType::Float},
      {"log", OpKind::Pointwise, pw(PointwiseMode::Log), {"Z"}, "log_Z", DataType::Float},
      {"add", OpKind::Pointwise, pw(PointwiseMode::Add), {"M", "log_Z"}, "Stats", DataType::Float, false},
      {"div", OpKind::Pointwise, pw(PointwiseMode::Div), {"E", "Z"}, "P", io},
      {"bmm2", OpKind::Matmul, kNoMode, {"P", "V"}, "O", io, false},
  };
  n.insert(n.end(), softmax.begin(), softmax.end());
  return n;
}

// CompositeSDPABackwardNode for I/O type `io`, MHA, no dropout, deterministic
// (use_dp_workspace: no dQ_accum).
std::vector<Node> frontend_backward(DataType io, bool causal) {
  std::vector<Node> n = {
      {"mul_dO_O", OpKind::Pointwise, pw(PointwiseMode::Mul), {"dO", "O"}, "dO_times_O", DataType::Float},
      {"reduce_dO_o", OpKind::Reduction, red(ReductionMode::Add), {"dO_times_O"}, "softmax_sum_raw",
       DataType::Float},
      {"scale_dropout_inv", OpKind::Pointwise, pw(PointwiseMode::Mul), {"softmax_sum_raw", "one"}, "softmax_sum",
       DataType::Float, false},
      {"matmul_Q_KT", OpKind::Matmul, kNoMode, {"Q", "K^T"}, "S", DataType::Float},
      {"mul_s_attn_scale", OpKind::Pointwise, pw(PointwiseMode::Mul), {"S", "attn_scale"}, "S_scaled",
       DataType::Float},
      {"sub_s_m", OpKind::Pointwise, pw(PointwiseMode::Sub), {"S_scaled", "Stats"}, "S_minus_stats",
       DataType::Float},
  };
  std::string s = "S_minus_stats";
  if (causal) {
    for (auto& c : causal_nodes(s)) n.push_back(c);
    s = "S_masked";
  }
  const std::vector<Node> rest = {
      {"exp_s", OpKind::Pointwise, pw(PointwiseMode::Exp), {s}, "P", DataType::Float},
      {"reshape_p", OpKind::Reshape, kNoMode, {"P"}, "P^T", io},
      {"matmul_pT_dO", OpKind::Matmul, kNoMode, {"P^T", "dO"}, "dV", io, false},
      {"matmul_dO_VT", OpKind::Matmul, kNoMode, {"dO", "V^T"}, "dP", DataType::Float},
      {"sub_dP_softmax_sum", OpKind::Pointwise, pw(PointwiseMode::Sub), {"dP", "softmax_sum"}, "dP_minus_sum",
       DataType::Float},
      {"mul_dP_exp_s", OpKind::Pointwise, pw(PointwiseMode::Mul), {"dP_minus_sum", "P"}, "dS_unscaled",
       DataType::Float},
      {"mul_dS_attn_scale", OpKind::Pointwise, pw(PointwiseMode::Mul), {"dS_unscaled", "attn_scale"}, "dS",
       DataType::Float},
      {"reshape_dS", OpKind::Reshape, kNoMode, {"dS"}, "dS^T", io},
      {"matmul_dST_Q", OpKind::Matmul, kNoMode, {"dS^T", "Q"}, "dK", io, false},
      // The frontend does not set reshape_k's output type: the intermediate type.
      {"reshape_k", OpKind::Reshape, kNoMode, {"K^T"}, "K", DataType::Float},
      {"matmul_dS_K", OpKind::Matmul, kNoMode, {"dS", "K"}, "dQ", io, false},
  };
  n.insert(n.end(), rest.begin(), rest.end());
  return n;
}

TEST(CudnnSdpaGraph, ForwardViewsIntoPackedQkvAndOutput) {
  const SdpaGraph g = make_sdpa_forward_graph(test_shape());
  EXPECT_EQ(g.direction, Direction::Forward);
  expect_view(g, "Q", uid::Q, DataType::Half, {3, 3, 5, 16}, {720, 16, 144, 1}, Buffer::Qkv, 0, 2160);
  // cuDNN's bmm1 takes K^T: the (B,H,T,D) view (720,16,144,1) of K with the last two dims swapped.
  expect_view(g, "K^T", uid::K, DataType::Half, {3, 3, 16, 5}, {720, 16, 1, 144}, Buffer::Qkv, 48, 2160);
  expect_view(g, "V", uid::V, DataType::Half, {3, 3, 5, 16}, {720, 16, 144, 1}, Buffer::Qkv, 96, 2160);
  expect_view(g, "O", uid::O, DataType::Half, {3, 3, 5, 16}, {240, 16, 48, 1}, Buffer::Out, 0, 720);
  expect_view(g, "Stats", uid::Stats, DataType::Float, {3, 3, 5, 1}, {15, 5, 1, 1}, Buffer::Stats, 0, 45);
  EXPECT_EQ(g.inputs, (V64{uid::Q, uid::K, uid::V, uid::AttnScale, uid::NegInf}));
  EXPECT_EQ(g.outputs, (V64{uid::O, uid::Stats}));
  EXPECT_EQ(g.workspace_prefix_bytes, 0);
  EXPECT_TRUE(g.zero_before_execute.empty());
  // The virtual score tensor is (B,H,T,T) fp32, packed.
  const TensorDesc& s = g.tensor("S");
  EXPECT_TRUE(s.is_virtual);
  EXPECT_EQ(s.dtype, DataType::Float);
  EXPECT_EQ(s.dims, (V64{3, 3, 5, 5}));
  EXPECT_EQ(s.strides, (V64{75, 25, 5, 1}));
  // P enters bmm2 in the I/O type.
  EXPECT_EQ(g.tensor("P").dtype, DataType::Half);
  // The softmax statistics chain is (B,H,T,1) packed.
  for (const char* n : {"M", "Z", "log_Z"}) {
    EXPECT_EQ(g.tensor(n).dims, (V64{3, 3, 5, 1})) << n;
    EXPECT_EQ(g.tensor(n).strides, (V64{15, 5, 1, 1})) << n;
  }
}

TEST(CudnnSdpaGraph, Bf16GraphUsesBf16ForEveryIoTensor) {
  const SdpaGraph f = make_sdpa_forward_graph(test_shape(DataType::BFloat16));
  for (const char* n : {"Q", "K^T", "V", "O", "P"}) EXPECT_EQ(f.tensor(n).dtype, DataType::BFloat16) << n;
  EXPECT_EQ(f.tensor("Stats").dtype, DataType::Float);
  const SdpaGraph b = make_sdpa_backward_graph(test_shape(DataType::BFloat16));
  for (const char* n : {"Q", "K^T", "V^T", "O", "dO", "dQ", "dK", "dV", "P^T", "dS^T"})
    EXPECT_EQ(b.tensor(n).dtype, DataType::BFloat16) << n;
  for (const char* n : {"softmax_sum", "K", "dS", "P"})
    EXPECT_EQ(b.tensor(n).dtype, DataType::Float) << n;
}

TEST(CudnnSdpaGraph, ForwardIsTheFrontendsLoweringNodeByNode) {
  for (DataType io : {DataType::Half, DataType::BFloat16})
    for (bool causal : {true, false}) {
      SCOPED_TRACE(std::string(to_string(io)) + (causal ? " causal" : " non-causal"));
      expect_nodes(make_sdpa_forward_graph(test_shape(io, causal)), frontend_forward(io, causal));
    }
  const SdpaGraph g = make_sdpa_forward_graph(test_shape());
  EXPECT_EQ(op_named(g, "add").output, uid::Stats);
  EXPECT_EQ(op_named(g, "bmm2").output, uid::O);
  EXPECT_EQ(g.ops.front().inputs, (V64{uid::Q, uid::K}));
}

TEST(CudnnSdpaGraph, BackwardIsTheFrontendsLoweringNodeByNode) {
  for (DataType io : {DataType::Half, DataType::BFloat16})
    for (bool causal : {true, false}) {
      SCOPED_TRACE(std::string(to_string(io)) + (causal ? " causal" : " non-causal"));
      expect_nodes(make_sdpa_backward_graph(test_shape(io, causal)), frontend_backward(io, causal));
    }
  const SdpaGraph g = make_sdpa_backward_graph(test_shape());
  EXPECT_EQ(op_names(g),
            (std::vector<std::string>{"mul_dO_O", "reduce_dO_o", "scale_dropout_inv", "matmul_Q_KT",
                                      "mul_s_attn_scale", "sub_s_m", "gen_row_index", "gen_col_index",
                                      "row>col", "binary_select", "exp_s", "reshape_p", "matmul_pT_dO",
                                      "matmul_dO_VT", "sub_dP_softmax_sum", "mul_dP_exp_s",
                                      "mul_dS_attn_scale", "reshape_dS", "matmul_dST_Q", "reshape_k",
                                      "matmul_dS_K"}));
  EXPECT_EQ(op_named(g, "matmul_pT_dO").output, uid::dV);
  EXPECT_EQ(op_named(g, "matmul_dST_Q").output, uid::dK);
  EXPECT_EQ(op_named(g, "matmul_dS_K").output, uid::dQ);  // deterministic: no dQ_accum
  EXPECT_EQ(g.find("dQ_accum"), nullptr);
  EXPECT_EQ(op_named(g, "scale_dropout_inv").output, uid::SoftmaxSum);
  EXPECT_EQ(op_named(g, "sub_dP_softmax_sum").inputs, (V64{g.tensor("dP").uid, uid::SoftmaxSum}));
}

TEST(CudnnSdpaGraph, BackwardHasNoExtraMultiplyByOne) {
  for (bool causal : {true, false}) {
    const SdpaGraph g = make_sdpa_backward_graph(test_shape(DataType::Half, causal));
    EXPECT_EQ(g.find("dP_times_one"), nullptr);
    std::vector<std::string> reading_one;
    for (const auto& op : g.ops) {
      EXPECT_NE(op.name, "mul_dP_one");
      if (std::count(op.inputs.begin(), op.inputs.end(), uid::One) > 0) reading_one.push_back(op.name);
    }
    // The only use of the by-value 1 is the frontend's dropout slot of softmax_sum.
    EXPECT_EQ(reading_one, (std::vector<std::string>{"scale_dropout_inv"}));
    // dP goes straight into the softmax_sum subtraction.
    const Operation& sub = op_named(g, "sub_dP_softmax_sum");
    EXPECT_EQ(sub.inputs.front(), op_named(g, "matmul_dO_VT").output);
    const TensorDesc& one = g.tensor("one");
    EXPECT_TRUE(one.is_by_value);
    EXPECT_EQ(one.value, 1.0f);
  }
}

TEST(CudnnSdpaGraph, BackwardStoresTheSoftmaxSumInTheWorkspace) {
  const SdpaGraph g = make_sdpa_backward_graph(test_shape());
  // softmax_sum: fp32 (B,H,T,1) packed at workspace byte 0 (the deterministic
  // graph has no dQ_accum before it).
  expect_view(g, "softmax_sum", uid::SoftmaxSum, DataType::Float, {3, 3, 5, 1}, {15, 5, 1, 1},
              Buffer::Workspace, 0, 64);
  const TensorDesc& sum = g.tensor("softmax_sum");
  EXPECT_EQ(extent_bytes(sum), 180);
  // Inside the prefix (180 bytes, rounded to 256).
  const std::int64_t sum_begin = sum.offset * 4, sum_end = sum_begin + extent_bytes(sum);
  EXPECT_EQ(g.workspace_prefix_bytes, 256);
  EXPECT_LE(sum_end, g.workspace_prefix_bytes);
  EXPECT_EQ(sum_begin % 16, 0);
  // Every workspace tensor is a graph output, so it is bound in the variant pack.
  std::vector<std::string> in_workspace;
  for (const auto& t : g.tensors)
    if (t.buffer == Buffer::Workspace) {
      in_workspace.push_back(t.name);
      EXPECT_NE(std::count(g.outputs.begin(), g.outputs.end(), t.uid), 0) << t.name;
    }
  EXPECT_EQ(in_workspace, (std::vector<std::string>{"softmax_sum"}));
  // Nothing is zeroed: the graph writes softmax_sum before it reads it.
  EXPECT_TRUE(g.zero_before_execute.empty());
  const auto names = op_names(g);
  EXPECT_LT(std::find(names.begin(), names.end(), "scale_dropout_inv"),
            std::find(names.begin(), names.end(), "sub_dP_softmax_sum"));
  // No tensor is reordered.
  for (const auto& t : g.tensors) EXPECT_EQ(t.reordering, Reordering::None) << t.name;
  // The GPT-2-sized shape: B=4, H=12, T=1024, D=64.
  SdpaShape big = test_shape();
  big.batch = 4;
  big.seq_len = 1024;
  big.channels = 768;
  big.n_head = 12;
  const SdpaGraph b = make_sdpa_backward_graph(big);
  EXPECT_EQ(b.tensor("softmax_sum").offset, 0);
  EXPECT_EQ(b.tensor("softmax_sum").dims, (V64{4, 12, 1024, 1}));
  EXPECT_EQ(b.workspace_prefix_bytes, 4 * 12 * 1024 * 4);
}

TEST(CudnnSdpaGraph, BackwardVirtualLayoutsAreTheFrontends) {
  const SdpaGraph g = make_sdpa_backward_graph(test_shape());
  // mul_dO_O's output strides as the frontend sets them: (H*T*D, T*D, H*D, 1).
  EXPECT_EQ(g.tensor("dO_times_O").dims, (V64{3, 3, 5, 16}));
  EXPECT_EQ(g.tensor("dO_times_O").strides, (V64{240, 80, 48, 1}));
  EXPECT_EQ(g.tensor("softmax_sum_raw").dims, (V64{3, 3, 5, 1}));
  EXPECT_EQ(g.tensor("softmax_sum_raw").strides, (V64{15, 5, 1, 1}));
  for (const char* n : {"S", "S_scaled", "S_minus_stats", "S_masked", "P", "dP", "dS"}) {
    EXPECT_EQ(g.tensor(n).dims, (V64{3, 3, 5, 5})) << n;
    EXPECT_EQ(g.tensor(n).strides, (V64{75, 25, 5, 1})) << n;
  }
  // The transposes the backward matmuls take.
  EXPECT_EQ(g.tensor("P^T").strides, (V64{75, 25, 1, 5}));
  EXPECT_EQ(g.tensor("dS^T").strides, (V64{75, 25, 1, 5}));
  EXPECT_EQ(g.tensor("K").dims, (V64{3, 3, 5, 16}));
  EXPECT_EQ(g.tensor("K").strides, (V64{720, 16, 144, 1}));
}

TEST(CudnnSdpaGraph, UidsAreUnique) {
  for (const SdpaGraph& g : {make_sdpa_forward_graph(test_shape()), make_sdpa_backward_graph(test_shape())}) {
    std::set<std::int64_t> uids;
    for (const auto& t : g.tensors) {
      EXPECT_TRUE(uids.insert(t.uid).second) << "uid " << t.uid << " repeats";
      if (t.is_virtual) {
        EXPECT_GE(t.uid, uid::FirstVirtual) << t.name;
      } else {
        EXPECT_LT(t.uid, uid::FirstVirtual) << t.name;
      }
    }
  }
  EXPECT_EQ(make_sdpa_backward_graph(test_shape()).tensors.size(), 30u);  // no dQ_accum (deterministic)
  EXPECT_EQ(make_sdpa_forward_graph(test_shape()).tensors.size(), 19u);
}

TEST(CudnnSdpaGraph, CausalMaskOnlyWhenCausal) {
  const SdpaGraph g = make_sdpa_forward_graph(test_shape());
  const Operation& row = op_named(g, "gen_row_index");
  const Operation& col = op_named(g, "gen_col_index");
  EXPECT_EQ(row.pointwise_mode, PointwiseMode::GenIndex);
  EXPECT_EQ(row.axis, 2);
  EXPECT_EQ(col.axis, 3);
  EXPECT_EQ(row.compute_type, DataType::Float);
  EXPECT_EQ(row.inputs, (V64{g.tensor("S_scaled").uid}));
  EXPECT_EQ(g.tensor("row_index").dtype, DataType::Int32);
  const Operation& ge = op_named(g, "row>col");
  EXPECT_EQ(ge.pointwise_mode, PointwiseMode::CmpGe);
  EXPECT_EQ(ge.inputs, (V64{row.output, col.output}));
  EXPECT_EQ(g.tensor(ge.output).dtype, DataType::Boolean);
  const Operation& sel = op_named(g, "binary_select");
  EXPECT_EQ(sel.pointwise_mode, PointwiseMode::BinarySelect);
  EXPECT_EQ(sel.inputs, (V64{g.tensor("S_scaled").uid, uid::NegInf, ge.output}));
  EXPECT_EQ(op_named(g, "Max").inputs, (V64{sel.output}));
  // The frontend's mask value from cuDNN 9.10 on is -inf (get_negative_inf_value).
  for (const SdpaGraph& c : {g, make_sdpa_backward_graph(test_shape())}) {
    const TensorDesc& neg_inf = c.tensor("neg_inf");
    EXPECT_TRUE(neg_inf.is_by_value);
    EXPECT_EQ(neg_inf.dtype, DataType::Float);
    EXPECT_TRUE(std::isinf(neg_inf.value) && neg_inf.value < 0.0f) << neg_inf.value;
  }

  for (const SdpaGraph& nc : {make_sdpa_forward_graph(test_shape(DataType::Half, false)),
                              make_sdpa_backward_graph(test_shape(DataType::Half, false))}) {
    for (const auto& op : nc.ops) {
      EXPECT_NE(op.pointwise_mode, PointwiseMode::GenIndex) << op.name;
      EXPECT_NE(op.pointwise_mode, PointwiseMode::CmpGe) << op.name;
      EXPECT_NE(op.pointwise_mode, PointwiseMode::BinarySelect) << op.name;
    }
    EXPECT_EQ(nc.find("neg_inf"), nullptr);
    EXPECT_EQ(std::count(nc.inputs.begin(), nc.inputs.end(), uid::NegInf), 0);
  }
  const SdpaGraph nc = make_sdpa_forward_graph(test_shape(DataType::Half, false));
  EXPECT_EQ(op_named(nc, "Max").inputs, (V64{nc.tensor("S_scaled").uid}));
  EXPECT_EQ(nc.ops.size(), 10u);
  // Backward: the mask follows the Stats subtraction and feeds exp_s.
  const SdpaGraph b = make_sdpa_backward_graph(test_shape());
  EXPECT_EQ(op_named(b, "sub_s_m").inputs, (V64{b.tensor("S_scaled").uid, uid::Stats}));
  EXPECT_EQ(op_named(b, "gen_row_index").inputs, (V64{op_named(b, "sub_s_m").output}));
  EXPECT_EQ(op_named(b, "binary_select").inputs.front(), op_named(b, "sub_s_m").output);
  EXPECT_EQ(op_named(b, "exp_s").inputs, (V64{op_named(b, "binary_select").output}));
  const SdpaGraph bnc = make_sdpa_backward_graph(test_shape(DataType::Half, false));
  EXPECT_EQ(op_named(bnc, "exp_s").inputs, (V64{op_named(bnc, "sub_s_m").output}));
}

TEST(CudnnSdpaGraph, ScaleIsOneOverSqrtDByValue) {
  for (std::int64_t c : {48, 96, 384}) {  // D = 16, 32, 128
    SdpaShape s = test_shape();
    s.channels = c;
    const float want = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c / 3)));
    const SdpaGraph f = make_sdpa_forward_graph(s), b = make_sdpa_backward_graph(s);
    for (const SdpaGraph* g : {&f, &b}) {
      const TensorDesc& t = g->tensor("attn_scale");
      EXPECT_EQ(t.uid, uid::AttnScale);
      EXPECT_TRUE(t.is_by_value);
      EXPECT_FALSE(t.is_virtual);
      EXPECT_EQ(t.dtype, DataType::Float);
      EXPECT_EQ(t.dims, (V64{1, 1, 1, 1}));
      EXPECT_EQ(t.value, want) << "C=" << c;
    }
    EXPECT_EQ(op_named(f, "attn_scale").inputs, (V64{f.tensor("S").uid, uid::AttnScale}));
    EXPECT_EQ(op_named(b, "mul_s_attn_scale").inputs, (V64{b.tensor("S").uid, uid::AttnScale}));
    EXPECT_EQ(op_named(b, "mul_dS_attn_scale").inputs, (V64{b.tensor("dS_unscaled").uid, uid::AttnScale}));
  }
  EXPECT_EQ(make_sdpa_forward_graph(test_shape()).tensor("attn_scale").value, 0.25f);
}

TEST(CudnnSdpaGraph, InferenceForwardWritesNoStats) {
  const SdpaGraph g = make_sdpa_forward_graph(test_shape(DataType::Half, true, false));
  EXPECT_EQ(g.find("Stats"), nullptr);
  EXPECT_EQ(g.outputs, (V64{uid::O}));
  const auto names = op_names(g);
  EXPECT_EQ(std::count(names.begin(), names.end(), "log"), 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "add"), 0);
  EXPECT_ERROR_HAS(make_sdpa_backward_graph(test_shape(DataType::Half, true, false)),
                   "backward graph needs the forward's Stats");
}

TEST(CudnnSdpaGraph, BackwardViewsInputsAndOutputs) {
  const SdpaGraph g = make_sdpa_backward_graph(test_shape());
  EXPECT_EQ(g.direction, Direction::Backward);
  expect_view(g, "Q", uid::Q, DataType::Half, {3, 3, 5, 16}, {720, 16, 144, 1}, Buffer::Qkv, 0, 2160);
  expect_view(g, "K^T", uid::K, DataType::Half, {3, 3, 16, 5}, {720, 16, 1, 144}, Buffer::Qkv, 48, 2160);
  expect_view(g, "V^T", uid::V, DataType::Half, {3, 3, 16, 5}, {720, 16, 1, 144}, Buffer::Qkv, 96, 2160);
  expect_view(g, "O", uid::O, DataType::Half, {3, 3, 5, 16}, {240, 16, 48, 1}, Buffer::Out, 0, 720);
  expect_view(g, "dO", uid::dO, DataType::Half, {3, 3, 5, 16}, {240, 16, 48, 1}, Buffer::DOut, 0, 720);
  expect_view(g, "Stats", uid::Stats, DataType::Float, {3, 3, 5, 1}, {15, 5, 1, 1}, Buffer::Stats, 0, 45);
  expect_view(g, "dQ", uid::dQ, DataType::Half, {3, 3, 5, 16}, {720, 16, 144, 1}, Buffer::DQkv, 0, 2160);
  expect_view(g, "dK", uid::dK, DataType::Half, {3, 3, 5, 16}, {720, 16, 144, 1}, Buffer::DQkv, 48, 2160);
  expect_view(g, "dV", uid::dV, DataType::Half, {3, 3, 5, 16}, {720, 16, 144, 1}, Buffer::DQkv, 96, 2160);
  EXPECT_EQ(g.inputs, (V64{uid::Q, uid::K, uid::V, uid::O, uid::dO, uid::Stats, uid::AttnScale,
                           uid::NegInf, uid::One}));
  EXPECT_EQ(g.outputs, (V64{uid::dQ, uid::dK, uid::dV, uid::SoftmaxSum}));
}

TEST(CudnnSdpaGraph, DescribeListsTensorsAndOps) {
  const std::string d = describe(make_sdpa_forward_graph(test_shape()));
  EXPECT_NE(d.find("cuDNN SDPA forward graph: B=3 T=5 C=48 H=3 D=16 half causal training, 19 tensors, 14 ops"),
            std::string::npos) << d;
  EXPECT_NE(d.find("tensor 1 Q: half dims [3,3,5,16] strides [720,16,144,1] align 16 qkv+0 input"),
            std::string::npos) << d;
  EXPECT_NE(d.find("tensor 2 K^T: half dims [3,3,16,5] strides [720,16,1,144] align 16 qkv+48 input"),
            std::string::npos) << d;
  EXPECT_NE(d.find("op 0 bmm1: matmul (Q, K^T) -> S compute float"), std::string::npos) << d;
  EXPECT_NE(d.find("op 5 binary_select: pointwise binary_select (S_scaled, neg_inf, causal_mask) -> S_masked"),
            std::string::npos) << d;
  const std::string b = describe(make_sdpa_backward_graph(test_shape()));
  EXPECT_NE(b.find("30 tensors, 21 ops, workspace prefix 256 bytes"), std::string::npos) << b;
  EXPECT_EQ(b.find("zeroed-before-execute"), std::string::npos) << b;
  EXPECT_NE(b.find("tensor 14 softmax_sum: float dims [3,3,5,1] strides [15,5,1,1] align 16 workspace+0 "
                   "output\n"),
            std::string::npos) << b;
  EXPECT_NE(b.find("op 2 scale_dropout_inv: pointwise mul (softmax_sum_raw, one) -> softmax_sum compute float"),
            std::string::npos) << b;
}

TEST(CudnnSdpaGraph, AcceptsTheFlashHeadSizeLimits) {
  SdpaShape s = test_shape();
  s.channels = 3 * 128;  // D = 128: the largest allowed
  EXPECT_EQ(error_of([&] { make_sdpa_backward_graph(s); }), "<no error>");
  s.channels = 3 * 8;  // D = 8
  EXPECT_EQ(error_of([&] { make_sdpa_forward_graph(s); }), "<no error>");
}

// ---- every validate() refusal, on a mutated valid graph ----

TEST(CudnnSdpaGraphValidate, RepeatedUid) {
  SdpaGraph g = make_sdpa_forward_graph(test_shape());
  g.tensor_mut("V").uid = uid::Q;
  EXPECT_ERROR_HAS(g.validate(), "uid 1 repeats ('V')");
}

TEST(CudnnSdpaGraphValidate, ReadBeforeWritten) {
  SdpaGraph g = make_sdpa_forward_graph(test_shape());
  std::swap(g.ops[g.ops.size() - 1], g.ops[g.ops.size() - 2]);  // bmm2 before div
  EXPECT_ERROR_HAS(g.validate(), "op 12 'bmm2' (matmul) reads tensor 'P' (uid ");
  EXPECT_ERROR_HAS(g.validate(), "which no earlier op produced and which is not a graph input");

  SdpaGraph b = make_sdpa_backward_graph(test_shape());
  b.inputs.erase(std::find(b.inputs.begin(), b.inputs.end(), uid::Stats));
  b.outputs.push_back(uid::Stats);  // keep it listed, but as an output: nobody writes it
  EXPECT_ERROR_HAS(b.validate(), "'sub_s_m' (pointwise) reads tensor 'Stats' (uid 5)");
}

TEST(CudnnSdpaGraphValidate, VirtualTensorAsGraphInputOrOutput) {
  SdpaGraph g = make_sdpa_forward_graph(test_shape());
  g.inputs.push_back(g.tensor("S").uid);
  EXPECT_ERROR_HAS(g.validate(), "tensor 'S' (uid 100) is virtual but listed as a graph input");
  SdpaGraph h = make_sdpa_forward_graph(test_shape());
  h.outputs.push_back(h.tensor("P").uid);
  EXPECT_ERROR_HAS(h.validate(), "tensor 'P' (uid ");
  EXPECT_ERROR_HAS(h.validate(), "is virtual but listed as a graph output");
}

TEST(CudnnSdpaGraphValidate, VirtualTensorNeverConsumed) {
  SdpaGraph g = make_sdpa_forward_graph(test_shape());
  TensorDesc t = g.tensor("E");
  t.uid = 999;
  t.name = "dangling";
  g.tensors.push_back(t);
  Operation op;
  op.kind = OpKind::Pointwise;
  op.name = "exp_again";
  op.pointwise_mode = PointwiseMode::Exp;
  op.inputs = {g.tensor("S_minus_M").uid};
  op.output = 999;
  g.ops.push_back(op);
  EXPECT_ERROR_HAS(g.validate(), "virtual tensor 'dangling' (uid 999) is never consumed by an op");
}

TEST(CudnnSdpaGraphValidate, DimsAndStridesRanksDiffer) {
  SdpaGraph g = make_sdpa_forward_graph(test_shape());
  g.tensor_mut("Q").strides.pop_back();
  EXPECT_ERROR_HAS(g.validate(),
                   "tensor 'Q' (uid 1): dims [3,3,5,16] and strides [720,16,144] have different ranks");
}

TEST(CudnnSdpaGraphValidate, OverlappingStrides) {
  SdpaGraph g = make_sdpa_forward_graph(test_shape());
  g.tensor_mut("Q").strides = {720, 8, 144, 1};  // head h+1 starts inside head h
  EXPECT_ERROR_HAS(g.validate(),
                   "tensor 'Q' (uid 1): strides [720,8,144,1] over dims [3,3,5,16] let two elements overlap");
  SdpaGraph b = make_sdpa_backward_graph(test_shape());
  b.tensor_mut("dK").strides = {720, 16, 0, 1};  // every position on one row
  EXPECT_ERROR_HAS(b.validate(), "tensor 'dK' (uid 8)");
  EXPECT_ERROR_HAS(b.validate(), "let two elements overlap");
}

TEST(CudnnSdpaGraphValidate, PastTheEndOfTheBuffer) {
  SdpaGraph g = make_sdpa_forward_graph(test_shape());
  g.tensor_mut("O").buffer_elems = 719;
  EXPECT_ERROR_HAS(g.validate(), "tensor 'O' (uid 4): dims [3,3,5,16] strides [240,16,48,1] at offset 0 "
                                 "reach element 719, past the end of out (719 elements)");
  SdpaGraph h = make_sdpa_forward_graph(test_shape());
  h.tensor_mut("V").offset = 104;  // aligned, but V's last element leaves qkv
  EXPECT_ERROR_HAS(h.validate(), "reach element 2167, past the end of qkv (2160 elements)");
}

TEST(CudnnSdpaGraphValidate, AlignmentNotMet) {
  SdpaGraph g = make_sdpa_forward_graph(test_shape());
  g.tensor_mut("K^T").offset = 44;  // 88 bytes
  EXPECT_ERROR_HAS(g.validate(), "tensor 'K^T' (uid 2): alignment not met: its start, 44 elements "
                                 "(88 bytes) into qkv, is not a multiple of 16 bytes");
  SdpaGraph h = make_sdpa_backward_graph(test_shape());
  h.tensor_mut("dQ").alignment = 12;
  EXPECT_ERROR_HAS(h.validate(), "tensor 'dQ' (uid 7): byte alignment 12 is not a power of two");
}

TEST(CudnnSdpaGraphValidate, HeadSizeNotAMultipleOf8) {
  SdpaShape s = test_shape();
  s.channels = 36;  // D = 12
  EXPECT_ERROR_HAS(make_sdpa_forward_graph(s),
                   "cuDNN SDPA forward graph: head size D = C/H = 12 is not a multiple of 8");
  SdpaGraph g = make_sdpa_backward_graph(test_shape());
  g.shape.channels = 60;  // D = 20
  EXPECT_ERROR_HAS(g.validate(), "cuDNN SDPA backward graph: head size D = C/H = 20 is not a multiple of 8");
  s.channels = 49;
  EXPECT_ERROR_HAS(make_sdpa_forward_graph(s), "channels 49 is not divisible by n_head 3");
}

TEST(CudnnSdpaGraphValidate, HeadSizeAbove128) {
  SdpaShape s = test_shape();
  s.channels = 3 * 136;  // D = 136
  EXPECT_ERROR_HAS(make_sdpa_backward_graph(s), "head size D = C/H = 136 exceeds 128");
  EXPECT_ERROR_HAS(make_sdpa_forward_graph(s), "head size D = C/H = 136 exceeds 128");
}

TEST(CudnnSdpaGraphValidate, UnsupportedDataTypes) {
  EXPECT_ERROR_HAS(make_sdpa_forward_graph(test_shape(DataType::Float)),
                   "unsupported data type float for Q, K, V, O: cuDNN flash attention takes half or "
                   "bfloat16 only");
  SdpaGraph g = make_sdpa_forward_graph(test_shape());
  g.tensor_mut("row_index").dtype = DataType::Int64;
  EXPECT_ERROR_HAS(g.validate(), "tensor 'row_index' (uid 102): unsupported data type int64");
  SdpaGraph h = make_sdpa_forward_graph(test_shape());
  h.tensor_mut("Stats").dtype = DataType::Half;
  EXPECT_ERROR_HAS(h.validate(), "tensor 'Stats' (uid 5): unsupported data type half (must be float)");
  SdpaGraph k = make_sdpa_backward_graph(test_shape());
  k.tensor_mut("dV").dtype = DataType::BFloat16;
  EXPECT_ERROR_HAS(k.validate(), "tensor 'dV' (uid 9): data type bfloat16 differs from the graph's I/O type half");
}

TEST(CudnnSdpaGraphValidate, OperandShapesMustAgree) {
  SdpaGraph g = make_sdpa_forward_graph(test_shape());
  g.tensor_mut("K^T").dims = {3, 3, 5, 16};  // forgot the transpose
  g.tensor_mut("K^T").strides = {720, 16, 144, 1};
  EXPECT_ERROR_HAS(g.validate(), "op 0 'bmm1' (matmul): operand dims [3,3,5,16] x [3,3,5,16] -> "
                                 "[3,3,5,5] do not form a batched matrix product");
}

// A second workspace tensor (a copy of softmax_sum, planted) over softmax_sum's bytes.
TEST(CudnnSdpaGraphValidate, WorkspaceTensorsOverlap) {
  SdpaGraph g = make_sdpa_backward_graph(test_shape());
  TensorDesc extra = g.tensor("softmax_sum");
  extra.uid = 13;
  extra.name = "extra";
  extra.offset = 8;  // bytes [32, 212): inside softmax_sum's [0, 180)
  g.tensors.push_back(extra);
  EXPECT_ERROR_HAS(g.validate(), "tensor 'extra' (uid 13): workspace bytes [32, 212) overlap "
                                 "tensor 'softmax_sum' (uid 14)'s [0, 180)");
}

TEST(CudnnSdpaGraphValidate, WorkspaceTensorPastThePrefix) {
  SdpaGraph g = make_sdpa_backward_graph(test_shape());
  g.workspace_prefix_bytes = 0;
  EXPECT_ERROR_HAS(g.validate(), "tensor 'softmax_sum' (uid 14): workspace bytes [0, 180) reach past the "
                                 "graph's workspace prefix of 0 bytes");
  SdpaGraph h = make_sdpa_backward_graph(test_shape());
  h.workspace_prefix_bytes = 3060;
  EXPECT_ERROR_HAS(h.validate(), "workspace prefix of 3060 bytes is not a non-negative multiple of 256");
}

TEST(CudnnSdpaGraphValidate, ZeroedTensorNotInTheWorkspace) {
  SdpaGraph g = make_sdpa_backward_graph(test_shape());
  g.zero_before_execute = {uid::dQ};
  EXPECT_ERROR_HAS(g.validate(), "tensor 'dQ' (uid 7) is in zero_before_execute but not in the graph's workspace");
  g.zero_before_execute = {77};
  EXPECT_ERROR_HAS(g.validate(), "zero_before_execute uid 77 is not a tensor of the graph");
}

// The non-deterministic backward (what the frontend builds without
// set_deterministic_algorithm: matmul_dS_K into an fp32 dQ_accum in the workspace,
// identity_dQ from it into dQ), rebuilt from the deterministic one, is refused.
TEST(CudnnSdpaGraphValidate, NonDeterministicDqAccumulatorIsRefused) {
  SdpaGraph g = make_sdpa_backward_graph(test_shape());
  g.workspace_prefix_bytes = 256 + 2880 + 192;  // softmax_sum, then dQ_accum, rounded up to 256
  TensorDesc accum = g.tensor("softmax_sum");
  accum.uid = 13;
  accum.name = "dQ_accum";
  accum.dims = {3, 3, 5, 16};
  accum.strides = {240, 80, 16, 1};
  accum.offset = 64;  // workspace byte 256
  accum.buffer_elems = g.workspace_prefix_bytes / 4;
  g.tensors.push_back(accum);
  g.outputs.push_back(13);
  for (Operation& op : g.ops)
    if (op.name == "matmul_dS_K") op.output = 13;
  Operation identity;
  identity.kind = OpKind::Pointwise;
  identity.name = "identity_dQ";
  identity.pointwise_mode = PointwiseMode::Identity;
  identity.inputs = {13};
  identity.output = uid::dQ;
  g.ops.push_back(identity);
  EXPECT_ERROR_HAS(g.validate(), "cuDNN SDPA backward graph: op 'matmul_dS_K' (matmul) writes tensor 'dQ_accum' "
                                 "(uid 13) in the workspace: an fp32 accumulator across key blocks is the "
                                 "non-deterministic backward");
  // The accumulator made virtual instead: dQ still comes from an identity, refused too.
  SdpaGraph h = make_sdpa_backward_graph(test_shape());
  TensorDesc v = h.tensor("dS");  // a virtual float tensor of the right kind
  v.uid = 200;
  v.name = "dQ_virtual";
  v.dims = {3, 3, 5, 16};
  v.strides = {240, 80, 16, 1};
  h.tensors.push_back(v);
  for (Operation& op : h.ops)
    if (op.name == "matmul_dS_K") op.output = 200;
  identity.inputs = {200};
  h.ops.push_back(identity);
  EXPECT_ERROR_HAS(h.validate(), "op 'identity_dQ' (pointwise) writes dQ: the deterministic backward writes dQ "
                                 "from the dS K matmul itself");
}

TEST(CudnnVersion, RangeCheckedAtBothEnds) {
  EXPECT_EQ(error_of([] { check_cudnn_version(91900); }), "<no error>");  // the build's 9.19.0
  EXPECT_EQ(error_of([] { check_cudnn_version(kMinCudnnVersion); }), "<no error>");
  EXPECT_EQ(error_of([] { check_cudnn_version(kEndCudnnVersion - 1); }), "<no error>");
  EXPECT_ERROR_HAS(check_cudnn_version(91500), "the cuDNN library loaded is 9.15.0 (91500), older than 9.15.1");
  EXPECT_ERROR_HAS(check_cudnn_version(90100), "older than 9.15.1");
  EXPECT_ERROR_HAS(check_cudnn_version(92000), "the cuDNN library loaded is 9.20.0 (92000), not older than 9.20.0");
  EXPECT_ERROR_HAS(check_cudnn_version(100000), "not older than 9.20.0");
}

TEST(CudnnEngineNotes, NondeterministicEnginesAreRefused) {
  EXPECT_EQ(engine_refusal({}), "");
  EXPECT_EQ(engine_refusal({NumericalNote::TensorCore}), "");
  EXPECT_NE(engine_refusal({NumericalNote::TensorCore, NumericalNote::Nondeterministic}).find("NONDETERMINISTIC"),
            std::string::npos);
  EXPECT_NE(engine_refusal({NumericalNote::Nondeterministic}), "");
}

TEST(CudnnSdpaGraphValidate, TheUnmutatedGraphsPass) {
  for (bool causal : {true, false})
    for (DataType t : {DataType::Half, DataType::BFloat16}) {
      EXPECT_EQ(error_of([&] { make_sdpa_forward_graph(test_shape(t, causal)).validate(); }), "<no error>");
      EXPECT_EQ(error_of([&] { make_sdpa_backward_graph(test_shape(t, causal)).validate(); }), "<no error>");
    }
}

}  // namespace
}  // namespace shardtrain::cudnn
