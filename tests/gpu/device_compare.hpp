// tests/gpu/device_compare.hpp
// What the device-against-host kernel tests share (gemm, encoder, pointwise and
// CNN kernel tests): the host type and tolerances of each device storage type,
// NaN-filled outputs, the relative L2 error and its EXPECT_REL report, the
// (host, device) storage type pairs, a fixture base with a stream and a cuBLAS
// handle, and the SetUp check that fails (never skips) without a device.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "core/cuda_check.hpp"
#include "device_buffer.hpp"
#include "kernels/cuda/vector_reduce.cuh"
#include "core/half.hpp"

namespace shardtrain::test {

// Device storage type D -> host kernel type and the relative L2 bounds of
// GEMM-based ops (tol) and attention (attention_tol) against the host kernels.
template <class D>
struct Host;
template <>
struct Host<float> {
  using type = float;
  static constexpr double tol = 1e-5, attention_tol = 5e-5;
};
template <>
struct Host<__half> {
  using type = f16;
  static constexpr double tol = 1e-2, attention_tol = 1e-2;
};
template <>
struct Host<__nv_bfloat16> {
  using type = bf16;
  static constexpr double tol = 2e-2, attention_tol = 2e-2;
};
static_assert(sizeof(f16) == sizeof(__half) && sizeof(bf16) == sizeof(__nv_bfloat16));

// (host storage type, device storage type) pairs of the typed tests.
template <class H, class D>
struct TypePair {
  using Host = H;  // shardtrain storage type of the host kernels
  using Dev = D;   // CUDA storage type of kernels/cuda
};
using StorageTypes = ::testing::Types<TypePair<float, float>, TypePair<f16, __half>, TypePair<bf16, __nv_bfloat16>>;

template <class H>
std::vector<H> nan_values(std::size_t n) {
  return std::vector<H>(n, from_float<H>(std::numeric_limits<float>::quiet_NaN()));
}

// ||got - want|| / ||want|| over [begin, end) (the absolute norm when want is 0);
// a NaN in got gives NaN, which fails EXPECT_LE.
template <class H>
double rel_l2(const std::vector<H>& got, const std::vector<H>& want, std::size_t begin = 0,
              std::size_t end = std::size_t(-1)) {
  if (end > want.size()) end = want.size();
  double num = 0.0, den = 0.0;
  for (std::size_t i = begin; i < end; ++i) {
    const double g = to_float(got[i]), w = to_float(want[i]);
    num += (g - w) * (g - w);
    den += w * w;
  }
  return den == 0.0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Index of the first NaN or inf among the n elements of device array x (-1:
// none), by kernels/cuda/vector_reduce's scan on `stream`: proves a large output
// (NaN-prefilled) was written everywhere without copying it to the host.
template <class D>
std::int64_t first_non_finite_on_device(const D* x, std::int64_t n, cudaStream_t stream) {
  DeviceBuffer<unsigned long long> first(1);  // poisoned: every bit set = ~0ull, "none yet"
  cuda::first_non_finite(x, n, first.data(), stream);
  SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream));
  const unsigned long long got = first.download()[0];
  return got == ~0ull ? -1 : static_cast<std::int64_t>(got);
}

// Indices of `count` rows of a matrix of n rows spread over it, always with the
// first two and the last two (where 32-bit offset overflow would show first).
inline std::vector<std::size_t> sample_rows(std::size_t n, std::size_t count) {
  std::vector<std::size_t> rows;
  for (std::size_t r : {std::size_t{0}, std::size_t{1}}) if (r < n) rows.push_back(r);
  const std::size_t step = count > 4 ? n / (count - 3) : n;
  for (std::size_t r = step | 1; r + 2 < n && rows.size() + 2 < count; r += step) rows.push_back(r);
  for (std::size_t r : {n - 2, n - 1}) if (n >= 4) rows.push_back(r);
  return rows;
}

#define EXPECT_REL(got, want, tol, what)                                                     \
  do {                                                                                       \
    const double e_ = ::shardtrain::test::rel_l2(got, want);                                 \
    std::printf("[gpu-error] %s: %.3e (bound %.1e)\n", std::string(what).c_str(), e_, tol); \
    EXPECT_LE(e_, tol) << what;                                                              \
  } while (0)

// In a fixture's SetUp: the test fails without a CUDA device (gpu tests never skip).
#define ASSERT_CUDA_DEVICE()                                                                  \
  ASSERT_EQ(::shardtrain::test::device_problem(), std::string())                              \
      << "the gpu tests need a CUDA device"

// A fixture with one non-blocking stream (as the trainer's compute stream: it
// does not wait for the legacy default stream, so a test sees the stream bugs
// the trainer would have) and a cuBLAS handle (none when with_cublas is false),
// made after the device check.
class StreamTest : public ::testing::Test {
 protected:
  explicit StreamTest(bool with_cublas = true) : m_with_cublas(with_cublas) {}
  void SetUp() override {
    ASSERT_CUDA_DEVICE();
    SHARDTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
    if (m_with_cublas) SHARDTRAIN_CUBLAS_CHECK(cublasCreate(&m_handle));
  }
  void TearDown() override {
    if (m_handle != nullptr) cublasDestroy(m_handle);
    if (m_stream != nullptr) cudaStreamDestroy(m_stream);
  }
  void sync() { SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(m_stream)); }

  cudaStream_t m_stream = nullptr;
  cublasHandle_t m_handle = nullptr;

 private:
  bool m_with_cublas;
};

}  // namespace shardtrain::test
