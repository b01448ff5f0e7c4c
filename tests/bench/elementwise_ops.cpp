// shardtrain/tests/bench/elementwise_ops.cpp
// Issue 50: what the host's GELU and LayerNorm cost per value, fp32 against bf16,
// at the GPT shapes of the CPU benchmark (quickstart: 512 rows x 128 channels, the
// MLP's 512 x 512; the 12-layer GPT as one of 2 ranks: 1024 x 512, MLP 1024 x 2048).
// One thread, hot operands, best of REPS, each kernel as the trainer calls it
// (kernels/gelu.hpp, kernels/layernorm.hpp). Run on one core, nothing else running:
//   OMP_NUM_THREADS=1 taskset -c 1 build/tests/bench/elementwise_ops [REPS=30]
// Prints, per precision and shape, GELU forward and backward (us, and ns a value)
// and LayerNorm forward and backward (us).
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"

namespace {

using namespace shardtrain;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

template <class T>
void run(const char* name, const char* model, std::int64_t gelu_n, std::int64_t rows, std::int64_t c, int reps) {
  const std::int64_t n = std::max(gelu_n, rows * c);
  std::vector<T> x(n), y(n), dy(n), dx(n), w(c), b(c), dw(c), db(c), mean(rows), rstd(rows);
  for (std::int64_t i = 0; i < n; ++i) {
    x[i] = T(static_cast<float>((i * 7) % 13) * 0.3f - 1.8f);
    dy[i] = T(static_cast<float>((i * 5) % 11) * 0.01f - 0.05f);
  }
  for (std::int64_t i = 0; i < c; ++i) {
    w[i] = T(1.0f + 0.01f * static_cast<float>(i % 7));
    b[i] = T(0.01f * static_cast<float>(i % 5));
  }
  double gf = 1e30, gb = 1e30, lf = 1e30, lb = 1e30;
  for (int r = 0; r < reps + 2; ++r) {  // the first two warm up
    double t = now();
    gelu_forward<T>(CView1<T>(x.data(), gelu_n), View1<T>(y.data(), gelu_n));
    const double d0 = now() - t;
    t = now();
    gelu_backward<T>(CView1<T>(x.data(), gelu_n), CView1<T>(dy.data(), gelu_n), View1<T>(dx.data(), gelu_n));
    const double d1 = now() - t;
    t = now();
    layernorm_forward<T>(CView2<T>(x.data(), rows, c), CView1<T>(w.data(), c), CView1<T>(b.data(), c),
                         View2<T>(y.data(), rows, c), View1<T>(mean.data(), rows), View1<T>(rstd.data(), rows),
                         T(1e-5f));
    const double d2 = now() - t;
    std::fill(dw.begin(), dw.end(), T(0.0f));
    std::fill(db.begin(), db.end(), T(0.0f));
    t = now();
    layernorm_backward<T>(CView2<T>(x.data(), rows, c), CView1<T>(w.data(), c), CView1<T>(mean.data(), rows),
                          CView1<T>(rstd.data(), rows), CView2<T>(dy.data(), rows, c), View2<T>(dx.data(), rows, c),
                          View1<T>(dw.data(), c), View1<T>(db.data(), c));
    const double d3 = now() - t;
    if (r >= 2) {
      gf = std::min(gf, d0);
      gb = std::min(gb, d1);
      lf = std::min(lf, d2);
      lb = std::min(lb, d3);
    }
  }
  std::printf("%-10s %-4s gelu %8ld values: forward %8.1f us (%.2f ns a value), backward %8.1f us (%.2f)   "
              "layernorm %5ld x %4ld: forward %7.1f us, backward %7.1f us\n",
              model, name, static_cast<long>(gelu_n), gf * 1e6, gf * 1e9 / static_cast<double>(gelu_n), gb * 1e6,
              gb * 1e9 / static_cast<double>(gelu_n), static_cast<long>(rows), static_cast<long>(c), lf * 1e6,
              lb * 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 30;
  if (argc > 2 || reps < 1 || reps > 10000) {
    std::fprintf(stderr, "usage: elementwise_ops [REPS in 1..10000, default 30]\n");
    return 2;
  }
  Kokkos::ScopeGuard kokkos(argc, argv);
  std::printf("elementwise_ops: 1 thread, hot, best of %d\n", reps);
  run<float>("fp32", "quickstart", 512 * 512, 512, 128, reps);
  run<bf16>("bf16", "quickstart", 512 * 512, 512, 128, reps);
  run<float>("fp32", "12-layer", 1024 * 2048, 1024, 512, reps);
  run<bf16>("bf16", "12-layer", 1024 * 2048, 1024, 512, reps);
  return 0;
}
