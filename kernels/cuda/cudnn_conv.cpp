// CudnnConv2d (see cudnn_conv.cuh): cuDNN's legacy convolution API with
// deterministic algorithms picked by its heuristics, one convolution descriptor
// per pass carrying its algorithm's math type; the bias by our own kernels
// (conv_bias.cuh).
#include "kernels/cuda/cudnn_conv.cuh"

#include <algorithm>
#include <climits>
#include <utility>
#include <string>
#include <type_traits>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "kernels/cuda/conv_bias.cuh"

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

// The first heuristic result that succeeded, is deterministic when asked, and --
// for fp32 storage -- runs on plain FMA math (no TF32 tensor cores).
template <class Perf>
const Perf* choose(const Perf* perf, int found, bool fp32, bool need_deterministic) {
  const Perf* p = std::find_if(perf, perf + found, [&](const Perf& r) {
    return r.status == CUDNN_STATUS_SUCCESS && (!need_deterministic || r.determinism == CUDNN_DETERMINISTIC) &&
           (!fp32 || r.mathType == CUDNN_FMA_MATH);
  });
  return p != perf + found ? p : nullptr;
}

}  // namespace

template <class T>
CudnnConv2d<T>::CudnnConv2d(cudnnHandle_t handle, const ConvShape& s) : m_handle(handle), m_shape(s) {
  SHARDTRAIN_CHECK(s.padding >= 0 && s.stride >= 1 && s.out_h() >= 1 && s.out_w() >= 1,
                   "conv2d: the kernel does not fit the padded input");
  // The legacy API describes tensors with int dimensions and strides (and cuDNN
  // refuses more than 2^31 - 1 elements in one): checked here, with a message,
  // before any descriptor is made.
  for (const auto& [what, elems] :
       {std::pair<const char*, std::int64_t>{"x", s.batch * s.in_channels * s.height * s.width},
        {"y", s.batch * s.out_channels * s.out_h() * s.out_w()},
        {"w", s.out_channels * s.in_channels * s.kernel_h * s.kernel_w}})
    SHARDTRAIN_CHECK(elems <= INT32_MAX, std::string("conv2d: ") + what + " has " + std::to_string(elems) +
                                             " elements, more than cuDNN's legacy API takes (2^31 - 1): "
                                             "split the batch");
  constexpr cudnnDataType_t t = data_type<T>();
  constexpr bool fp32 = std::is_same_v<T, float>;
  try {
    SHARDTRAIN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&m_x));
    SHARDTRAIN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&m_y));
    SHARDTRAIN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&m_w));
    for (auto& c : m_conv) SHARDTRAIN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&c));
    set_tensor(m_x, t, s.batch, s.in_channels, s.height, s.width);
    set_tensor(m_y, t, s.batch, s.out_channels, s.out_h(), s.out_w());
    SHARDTRAIN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(m_w, t, CUDNN_TENSOR_NCHW, to_int(s.out_channels, "out_channels"),
                                                      to_int(s.in_channels, "in_channels"),
                                                      to_int(s.kernel_h, "kernel_h"), to_int(s.kernel_w, "kernel_w")));
    const int pad = static_cast<int>(s.padding), stride = to_int(s.stride, "stride");
    // One descriptor per pass, so each carries the math type of its own algorithm.
    // Cross-correlation (what deep-learning frameworks call convolution), fp32
    // compute. The heuristics are asked with the math type we allow (fp32: FMA
    // only, no TF32; 16-bit: tensor cores), then the descriptor is set to the
    // math type the chosen algorithm was reported with: cuDNN picks the kernel
    // from the algorithm AND the descriptor's math type.
    for (auto c : m_conv) {
      SHARDTRAIN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(c, pad, pad, stride, stride, 1, 1,
                                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
      SHARDTRAIN_CUDNN_CHECK(cudnnSetConvolutionMathType(c, fp32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
    }
    cudnnConvolutionDescriptor_t cf = m_conv[kForward], cd = m_conv[kBackwardData], cw = m_conv[kBackwardFilter];

    constexpr int kMax = 16;
    int found = 0;
    std::size_t bytes = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[kMax];
    SHARDTRAIN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, m_x, m_w, cf, m_y, kMax, &found, fwd));
    const auto* f = choose(fwd, found, fp32, false);
    SHARDTRAIN_CHECK(f != nullptr, std::string("conv2d: cuDNN offers no forward algorithm for this shape and type") +
                                       (fp32 ? " with FMA math (no TF32)" : ""));
    m_fwd = f->algo;
    m_math[kForward] = f->mathType;
    SHARDTRAIN_CUDNN_CHECK(cudnnSetConvolutionMathType(cf, f->mathType));
    SHARDTRAIN_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(handle, m_x, m_w, cf, m_y, m_fwd, &bytes));
    m_workspace_bytes = std::max(m_workspace_bytes, bytes);

    cudnnConvolutionBwdDataAlgoPerf_t bd[kMax];
    SHARDTRAIN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, m_w, m_y, cd, m_x, kMax, &found, bd));
    const auto* d = choose(bd, found, fp32, true);
    SHARDTRAIN_CHECK(d != nullptr, std::string("conv2d: cuDNN offers no deterministic backward-data algorithm") +
                                       (fp32 ? " with FMA math (no TF32)" : ""));
    m_bwd_data = d->algo;
    m_math[kBackwardData] = d->mathType;
    SHARDTRAIN_CUDNN_CHECK(cudnnSetConvolutionMathType(cd, d->mathType));
    SHARDTRAIN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(handle, m_w, m_y, cd, m_x, m_bwd_data, &bytes));
    m_workspace_bytes = std::max(m_workspace_bytes, bytes);

    cudnnConvolutionBwdFilterAlgoPerf_t bf[kMax];
    SHARDTRAIN_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, m_x, m_y, cw, m_w, kMax, &found, bf));
    const auto* g = choose(bf, found, fp32, true);
    SHARDTRAIN_CHECK(g != nullptr, std::string("conv2d: cuDNN offers no deterministic backward-filter algorithm") +
                                       (fp32 ? " with FMA math (no TF32)" : ""));
    m_bwd_filter = g->algo;
    m_math[kBackwardFilter] = g->mathType;
    SHARDTRAIN_CUDNN_CHECK(cudnnSetConvolutionMathType(cw, g->mathType));
    SHARDTRAIN_CUDNN_CHECK(
        cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, m_x, m_y, cw, m_w, m_bwd_filter, &bytes));
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
  for (auto& c : m_conv) {
    if (c) cudnnDestroyConvolutionDescriptor(c);
    c = nullptr;
  }
  if (m_w) cudnnDestroyFilterDescriptor(m_w);
  if (m_y) cudnnDestroyTensorDescriptor(m_y);
  if (m_x) cudnnDestroyTensorDescriptor(m_x);
  m_w = nullptr;
  m_y = m_x = nullptr;
}

template <class T>
cudnnMathType_t CudnnConv2d<T>::descriptor_math_type(ConvPass pass) const {
  cudnnMathType_t m{};
  SHARDTRAIN_CUDNN_CHECK(cudnnGetConvolutionMathType(m_conv[static_cast<int>(pass)], &m));
  return m;
}

template <class T>
void CudnnConv2d<T>::forward(cudaStream_t stream, const T* x, const T* w, const T* b, T* y, void* ws) const {
  const float one = 1.0f, zero = 0.0f;
  SHARDTRAIN_CUDNN_CHECK(cudnnSetStream(m_handle, stream));
  SHARDTRAIN_CUDNN_CHECK(cudnnConvolutionForward(m_handle, &one, m_x, x, m_w, w, m_conv[kForward], m_fwd, ws,
                                                 m_workspace_bytes, &zero, m_y, y));
  if (b) conv_bias_forward(b, y, m_shape.batch, m_shape.out_channels, m_shape.out_h() * m_shape.out_w(), stream);
}

template <class T>
void CudnnConv2d<T>::backward(cudaStream_t stream, const T* x, const T* w, const T* dy, T* dx, T* dw, T* db,
                              void* ws) const {
  const float one = 1.0f, zero = 0.0f;
  SHARDTRAIN_CUDNN_CHECK(cudnnSetStream(m_handle, stream));
  if (dx)
    SHARDTRAIN_CUDNN_CHECK(cudnnConvolutionBackwardData(m_handle, &one, m_w, w, m_y, dy, m_conv[kBackwardData],
                                                        m_bwd_data, ws, m_workspace_bytes, &zero, m_x, dx));
  SHARDTRAIN_CUDNN_CHECK(cudnnConvolutionBackwardFilter(m_handle, &one, m_x, x, m_y, dy, m_conv[kBackwardFilter],
                                                        m_bwd_filter, ws, m_workspace_bytes, &one, m_w, dw));
  if (db) conv_bias_backward(dy, db, m_shape.batch, m_shape.out_channels, m_shape.out_h() * m_shape.out_w(), stream);
}

template class CudnnConv2d<float>;
template class CudnnConv2d<__half>;
template class CudnnConv2d<__nv_bfloat16>;

}  // namespace shardtrain::cuda
