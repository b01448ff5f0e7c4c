// shardtrain/kernels/cuda/cudnn_graph.hpp
// Owns the description of cuDNN's fused scaled-dot-product attention (SDPA,
// "flash attention") forward and backward operation graphs as plain data, in the
// terms of the cuDNN 9 backend API: tensors (uid, data type, dims, strides, byte
// alignment, virtual / by-value) and operations (matmul, pointwise with a mode,
// reduction, reshape) with their input and output uids, in topological order.
// It includes no cuDNN or CUDA header and is compiled in every build, so that the
// graph is built and validated on the host (tests/unit/kernels/cuda); the CUDA build
// turns it into backend descriptors (kernels/cuda/cudnn_sdpa.cpp) mechanically.
//
// Attention semantics are those of kernels/attention.hpp: causal multi-head
// attention over a packed qkv (B, T, 3C) row-major, q = channels [0, C),
// k = [C, 2C), v = [2C, 3C), head h = channels [h*D, (h+1)*D) of each, D = C/H,
// scale 1/sqrt(D), output (B, T, C) with the heads concatenated. The graph's Q, K,
// V, O, dO, dQ, dK, dV are strided (B, H, T, D) views INTO those buffers (no
// permute copies); the base offset of each view into its buffer is data
// (TensorDesc::buffer, ::offset), because the variant pack gets one pointer per
// tensor.
//
// The op sequence is what NVIDIA's cudnn-frontend v1.19.0 (the release for
// cuDNN 9.19; github.com/NVIDIA/cudnn-frontend, tag v1.19.0 = commit df73764)
// lowers its SDPA nodes to for our case (causal top-left mask, attn_scale as a
// by-value float, no bias / dropout / padding / alibi / sink / ragged, fp16 or
// bf16 I/O, fp32 intermediates and compute), node by node, in the frontend's
// order and with the frontend's node names. Sources, read in the stored copies
// of include/cudnn_frontend/node/scaled_dot_product_flash_attention.h (commits
// 0b73d066 and 01a727ea: CompositeSDPANode::expand_node,
// CompositeSDPABackwardNode::expand_node, collect_tensors_in_workspace_node),
// node/softmax.h (CompositeSoftmaxNode), node/diagonal_band_mask.h at df73764
// (CompositeDiagonalBandMaskNode) and utils/attn_score_modifiers.h
// (sliding_window_mask, get_negative_inf_value); details in cudnn_graph.cpp.
//   forward  bmm1 S = Q K^T; attn_scale S *= scale;
//            causal: gen_row_index, gen_col_index, row>col (CMP_GE),
//                    binary_select(S, -inf, row >= col);
//            softmax: Max M = max_row S; sub S - M; exp E; sum Z = sum_row E;
//                     [training: log, add Stats = M + log Z]; div P = E / Z
//                     (P in the I/O type: the backend's requirement for bmm2);
//            bmm2 O = P V
//   backward mul_dO_O, reduce_dO_o, scale_dropout_inv: softmax_sum = rowsum(dO * O) * 1,
//                     stored: NON-virtual float (B,H,T,1) in the workspace;
//            matmul_Q_KT S = Q K^T; mul_s_attn_scale; sub_s_m S - Stats;
//            causal mask as in forward, AFTER the Stats subtraction; exp_s P;
//            reshape_p P^T (I/O type); matmul_pT_dO dV = P^T dO;
//            matmul_dO_VT dP = dO V^T; sub_dP_softmax_sum; mul_dP_exp_s;
//            mul_dS_attn_scale dS = (dP - softmax_sum) * P * scale;
//            reshape_dS dS^T (I/O type); matmul_dST_Q dK = dS^T Q;
//            reshape_k K (float: the frontend leaves its type to the graph's
//            intermediate type); matmul_dS_K dQ = dS K, straight into dQ.
// The backward is the DETERMINISTIC graph: what the frontend builds with
// set_deterministic_algorithm(true) on Hopper and earlier (use_dp_workspace: no
// fp32 dQ_accum summed across key blocks in a varying order, no identity_dQ);
// validate() refuses a matmul into the workspace or a dQ not written by a matmul.
// CudnnSdpa also refuses engine configs whose engine carries the numerical note
// NONDETERMINISTIC (engine_refusal below) and a runtime cuDNN outside
// [kMinCudnnVersion, kEndCudnnVersion) (check_cudnn_version).
// The "* 1" of scale_dropout_inv is the frontend's dropout slot (a by-value
// 1.0f without dropout); there is no other multiply by one.
// Workspace (the graph's prefix of the caller's workspace, then the engine's):
//   [0, 4BHT)   softmax_sum fp32 (B,H,T,1) packed, written by the graph
//   rounded up to 256 bytes: workspace_prefix_bytes; the forward has none;
//   zero_before_execute is empty (only the non-deterministic dQ_accum needed it).
// The frontend derives this graph from the runtime cuDNN version: the mask value
// is the lowest float before 9.10, backward adds a padding-mask workaround for
// T % 128 != 0 up to 9.15.0, and from 9.20 / 9.21 newer frontends lower the
// mask, the softmax and (9.21, causal forward) the whole forward to single
// backend operations. This graph is the one for cuDNN 9.15.1 <= v < 9.20 (the
// build's 9.19 included); CudnnSdpa refuses a runtime below kMinCudnnVersion.
// Known deviation: for shape.training == false the frontend still emits log and
// add into a virtual, unused Stats tensor; this graph omits those dead ops.
//
// Invariants kept by validate() (it throws shardtrain::Error naming the tensor or
// op): unique uids; ops in topological order (an op reads only graph inputs and
// tensors an earlier op wrote, and every tensor is written at most once); virtual
// tensors are neither graph inputs nor outputs and are consumed; dims and strides
// have the same rank; non-virtual views neither overlap themselves nor reach past
// their buffer, and their start is aligned; operand shapes agree; data types are
// ones the flash engines take; the head size is within the flash limits;
// Buffer::Workspace tensors lie inside workspace_prefix_bytes and their extents
// (first to last element reached) do not overlap; every tensor in
// zero_before_execute is such a workspace tensor; backward: no matmul writes a
// workspace tensor and dQ is written by a matmul (the deterministic graph).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardtrain::cudnn {

// Mirrors cudnnDataType_t: the enumerator values ARE cuDNN's (checked with
// static_asserts where both are visible, kernels/cuda/cudnn_sdpa.cpp).
enum class DataType : std::int32_t {
  Float = 0,     // CUDNN_DATA_FLOAT
  Double = 1,    // CUDNN_DATA_DOUBLE
  Half = 2,      // CUDNN_DATA_HALF
  Int8 = 3,      // CUDNN_DATA_INT8
  Int32 = 4,     // CUDNN_DATA_INT32
  BFloat16 = 9,  // CUDNN_DATA_BFLOAT16
  Int64 = 10,    // CUDNN_DATA_INT64
  Boolean = 11,  // CUDNN_DATA_BOOLEAN
};

// Mirrors cudnnPointwiseMode_t (values are cuDNN's).
enum class PointwiseMode : std::int32_t {
  Add = 0,            // CUDNN_POINTWISE_ADD
  Mul = 1,            // CUDNN_POINTWISE_MUL
  Div = 6,            // CUDNN_POINTWISE_DIV
  Sub = 9,            // CUDNN_POINTWISE_SUB
  Exp = 13,           // CUDNN_POINTWISE_EXP
  Log = 15,           // CUDNN_POINTWISE_LOG
  Identity = 21,      // CUDNN_POINTWISE_IDENTITY
  CmpGe = 303,        // CUDNN_POINTWISE_CMP_GE
  GenIndex = 501,     // CUDNN_POINTWISE_GEN_INDEX
  BinarySelect = 601, // CUDNN_POINTWISE_BINARY_SELECT
};

// Mirrors cudnnReduceTensorOp_t (values are cuDNN's).
enum class ReductionMode : std::int32_t {
  Add = 0,  // CUDNN_REDUCE_TENSOR_ADD
  Max = 3,  // CUDNN_REDUCE_TENSOR_MAX
};

// Mirrors cudnnBackendTensorReordering_t (values are cuDNN's).
enum class Reordering : std::int32_t {
  None = 0,    // CUDNN_TENSOR_REORDERING_NONE
  F16x16 = 2,  // CUDNN_TENSOR_REORDERING_F16x16 (older frontends set it on dQ_accum;
               // the frontend this graph follows does not, so no tensor uses it)
};

enum class OpKind { Matmul, Pointwise, Reduction, Reshape };

// Which caller buffer a non-virtual, non-by-value tensor views. CudnnSdpa maps
// each to one of its call's pointers; the variant-pack pointer of a tensor is
// that pointer + offset elements.
enum class Buffer {
  None,       // virtual or by-value tensors
  Qkv,        // (B, T, 3C) of the I/O type: Q, K, V
  Out,        // (B, T, C): O
  Stats,      // (B, H, T) fp32: softmax statistics max + log(sum exp)
  DOut,       // (B, T, C): dO
  DQkv,       // (B, T, 3C): dQ, dK, dV
  Workspace,  // the graph's own prefix of the caller's workspace (dQ_accum, softmax_sum)
};

enum class Direction { Forward, Backward };

struct SdpaShape {
  std::int64_t batch = 0;     // B
  std::int64_t seq_len = 0;   // T
  std::int64_t channels = 0;  // C
  std::int64_t n_head = 0;    // H, divides C; D = C/H
  DataType dtype = DataType::Half;  // I/O type: Half or BFloat16
  bool causal = true;
  bool training = true;  // forward writes Stats (needed by backward)

  std::int64_t head_dim() const { return n_head > 0 ? channels / n_head : 0; }
};

struct TensorDesc {
  std::int64_t uid = 0;
  std::string name;
  DataType dtype = DataType::Float;
  std::vector<std::int64_t> dims;
  std::vector<std::int64_t> strides;  // in elements
  std::int64_t alignment = 16;        // bytes (CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT)
  bool is_virtual = false;
  bool is_by_value = false;
  float value = 0.0f;  // the scalar of a by-value tensor (dtype Float, dims all 1)
  Reordering reordering = Reordering::None;
  Buffer buffer = Buffer::None;
  std::int64_t offset = 0;        // elements of dtype from the buffer start
  std::int64_t buffer_elems = 0;  // elements of dtype in the buffer
};

struct Operation {
  OpKind kind = OpKind::Pointwise;
  std::string name;
  PointwiseMode pointwise_mode = PointwiseMode::Identity;  // kind == Pointwise
  ReductionMode reduction_mode = ReductionMode::Add;       // kind == Reduction
  DataType compute_type = DataType::Float;  // matmul / pointwise math / reduction type
  std::int64_t axis = -1;                   // GenIndex: the dimension indexed
  // Matmul {A, B} (C = A B over the last two dims, batched over the first two);
  // Pointwise {X}, {X, B} or BinarySelect {X, B, T} (T ? X : B);
  // Reduction {X}; Reshape {X}.
  std::vector<std::int64_t> inputs;
  std::int64_t output = 0;
};

struct SdpaGraph {
  SdpaShape shape;
  Direction direction = Direction::Forward;
  std::vector<TensorDesc> tensors;
  std::vector<Operation> ops;      // topological order
  std::vector<std::int64_t> inputs;   // non-virtual tensors read (incl. by-value scalars)
  std::vector<std::int64_t> outputs;  // non-virtual tensors written
  // Bytes at the start of the caller's workspace that the graph's Buffer::Workspace
  // tensors use (multiple of 256); cuDNN's own workspace follows them.
  std::int64_t workspace_prefix_bytes = 0;
  // Buffer::Workspace tensors whose bytes (extent_bytes) the caller zeroes on its
  // stream before every execution (the backward's dQ_accum).
  std::vector<std::int64_t> zero_before_execute;

  const TensorDesc& tensor(std::int64_t uid) const;       // throws if absent
  const TensorDesc& tensor(std::string_view name) const;  // throws if absent
  const TensorDesc* find(std::string_view name) const;    // nullptr if absent
  TensorDesc& tensor_mut(std::string_view name);           // throws if absent

  // Throws shardtrain::Error with a message naming the first violated invariant.
  void validate() const;
};

// Fixed uids of the graph's non-virtual tensors (virtual ones start at 100).
namespace uid {
inline constexpr std::int64_t Q = 1, K = 2, V = 3, O = 4, Stats = 5, dO = 6, dQ = 7, dK = 8,
                              dV = 9, AttnScale = 10, NegInf = 11, One = 12, /* 13: the non-deterministic graph's dQ_accum, never made */
                              SoftmaxSum = 14;
inline constexpr std::int64_t FirstVirtual = 100;
}  // namespace uid

// Both build the graph for `shape` and validate() it (so an unsupported shape
// throws here, with validate()'s message).
SdpaGraph make_sdpa_forward_graph(const SdpaShape& shape);
SdpaGraph make_sdpa_backward_graph(const SdpaShape& shape);

// Bytes of one element of `t` (Boolean counts 1).
std::int64_t element_bytes(DataType t);
// Elements of a view from its first to its last element reached, inclusive
// (1 + sum of (dim - 1) * stride), and the same in bytes.
std::int64_t extent_elems(const TensorDesc& t);
std::int64_t extent_bytes(const TensorDesc& t);
const char* to_string(DataType t);
const char* to_string(PointwiseMode m);
const char* to_string(ReductionMode m);
const char* to_string(OpKind k);
const char* to_string(Buffer b);

// Multi-line, human-readable listing of the shape, tensors and ops, for logs.
std::string describe(const SdpaGraph& graph);

// cuDNN's flash-attention head-size limit that validate() enforces (see the .cpp).
inline constexpr std::int64_t kMaxHeadDim = 128;
inline constexpr std::int64_t kHeadDimMultiple = 8;

// The oldest runtime cuDNN (cudnnGetVersion()) for which the frontend lowers our
// case to exactly these graphs: 9.15.1 (below it, a backward padding-mask
// workaround for T % 128 != 0 up to 9.15.0, and the lowest float instead of
// -inf as the mask value before 9.10). Checked by CudnnSdpa's constructor.
inline constexpr std::int64_t kMinCudnnVersion = 91501;
// The first runtime cuDNN for which they are no longer: 9.20 (newer frontends
// lower the mask and the softmax, and from 9.21 the causal forward, to single
// backend operations). The range is [kMinCudnnVersion, kEndCudnnVersion).
inline constexpr std::int64_t kEndCudnnVersion = 92000;
// Throws shardtrain::Error naming the version and the range when `version`
// (cudnnGetVersion()'s encoding, major*10000 + minor*100 + patch) is outside it.
void check_cudnn_version(std::int64_t version);

// Mirrors cudnnBackendNumericalNote_t (values are cuDNN's; checked in
// kernels/cuda/cudnn_sdpa.cpp). Only the notes this code looks at.
enum class NumericalNote : std::int32_t {
  TensorCore = 0,        // CUDNN_NUMERICAL_NOTE_TENSOR_CORE
  Nondeterministic = 4,  // CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
};
// Why an engine config with these numerical notes (CUDNN_ATTR_ENGINE_NUMERICAL_NOTE
// of its engine) is refused, or "" if it is taken: every config whose engine
// notes NONDETERMINISTIC is refused, so a run is bitwise repeatable.
std::string engine_refusal(const std::vector<NumericalNote>& notes);

}  // namespace shardtrain::cudnn
