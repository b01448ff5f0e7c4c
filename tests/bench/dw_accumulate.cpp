// shardtrain/tests/bench/dw_accumulate.cpp
// Issue 33's question "what does accumulating into the weight gradient cost?":
// times the Linear layer's three matmuls on oneDNN (kernels/dnnl_matmul.hpp, as
// kernels/linear.cpp issues them) for the 12-layer GPT's shapes on one rank (1024
// rows = 8 sequences x 128 tokens; qkv 512->1536, proj 512->512, fc 512->2048,
// fc2 2048->512), one thread (set_compute_threads(1), as a rank of the trainer):
//   fwd    y = x w^T (+ nothing)                      (n x m)
//   dX     dx = dy w                                  (n x k)
//   dW b1  dw += dy^T x (beta 1: oneDNN's sum post-op, what linear_backward did
//          before the provider's grads_zero)
//   dW b0  dw = dy^T x (beta 0: what it does now on zeroed gradients)
// each hot (operands in cache, repeated) and cold (a 64 MiB buffer written between
// calls, as in the trainer, where the operands come from earlier layers); median
// of 11 per cell, in GFLOP/s. dW b0 and b1 must agree (b1 on zeros): a
// disagreement exits 1.
// Usage: dw_accumulate (no arguments). Results in share/doc/benchmarks.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/cpu_compute.hpp"
#include "kernels/dnnl_matmul.hpp"

namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
std::vector<float> g_junk(std::size_t(64) << 18);  // 64 MiB
void flush() {
  for (std::size_t i = 0; i < g_junk.size(); i += 16) g_junk[i] += 1.0f;
}
}  // namespace

int main() {
  using shardtrain::MatmulShape;
  shardtrain::set_compute_threads(1);
  std::printf("threads: 1 (oneDNN); GFLOP/s, median of 11; n = 1024 rows\n");
  const long n = 1024;
  const long shapes[][2] = {{1536, 512}, {512, 512}, {2048, 512}, {512, 2048}};  // m (out), k (in)
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  int rc = 0;
  for (const auto& sh : shapes) {
    const long m = sh[0], k = sh[1];
    std::vector<float> dy(n * m), x(n * k), w(m * k), dw0(m * k), dw1(m * k), dx(n * k), y(n * m);
    for (auto* v : {&dy, &x, &w})
      for (float& e : *v) e = nd(rng);
    MatmulShape f;  // y (n x m) = x (n x k) w^T
    f.m = n, f.n = m, f.k = k, f.trans_b = true, f.lda = k, f.ldb = k, f.ldc = m;
    MatmulShape d;  // dx (n x k) = dy (n x m) w (m x k)
    d.m = n, d.n = k, d.k = m, d.lda = m, d.ldb = k, d.ldc = k;
    MatmulShape w1;  // dw (m x k) += dy^T x
    w1.m = m, w1.n = k, w1.k = n, w1.trans_a = true, w1.lda = m, w1.ldb = k, w1.ldc = k, w1.beta = 1.0f;
    MatmulShape w0 = w1;
    w0.beta = 0.0f;
    const double flop = 2.0 * m * n * k;
    std::vector<double> t[2][4];
    for (int r = 0; r < 11; ++r)
      for (int cold = 0; cold < 2; ++cold) {
        auto run = [&](int i, auto fn) {
          if (cold) flush();
          const double t0 = now();
          fn();
          t[cold][i].push_back(now() - t0);
        };
        run(0, [&] { shardtrain::dnnl_matmul(f, x.data(), w.data(), nullptr, y.data(), "fwd"); });
        run(1, [&] { shardtrain::dnnl_matmul(d, dy.data(), w.data(), nullptr, dx.data(), "dX"); });
        run(2, [&] {
          std::fill(dw1.begin(), dw1.end(), 0.0f);  // outside oneDNN, but inside the timing: what grad_zero did
          shardtrain::dnnl_matmul(w1, dy.data(), x.data(), nullptr, dw1.data(), "dW b1");
        });
        run(3, [&] { shardtrain::dnnl_matmul(w0, dy.data(), x.data(), nullptr, dw0.data(), "dW b0"); });
      }
    if (dw0 != dw1) {
      std::fprintf(stderr, "dW %ldx%ld: beta 0 and beta 1 on zeros disagree\n", m, k);
      rc = 1;
    }
    const char* names[4] = {"fwd", "dX", "dW b1 (zero + add)", "dW b0"};
    std::printf("%ld -> %ld:", k, m);
    for (int cold = 0; cold < 2; ++cold)
      for (int i = 0; i < 4; ++i) {
        std::vector<double> v = t[cold][i];
        std::sort(v.begin(), v.end());
        std::printf("  %s %s %.0f", cold ? "cold" : "hot", names[i], flop / v[v.size() / 2] / 1e9);
      }
    std::printf("\n");
  }
  return rc;
}
