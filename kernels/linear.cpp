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
//  - backward checks dx and db before it writes anything.
//  - T = f16 / bf16 (half_tiles.hpp): blocks of kGemmRows rows of x by kGemmCols
//    rows of w, each converted to fp32 with the whole K; linear_forward<float> /
//    gemm<float> / linear_backward<float> run on the blocks. Forward converts x once
//    per row block and w once per block pair (once per call when one block covers
//    w); with accumulate the y block is loaded, added to in fp32 and rounded once.
//    Backward runs two passes over the blocks: dx row block = sum over w blocks in
//    fp32, rounded once; then per block of w rows, an fp32 accumulator loaded from
//    dw (and db) collects dy^T x (and the column sums of dy) from every row block
//    and is rounded back once. Scratch: linear_half_scratch_elems.
#include "kernels/linear.hpp"

#include <algorithm>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "kernels/gemm.hpp"
#include "kernels/cpu_compute.hpp"
#include "kernels/dnnl_context.hpp"
#include "kernels/dnnl_matmul.hpp"
#include "kernels/half_tiles.hpp"
#include "kernels/vec_math.hpp"

namespace shardtrain {
namespace {

const std::string kLabelBias = "Linear::forward_bias";
const std::string kLabelBiasGrad = "Linear::backward_bias";

constexpr std::int64_t kColBlock = 64;  // columns per work item of the db reduction

std::string dims(const char* name, std::size_t r, std::size_t c) {
  return std::string(name) + "(" + std::to_string(r) + "," + std::to_string(c) + ")";
}

// Block geometry of the 16-bit path: `rows` rows of x by `cols` rows of w, each with
// the whole inner dimension k. The scratch holds one w block (or dw accumulator),
// one x block (or dx block), one (rows, cols) block of y / dy and cols bias floats.
struct HalfLinearBlocks {
  std::int64_t rows, cols, k;
  std::int64_t elems() const { return (rows + cols) * k + rows * cols + cols; }
};

HalfLinearBlocks half_linear_blocks(std::int64_t n, std::int64_t k, std::int64_t m) {
  return {half_tiles::min(n, half_tiles::kGemmRows), half_tiles::min(m, half_tiles::kGemmCols),
          k};
}

// Shapes checked by linear_forward.
template <class H>
void linear_forward_half(CView2<H> x, CView2<H> w, CView1<H> b, View2<H> y, bool accumulate) {
  using namespace half_tiles;
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  const std::int64_t k = static_cast<std::int64_t>(x.extent(1));
  const std::int64_t m = static_cast<std::int64_t>(w.extent(0));
  if (n == 0 || m == 0) return;
  check_host("linear_forward");
  const HalfLinearBlocks blk = half_linear_blocks(n, k, m);
  Scratch scratch(blk.elems(), "linear_forward");
  float* wt = scratch.take(blk.cols * k);
  float* xt = scratch.take(blk.rows * k);
  float* yt = scratch.take(blk.rows * blk.cols);
  float* bt = scratch.take(blk.cols);
  const bool has_bias = b.extent(0) != 0;
  const bool one_w_block = m <= blk.cols;
  for (std::int64_t i0 = 0; i0 < n; i0 += blk.rows) {
    const std::int64_t nr = min(blk.rows, n - i0);
    to_f32(x.data() + i0 * k, xt, nr * k);
    for (std::int64_t j0 = 0; j0 < m; j0 += blk.cols) {
      const std::int64_t nc = min(blk.cols, m - j0);
      if (i0 == 0 || !one_w_block) {
        to_f32(w.data() + j0 * k, wt, nc * k);
        if (has_bias) to_f32(b.data() + j0, bt, nc);
      }
      H* yb = y.data() + i0 * m + j0;
      if (accumulate) load_block(yb, m, nr, nc, yt);
      linear_forward<float>(CView2<float>(xt, nr, k), CView2<float>(wt, nc, k),
                            has_bias ? CView1<float>(bt, nc) : CView1<float>(),
                            View2<float>(yt, nr, nc), accumulate);
      store_block(yt, nr, nc, yb, m);
    }
  }
}

// Shapes (including dx and db) checked by linear_backward.
template <class H>
void linear_backward_half(CView2<H> x, CView2<H> w, CView2<H> dy, View2<H> dx, View2<H> dw,
                          View1<H> db, bool accumulate) {
  using namespace half_tiles;
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  const std::int64_t k = static_cast<std::int64_t>(x.extent(1));
  const std::int64_t m = static_cast<std::int64_t>(w.extent(0));
  if (n == 0) {  // dw, db += 0 (or = 0); dx is empty
    if (!accumulate) {
      for (std::size_t i = 0; i < dw.size(); ++i) dw.data()[i] = H(0.0f);
      for (std::size_t i = 0; i < db.size(); ++i) db.data()[i] = H(0.0f);
    }
    return;
  }
  if (m == 0) {        // dx = dy w is an empty sum; dw and db are empty
    H* dxp = dx.data();
    for (std::size_t i = 0; i < dx.size(); ++i) dxp[i] = H(0.0f);
    return;
  }
  check_host("linear_backward");
  const HalfLinearBlocks blk = half_linear_blocks(n, k, m);
  Scratch scratch(blk.elems(), "linear_backward");
  float* wt = scratch.take(blk.cols * k);  // w block (dx pass), dw accumulator (dw pass)
  float* xt = scratch.take(blk.rows * k);  // dx block (dx pass), x block (dw pass)
  float* dyt = scratch.take(blk.rows * blk.cols);
  float* bt = scratch.take(blk.cols);      // db accumulator

  // dx = dy w: per row block, summed over the w blocks in fp32, rounded once.
  if (dx.size() != 0) {
    const bool one_w_block = m <= blk.cols;
    for (std::int64_t i0 = 0; i0 < n; i0 += blk.rows) {
      const std::int64_t nr = min(blk.rows, n - i0);
      for (std::int64_t j0 = 0; j0 < m; j0 += blk.cols) {
        const std::int64_t nc = min(blk.cols, m - j0);
        if (i0 == 0 || !one_w_block) to_f32(w.data() + j0 * k, wt, nc * k);
        load_block(dy.data() + i0 * m + j0, m, nr, nc, dyt);
        gemm<float>(Trans::N, Trans::N, 1.0f, CView2<float>(dyt, nr, nc), CView2<float>(wt, nc, k),
                    j0 == 0 ? 0.0f : 1.0f, View2<float>(xt, nr, k));
      }
      from_f32(xt, dx.data() + i0 * k, nr * k);
    }
  }
  // dw += dy^T x, db += column sums of dy: per block of w rows, an fp32 accumulator
  // loaded from dw / db (zeros when overwriting) collects every row block, then is
  // rounded back once.
  const bool has_db = db.extent(0) != 0;
  const bool one_x_block = n <= blk.rows;
  for (std::int64_t j0 = 0; j0 < m; j0 += blk.cols) {
    const std::int64_t nc = min(blk.cols, m - j0);
    if (accumulate) {
      to_f32(dw.data() + j0 * k, wt, nc * k);
      if (has_db) to_f32(db.data() + j0, bt, nc);
    } else {
      std::fill(wt, wt + nc * k, 0.0f);
      if (has_db) std::fill(bt, bt + nc, 0.0f);
    }
    for (std::int64_t i0 = 0; i0 < n; i0 += blk.rows) {
      const std::int64_t nr = min(blk.rows, n - i0);
      if (j0 == 0 || !one_x_block) to_f32(x.data() + i0 * k, xt, nr * k);
      load_block(dy.data() + i0 * m + j0, m, nr, nc, dyt);
      // With dx empty, linear_backward uses w only for its shape: a null view of it.
      linear_backward<float>(CView2<float>(xt, nr, k), CView2<float>(nullptr, nc, k),
                             CView2<float>(dyt, nr, nc), View2<float>(), View2<float>(wt, nc, k),
                             has_db ? View1<float>(bt, nc) : View1<float>());
    }
    from_f32(wt, dw.data() + j0 * k, nc * k);
    if (has_db) from_f32(bt, db.data() + j0, nc);
  }
}


// One block of columns [j0, j0 + nj). Cloned (core/vectorize.hpp), so that the
// widening adds run in AVX-512 / AVX2 vectors across the columns; every column is
// still its own sum in row order, so every clone gives the same bits.
template <class T>
SHARDTRAIN_TARGET_CLONES
void column_sums_block(const T* __restrict dyp, std::int64_t n, std::int64_t m, std::int64_t j0, std::int64_t nj,
                       T* __restrict dbp, bool accumulate) {
  using C = compute_t<T>;
  C acc[kColBlock];
  for (std::int64_t j = 0; j < nj; ++j) acc[j] = C(0);
  for (std::int64_t i = 0; i < n; ++i) {
    const T* row = dyp + i * m + j0;
    for (std::int64_t j = 0; j < nj; ++j) acc[j] += vec::widen(row[j]);
  }
  if (accumulate) {
    for (std::int64_t j = 0; j < nj; ++j) dbp[j0 + j] = vec::narrow<T>(vec::widen(dbp[j0 + j]) + acc[j]);
  } else {
    for (std::int64_t j = 0; j < nj; ++j) dbp[j0 + j] = vec::narrow<T>(acc[j]);
  }
}

// db(m) += column sums of dy(n, m) (db = them when !accumulate): per block of kColBlock columns, fp32
// accumulators over the rows in row order (deterministic, independent of the
// thread count), added to db and rounded once.
template <class T>
void add_column_sums(const T* dyp, std::int64_t n, std::int64_t m, T* dbp, bool accumulate) {
  const std::int64_t blocks = (m + kColBlock - 1) / kColBlock;
  Kokkos::parallel_for(kLabelBiasGrad, range(blocks), KOKKOS_LAMBDA(const std::int64_t blk) {
    const std::int64_t j0 = blk * kColBlock;
    const std::int64_t nj = (m - j0) < kColBlock ? (m - j0) : kColBlock;
    column_sums_block(dyp, n, m, j0, nj, dbp, accumulate);
  });
}

// The oneDNN paths (T = float, or bf16 on a CPU with native bf16). Shapes are
// checked and n, k, m > 0. Every product is one matmul on the caller's buffers.
template <class T>
MatmulShape linear_matmul(std::int64_t m, std::int64_t n, std::int64_t k) {
  MatmulShape s;
  s.m = m;
  s.n = n;
  s.k = k;
  s.ab = s.c = dnnl_type<T>();
  return s;
}

template <class T>
void linear_forward_dnnl(CView2<T> x, CView2<T> w, CView1<T> b, View2<T> y, bool accumulate) {
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  const std::int64_t k = static_cast<std::int64_t>(x.extent(1));
  const std::int64_t m = static_cast<std::int64_t>(w.extent(0));
  // y (n x m) = x (n x k) w^T (w stored m x k) + b, + y when accumulating.
  MatmulShape s = linear_matmul<T>(n, m, k);
  s.trans_b = true;
  s.lda = k;
  s.ldb = k;
  s.ldc = m;
  s.bias = b.extent(0) != 0;
  s.beta = accumulate ? 1.0f : 0.0f;
  dnnl_matmul(s, x.data(), w.data(), s.bias ? b.data() : nullptr, y.data(), "linear_forward");
}

template <class T>
void linear_backward_dnnl(CView2<T> x, CView2<T> w, CView2<T> dy, View2<T> dx, View2<T> dw, View1<T> db,
                          bool accumulate) {
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0));
  const std::int64_t k = static_cast<std::int64_t>(x.extent(1));
  const std::int64_t m = static_cast<std::int64_t>(w.extent(0));
  if (dx.size() != 0) {  // dx (n x k) = dy (n x m) w (m x k)
    MatmulShape s = linear_matmul<T>(n, k, m);
    s.lda = m;
    s.ldb = k;
    s.ldc = k;
    dnnl_matmul(s, dy.data(), w.data(), nullptr, dx.data(), "linear_backward (dx)");
  }
  // dw (m x k) (+)= dy^T (dy stored n x m) x (n x k)
  MatmulShape s = linear_matmul<T>(m, k, n);
  s.trans_a = true;
  s.lda = m;
  s.ldb = k;
  s.ldc = k;
  s.beta = accumulate ? 1.0f : 0.0f;
  dnnl_matmul(s, dy.data(), x.data(), nullptr, dw.data(), "linear_backward (dw)");
  if (db.extent(0) != 0) add_column_sums<T>(dy.data(), n, m, db.data(), accumulate);
}

template <class T>
bool use_dnnl(std::int64_t n, std::int64_t k, std::int64_t m) {
  if (n == 0 || k == 0 || m == 0) return false;  // degenerate: the plain paths below
  if constexpr (std::is_same_v<T, float>) return true;
  else if constexpr (std::is_same_v<T, bf16>) return cpu_bf16_native();
  else return false;
}

}  // namespace

std::int64_t linear_half_scratch_elems(std::int64_t n, std::int64_t k, std::int64_t m) {
  if (n <= 0 || m <= 0) return 0;
  return half_linear_blocks(n, k, m).elems();
}

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
  if (use_dnnl<T>(n, static_cast<std::int64_t>(x.extent(1)), m)) {
    half_tiles::check_host("linear_forward");
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bf16>) linear_forward_dnnl<T>(x, w, b, y, accumulate);
  } else if constexpr (is_half_v<T>) {
    linear_forward_half(x, w, b, y, accumulate);
  } else {
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
}

template <class T>
void linear_backward(CView2<T> x, CView2<T> w, CView2<T> dy, View2<T> dx, View2<T> dw,
                     View1<T> db, bool accumulate) {
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
  SHARDTRAIN_CHECK(dx.size() == 0 || (dx.extent(0) == x.extent(0) && dx.extent(1) == x.extent(1)),
                   "linear_backward: " + dims("dx", dx.extent(0), dx.extent(1)) +
                       " does not match " + dims("x", x.extent(0), x.extent(1)));
  SHARDTRAIN_CHECK(db.extent(0) == 0 || static_cast<std::int64_t>(db.extent(0)) == m,
                   "linear_backward: db has " + std::to_string(db.extent(0)) +
                       " elements, expected " + std::to_string(m));
  if (use_dnnl<T>(n, static_cast<std::int64_t>(x.extent(1)), m)) {
    half_tiles::check_host("linear_backward");
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bf16>) linear_backward_dnnl<T>(x, w, dy, dx, dw, db, accumulate);
  } else if constexpr (is_half_v<T>) {
    linear_backward_half(x, w, dy, dx, dw, db, accumulate);
  } else {
    if (dx.size() != 0) gemm<T>(Trans::N, Trans::N, T(1), dy, w, T(0), dx);  // dx = dy w
    gemm<T>(Trans::T, Trans::N, T(1), dy, x, accumulate ? T(1) : T(0), dw);  // dw (+)= dy^T x
    if (db.extent(0) != 0) add_column_sums<T>(dy.data(), n, m, db.data(), accumulate);
  }
}

#define SHARDTRAIN_INSTANTIATE_LINEAR(T)                                                  \
  template void linear_forward<T>(CView2<T>, CView2<T>, CView1<T>, View2<T>, bool);      \
  template void linear_backward<T>(CView2<T>, CView2<T>, CView2<T>, View2<T>, View2<T>, \
                                   View1<T>, bool);
SHARDTRAIN_INSTANTIATE_LINEAR(float)
SHARDTRAIN_INSTANTIATE_LINEAR(double)
SHARDTRAIN_INSTANTIATE_LINEAR(f16)
SHARDTRAIN_INSTANTIATE_LINEAR(bf16)
#undef SHARDTRAIN_INSTANTIATE_LINEAR

}  // namespace shardtrain
