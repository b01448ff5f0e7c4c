// shardtrain/kernels/seq_pool.cpp
// Owns the masked mean pooling over sequence positions (seq_pool.hpp).
// Invariants: one work item per (b, c) output column, summing t upwards in
// compute_t<T> (deterministic, independent of the thread count); backward
// writes every dx element (0 at padded positions); no allocation.
#include "kernels/seq_pool.hpp"

#include <string>

#include "core/error.hpp"

namespace shardtrain {
namespace {

const std::string kLabelForward = "SeqMeanPool::forward";
const std::string kLabelBackward = "SeqMeanPool::backward";

void check_lengths(const char* op, CView1<std::int32_t> lengths, std::int64_t nb, std::int64_t nt) {
  if (lengths.extent(0) == 0) return;
  SHARDTRAIN_CHECK(static_cast<std::int64_t>(lengths.extent(0)) == nb,
                   std::string(op) + ": lengths has " + std::to_string(lengths.extent(0)) +
                       " entries, batch is " + std::to_string(nb));
  for (std::int64_t b = 0; b < nb; ++b)
    SHARDTRAIN_CHECK(lengths(b) >= 1 && lengths(b) <= nt,
                     std::string(op) + ": lengths[" + std::to_string(b) + "] = " + std::to_string(lengths(b)) +
                         " is not in [1, " + std::to_string(nt) + "]");
}

}  // namespace

template <class T>
void seq_mean_pool_forward(CView3<T> x, CView1<std::int32_t> lengths, View2<T> y) {
  const std::int64_t nb = static_cast<std::int64_t>(x.extent(0)), nt = static_cast<std::int64_t>(x.extent(1)),
                     nc = static_cast<std::int64_t>(x.extent(2));
  SHARDTRAIN_CHECK(static_cast<std::int64_t>(y.extent(0)) == nb && static_cast<std::int64_t>(y.extent(1)) == nc,
                   "seq_mean_pool_forward: y is not (B, C) of x (B, T, C)");
  check_lengths("seq_mean_pool_forward", lengths, nb, nt);
  using C = compute_t<T>;
  const T* xp = x.data();
  T* yp = y.data();
  const std::int32_t* lp = lengths.extent(0) == 0 ? nullptr : lengths.data();
  Kokkos::parallel_for(kLabelForward, range(nb * nc), KOKKOS_LAMBDA(const std::int64_t i) {
    const std::int64_t b = i / nc, c = i % nc;
    const std::int64_t len = lp ? lp[b] : nt;
    C sum = C(0);
    for (std::int64_t t = 0; t < len; ++t) sum += static_cast<C>(xp[(b * nt + t) * nc + c]);
    yp[i] = static_cast<T>(sum * (C(1) / static_cast<C>(len)));
  });
}

template <class T>
void seq_mean_pool_backward(CView2<T> dy, CView1<std::int32_t> lengths, View3<T> dx) {
  const std::int64_t nb = static_cast<std::int64_t>(dx.extent(0)), nt = static_cast<std::int64_t>(dx.extent(1)),
                     nc = static_cast<std::int64_t>(dx.extent(2));
  SHARDTRAIN_CHECK(static_cast<std::int64_t>(dy.extent(0)) == nb && static_cast<std::int64_t>(dy.extent(1)) == nc,
                   "seq_mean_pool_backward: dy is not (B, C) of dx (B, T, C)");
  check_lengths("seq_mean_pool_backward", lengths, nb, nt);
  using C = compute_t<T>;
  const T* dyp = dy.data();
  T* dxp = dx.data();
  const std::int32_t* lp = lengths.extent(0) == 0 ? nullptr : lengths.data();
  Kokkos::parallel_for(kLabelBackward, range(nb * nt), KOKKOS_LAMBDA(const std::int64_t bt) {
    const std::int64_t b = bt / nt, t = bt % nt;
    const std::int64_t len = lp ? lp[b] : nt;
    const C inv = C(1) / static_cast<C>(len);
    T* row = dxp + bt * nc;
    if (t < len) {
      for (std::int64_t c = 0; c < nc; ++c) row[c] = static_cast<T>(static_cast<C>(dyp[b * nc + c]) * inv);
    } else {
      for (std::int64_t c = 0; c < nc; ++c) row[c] = static_cast<T>(C(0));
    }
  });
}

#define SHARDTRAIN_INSTANTIATE_SEQ_POOL(T)                                             \
  template void seq_mean_pool_forward<T>(CView3<T>, CView1<std::int32_t>, View2<T>); \
  template void seq_mean_pool_backward<T>(CView2<T>, CView1<std::int32_t>, View3<T>);
SHARDTRAIN_INSTANTIATE_SEQ_POOL(float)
SHARDTRAIN_INSTANTIATE_SEQ_POOL(double)
SHARDTRAIN_INSTANTIATE_SEQ_POOL(f16)
SHARDTRAIN_INSTANTIATE_SEQ_POOL(bf16)
#undef SHARDTRAIN_INSTANTIATE_SEQ_POOL

}  // namespace shardtrain
