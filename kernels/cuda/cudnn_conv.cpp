// CudnnConv2d (see cudnn_conv.cuh): cuDNN's legacy convolution API with
// deterministic algorithms picked by its heuristics.
#include "kernels/cuda/cudnn_conv.cuh"

#include <algorithm>
#include <string>
#include <type_traits>

#include "core/cuda_check.hpp"
#include "core/error.hpp"

namespace shardtrain::cuda {

namespace {

template <class T>
constexpr cudnnDataType_t data_type() {
  if constexpr (std::is_same_v<T, float>) return CUDNN_DATA_FLOAT;
  else if constexpr (std::is_same_v<T, __half>) return CUDNN_DATA_HALF;
  else return CUDNN_DATA_BFLOAT16;
}

int to_int(std::int64_t v, const char* what) {
  SHARDTRAIN_CHECK(v > 0 && v <= (std::int64_t{1} << 30), std::string("conv2d: ") + what + " out of range");
  return static_cast<int>(v);
}

void set_tensor(cudnnTensorDescriptor_t d, cudnnDataType_t t, std::int64_t n, std::int64_t c, std::int64_t h,
                std::int64_t w) {
  SHARDTRAIN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, t, to_int(n, "batch"),
                                                    to_int(c, "channels"), to_int(h, "height"), to_int(w, "width")));
}

}  // namespace

template <class T>
CudnnConv2d<T>::CudnnConv2d(cudnnHandle_t handle, const ConvShape& s) : m_handle(handle), m_shape(s) {
  SHARDTRAIN_CHECK(s.padding >= 0 && s.stride >= 1 && s.out_h() >= 1 && s.out_w() >= 1,
                   "conv2d: the kernel does not fit the padded input");
  constexpr cudnnDataType_t t = data_type<T>();
  try {
    SHARDTRAIN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&m_x));
    SHARDTRAIN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&m_y));
    SHARDTRAIN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&m_bias));
    SHARDTRAIN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&m_w));
    SHARDTRAIN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&m_conv));
    set_tensor(m_x, t, s.batch, s.in_channels, s.height, s.width);
    set_tensor(m_y, t, s.batch, s.out_channels, s.out_h(), s.out_w());
    set_tensor(m_bias, t, 1, s.out_channels, 1, 1);
    SHARDTRAIN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(m_w, t, CUDNN_TENSOR_NCHW, to_int(s.out_channels, "out_channels"),
                                                      to_int(s.in_channels, "in_channels"),
                                                      to_int(s.kernel_h, "kernel_h"), to_int(s.kernel_w, "kernel_w")));
    const int pad = static_cast<int>(s.padding), stride = to_int(s.stride, "stride");
    // Cross-correlation (what deep-learning frameworks call convolution), fp32 compute.
    SHARDTRAIN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(m_conv, pad, pad, stride, stride, 1, 1,
                                                           CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    SHARDTRAIN_CUDNN_CHECK(cudnnSetConvolutionMathType(
        m_conv, std::is_same_v<T, float> ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));

    constexpr int kMax = 16;
    int found = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[kMax];
    SHARDTRAIN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, m_x, m_w, m_conv, m_y, kMax, &found, fwd));
    const auto* f = std::find_if(fwd, fwd + found, [](const auto& p) { return p.status == CUDNN_STATUS_SUCCESS; });
    SHARDTRAIN_CHECK(f != fwd + found, "conv2d: cuDNN offers no forward algorithm for this shape and type");
    m_fwd = f->algo;
    std::size_t bytes = 0;
    SHARDTRAIN_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(handle, m_x, m_w, m_conv, m_y, m_fwd, &bytes));
    m_workspace_bytes = std::max(m_workspace_bytes, bytes);

    cudnnConvolutionBwdDataAlgoPerf_t bd[kMax];
    SHARDTRAIN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, m_w, m_y, m_conv, m_x, kMax, &found, bd));
    const auto* d = std::find_if(bd, bd + found, [](const auto& p) {
      return p.status == CUDNN_STATUS_SUCCESS && p.determinism == CUDNN_DETERMINISTIC;
    });
    SHARDTRAIN_CHECK(d != bd + found, "conv2d: cuDNN offers no deterministic backward-data algorithm");
    m_bwd_data = d->algo;
    SHARDTRAIN_CUDNN_CHECK(
        cudnnGetConvolutionBackwardDataWorkspaceSize(handle, m_w, m_y, m_conv, m_x, m_bwd_data, &bytes));
    m_workspace_bytes = std::max(m_workspace_bytes, bytes);

    cudnnConvolutionBwdFilterAlgoPerf_t bf[kMax];
    SHARDTRAIN_CUDNN_CHECK(
        cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, m_x, m_y, m_conv, m_w, kMax, &found, bf));
    const auto* g = std::find_if(bf, bf + found, [](const auto& p) {
      return p.status == CUDNN_STATUS_SUCCESS && p.determinism == CUDNN_DETERMINISTIC;
    });
    SHARDTRAIN_CHECK(g != bf + found, "conv2d: cuDNN offers no deterministic backward-filter algorithm");
    m_bwd_filter = g->algo;
    SHARDTRAIN_CUDNN_CHECK(
        cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, m_x, m_y, m_conv, m_w, m_bwd_filter, &bytes));
    m_workspace_bytes = std::max(m_workspace_bytes, bytes);
  } catch (...) {
    release();
    throw;
  }
}

template <class T>
CudnnConv2d<T>::~CudnnConv2d() { release(); }

template <class T>
void CudnnConv2d<T>::release() noexcept {
  // Destroy calls only fail on a null or invalid descriptor, which these are not.
  if (m_conv) cudnnDestroyConvolutionDescriptor(m_conv);
  if (m_w) cudnnDestroyFilterDescriptor(m_w);
  if (m_bias) cudnnDestroyTensorDescriptor(m_bias);
  if (m_y) cudnnDestroyTensorDescriptor(m_y);
  if (m_x) cudnnDestroyTensorDescriptor(m_x);
  m_conv = nullptr;
  m_w = nullptr;
  m_bias = m_y = m_x = nullptr;
}

template <class T>
void CudnnConv2d<T>::forward(cudaStream_t stream, const T* x, const T* w, const T* b, T* y, void* ws) const {
  const float one = 1.0f, zero = 0.0f;
  SHARDTRAIN_CUDNN_CHECK(cudnnSetStream(m_handle, stream));
  SHARDTRAIN_CUDNN_CHECK(cudnnConvolutionForward(m_handle, &one, m_x, x, m_w, w, m_conv, m_fwd, ws, m_workspace_bytes,
                                                 &zero, m_y, y));
  if (b) SHARDTRAIN_CUDNN_CHECK(cudnnAddTensor(m_handle, &one, m_bias, b, &one, m_y, y));
}

template <class T>
void CudnnConv2d<T>::backward(cudaStream_t stream, const T* x, const T* w, const T* dy, T* dx, T* dw, T* db,
                              void* ws) const {
  const float one = 1.0f, zero = 0.0f;
  SHARDTRAIN_CUDNN_CHECK(cudnnSetStream(m_handle, stream));
  if (dx)
    SHARDTRAIN_CUDNN_CHECK(cudnnConvolutionBackwardData(m_handle, &one, m_w, w, m_y, dy, m_conv, m_bwd_data, ws,
                                                        m_workspace_bytes, &zero, m_x, dx));
  SHARDTRAIN_CUDNN_CHECK(cudnnConvolutionBackwardFilter(m_handle, &one, m_x, x, m_y, dy, m_conv, m_bwd_filter, ws,
                                                        m_workspace_bytes, &one, m_w, dw));
  if (db) SHARDTRAIN_CUDNN_CHECK(cudnnConvolutionBackwardBias(m_handle, &one, m_y, dy, &one, m_bias, db));
}

template class CudnnConv2d<float>;
template class CudnnConv2d<__half>;
template class CudnnConv2d<__nv_bfloat16>;

}  // namespace shardtrain::cuda
