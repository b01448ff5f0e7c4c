// shardtrain/kernels/cuda/cudnn_sdpa.cuh
// Owns causal multi-head attention through cuDNN's fused flash-attention (SDPA)
// graphs: the forward and backward graphs described and validated on the host
// by kernels/cuda/cudnn_graph.hpp, turned into cuDNN 9 backend descriptors
// (tensors, operations, operation graph, engine heuristics mode A, engine
// config, execution plan) once in the constructor, and executed with a variant
// pack per call. Every cuDNN call is checked (SHARDTRAIN_CUDNN_CHECK: call,
// file:line, rank, cuDNN's text); every descriptor is destroyed (RAII).
//
// Layouts are those of kernels/cuda/attention.cuh: qkv (B, T, 3C) = [q | k | v],
// out (B, T, C), head h at channels [h*D, (h+1)*D); dqkv is packed like qkv.
// Unlike attention.cuh, the forward saves no (B, H, T, T) probabilities: it
// writes stats (B, H, T) fp32 = max + log(sum exp) of each scaled, masked score
// row, and backward recomputes the probabilities from q, k and stats (flash
// attention). forward OVERWRITES out and stats, backward OVERWRITES dqkv.
// Only __half and __nv_bfloat16 storage (cuDNN's flash engines take no fp32);
// the type must match the shape's dtype. Pointers must be 16-byte aligned
// (cudaMalloc's are); workspace must hold workspace_bytes() bytes, start
// 256-byte aligned, and is scratch valid only during one call: its contents on
// entry do not matter. Its layout: the graph's prefix (backward: the fp32 dQ
// accumulator (B,H,T,D), then the stored fp32 softmax_sum = rowsum(dO*O)
// (B,H,T,1); the forward has none), then the plan's own workspace.
// Each call sets the handle's stream to `stream` and does all its device work on
// it (backward: a cudaMemsetAsync zeroing the dQ accumulator, then the graph);
// no device allocation, no synchronization (each call builds a small host-side
// variant-pack descriptor). The constructor refuses a cuDNN library older than
// cudnn::kMinCudnnVersion (9.15.1).
// Its device test (gpu_cudnn_sdpa) passed on an H100 on 2026-11-28; the trainer
// does not use it yet (share/doc/gpu.md).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cuda/cudnn_graph.hpp"

namespace shardtrain::cuda {

// The cuDNN SDPA dtype for a storage type.
template <class T>
constexpr cudnn::DataType cudnn_sdpa_dtype();
template <>
constexpr cudnn::DataType cudnn_sdpa_dtype<__half>() { return cudnn::DataType::Half; }
template <>
constexpr cudnn::DataType cudnn_sdpa_dtype<__nv_bfloat16>() { return cudnn::DataType::BFloat16; }

class CudnnSdpa {
 public:
  // Builds and validates both graphs (the backward one only if shape.training),
  // then one execution plan per graph: the first engine config of heuristics
  // mode A that finalizes. Throws shardtrain::Error if a graph is invalid or no
  // engine takes it (the message then carries the graph's describe()).
  CudnnSdpa(cudnnHandle_t handle, const cudnn::SdpaShape& shape);
  ~CudnnSdpa();
  CudnnSdpa(const CudnnSdpa&) = delete;
  CudnnSdpa& operator=(const CudnnSdpa&) = delete;

  const cudnn::SdpaShape& shape() const { return m_shape; }
  const cudnn::SdpaGraph& forward_graph() const;
  const cudnn::SdpaGraph& backward_graph() const;  // throws unless shape.training

  // Bytes of workspace that forward and backward need (the larger of the two):
  // the graph's prefix (backward: B*H*T floats for softmax_sum, rounded up to
  // 256 bytes) plus that plan's own workspace.
  std::size_t workspace_bytes() const;

  // out (B,T,C) = attention(qkv (B,T,3C)); stats (B,H,T) fp32, may be nullptr
  // only when !shape.training.
  template <class T>
  void forward(cudaStream_t stream, const T* qkv, T* out, float* stats, void* workspace) const;

  // dqkv (B,T,3C) from qkv, the forward's out and stats, and dout (B,T,C).
  template <class T>
  void backward(cudaStream_t stream, const T* qkv, const T* out, const T* dout, const float* stats,
                T* dqkv, void* workspace) const;

 private:
  struct Plan;  // descriptors of one graph (cudnn_sdpa.cpp)
  static std::unique_ptr<Plan> build_plan(cudnnHandle_t handle, cudnn::SdpaGraph graph);
  void execute(const Plan& plan, cudaStream_t stream, const void* const* buffers,
               void* workspace) const;

  cudnnHandle_t m_handle = nullptr;
  cudnn::SdpaShape m_shape;
  std::unique_ptr<Plan> m_forward;
  std::unique_ptr<Plan> m_backward;
};

#define SHARDTRAIN_CUDA_DECLARE_CUDNN_SDPA(T)                                                \
  extern template void CudnnSdpa::forward<T>(cudaStream_t, const T*, T*, float*, void*) const; \
  extern template void CudnnSdpa::backward<T>(cudaStream_t, const T*, const T*, const T*,     \
                                              const float*, T*, void*) const;
SHARDTRAIN_CUDA_DECLARE_CUDNN_SDPA(__half)
SHARDTRAIN_CUDA_DECLARE_CUDNN_SDPA(__nv_bfloat16)
#undef SHARDTRAIN_CUDA_DECLARE_CUDNN_SDPA

}  // namespace shardtrain::cuda
