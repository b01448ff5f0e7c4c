// shardtrain/backend/model_ops.hpp
// Owns the op table the models are written against: ModelOps<T>, the layer
// kernels of kernels/*.hpp in pointer form (row-major, the same semantics,
// shapes and saved layouts), run by the host backend with the Kokkos kernels
// and by the CUDA backend with kernels/cuda (cuBLAS GEMMs, cuDNN attention
// where it is built).
// Ops as data: backend/model_ops.def lists every op once -- name, the
// ProfileOp it is timed under, signature, and what it computes -- and the
// table has one OpEntry per line, a function pointer plus the object it is
// bound to. A model calls an entry like a method, `ops.linear_forward(x, w, b,
// y, n, k, m, false)`: one indirect call, as the virtual call it replaces.
//  - Each backend binds every line of the list (make_model_ops): an op listed
//    SHARDTRAIN_MODEL_OP to the method of that name of its ModelOps object
//    (host_backend.cpp, cuda/cuda_model_ops.cpp), an op listed
//    SHARDTRAIN_POINTWISE_OP straight to its two kernels by name. A backend
//    missing an op's method or kernel does not compile (the host build checks
//    the host, the CUDA build -- share/test.sh, `ctest -L cuda-build` -- the
//    device).
//  - `--profile` wraps a table once, generically (profiled_model_ops.hpp):
//    every entry of the list, timed under its ProfileOp.
//  - Adding an op: its host kernel pair (kernels/), its CUDA kernel pair
//    (kernels/cuda/), one line here in model_ops.def; an op that is not
//    pointwise also gets a method in each backend (share/doc/gpu.md, "Adding an op").
// A table belongs to one model and owns the object its entries are bound to:
// the scratch the kernels need for micro-batches up to the limits it was made
// for (category Workspace), and the device copy of the token ids.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "backend/backend.hpp"
#include "kernels/cnn_shapes.hpp"  // Conv2dShape, Pool2dShape, DropoutParams (Kokkos-free)
#include "kernels/types.hpp"

namespace shardtrain {

struct ModelOpsLimits {
  std::int64_t max_batch = 0, seq_len = 0, channels = 0, n_head = 0, vocab = 0;
  std::int64_t max_input_elems = 0;  // floats stage_values takes at most (classifier inputs)
  // Host 16-bit kernels: fp32 scratch floats the model's other ops need at
  // least (e.g. the CNN's conv2d_half_scratch_elems); the GPT ops' need is
  // computed from the fields above.
  std::int64_t half_scratch_elems = 0;
  // GPT attention through cuDNN's fused flash-attention graphs (model.attention =
  // "fused"; CUDA device, 16-bit storage): the device ops size their scratch for it.
  bool fused_attention = false;
  // GPT attention through our tiled kernels (model.attention = "flash"; CUDA device):
  // the device ops size their scratch for its backward.
  bool flash_attention = false;
};

struct AttnShape {  // multi-head attention over packed qkv (B, T, 3C), kernels/attention.hpp
  std::int64_t batch = 0, seq_len = 0, channels = 0, n_head = 0;
  bool causal = true;                     // false: bidirectional (encoder classifier)
  const std::int32_t* lengths = nullptr;  // HOST: valid keys per sequence, in [1, T]; nullptr: all T
  // cuDNN's fused flash attention (CUDA device, f16/bf16, causal, no lengths): the
  // forward keeps qkv and the (B, H) rows' fp32 log-sum-exp, not the (B, H, T, T)
  // probabilities, and the backward recomputes them. Sizes: op_sizes below.
  bool fused = false;
  // Our tiled ("flash") attention (CUDA device, any storage type, no lengths;
  // kernels/cuda/flash_attention.cuh): the forward keeps qkv and the rows' fp32
  // log-sum-exp, the backward recomputes the probabilities tile by tile. Sizes:
  // op_sizes below (the same as fused).
  bool flash = false;
};

// What a model asks the op table for before it has one (its plan and costs
// are computed first): the sizes, in elements, of the buffers it passes to the
// ops (saved state, workspace, the host 16-bit paths' fp32 scratch), as every
// backend's kernels lay them out (the host kernels' layouts, which the CUDA
// kernels share: kernels/cuda/attention.cuh), and the host convolutions' code
// built ahead of the process measurement. A model sizes what it allocates by
// these, never by a kernel's header. Defined in host_backend.cpp.
namespace op_sizes {
// attention_forward's `saved`. Fused and flash: qkv (3BTC) | the statistics (B*H*T
// floats, counted as 2 elements each: exact for 16-bit storage, twice the need for
// fp32, which only flash runs) | 32 elements for the device ops to start both
// pieces 16-byte aligned (cuDNN's requirement; flash keeps the same layout).
std::int64_t attention_saved(const AttnShape& s);
// attention_forward/backward's `workspace` (fused, flash: none; the device ops' own
// scratch holds cuDNN's / flash's backward rowsum(dO * O)).
std::int64_t attention_workspace(const AttnShape& s);
template <class T>
std::int64_t conv2d_workspace(const Conv2dShape& s);   // conv2d_forward/backward's `workspace`
std::int64_t conv2d_half_scratch(const Conv2dShape& s);                           // ModelOpsLimits::half_scratch_elems
std::int64_t linear_half_scratch(std::int64_t rows, std::int64_t in, std::int64_t out);  // likewise
std::int64_t cross_entropy_half_scratch(std::int64_t vocab);                      // likewise
// Builds the host's oneDNN convolution primitives of `s` now (model/cnn.hpp
// cnn_warm_up_kernels says why); nothing for a shape without them.
template <class T>
void warm_up_conv2d(const Conv2dShape& s);
}  // namespace op_sizes

// One entry of the op table: a function pointer and the object it is bound to
// (the backend's HostModelOps / CudaModelOps, or the --profile wrapper), called
// like a method: entry(args...) is one indirect call, as a virtual call is.
template <class Signature>
class OpEntry;

template <class R, class... A>
class OpEntry<R(A...)> {
 public:
  R operator()(A... args) const { return m_fn(m_object, std::forward<A>(args)...); }

  // From now on a call runs Call{}(object, args...); Call is a captureless
  // lambda, so the pointer stays one plain function of this entry's signature.
  template <class Object, class Call>
  void bind(Object& object, Call) {
    m_object = &object;
    m_fn = [](void* o, A... args) -> R { return Call{}(*static_cast<Object*>(o), std::forward<A>(args)...); };
  }
  explicit operator bool() const { return m_fn != nullptr; }

 private:
  R (*m_fn)(void*, A...) = nullptr;
  void* m_object = nullptr;
};

// The op table of one model: an entry per line of backend/model_ops.def, bound
// by the backend that made it (make_model_ops), plus the object the entries are
// bound to, which the table owns.
template <class T>
class ModelOps {
 public:
  template <class Object>
  ModelOps(std::unique_ptr<Object> object, MemorySpace* memory)
      : m_memory(memory), m_object(object.release(), [](void* o) { delete static_cast<Object*>(o); }) {}

#define SHARDTRAIN_MODEL_OP(name, profile_op, signature) OpEntry<signature> name;
#include "backend/model_ops.def"

  // Where activations and workspace of this model live (nullptr: host).
  MemorySpace* memory() const { return m_memory; }

 private:
  MemorySpace* m_memory;
  std::unique_ptr<void, void (*)(void*)> m_object;
};

// Binds entry `name` of `ops` to the method `name` of `object` (an op listed
// SHARDTRAIN_MODEL_OP). A backend without that method does not compile.
#define SHARDTRAIN_BIND_MODEL_OP_METHOD(ops, object, name)                     \
  (ops).name.bind((object), [](auto& self, auto&&... args) -> decltype(auto) { \
    return self.name(std::forward<decltype(args)>(args)...);                   \
  })

// Floats of fp32 scratch the host's 16-bit kernels need for a GPT within
// `limits` (kernels/half_scratch.hpp): the largest op's tiles.
std::int64_t host_half_scratch_elems(const ModelOpsLimits& limits);

// The layer kernels of `backend` for a model within `limits`; their scratch is
// counted in `memory`. T = double exists on the host only.
template <class T>
std::unique_ptr<ModelOps<T>> make_model_ops(Backend& backend, const ModelOpsLimits& limits,
                                            MemoryTracker& memory);

}  // namespace shardtrain
