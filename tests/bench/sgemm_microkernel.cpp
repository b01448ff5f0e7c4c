// shardtrain/tests/bench/sgemm_microkernel.cpp
// Issue 33's "another algorithm" check for the fp32 GEMMs: could a hand-written
// GEMM beat oneDNN's (brgemm) on this core, on the 12-layer GPT's shapes (1024
// rows = 8 sequences x 128 tokens: qkv 512->1536, fc 512->2048, fc2 2048->512, dX
// of fc, proj 512->512)? The candidate is the classic BLIS-style design: B packed
// in KC x 32 micro-panels, A in 12 x KC micro-panels, a 12 x 32 micro-tile of 24
// AVX-512 accumulators (2 vector loads of B and 12 broadcasts of A per 24 FMAs),
// C accumulated across KC blocks. Both run single-threaded on the same hot
// operands, interleaved, best of 30, in GFLOP/s; results must agree (relative
// 1e-5 of the largest |C|, else exit 1). Measured 2026-11-27 on AMD EPYC (Zen 5,
// 2 vCPUs): oneDNN 241-262 GF/s, this kernel 0.82-0.94x of it (KC 192, 256, 384):
// no gain to be had from our own fp32 GEMM (share/doc/benchmarks.md).
// Usage: sgemm_microkernel [KC=256] [MC=384]. Without AVX-512 it says so and exits 0.
#include <immintrin.h>
#include <dnnl.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <cmath>

using clk = std::chrono::steady_clock;
constexpr int MR = 12, NR = 32;
static int KC = 256, MC = 384, NC = 4096;

// packed A: for each k, MR consecutive values (rows i..i+MR)
static void pack_a(const float* a, long lda, long m0, long mr, long k0, long kc, float* dst) {
  for (long k = 0; k < kc; ++k)
    for (long i = 0; i < MR; ++i) dst[k * MR + i] = i < mr ? a[(m0 + i) * lda + k0 + k] : 0.f;
}
// packed B (B[k][n] = b[k*ldb + n] when !bt, else b[n*ldb + k])
static void pack_b(const float* b, long ldb, bool bt, long k0, long kc, long n0, long nr, float* dst) {
  if (!bt) {
    for (long k = 0; k < kc; ++k) {
      const float* src = b + (k0 + k) * ldb + n0;
      if (nr == NR) std::memcpy(dst + k * NR, src, NR * 4);
      else for (long j = 0; j < NR; ++j) dst[k * NR + j] = j < nr ? src[j] : 0.f;
    }
  } else {
    for (long j = 0; j < NR; ++j) {
      if (j < nr) { const float* src = b + (n0 + j) * ldb + k0; for (long k = 0; k < kc; ++k) dst[k * NR + j] = src[k]; }
      else for (long k = 0; k < kc; ++k) dst[k * NR + j] = 0.f;
    }
  }
}

__attribute__((noinline)) static void kernel(long kc, const float* __restrict a, const float* __restrict b, float* c, long ldc,
                   bool accumulate, long mr, long nr) {
  __m512 c0[MR], c1[MR];
  for (int i = 0; i < MR; ++i) { c0[i] = _mm512_setzero_ps(); c1[i] = _mm512_setzero_ps(); }
  for (long k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b + k * NR), b1 = _mm512_load_ps(b + k * NR + 16);
    _mm_prefetch((const char*)(b + (k + 8) * NR), _MM_HINT_T0);
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(a[k * MR + i]);
      c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);
      c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);
    }
  }
  if (mr == MR && nr == NR) {
    for (int i = 0; i < MR; ++i) {
      float* r = c + i * ldc;
      if (accumulate) { c0[i] = _mm512_add_ps(c0[i], _mm512_loadu_ps(r)); c1[i] = _mm512_add_ps(c1[i], _mm512_loadu_ps(r + 16)); }
      _mm512_storeu_ps(r, c0[i]); _mm512_storeu_ps(r + 16, c1[i]);
    }
  } else {
    alignas(64) float t[MR * NR];
    for (int i = 0; i < MR; ++i) { _mm512_store_ps(t + i * NR, c0[i]); _mm512_store_ps(t + i * NR + 16, c1[i]); }
    for (long i = 0; i < mr; ++i) for (long j = 0; j < nr; ++j) c[i * ldc + j] = (accumulate ? c[i * ldc + j] : 0.f) + t[i * NR + j];
  }
}

static void my_sgemm(long M, long N, long K, const float* a, long lda, const float* b, long ldb, bool bt, float* c, long ldc) {
  static float* A = (float*)std::aligned_alloc(64, sizeof(float) * 4096 * 1024);
  static float* B = (float*)std::aligned_alloc(64, sizeof(float) * 4096 * 1024);
  for (long jc = 0; jc < N; jc += NC) {
    const long nc = std::min<long>(NC, N - jc);
    for (long pc = 0; pc < K; pc += KC) {
      const long kc = std::min<long>(KC, K - pc);
      const long nb = (nc + NR - 1) / NR;
      for (long jr = 0; jr < nb; ++jr) pack_b(b, ldb, bt, pc, kc, jc + jr * NR, std::min<long>(NR, nc - jr * NR), B + jr * kc * NR);
      for (long ic = 0; ic < M; ic += MC) {
        const long mc = std::min<long>(MC, M - ic);
        const long mb = (mc + MR - 1) / MR;
        for (long ir = 0; ir < mb; ++ir) pack_a(a, lda, ic + ir * MR, std::min<long>(MR, mc - ir * MR), pc, kc, A + ir * kc * MR);
        for (long jr = 0; jr < nb; ++jr)
          for (long ir = 0; ir < mb; ++ir)
            kernel(kc, A + ir * kc * MR, B + jr * kc * NR, c + (ic + ir * MR) * ldc + jc + jr * NR, ldc, pc > 0,
                   std::min<long>(MR, mc - ir * MR), std::min<long>(NR, nc - jr * NR));
      }
    }
  }
}

int main(int argc, char** argv) {
  if (!__builtin_cpu_supports("avx512f")) {
    std::printf("sgemm_microkernel: this CPU has no AVX-512: nothing to compare\n");
    return 0;
  }
  if (argc > 1) KC = atoi(argv[1]);
  if (argc > 2) MC = atoi(argv[2]);
  if (KC < 16 || KC > 1024 || MC < 12 || MC > 4096) { std::fprintf(stderr, "usage: sgemm_microkernel [KC 16..1024] [MC 12..4096]\n"); return 2; }
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream st(eng);
  struct S { long m, n, k; bool bt; const char* what; };
  S shapes[] = {{1024, 1536, 512, true, "qkv fwd X.W^T"}, {1024, 2048, 512, true, "fc1 fwd"}, {1024, 512, 2048, true, "fc2 fwd"},
                {1024, 512, 2048, false, "fc1 dX dY.W"}, {1024, 512, 512, true, "proj fwd"}};
  for (auto s : shapes) {
    std::vector<float> a(s.m * s.k), b(s.k * s.n), c1(s.m * s.n), c2(s.m * s.n);
    for (size_t i = 0; i < a.size(); ++i) a[i] = ((i * 7) % 13) * 0.01f - 0.06f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = ((i * 5 + 3) % 11) * 0.01f - 0.05f;
    using dims = dnnl::memory::dims;
    auto dt = dnnl::memory::data_type::f32;
    dnnl::memory::desc ad(dims{s.m, s.k}, dt, dims{s.k, 1});
    dnnl::memory::desc bd(dims{s.k, s.n}, dt, s.bt ? dims{1, s.k} : dims{s.n, 1});
    dnnl::memory::desc cd(dims{s.m, s.n}, dt, dims{s.n, 1});
    dnnl::matmul mm(dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), eng));
    dnnl::memory am(ad, eng, a.data()), bm(bd, eng, b.data()), cm(cd, eng, c1.data());
    double best1 = 1e9, best2 = 1e9;
    for (int r = 0; r < 30; ++r) {
      auto t0 = clk::now();
      mm.execute(st, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
      st.wait();
      auto t1 = clk::now();
      my_sgemm(s.m, s.n, s.k, a.data(), s.k, b.data(), s.bt ? s.k : s.n, s.bt, c2.data(), s.n);
      auto t2 = clk::now();
      best1 = std::min(best1, std::chrono::duration<double>(t1 - t0).count());
      best2 = std::min(best2, std::chrono::duration<double>(t2 - t1).count());
    }
    double err = 0, big = 0;
    for (size_t i = 0; i < c1.size(); ++i) {
      err = std::max(err, (double)std::fabs(c1[i] - c2[i]));
      big = std::max(big, (double)std::fabs(c1[i]));
    }
    if (err > 1e-5 * big) {
      std::printf("%s: the two products differ by %.3g (largest |C| %.3g)\n", s.what, err, big);
      return 1;
    }
    double f = 2.0 * s.m * s.n * s.k / 1e9;
    std::printf("%-16s M%ld N%ld K%ld: onednn %.1f GF/s, mine %.1f GF/s (x%.3f), maxdiff %.2g\n", s.what, s.m, s.n, s.k, f / best1, f / best2, best1 / best2, err);
  }
}
