// shardtrain/kernels/linear.cpp
// Owns nn.Linear forward/backward on top of gemm (weight w is (M out, K in)).
// Invariants (see linear.hpp):
//  - forward OVERWRITES y, or ADDS to it when accumulate == true (fused residual);
//  - backward OVERWRITES dx and ACCUMULATES (+=) into dw and db;
//  - an empty b / dx / db (extent 0) means "no bias" / "skip";
//  - every GEMM is one BLAS call on the caller's contiguous buffers: no copies,
//    no allocation. The bias is added by a row pass before the GEMM (beta = 1),
//    which touches y once instead of twice.
//  - db is reduced over rows in row order per column (blocks of columns in
//    parallel), so results are deterministic and independent of the thread count.
#include "kernels/linear.hpp"

#include <string>

#include "core/error.hpp"
#include "kernels/gemm.hpp"

namespace shardtrain {
namespace {

const std::string kLabelBias = "Linear::forward_bias";
const std::string kLabelBiasGrad = "Linear::backward_bias";

constexpr std::int64_t kColBlock = 64;  // columns per work item of the db reduction

template <class... V>
bool contiguous(const V&... v) {
  return (v.span_is_contiguous() && ...);
}

std::string dims(const char* name, std::size_t r, std::size_t c) {
  return std::string(name) + "(" + std::to_string(r) + "," + std::to_string(c) + ")";
}

}  // namespace

template <class T>
void linear_forward(CView2<T> x, CView2<T> w, CView1<T> b, View2<T> y, bool accumulate) {
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  const std::int64_t m = static_cast<std::int64_t>(w.extent(0));
  SHARDTRAIN_CHECK(x.extent(1) == w.extent(1) && y.extent(0) == x.extent(0) &&
                       y.extent(1) == w.extent(0),
                   "linear_forward: " + dims("x", x.extent(0), x.extent(1)) + " " +
                       dims("w", w.extent(0), w.extent(1)) + " " +
                       dims("y", y.extent(0), y.extent(1)));
  SHARDTRAIN_CHECK(contiguous(x, w, b, y), "linear_forward: views must be contiguous");
  const bool has_bias = b.extent(0) != 0;
  SHARDTRAIN_CHECK(!has_bias || static_cast<std::int64_t>(b.extent(0)) == m,
                   "linear_forward: bias has " + std::to_string(b.extent(0)) +
                       " elements, expected " + std::to_string(m));
  T beta = accumulate ? T(1) : T(0);
  if (has_bias) {
    const T* bp = b.data();
    T* yp = y.data();
    const bool add = accumulate;
    Kokkos::parallel_for(kLabelBias, range(n), KOKKOS_LAMBDA(const std::int64_t i) {
      T* row = yp + i * m;
      if (add) {
        for (std::int64_t j = 0; j < m; ++j) row[j] += bp[j];
      } else {
        for (std::int64_t j = 0; j < m; ++j) row[j] = bp[j];
      }
    });
    beta = T(1);
  }
  gemm<T>(Trans::N, Trans::T, T(1), x, w, beta, y);
}

template <class T>
void linear_backward(CView2<T> x, CView2<T> w, CView2<T> dy, View2<T> dx, View2<T> dw,
                     View1<T> db) {
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  const std::int64_t m = static_cast<std::int64_t>(w.extent(0));
  SHARDTRAIN_CHECK(x.extent(1) == w.extent(1) && dy.extent(0) == x.extent(0) &&
                       dy.extent(1) == w.extent(0) && dw.extent(0) == w.extent(0) &&
                       dw.extent(1) == w.extent(1),
                   "linear_backward: " + dims("x", x.extent(0), x.extent(1)) + " " +
                       dims("w", w.extent(0), w.extent(1)) + " " +
                       dims("dy", dy.extent(0), dy.extent(1)) + " " +
                       dims("dw", dw.extent(0), dw.extent(1)));
  SHARDTRAIN_CHECK(contiguous(x, w, dy, dx, dw, db), "linear_backward: views must be contiguous");
  if (dx.size() != 0) {
    SHARDTRAIN_CHECK(dx.extent(0) == x.extent(0) && dx.extent(1) == x.extent(1),
                     "linear_backward: " + dims("dx", dx.extent(0), dx.extent(1)) +
                         " does not match " + dims("x", x.extent(0), x.extent(1)));
    gemm<T>(Trans::N, Trans::N, T(1), dy, w, T(0), dx);  // dx = dy w
  }
  gemm<T>(Trans::T, Trans::N, T(1), dy, x, T(1), dw);  // dw += dy^T x
  if (db.extent(0) != 0) {
    SHARDTRAIN_CHECK(static_cast<std::int64_t>(db.extent(0)) == m,
                     "linear_backward: db has " + std::to_string(db.extent(0)) +
                         " elements, expected " + std::to_string(m));
    const T* dyp = dy.data();
    T* dbp = db.data();
    const std::int64_t blocks = (m + kColBlock - 1) / kColBlock;
    Kokkos::parallel_for(kLabelBiasGrad, range(blocks), KOKKOS_LAMBDA(const std::int64_t blk) {
      const std::int64_t j0 = blk * kColBlock;
      const std::int64_t nj = (m - j0) < kColBlock ? (m - j0) : kColBlock;
      T acc[kColBlock];
      for (std::int64_t j = 0; j < nj; ++j) acc[j] = T(0);
      for (std::int64_t i = 0; i < n; ++i) {
        const T* row = dyp + i * m + j0;
        for (std::int64_t j = 0; j < nj; ++j) acc[j] += row[j];
      }
      for (std::int64_t j = 0; j < nj; ++j) dbp[j0 + j] += acc[j];
    });
  }
}

#define SHARDTRAIN_INSTANTIATE_LINEAR(T)                                                  \
  template void linear_forward<T>(CView2<T>, CView2<T>, CView1<T>, View2<T>, bool);      \
  template void linear_backward<T>(CView2<T>, CView2<T>, CView2<T>, View2<T>, View2<T>, \
                                   View1<T>);
SHARDTRAIN_INSTANTIATE_LINEAR(float)
SHARDTRAIN_INSTANTIATE_LINEAR(double)
#undef SHARDTRAIN_INSTANTIATE_LINEAR

}  // namespace shardtrain
