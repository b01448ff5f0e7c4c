// tests/unit/backend/cudnn_graph_test.cpp
// The cuDNN SDPA graph description (src/backend/cudnn_graph.hpp), on the host:
// the exact views of Q, K, V, O, Stats, dO, dQ, dK, dV into our packed buffers
// for a shape whose numbers do not coincide (B=3, T=5, C=48, H=3, D=16), the op
// order, uids, the causal mask only when causal, the by-value scale, backward
// inputs and outputs, and every validate() refusal on a mutated graph, checked
// by its message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "backend/cudnn_graph.hpp"
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
  // The virtual score tensor is (B,H,T,T) fp32, packed.
  const TensorDesc& s = g.tensor("S");
  EXPECT_TRUE(s.is_virtual);
  EXPECT_EQ(s.dtype, DataType::Float);
  EXPECT_EQ(s.dims, (V64{3, 3, 5, 5}));
  EXPECT_EQ(s.strides, (V64{75, 25, 5, 1}));
  // P enters bmm2 in the I/O type.
  EXPECT_EQ(g.tensor("P").dtype, DataType::Half);
}

TEST(CudnnSdpaGraph, Bf16GraphUsesBf16ForEveryIoTensor) {
  const SdpaGraph f = make_sdpa_forward_graph(test_shape(DataType::BFloat16));
  for (const char* n : {"Q", "K^T", "V", "O", "P"}) EXPECT_EQ(f.tensor(n).dtype, DataType::BFloat16) << n;
  EXPECT_EQ(f.tensor("Stats").dtype, DataType::Float);
  const SdpaGraph b = make_sdpa_backward_graph(test_shape(DataType::BFloat16));
  for (const char* n : {"Q", "K^T", "V^T", "O", "dO", "dQ", "dK", "dV", "P^T", "dS^T", "K"})
    EXPECT_EQ(b.tensor(n).dtype, DataType::BFloat16) << n;
  EXPECT_EQ(b.tensor("dQ_accum").dtype, DataType::Float);
}

TEST(CudnnSdpaGraph, ForwardTopologicalOrder) {
  const SdpaGraph g = make_sdpa_forward_graph(test_shape());
  EXPECT_EQ(op_names(g), (std::vector<std::string>{"bmm1", "attn_scale", "gen_row_index",
                                                    "gen_col_index", "row_ge_col", "causal_select",
                                                    "row_max", "sub_max", "exp", "row_sum", "log",
                                                    "stats", "div", "bmm2"}));
  const Operation& bmm1 = g.ops.front();
  EXPECT_EQ(bmm1.kind, OpKind::Matmul);
  EXPECT_EQ(bmm1.inputs, (V64{uid::Q, uid::K}));
  EXPECT_EQ(bmm1.compute_type, DataType::Float);
  const Operation& bmm2 = g.ops.back();
  EXPECT_EQ(bmm2.inputs, (V64{g.tensor("P").uid, uid::V}));
  EXPECT_EQ(bmm2.output, uid::O);
  const Operation& stats = op_named(g, "stats");
  EXPECT_EQ(stats.pointwise_mode, PointwiseMode::Add);
  EXPECT_EQ(stats.inputs, (V64{g.tensor("M").uid, g.tensor("log_Z").uid}));
  EXPECT_EQ(stats.output, uid::Stats);
  EXPECT_EQ(op_named(g, "row_max").reduction_mode, ReductionMode::Max);
  EXPECT_EQ(op_named(g, "row_sum").reduction_mode, ReductionMode::Add);
  EXPECT_EQ(g.tensor("M").dims, (V64{3, 3, 5, 1}));
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
  EXPECT_EQ(make_sdpa_backward_graph(test_shape()).tensors.size(), 32u);
  EXPECT_EQ(make_sdpa_forward_graph(test_shape()).tensors.size(), 19u);
}

TEST(CudnnSdpaGraph, CausalMaskOnlyWhenCausal) {
  const SdpaGraph g = make_sdpa_forward_graph(test_shape());
  const Operation& row = op_named(g, "gen_row_index");
  const Operation& col = op_named(g, "gen_col_index");
  EXPECT_EQ(row.pointwise_mode, PointwiseMode::GenIndex);
  EXPECT_EQ(row.axis, 2);
  EXPECT_EQ(col.axis, 3);
  EXPECT_EQ(row.inputs, (V64{g.tensor("S_scaled").uid}));
  EXPECT_EQ(g.tensor("row_index").dtype, DataType::Int32);
  const Operation& ge = op_named(g, "row_ge_col");
  EXPECT_EQ(ge.pointwise_mode, PointwiseMode::CmpGe);
  EXPECT_EQ(ge.inputs, (V64{row.output, col.output}));
  EXPECT_EQ(g.tensor(ge.output).dtype, DataType::Boolean);
  const Operation& sel = op_named(g, "causal_select");
  EXPECT_EQ(sel.pointwise_mode, PointwiseMode::BinarySelect);
  EXPECT_EQ(sel.inputs, (V64{g.tensor("S_scaled").uid, uid::NegInf, ge.output}));
  EXPECT_EQ(op_named(g, "row_max").inputs, (V64{sel.output}));
  const TensorDesc& neg_inf = g.tensor("neg_inf");
  EXPECT_TRUE(neg_inf.is_by_value);
  EXPECT_EQ(neg_inf.value, std::numeric_limits<float>::lowest());

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
  EXPECT_EQ(op_named(nc, "row_max").inputs, (V64{nc.tensor("S_scaled").uid}));
  EXPECT_EQ(nc.ops.size(), 10u);
  const SdpaGraph b = make_sdpa_backward_graph(test_shape());
  EXPECT_EQ(op_named(b, "sub_stats").inputs, (V64{op_named(b, "causal_select").output, uid::Stats}));
}

TEST(CudnnSdpaGraph, ScaleIsOneOverSqrtDByValue) {
  for (std::int64_t c : {48, 96, 384}) {  // D = 16, 32, 128
    SdpaShape s = test_shape();
    s.channels = c;
    const float want = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c / 3)));
    for (const SdpaGraph& g : {make_sdpa_forward_graph(s), make_sdpa_backward_graph(s)}) {
      const TensorDesc& t = g.tensor("attn_scale");
      EXPECT_EQ(t.uid, uid::AttnScale);
      EXPECT_TRUE(t.is_by_value);
      EXPECT_FALSE(t.is_virtual);
      EXPECT_EQ(t.dtype, DataType::Float);
      EXPECT_EQ(t.dims, (V64{1, 1, 1, 1}));
      EXPECT_EQ(t.value, want) << "C=" << c;
      const Operation& mul = op_named(g, "attn_scale");
      EXPECT_EQ(mul.pointwise_mode, PointwiseMode::Mul);
      EXPECT_EQ(mul.inputs, (V64{g.tensor("S").uid, uid::AttnScale}));
    }
  }
  EXPECT_EQ(make_sdpa_forward_graph(test_shape()).tensor("attn_scale").value, 0.25f);
}

TEST(CudnnSdpaGraph, InferenceForwardWritesNoStats) {
  const SdpaGraph g = make_sdpa_forward_graph(test_shape(DataType::Half, true, false));
  EXPECT_EQ(g.find("Stats"), nullptr);
  EXPECT_EQ(g.outputs, (V64{uid::O}));
  const auto names = op_names(g);
  EXPECT_EQ(std::count(names.begin(), names.end(), "log"), 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "stats"), 0);
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
  expect_view(g, "dQ_accum", uid::dQAccum, DataType::Float, {3, 3, 5, 16}, {240, 80, 16, 1},
              Buffer::Workspace, 0, 720);
  EXPECT_EQ(g.tensor("dQ_accum").reordering, Reordering::F16x16);
  EXPECT_EQ(g.workspace_prefix_bytes, 3072);  // 720 floats = 2880 bytes, rounded up to 256
  EXPECT_EQ(g.inputs, (V64{uid::Q, uid::K, uid::V, uid::O, uid::dO, uid::Stats, uid::AttnScale,
                           uid::NegInf, uid::One}));
  EXPECT_EQ(g.outputs, (V64{uid::dQ, uid::dK, uid::dV, uid::dQAccum}));
  EXPECT_EQ(g.tensor("one").value, 1.0f);
  // The transposes the backward matmuls take.
  EXPECT_EQ(g.tensor("P^T").strides, (V64{75, 25, 1, 5}));
  EXPECT_EQ(g.tensor("K").dims, (V64{3, 3, 5, 16}));
  EXPECT_EQ(g.tensor("K").strides, (V64{720, 16, 144, 1}));
}

TEST(CudnnSdpaGraph, BackwardTopologicalOrder) {
  const SdpaGraph g = make_sdpa_backward_graph(test_shape());
  EXPECT_EQ(op_names(g),
            (std::vector<std::string>{"mul_dO_O", "reduce_dO_O", "mul_Dsum_one", "matmul_Q_KT",
                                      "attn_scale", "gen_row_index", "gen_col_index", "row_ge_col",
                                      "causal_select", "sub_stats", "exp", "reshape_P_T",
                                      "matmul_PT_dO", "matmul_dO_VT", "mul_dP_one", "sub_Dsum",
                                      "mul_P", "mul_attn_scale", "reshape_dS_T", "matmul_dST_Q",
                                      "reshape_K", "matmul_dS_K", "identity_dQ"}));
  EXPECT_EQ(op_named(g, "matmul_PT_dO").inputs, (V64{g.tensor("P^T").uid, uid::dO}));
  EXPECT_EQ(op_named(g, "matmul_PT_dO").output, uid::dV);
  EXPECT_EQ(op_named(g, "matmul_dO_VT").inputs, (V64{uid::dO, uid::V}));
  EXPECT_EQ(op_named(g, "matmul_dST_Q").inputs, (V64{g.tensor("dS^T").uid, uid::Q}));
  EXPECT_EQ(op_named(g, "matmul_dST_Q").output, uid::dK);
  EXPECT_EQ(op_named(g, "matmul_dS_K").inputs, (V64{g.tensor("dS").uid, g.tensor("K").uid}));
  EXPECT_EQ(op_named(g, "matmul_dS_K").output, uid::dQAccum);
  EXPECT_EQ(op_named(g, "identity_dQ").inputs, (V64{uid::dQAccum}));
  EXPECT_EQ(op_named(g, "identity_dQ").output, uid::dQ);
  EXPECT_EQ(op_named(g, "mul_dP_one").inputs, (V64{g.tensor("dP").uid, uid::One}));
  EXPECT_EQ(op_named(g, "sub_Dsum").inputs, (V64{g.tensor("dP_times_one").uid, g.tensor("Dsum").uid}));
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
  EXPECT_NE(d.find("op 5 causal_select: pointwise binary_select (S_scaled, neg_inf, causal_mask) -> S_masked"),
            std::string::npos) << d;
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
  EXPECT_ERROR_HAS(b.validate(), "'sub_stats' (pointwise) reads tensor 'Stats' (uid 5)");
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

TEST(CudnnSdpaGraphValidate, TheUnmutatedGraphsPass) {
  for (bool causal : {true, false})
    for (DataType t : {DataType::Half, DataType::BFloat16}) {
      EXPECT_EQ(error_of([&] { make_sdpa_forward_graph(test_shape(t, causal)).validate(); }), "<no error>");
      EXPECT_EQ(error_of([&] { make_sdpa_backward_graph(test_shape(t, causal)).validate(); }), "<no error>");
    }
}

}  // namespace
}  // namespace shardtrain::cudnn
