// shardtrain/tests/bench/attention_products.cpp
// Issue 33's question "the attention products on oneDNN too, if it beats
// small_gemm there": times Q K^T for every (sequence, head) of the 12-layer GPT's
// attention on one rank (8 sequences, 8 heads, T 128, hd 64, in place in the qkv
// layout (B, T, 3C)) three ways, one thread each (set_compute_threads(1), as a rank
// of the trainer runs; oneDNN would otherwise take every core), best of 29:
//   - oneDNN batched matmul, fp32 and bf16 inputs (fp32 scores), over the full
//     T x T (oneDNN's matmul has no causal mask), heads addressed by strides;
//   - kernels/small_gemm (what attention.cpp runs): fp32 FMA chains over causal
//     blocks of 4 query rows (about half the full FLOPs), K^T transposed first.
// The three agree: every causal score of oneDNN's fp32 and bf16 products is
// compared with small_gemm's (relative to the largest score: 1e-5 fp32, 2e-2 for
// bf16 inputs); a disagreement exits 1.
// Usage: attention_products (no arguments). Results in share/doc/benchmarks.md.
#include <dnnl.hpp>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include "kernels/cpu_compute.hpp"
#include "kernels/small_gemm.hpp"
using namespace dnnl; using dt = memory::data_type; using dims = memory::dims;
int main() {
  const long B = 8, H = 8, T = 128, hd = 64, C = H * hd;
  shardtrain::set_compute_threads(1);  // oneDNN's OpenMP pool: one thread, like small_gemm
  printf("threads: 1 (oneDNN and small_gemm)\n");
  engine eng(engine::kind::cpu, 0); stream s(eng);
  // qkv (B, T, 3C): Q of head h at column h*hd, K at C + h*hd; S (B*H, T, T)
  std::vector<float> qkvf(B * T * 3 * C);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& v : qkvf) v = nd(rng);
  std::vector<std::vector<float>> scores;  // oneDNN's S, fp32 then bf16
  for (dt t : {dt::f32, dt::bf16}) {
    const size_t es = t == dt::f32 ? 4 : 2;
    std::vector<char> qkv(B * T * 3 * C * es), S(B * H * T * T * 4, 0);
    for (size_t i = 0; i < qkvf.size(); ++i) {
      if (t == dt::f32) { std::memcpy(qkv.data() + 4 * i, &qkvf[i], 4); continue; }
      uint32_t u; std::memcpy(&u, &qkvf[i], 4);
      const uint16_t h16 = static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);  // round to nearest even
      std::memcpy(qkv.data() + 2 * i, &h16, 2);
    }
    // batch dims (B, H): strides (T*3C, hd); Q (T, hd) row stride 3C; K^T (hd, T): element (d, j) at j*3C + d
    memory::desc q({B, H, T, hd}, t, dims{T * 3 * C, hd, 3 * C, 1});
    memory::desc k({B, H, hd, T}, t, dims{T * 3 * C, hd, 1, 3 * C});
    memory::desc sd({B, H, T, T}, dt::f32, dims{H * T * T, T * T, T, 1});
    primitive_attr attr; attr.set_output_scales(0, {0.125f});
    matmul::primitive_desc pd(matmul::desc(q, k, sd), attr, eng);
    matmul mm(pd);
    memory qm(q, eng, qkv.data()), km(k, eng, qkv.data() + C * es), smm(sd, eng, S.data());
    double best = 1e30;
    for (int r = 0; r < 30; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      mm.execute(s, {{DNNL_ARG_SRC, qm}, {DNNL_ARG_WEIGHTS, km}, {DNNL_ARG_DST, smm}}); s.wait();
      double d = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r) best = std::min(best, d);
    }
    printf("oneDNN %s full QK^T all heads: %.3f ms (%s)\n", t == dt::f32 ? "f32" : "bf16", best * 1e3, pd.impl_info_str());
    scores.emplace_back(B * H * T * T);
    std::memcpy(scores.back().data(), S.data(), S.size());
  }
  // small_gemm causal: per (b,h): rows in blocks of 4, keys [0, r1); K^T transposed first (as attention.cpp)
  const std::vector<float>& qkv = qkvf;
  std::vector<float> kt(hd * T), S(B * H * T * T);
  double best = 1e30;
  for (int r = 0; r < 30; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (long b = 0; b < B; ++b) for (long h = 0; h < H; ++h) {
      const float* qp = qkv.data() + b * T * 3 * C + h * hd;
      const float* kp = qkv.data() + b * T * 3 * C + C + h * hd;
      for (long j = 0; j < T; ++j) for (long d = 0; d < hd; ++d) kt[d * T + j] = kp[j * 3 * C + d];
      for (long r0 = 0; r0 < T; r0 += 4) {
        long r1 = std::min(T, r0 + 4);
        shardtrain::small_gemm<float>(r1 - r0, r1, hd, 0.125f, qp + r0 * 3 * C, 3 * C, 1, kt.data(), T,
                                      S.data() + (b * H + h) * T * T + r0 * T, T);
      }
    }
    double d = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r) best = std::min(best, d);
  }
  printf("small_gemm f32 causal QK^T all heads (incl. K^T transpose): %.3f ms\n", best * 1e3);
  // Every causal score (key j <= query i) of the three products agrees.
  int bad = 0;
  for (int v = 0; v < 2; ++v) {
    double big = 0.0, worst = 0.0;
    for (long bh = 0; bh < B * H; ++bh)
      for (long i = 0; i < T; ++i)
        for (long j = 0; j <= i; ++j) {
          const long e = (bh * T + i) * T + j;
          big = std::max(big, std::fabs(double(S[e])));
          worst = std::max(worst, std::fabs(double(S[e]) - scores[v][e]));
        }
    const double tol = v == 0 ? 1e-5 : 2e-2;
    printf("oneDNN %s against small_gemm: largest difference %.3g of the largest score %.3g (allowed %.0e)\n",
           v == 0 ? "f32" : "bf16", worst, big, tol);
    if (!(worst <= tol * big)) bad = 1;
  }
  return bad;
}
