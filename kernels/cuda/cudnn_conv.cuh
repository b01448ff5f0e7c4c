// shardtrain/kernels/cuda/cudnn_conv.cuh
// 2-D convolution on the device through cuDNN (the CNN model's conv layers in
// the CUDA build; the host runs im2col + GEMM, kernels/conv2d). NCHW row-major,
// weights (OC, IC, KH, KW), optional bias (OC); square stride and zero padding.
// Semantics as the host kernel: forward OVERWRITES y = conv(x, w) + b; backward
// OVERWRITES dx (skipped when nullptr) and ACCUMULATES dw += and db += (beta = 1),
// so micro-batches add up.
// Algorithms are chosen once, in the constructor, by cuDNN's heuristics
// (cudnnGet*Algorithm_v7), keeping the first that succeeds and, for the two
// backward passes, is CUDNN_DETERMINISTIC: same inputs give bitwise the same
// gradients. Math: each pass has its own convolution descriptor, set to the
// math type its chosen algorithm was reported with (cudnnSetConvolutionMathType;
// cuDNN selects the kernel from the algorithm and that math type). fp32 storage
// asks for and accepts only CUDNN_FMA_MATH (no TF32: fp32 stays fp32); fp16/bf16
// storage asks for tensor cores (CUDNN_TENSOR_OP_MATH) with fp32 accumulation
// and takes what the heuristics report for the algorithm.
// Bias: added and reduced by our own kernels (conv_bias.cuh) for every type, not
// cuDNN's legacy cudnnAddTensor / cudnnConvolutionBackwardBias; the bias
// gradient is a deterministic fp32 reduction per channel.
// The legacy convolution API used here is marked deprecated in cuDNN 9 (it
// still ships; the graph API is the successor) -- see share/doc/gpu.md.
// Every cuDNN call is checked (SHARDTRAIN_CUDNN_CHECK: call, file, line, rank).
// NOT RUN: no machine here has a GPU; the device test is tests/gpu/cudnn_conv_test.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>

namespace shardtrain::cuda {

struct ConvShape {
  std::int64_t batch = 0, in_channels = 0, height = 0, width = 0;
  std::int64_t out_channels = 0, kernel_h = 0, kernel_w = 0, stride = 1, padding = 0;
  std::int64_t out_h() const { return (height + 2 * padding - kernel_h) / stride + 1; }
  std::int64_t out_w() const { return (width + 2 * padding - kernel_w) / stride + 1; }
};

enum class ConvPass { Forward = 0, BackwardData = 1, BackwardFilter = 2 };

template <class T>  // float, __half, __nv_bfloat16
class CudnnConv2d {
 public:
  // Builds the descriptors and picks the algorithms (needs the device of `handle`).
  CudnnConv2d(cudnnHandle_t handle, const ConvShape& shape);
  ~CudnnConv2d();
  CudnnConv2d(const CudnnConv2d&) = delete;
  CudnnConv2d& operator=(const CudnnConv2d&) = delete;

  // Device scratch the three passes need (the largest of them).
  std::size_t workspace_bytes() const { return m_workspace_bytes; }
  const ConvShape& shape() const { return m_shape; }
  // The math type cuDNN's heuristics reported for the algorithm chosen for
  // `pass`, and the one that pass's convolution descriptor holds (read back from
  // cuDNN): always the same.
  cudnnMathType_t chosen_math_type(ConvPass pass) const { return m_math[static_cast<int>(pass)]; }
  cudnnMathType_t descriptor_math_type(ConvPass pass) const;

  void forward(cudaStream_t stream, const T* x, const T* w, const T* b, T* y, void* workspace) const;
  void backward(cudaStream_t stream, const T* x, const T* w, const T* dy, T* dx, T* dw, T* db,
                void* workspace) const;

 private:
  void release() noexcept;
  cudnnHandle_t m_handle;
  ConvShape m_shape;
  static constexpr int kForward = 0, kBackwardData = 1, kBackwardFilter = 2;  // ConvPass
  cudnnTensorDescriptor_t m_x = nullptr, m_y = nullptr;
  cudnnFilterDescriptor_t m_w = nullptr;
  cudnnConvolutionDescriptor_t m_conv[3] = {nullptr, nullptr, nullptr};  // per pass
  cudnnMathType_t m_math[3] = {};
  cudnnConvolutionFwdAlgo_t m_fwd{};
  cudnnConvolutionBwdDataAlgo_t m_bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t m_bwd_filter{};
  std::size_t m_workspace_bytes = 0;
};

extern template class CudnnConv2d<float>;
extern template class CudnnConv2d<__half>;
extern template class CudnnConv2d<__nv_bfloat16>;

}  // namespace shardtrain::cuda
