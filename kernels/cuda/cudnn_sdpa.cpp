// shardtrain/kernels/cuda/cudnn_sdpa.cpp
// CudnnSdpa: SdpaGraph (kernels/cuda/cudnn_graph.hpp) -> cuDNN 9 backend
// descriptors -> execution plans, and their execution. The translation is
// mechanical: one CUDNN_BACKEND_TENSOR_DESCRIPTOR per TensorDesc (our enums carry
// cuDNN's values, checked below), one operation descriptor (plus its matmul /
// pointwise / reduction descriptor) per Operation, in the graph's order.
// Descriptors are owned by BackendDescriptor (destroyed in reverse order of
// creation by the Plan that holds them). Compiled in the CUDA build only; never
// run here (no GPU).
//
// Workspace, per call: [graph prefix | plan workspace]. The prefix holds the
// graph's Buffer::Workspace tensors (the backward's softmax_sum, at the offset the
// graph gives; cudnn_graph.hpp) and is workspace_prefix_bytes
// long; the engine's own workspace starts right after it, as in cudnn-frontend
// (its workspace tensors first, the plan's workspace at the frontend-workspace
// offset). Workspace tensors are graph outputs, so execute() binds their
// pointers in the variant pack like any other tensor; the graph's
// zero_before_execute tensors (none in the deterministic backward) would be zeroed
// with cudaMemsetAsync on the caller's stream, ordered before cudnnBackendExecute.
// Determinism: the backward graph is the deterministic one (cudnn_graph.hpp), and
// an engine config whose engine carries CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC is
// skipped (cudnn::engine_refusal), as any config whose plan does not finalize.
// The runtime cuDNN must lie in [kMinCudnnVersion, kEndCudnnVersion).
#include "kernels/cuda/cudnn_sdpa.cuh"

#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/cuda_check.hpp"
#include "core/error.hpp"

namespace shardtrain::cuda {

namespace {

using cudnn::Buffer;
using cudnn::DataType;
using cudnn::OpKind;
using cudnn::PointwiseMode;
using cudnn::ReductionMode;
using cudnn::Reordering;

// Our mirror enums carry cuDNN's values, so a static_cast is the translation.
static_assert(static_cast<int>(DataType::Float) == CUDNN_DATA_FLOAT);
static_assert(static_cast<int>(DataType::Double) == CUDNN_DATA_DOUBLE);
static_assert(static_cast<int>(DataType::Half) == CUDNN_DATA_HALF);
static_assert(static_cast<int>(DataType::Int8) == CUDNN_DATA_INT8);
static_assert(static_cast<int>(DataType::Int32) == CUDNN_DATA_INT32);
static_assert(static_cast<int>(DataType::BFloat16) == CUDNN_DATA_BFLOAT16);
static_assert(static_cast<int>(DataType::Int64) == CUDNN_DATA_INT64);
static_assert(static_cast<int>(DataType::Boolean) == CUDNN_DATA_BOOLEAN);
static_assert(static_cast<int>(PointwiseMode::Add) == CUDNN_POINTWISE_ADD);
static_assert(static_cast<int>(PointwiseMode::Mul) == CUDNN_POINTWISE_MUL);
static_assert(static_cast<int>(PointwiseMode::Div) == CUDNN_POINTWISE_DIV);
static_assert(static_cast<int>(PointwiseMode::Sub) == CUDNN_POINTWISE_SUB);
static_assert(static_cast<int>(PointwiseMode::Exp) == CUDNN_POINTWISE_EXP);
static_assert(static_cast<int>(PointwiseMode::Log) == CUDNN_POINTWISE_LOG);
static_assert(static_cast<int>(PointwiseMode::Identity) == CUDNN_POINTWISE_IDENTITY);
static_assert(static_cast<int>(PointwiseMode::CmpGe) == CUDNN_POINTWISE_CMP_GE);
static_assert(static_cast<int>(PointwiseMode::GenIndex) == CUDNN_POINTWISE_GEN_INDEX);
static_assert(static_cast<int>(PointwiseMode::BinarySelect) == CUDNN_POINTWISE_BINARY_SELECT);
static_assert(static_cast<int>(ReductionMode::Add) == CUDNN_REDUCE_TENSOR_ADD);
static_assert(static_cast<int>(ReductionMode::Max) == CUDNN_REDUCE_TENSOR_MAX);
static_assert(static_cast<int>(Reordering::None) == CUDNN_TENSOR_REORDERING_NONE);
static_assert(static_cast<int>(Reordering::F16x16) == CUDNN_TENSOR_REORDERING_F16x16);
static_assert(static_cast<int>(cudnn::NumericalNote::TensorCore) == CUDNN_NUMERICAL_NOTE_TENSOR_CORE);
static_assert(static_cast<int>(cudnn::NumericalNote::Nondeterministic) == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC);

// Checked cudnnBackendSetAttribute / Finalize / GetAttribute; being macros, the
// error message shows the attribute name and the file:line of the use.
#define SHARDTRAIN_CUDNN_SET(desc, name, type, count, data) \
  SHARDTRAIN_CUDNN_CHECK(cudnnBackendSetAttribute((desc), name, type, (count), (data)))
#define SHARDTRAIN_CUDNN_FINALIZE(desc) SHARDTRAIN_CUDNN_CHECK(cudnnBackendFinalize(desc))

// Owns one backend descriptor.
class BackendDescriptor {
 public:
  BackendDescriptor() = default;
  explicit BackendDescriptor(cudnnBackendDescriptorType_t type) {
    SHARDTRAIN_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &m_desc));
  }
  ~BackendDescriptor() {
    if (m_desc != nullptr) cudnnBackendDestroyDescriptor(m_desc);
  }
  BackendDescriptor(BackendDescriptor&& o) noexcept : m_desc(std::exchange(o.m_desc, nullptr)) {}
  BackendDescriptor& operator=(BackendDescriptor&& o) noexcept {
    if (this != &o) {
      if (m_desc != nullptr) cudnnBackendDestroyDescriptor(m_desc);
      m_desc = std::exchange(o.m_desc, nullptr);
    }
    return *this;
  }
  BackendDescriptor(const BackendDescriptor&) = delete;
  BackendDescriptor& operator=(const BackendDescriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return m_desc; }

 private:
  cudnnBackendDescriptor_t m_desc = nullptr;
};

cudnnDataType_t to_cudnn(DataType t) { return static_cast<cudnnDataType_t>(t); }

// The numerical notes of an engine config's engine (CUDNN_ATTR_ENGINECFG_ENGINE,
// then CUDNN_ATTR_ENGINE_NUMERICAL_NOTE), as the frontend reads them.
std::vector<cudnn::NumericalNote> numerical_notes(cudnnBackendDescriptor_t config) {
  BackendDescriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  std::int64_t count = 0;
  SHARDTRAIN_CUDNN_CHECK(
      cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count, &e));
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  std::int64_t n = 0;
  SHARDTRAIN_CUDNN_CHECK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                                  CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes));
  std::vector<cudnn::NumericalNote> out;
  for (std::int64_t i = 0; i < n && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; ++i)
    out.push_back(static_cast<cudnn::NumericalNote>(notes[i]));
  return out;
}

}  // namespace

// Everything one graph's execution needs. Members are destroyed in reverse
// order: the plan before the configs, the graph and the tensors it refers to.
struct CudnnSdpa::Plan {
  cudnn::SdpaGraph graph;
  std::vector<BackendDescriptor> descriptors;  // tensors, op-level and operation descriptors
  BackendDescriptor operation_graph;
  BackendDescriptor heuristics;
  std::vector<BackendDescriptor> engine_configs;
  BackendDescriptor plan;
  std::int64_t workspace_bytes = 0;   // the plan's own workspace
  std::vector<std::int64_t> uids;     // variant pack order: graph inputs, then outputs
  std::vector<float> scalars;         // host value of each by-value tensor in `uids` order
};

static_assert(static_cast<int>(Buffer::Workspace) == 6, "execute() indexes 7 buffer pointers");

std::unique_ptr<CudnnSdpa::Plan> CudnnSdpa::build_plan(cudnnHandle_t handle, cudnn::SdpaGraph graph) {
  auto p = std::make_unique<CudnnSdpa::Plan>();
  p->graph = std::move(graph);
  const cudnn::SdpaGraph& g = p->graph;

  // Tensors.
  std::unordered_map<std::int64_t, cudnnBackendDescriptor_t> tensor_desc;
  for (const auto& t : g.tensors) {
    BackendDescriptor d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const cudnnDataType_t dtype = to_cudnn(t.dtype);
    const auto rank = static_cast<std::int64_t>(t.dims.size());
    const bool is_virtual = t.is_virtual;
    SHARDTRAIN_CUDNN_SET(d.get(), CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype);
    SHARDTRAIN_CUDNN_SET(d.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank, t.dims.data());
    SHARDTRAIN_CUDNN_SET(d.get(), CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank, t.strides.data());
    SHARDTRAIN_CUDNN_SET(d.get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t.uid);
    SHARDTRAIN_CUDNN_SET(d.get(), CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &t.alignment);
    SHARDTRAIN_CUDNN_SET(d.get(), CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (t.is_by_value) {
      const bool by_value = true;
      SHARDTRAIN_CUDNN_SET(d.get(), CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    }
    if (t.reordering != Reordering::None) {
      const auto mode = static_cast<cudnnBackendTensorReordering_t>(t.reordering);
      SHARDTRAIN_CUDNN_SET(d.get(), CUDNN_ATTR_TENSOR_REORDERING_MODE,
                           CUDNN_TYPE_TENSOR_REORDERING_MODE, 1, &mode);
    }
    SHARDTRAIN_CUDNN_FINALIZE(d.get());
    tensor_desc[t.uid] = d.get();
    p->descriptors.push_back(std::move(d));
  }

  // Operations, in the graph's (topological) order.
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const auto& op : g.ops) {
    std::vector<cudnnBackendDescriptor_t> in;
    for (std::int64_t id : op.inputs) in.push_back(tensor_desc.at(id));
    cudnnBackendDescriptor_t out = tensor_desc.at(op.output);
    const cudnnDataType_t compute = to_cudnn(op.compute_type);
    BackendDescriptor operation;
    switch (op.kind) {
      case OpKind::Matmul: {
        BackendDescriptor mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
        SHARDTRAIN_CUDNN_SET(mm.get(), CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
        SHARDTRAIN_CUDNN_FINALIZE(mm.get());
        const cudnnBackendDescriptor_t mm_desc = mm.get();
        operation = BackendDescriptor(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
        SHARDTRAIN_CUDNN_SET(operation.get(), CUDNN_ATTR_OPERATION_MATMUL_ADESC,
                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &in[0]);
        SHARDTRAIN_CUDNN_SET(operation.get(), CUDNN_ATTR_OPERATION_MATMUL_BDESC,
                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &in[1]);
        SHARDTRAIN_CUDNN_SET(operation.get(), CUDNN_ATTR_OPERATION_MATMUL_CDESC,
                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &out);
        SHARDTRAIN_CUDNN_SET(operation.get(), CUDNN_ATTR_OPERATION_MATMUL_DESC,
                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm_desc);
        p->descriptors.push_back(std::move(mm));
        break;
      }
      case OpKind::Pointwise: {
        BackendDescriptor pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
        const auto mode = static_cast<cudnnPointwiseMode_t>(op.pointwise_mode);
        SHARDTRAIN_CUDNN_SET(pw.get(), CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
        SHARDTRAIN_CUDNN_SET(pw.get(), CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute);
        if (op.pointwise_mode == PointwiseMode::GenIndex)
          SHARDTRAIN_CUDNN_SET(pw.get(), CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &op.axis);
        SHARDTRAIN_CUDNN_FINALIZE(pw.get());
        const cudnnBackendDescriptor_t pw_desc = pw.get();
        operation = BackendDescriptor(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
        SHARDTRAIN_CUDNN_SET(operation.get(), CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw_desc);
        SHARDTRAIN_CUDNN_SET(operation.get(), CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &in[0]);
        if (in.size() >= 2)
          SHARDTRAIN_CUDNN_SET(operation.get(), CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &in[1]);
        if (in.size() == 3)  // BINARY_SELECT: y = T ? X : B
          SHARDTRAIN_CUDNN_SET(operation.get(), CUDNN_ATTR_OPERATION_POINTWISE_TDESC,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &in[2]);
        SHARDTRAIN_CUDNN_SET(operation.get(), CUDNN_ATTR_OPERATION_POINTWISE_YDESC,
                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &out);
        p->descriptors.push_back(std::move(pw));
        break;
      }
      case OpKind::Reduction: {
        BackendDescriptor red(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
        const auto mode = static_cast<cudnnReduceTensorOp_t>(op.reduction_mode);
        SHARDTRAIN_CUDNN_SET(red.get(), CUDNN_ATTR_REDUCTION_OPERATOR,
                             CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
        SHARDTRAIN_CUDNN_SET(red.get(), CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
        SHARDTRAIN_CUDNN_FINALIZE(red.get());
        const cudnnBackendDescriptor_t red_desc = red.get();
        operation = BackendDescriptor(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
        SHARDTRAIN_CUDNN_SET(operation.get(), CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &in[0]);
        SHARDTRAIN_CUDNN_SET(operation.get(), CUDNN_ATTR_OPERATION_REDUCTION_YDESC,
                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &out);
        SHARDTRAIN_CUDNN_SET(operation.get(), CUDNN_ATTR_OPERATION_REDUCTION_DESC,
                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &red_desc);
        p->descriptors.push_back(std::move(red));
        break;
      }
      case OpKind::Reshape: {
        operation = BackendDescriptor(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
        SHARDTRAIN_CUDNN_SET(operation.get(), CUDNN_ATTR_OPERATION_RESHAPE_XDESC,
                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &in[0]);
        SHARDTRAIN_CUDNN_SET(operation.get(), CUDNN_ATTR_OPERATION_RESHAPE_YDESC,
                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &out);
        break;
      }
    }
    SHARDTRAIN_CUDNN_FINALIZE(operation.get());
    ops.push_back(operation.get());
    p->descriptors.push_back(std::move(operation));
  }

  // Operation graph.
  p->operation_graph = BackendDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  SHARDTRAIN_CUDNN_SET(p->operation_graph.get(), CUDNN_ATTR_OPERATIONGRAPH_OPS,
                       CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<std::int64_t>(ops.size()), ops.data());
  SHARDTRAIN_CUDNN_SET(p->operation_graph.get(), CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE,
                       1, &handle);
  SHARDTRAIN_CUDNN_FINALIZE(p->operation_graph.get());

  // Engine heuristics (mode A) -> engine configs, best first.
  const cudnnBackendDescriptor_t op_graph = p->operation_graph.get();
  const cudnnBackendHeurMode_t heur_mode = CUDNN_HEUR_MODE_A;
  p->heuristics = BackendDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  SHARDTRAIN_CUDNN_SET(p->heuristics.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op_graph);
  SHARDTRAIN_CUDNN_SET(p->heuristics.get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1,
                       &heur_mode);
  SHARDTRAIN_CUDNN_FINALIZE(p->heuristics.get());
  std::int64_t n_configs = 0;
  SHARDTRAIN_CUDNN_CHECK(cudnnBackendGetAttribute(p->heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n_configs, nullptr));
  std::vector<cudnnBackendDescriptor_t> configs;
  for (std::int64_t i = 0; i < n_configs; ++i) {
    p->engine_configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    configs.push_back(p->engine_configs.back().get());
  }
  std::int64_t returned = 0;
  if (n_configs > 0)
    SHARDTRAIN_CUDNN_CHECK(cudnnBackendGetAttribute(p->heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, n_configs,
                                                    &returned, configs.data()));

  // The first config whose engine is not noted NONDETERMINISTIC and whose
  // execution plan finalizes. A refusal here is expected for some configs, so
  // these statuses are collected rather than thrown.
  std::string refusals;
  for (std::int64_t i = 0; i < returned; ++i) {
    const std::string why = cudnn::engine_refusal(numerical_notes(configs[static_cast<std::size_t>(i)]));
    if (!why.empty()) {
      refusals += " [config " + std::to_string(i) + ": " + why + "]";
      continue;
    }
    BackendDescriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    SHARDTRAIN_CUDNN_SET(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    SHARDTRAIN_CUDNN_SET(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &configs[static_cast<std::size_t>(i)]);
    const cudnnStatus_t rc = cudnnBackendFinalize(plan.get());
    if (rc == CUDNN_STATUS_SUCCESS) {
      p->plan = std::move(plan);
      break;
    }
    refusals += " [config " + std::to_string(i) + ": " + cudnnGetErrorString(rc) + "]";
  }
  if (p->plan.get() == nullptr)
    SHARDTRAIN_FAIL("no cuDNN engine takes this SDPA graph: heuristics mode A returned " +
                    std::to_string(returned) + " engine configs, none deterministic and finalized" + refusals +
                    "\n" +
                    cudnn::describe(g));
  std::int64_t got = 0;
  SHARDTRAIN_CUDNN_CHECK(cudnnBackendGetAttribute(p->plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                  CUDNN_TYPE_INT64, 1, &got, &p->workspace_bytes));

  // Variant pack order and the by-value scalars' host storage.
  for (std::int64_t id : g.inputs) p->uids.push_back(id);
  for (std::int64_t id : g.outputs) p->uids.push_back(id);
  for (std::int64_t id : p->uids) p->scalars.push_back(g.tensor(id).value);
  return p;
}

CudnnSdpa::CudnnSdpa(cudnnHandle_t handle, const cudnn::SdpaShape& shape)
    : m_handle(handle), m_shape(shape) {
  SHARDTRAIN_CHECK(handle != nullptr, "CudnnSdpa needs a cuDNN handle");
  // The graphs are what cudnn-frontend lowers our case to for cuDNN 9.15.1 <= v <
  // 9.20 (cudnn_graph.hpp); outside it the frontend builds a different graph
  // (lowest-float mask before 9.10, a padding-mask workaround for T % 128 != 0
  // up to 9.15.0; fused mask / softmax operations from 9.20), which this class
  // does not reproduce. Throws with both ends named.
  cudnn::check_cudnn_version(static_cast<std::int64_t>(cudnnGetVersion()));
  m_forward = build_plan(handle, cudnn::make_sdpa_forward_graph(shape));
  if (shape.training) m_backward = build_plan(handle, cudnn::make_sdpa_backward_graph(shape));
}

CudnnSdpa::~CudnnSdpa() = default;

const cudnn::SdpaGraph& CudnnSdpa::forward_graph() const { return m_forward->graph; }

const cudnn::SdpaGraph& CudnnSdpa::backward_graph() const {
  SHARDTRAIN_CHECK(m_backward != nullptr, "CudnnSdpa was built with shape.training == false: no backward graph");
  return m_backward->graph;
}

std::size_t CudnnSdpa::workspace_bytes() const {
  std::int64_t bytes = m_forward->graph.workspace_prefix_bytes + m_forward->workspace_bytes;
  if (m_backward)
    bytes = std::max(bytes, m_backward->graph.workspace_prefix_bytes + m_backward->workspace_bytes);
  return static_cast<std::size_t>(bytes);
}

// buffers[b] is the base pointer of Buffer b (indexed by the enum's value).
void CudnnSdpa::execute(const Plan& plan, cudaStream_t stream, const void* const* buffers,
                        void* workspace) const {
  const cudnn::SdpaGraph& g = plan.graph;
  std::vector<void*> pointers;
  for (std::size_t i = 0; i < plan.uids.size(); ++i) {
    const cudnn::TensorDesc& t = g.tensor(plan.uids[i]);
    if (t.is_by_value) {  // host pointer to the scalar
      pointers.push_back(const_cast<float*>(&plan.scalars[i]));
      continue;
    }
    const void* base = buffers[static_cast<int>(t.buffer)];
    if (base == nullptr)
      SHARDTRAIN_FAIL(std::string("CudnnSdpa: the ") + to_string(t.buffer) + " pointer for tensor '" +
                      t.name + "' is null");
    auto* ptr = static_cast<char*>(const_cast<void*>(base)) + t.offset * cudnn::element_bytes(t.dtype);
    if (reinterpret_cast<std::uintptr_t>(ptr) % static_cast<std::uintptr_t>(t.alignment) != 0)
      SHARDTRAIN_FAIL("CudnnSdpa: tensor '" + t.name + "' starts at a pointer not aligned to " +
                      std::to_string(t.alignment) + " bytes");
    pointers.push_back(ptr);
  }
  void* plan_workspace = static_cast<char*>(workspace) + g.workspace_prefix_bytes;
  // What must be zero before the graph runs, on the caller's stream (never the
  // legacy default stream); the deterministic backward has nothing there.
  for (std::int64_t id : g.zero_before_execute) {
    const cudnn::TensorDesc& t = g.tensor(id);
    char* begin = static_cast<char*>(workspace) + t.offset * cudnn::element_bytes(t.dtype);
    SHARDTRAIN_CUDA_CHECK(
        cudaMemsetAsync(begin, 0, static_cast<std::size_t>(cudnn::extent_bytes(t)), stream));
  }
  SHARDTRAIN_CUDNN_CHECK(cudnnSetStream(m_handle, stream));
  BackendDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  SHARDTRAIN_CUDNN_SET(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                       static_cast<std::int64_t>(plan.uids.size()), plan.uids.data());
  SHARDTRAIN_CUDNN_SET(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                       static_cast<std::int64_t>(pointers.size()), pointers.data());
  SHARDTRAIN_CUDNN_SET(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                       &plan_workspace);
  SHARDTRAIN_CUDNN_FINALIZE(pack.get());
  SHARDTRAIN_CUDNN_CHECK(cudnnBackendExecute(m_handle, plan.plan.get(), pack.get()));
}

template <class T>
void CudnnSdpa::forward(cudaStream_t stream, const T* qkv, T* out, float* stats, void* workspace) const {
  SHARDTRAIN_CHECK(cudnn_sdpa_dtype<T>() == m_shape.dtype,
                   std::string("CudnnSdpa::forward called with ") + cudnn::to_string(cudnn_sdpa_dtype<T>()) +
                       " data for a " + cudnn::to_string(m_shape.dtype) + " graph");
  SHARDTRAIN_CHECK(workspace != nullptr || workspace_bytes() == 0, "CudnnSdpa::forward: null workspace");
  const void* buffers[7] = {};
  buffers[static_cast<int>(Buffer::Qkv)] = qkv;
  buffers[static_cast<int>(Buffer::Out)] = out;
  buffers[static_cast<int>(Buffer::Stats)] = stats;
  buffers[static_cast<int>(Buffer::Workspace)] = workspace;
  execute(*m_forward, stream, buffers, workspace);
}

template <class T>
void CudnnSdpa::backward(cudaStream_t stream, const T* qkv, const T* out, const T* dout,
                         const float* stats, T* dqkv, void* workspace) const {
  SHARDTRAIN_CHECK(m_backward != nullptr, "CudnnSdpa::backward: built with shape.training == false");
  SHARDTRAIN_CHECK(cudnn_sdpa_dtype<T>() == m_shape.dtype,
                   std::string("CudnnSdpa::backward called with ") + cudnn::to_string(cudnn_sdpa_dtype<T>()) +
                       " data for a " + cudnn::to_string(m_shape.dtype) + " graph");
  SHARDTRAIN_CHECK(workspace != nullptr, "CudnnSdpa::backward: null workspace");
  const void* buffers[7] = {};
  buffers[static_cast<int>(Buffer::Qkv)] = qkv;
  buffers[static_cast<int>(Buffer::Out)] = out;
  buffers[static_cast<int>(Buffer::DOut)] = dout;
  buffers[static_cast<int>(Buffer::Stats)] = stats;
  buffers[static_cast<int>(Buffer::DQkv)] = dqkv;
  buffers[static_cast<int>(Buffer::Workspace)] = workspace;
  execute(*m_backward, stream, buffers, workspace);
}

#define SHARDTRAIN_CUDA_DEFINE_CUDNN_SDPA(T)                                                    \
  template void CudnnSdpa::forward<T>(cudaStream_t, const T*, T*, float*, void*) const;        \
  template void CudnnSdpa::backward<T>(cudaStream_t, const T*, const T*, const T*, const float*, \
                                       T*, void*) const;
SHARDTRAIN_CUDA_DEFINE_CUDNN_SDPA(__half)
SHARDTRAIN_CUDA_DEFINE_CUDNN_SDPA(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_DEFINE_CUDNN_SDPA

}  // namespace shardtrain::cuda
