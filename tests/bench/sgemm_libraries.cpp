// shardtrain/tests/bench/sgemm_libraries.cpp
// Issue 50: is another host BLAS a way past the trainer's fp32 GEMM on this CPU?
// One thread, hot operands, the 12-layer GPT's Linear products as one of 2 ranks
// computes them (1024 tokens, d 512: QKV, attention projection, MLP up and down;
// forward, dX and dW each), best of REPS, the libraries interleaved:
//   trainer   kernels/gemm.hpp gemm<float> (oneDNN's matmul, as the trainer runs it)
//   openblas  OpenBLAS's cblas_sgemm (linked; its core is printed)
//   blis      BLIS's cblas_sgemm from libblis.so.4 (Debian's libblis4-serial,
//             dlopen'd, so not a build dependency; "absent" when not installed),
//             its version and the sub-configuration it picked printed
// Prints each product's GFLOP/s per library, the largest difference from the
// trainer's result, and the rate over all 12 products (their FLOPs over the sum
// of their best times). Run it on one core, nothing else running:
//   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 taskset -c 1 build/tests/bench/sgemm_libraries [REPS=20]
#include <cblas.h>
#include <dlfcn.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu_compute.hpp"
#include "kernels/gemm.hpp"

namespace {

using CblasSgemm = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, int, int, int, float, const float*, int,
                            const float*, int, float, float*, int);

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Product {
  const char* name;
  int m, n, k;
  bool ta, tb;  // C(m x n) = op(A) op(B); A stored k x m when ta, B stored n x k when tb
};

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  if (argc > 2 || reps < 1 || reps > 1000) {
    std::fprintf(stderr, "usage: sgemm_libraries [REPS in 1..1000, default 20]\n");
    return 2;
  }
  Kokkos::ScopeGuard kokkos(argc, argv);
  void* blis = dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  auto blis_sgemm = blis ? reinterpret_cast<CblasSgemm>(dlsym(blis, "cblas_sgemm")) : nullptr;
  std::string blis_what = "absent (apt-get install libblis4-serial)";
  if (blis_sgemm) {
    auto version = reinterpret_cast<const char* (*)()>(dlsym(blis, "bli_info_get_version_str"));
    auto arch_id = reinterpret_cast<int (*)()>(dlsym(blis, "bli_arch_query_id"));
    auto arch_name = reinterpret_cast<const char* (*)(int)>(dlsym(blis, "bli_arch_string"));
    blis_what = std::string("libblis.so.4 ") + (version ? version() : "?") + ", sub-configuration " +
                (arch_id && arch_name ? arch_name(arch_id()) : "?");
  }
  std::printf("sgemm_libraries: 1 thread, hot, best of %d; %s; BLIS %s\n", reps,
              shardtrain::cpu_libraries_describe().c_str(), blis_what.c_str());
  const int M = 1024, C = 512;
  const std::vector<Product> products = {
      {"qkv forward", M, 3 * C, C, false, true},   {"qkv dX", M, C, 3 * C, false, false},
      {"qkv dW", 3 * C, C, M, true, false},        {"proj forward", M, C, C, false, true},
      {"proj dX", M, C, C, false, false},          {"proj dW", C, C, M, true, false},
      {"mlp up forward", M, 4 * C, C, false, true}, {"mlp up dX", M, C, 4 * C, false, false},
      {"mlp up dW", 4 * C, C, M, true, false},     {"mlp down forward", M, C, 4 * C, false, true},
      {"mlp down dX", M, 4 * C, C, false, false},  {"mlp down dW", C, 4 * C, M, true, false},
  };
  double flops = 0, total[3] = {0, 0, 0};
  for (const Product& p : products) {
    std::vector<float> a(static_cast<std::size_t>(p.m) * p.k), b(static_cast<std::size_t>(p.k) * p.n),
        c0(static_cast<std::size_t>(p.m) * p.n), c1(c0.size()), c2(c0.size());
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 7) % 13) * 0.01f - 0.06f;
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>((i * 5 + 3) % 11) * 0.01f - 0.05f;
    const int lda = p.ta ? p.m : p.k, ldb = p.tb ? p.k : p.n;
    using shardtrain::Trans;
    shardtrain::CView2<float> av(a.data(), p.ta ? p.k : p.m, p.ta ? p.m : p.k);
    shardtrain::CView2<float> bv(b.data(), p.tb ? p.n : p.k, p.tb ? p.k : p.n);
    shardtrain::View2<float> cv(c0.data(), p.m, p.n);
    const auto ta = p.ta ? CblasTrans : CblasNoTrans, tb = p.tb ? CblasTrans : CblasNoTrans;
    double best[3] = {1e30, 1e30, 1e30};
    for (int r = 0; r < reps + 2; ++r) {  // the first two warm up (buffers, primitives, page faults)
      double t = now();
      shardtrain::gemm<float>(p.ta ? Trans::T : Trans::N, p.tb ? Trans::T : Trans::N, 1.0f, av, bv, 0.0f, cv);
      const double d0 = now() - t;
      t = now();
      cblas_sgemm(CblasRowMajor, ta, tb, p.m, p.n, p.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c1.data(), p.n);
      const double d1 = now() - t;
      double d2 = 1e30;
      if (blis_sgemm) {
        t = now();
        blis_sgemm(CblasRowMajor, ta, tb, p.m, p.n, p.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c2.data(), p.n);
        d2 = now() - t;
      }
      if (r >= 2) {
        best[0] = std::min(best[0], d0);
        best[1] = std::min(best[1], d1);
        best[2] = std::min(best[2], d2);
      }
    }
    double diff = 0;
    for (std::size_t i = 0; i < c0.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(c0[i] - c1[i])));
      if (blis_sgemm) diff = std::max(diff, static_cast<double>(std::fabs(c0[i] - c2[i])));
    }
    const double f = 2.0 * p.m * p.n * p.k;
    flops += f;
    for (int i = 0; i < 3; ++i) total[i] += best[i];
    std::printf("%-17s m %4d n %4d k %4d  trainer %6.1f  openblas %6.1f  blis %6.1f GFLOP/s  max diff %.1e\n", p.name,
                p.m, p.n, p.k, f / best[0] / 1e9, f / best[1] / 1e9, blis_sgemm ? f / best[2] / 1e9 : 0.0, diff);
  }
  std::printf("all 12 products: trainer %.1f  openblas %.1f  blis %.1f GFLOP/s\n", flops / total[0] / 1e9,
              flops / total[1] / 1e9, blis_sgemm ? flops / total[2] / 1e9 : 0.0);
  return 0;
}
