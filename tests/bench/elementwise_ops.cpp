// shardtrain/tests/bench/elementwise_ops.cpp
// Issue 50: what the host's GELU and LayerNorm cost per value, fp32 against bf16,
// at the GPT shapes of the CPU benchmark (quickstart: 512 rows x 128 channels, the
// MLP's 512 x 512; the 12-layer GPT as one of 2 ranks: 1024 x 512, MLP 1024 x 2048).
// One thread, hot operands, best of REPS, each kernel as the trainer calls it
// (kernels/gelu.hpp, kernels/layernorm.hpp). Run on one core, nothing else running:
//   OMP_NUM_THREADS=1 taskset -c 1 build/tests/bench/elementwise_ops [REPS=30]
// Prints, per precision and shape, GELU forward and backward (us, and ns a value)
// and LayerNorm forward and backward (us); then one "lever:" line, the trainer's
// fp32 GELU forward against the same expressions with explicit std::fma (below),
// and their largest relative difference; then "gelu paths" lines: the 16-bit GELU's
// arithmetic against its tables (kernels/gelu.hpp GeluPath) on GPT-like activations,
// and how many results differ (must be 0).
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/vectorize.hpp"
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

// A lever measured, not in the trainer: the GELU forward of kernels/gelu.cpp with its
// multiply-adds as explicit std::fma (u, the exp range reduction and its Horner
// polynomial), cloned like the kernels (core/vectorize.hpp) and built like them
// without FMA contraction, so the only difference is the fused operations. Every
// clone with FMA hardware gives the same bits; they differ from the trainer's.
SHARDTRAIN_TARGET_CLONES
void gelu_forward_fma(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    const float x2 = xi * xi;
    const float u = 0.7978845608028654f * std::fma(0.044715f * x2, xi, xi);
    const float e_in = -2.0f * u;
    constexpr float kLo = -87.3f, kHi = 88.3f;
    float xe = e_in < kLo ? kLo : e_in;
    xe = xe > kHi ? kHi : xe;
    constexpr float kShift = 12582912.0f;
    const float t = std::fma(xe, 1.44269504088896341f, kShift);
    const float nn = t - kShift;
    const std::int32_t ni = std::bit_cast<std::int32_t>(t) - std::bit_cast<std::int32_t>(kShift);
    float r = std::fma(-nn, 0.693145751953125f, xe);
    r = std::fma(-nn, 1.428606765330187e-6f, r);
    float p = 1.0f / 5040.0f;
    p = std::fma(p, r, 1.0f / 720.0f);
    p = std::fma(p, r, 1.0f / 120.0f);
    p = std::fma(p, r, 1.0f / 24.0f);
    p = std::fma(p, r, 1.0f / 6.0f);
    p = std::fma(p, r, 0.5f);
    p = std::fma(p, r, 1.0f);
    p = std::fma(p, r, 1.0f);
    float e = p * std::bit_cast<float>((ni + 127) << 23);
    e = e_in > kHi ? std::numeric_limits<float>::infinity() : e;
    e = e_in < kLo ? 0.0f : e;
    y[i] = xi / (1.0f + e);
  }
}

void fma_lever(int reps) {
  const std::int64_t n = 512 * 512;
  std::vector<float> x(n), y0(n), y1(n);
  for (std::int64_t i = 0; i < n; ++i) x[i] = static_cast<float>((i * 2654435761LL) % 1000003) * 1e-5f - 5.0f;
  double b0 = 1e30, b1 = 1e30;
  for (int r = 0; r < reps + 2; ++r) {
    double t = now();
    gelu_forward<float>(CView1<float>(x.data(), n), View1<float>(y0.data(), n));
    const double d0 = now() - t;
    t = now();
    gelu_forward_fma(x.data(), y1.data(), n);
    const double d1 = now() - t;
    if (r >= 2) {
      b0 = std::min(b0, d0);
      b1 = std::min(b1, d1);
    }
  }
  double diff = 0;
  for (std::int64_t i = 0; i < n; ++i)
    diff = std::max(diff, static_cast<double>(std::fabs(y0[i] - y1[i])) / std::max(1e-30, std::fabs(double(y0[i]))));
  std::printf("lever: GELU forward fp32, %ld values: trainer %.1f us, with explicit fma %.1f us (%.2fx); "
              "largest relative difference %.1e\n", static_cast<long>(n), b0 * 1e6, b1 * 1e6, b0 / b1, diff);
}

// The 16-bit GELU's two paths (kernels/gelu.hpp GeluPath) on activations spread as
// a GPT's are (roughly normal, sd 1.5: a sum of four uniforms), so the table lookups
// touch as many entries as in training; the two must agree bit for bit.
template <class T>
void gelu_paths(const char* name, std::int64_t n, int reps) {
  std::vector<T> x(n), y0(n), y1(n), dy(n), dx0(n), dx1(n);
  std::uint64_t state = 88172645463325252ULL;
  auto uniform = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return static_cast<float>(state >> 40) / 16777216.0f;  // [0, 1)
  };
  for (std::int64_t i = 0; i < n; ++i) {
    x[i] = T(1.5f * 1.7320508f * (uniform() + uniform() + uniform() + uniform() - 2.0f));
    dy[i] = T(0.02f * (uniform() - 0.5f));
  }
  double best[4] = {1e30, 1e30, 1e30, 1e30};
  for (int r = 0; r < reps + 2; ++r) {
    double d[4];
    double t = now();
    gelu_forward_on<T>(GeluPath::arithmetic, CView1<T>(x.data(), n), View1<T>(y0.data(), n));
    d[0] = now() - t;
    t = now();
    gelu_forward_on<T>(GeluPath::table, CView1<T>(x.data(), n), View1<T>(y1.data(), n));
    d[1] = now() - t;
    t = now();
    gelu_backward_on<T>(GeluPath::arithmetic, CView1<T>(x.data(), n), CView1<T>(dy.data(), n), View1<T>(dx0.data(), n));
    d[2] = now() - t;
    t = now();
    gelu_backward_on<T>(GeluPath::table, CView1<T>(x.data(), n), CView1<T>(dy.data(), n), View1<T>(dx1.data(), n));
    d[3] = now() - t;
    if (r >= 2)
      for (int k = 0; k < 4; ++k) best[k] = std::min(best[k], d[k]);
  }
  std::int64_t differ = 0;
  for (std::int64_t i = 0; i < n; ++i) differ += (y0[i].bits != y1[i].bits) + (dx0[i].bits != dx1[i].bits);
  std::printf("gelu paths %s, %ld values (sd 1.5): forward arithmetic %.1f us, table %.1f us (%.2fx); "
              "backward arithmetic %.1f us, table %.1f us (%.2fx); results differing: %ld\n",
              name, static_cast<long>(n), best[0] * 1e6, best[1] * 1e6, best[0] / best[1], best[2] * 1e6,
              best[3] * 1e6, best[2] / best[3], static_cast<long>(differ));
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
  fma_lever(reps);
  gelu_paths<bf16>("bf16", 512 * 512, reps);
  gelu_paths<bf16>("bf16", 1024 * 2048, reps);
  gelu_paths<f16>("f16", 512 * 512, reps);
  return 0;
}
