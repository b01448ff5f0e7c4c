// shardtrain/kernels/core_peak.cpp
// Owns the instruction-throughput probes of core_peak.hpp. Invariant: each probe
// is one inline-assembly loop whose only work is the instruction measured, on
// registers the asm block declares clobbered; the chains' final values are stored
// and checked, so a loop that did not run its count cannot report a rate.
#include "kernels/core_peak.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace shardtrain {
namespace {

#define ST_REP24(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) \
                    M(12) M(13) M(14) M(15) M(16) M(17) M(18) M(19) M(20) M(21) M(22) M(23)
#define ST_REP12(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11)
#define ST_STR(x) #x
#define ST_XSTR(x) ST_STR(x)

// --- AVX-512: 24 chains of vfmadd231ps zmm, operands in zmm30/zmm31 -----------
#define ST_ZERO_Z(i) "vpxord %%zmm" #i ", %%zmm" #i ", %%zmm" #i "\n\t"
#define ST_FMA_Z(i) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #i "\n\t"
#define ST_DP_Z(i) "vdpbf16ps %%zmm30, %%zmm31, %%zmm" #i "\n\t"
#define ST_SUM_Z(i) "vaddps %%zmm" #i ", %%zmm29, %%zmm29\n\t"
#define ST_CLOBBER_Z(i) "xmm" #i,

// One probe: the chains start at 0, run `iters` times, and their sum over the 24
// chains (lane 0) is stored in *out (24 * iters * per-instruction increment).
__attribute__((target("avx512f,avx512bf16"))) void fma_avx512(std::int64_t iters, float* out) {
  const float one = 1.0f;
  asm volatile(
      "vbroadcastss %[one], %%zmm30\n\t"
      "vbroadcastss %[one], %%zmm31\n\t" ST_REP24(ST_ZERO_Z)
      "1:\n\t" ST_REP24(ST_FMA_Z)
      "dec %[n]\n\t"
      "jnz 1b\n\t"
      "vpxord %%zmm29, %%zmm29, %%zmm29\n\t" ST_REP24(ST_SUM_Z)
      "vmovss %%xmm29, %[out]\n\t"
      : [n] "+r"(iters), [out] "=m"(*out)
      : [one] "m"(one)
      : ST_REP24(ST_CLOBBER_Z) "xmm29", "xmm30", "xmm31", "cc");
}

// bf16 1.0 is 0x3F80; a dword of two of them is 0x3F803F80.
__attribute__((target("avx512f,avx512bf16"))) void dpbf16_avx512(std::int64_t iters, float* out) {
  const std::uint32_t ones = 0x3F803F80u;
  asm volatile(
      "vpbroadcastd %[ones], %%zmm30\n\t"
      "vpbroadcastd %[ones], %%zmm31\n\t" ST_REP24(ST_ZERO_Z)
      "1:\n\t" ST_REP24(ST_DP_Z)
      "dec %[n]\n\t"
      "jnz 1b\n\t"
      "vpxord %%zmm29, %%zmm29, %%zmm29\n\t" ST_REP24(ST_SUM_Z)
      "vmovss %%xmm29, %[out]\n\t"
      : [n] "+r"(iters), [out] "=m"(*out)
      : [ones] "m"(ones)
      : ST_REP24(ST_CLOBBER_Z) "xmm29", "xmm30", "xmm31", "cc");
}

// --- AVX2 + FMA: 12 chains of vfmadd231ps ymm, operands in ymm14/ymm15 ----------
#define ST_ZERO_Y(i) "vpxor %%ymm" #i ", %%ymm" #i ", %%ymm" #i "\n\t"
#define ST_FMA_Y(i) "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #i "\n\t"
#define ST_SUM_Y(i) "vaddps %%ymm" #i ", %%ymm13, %%ymm13\n\t"
#define ST_CLOBBER_Y(i) "xmm" #i,

__attribute__((target("avx2,fma"))) void fma_avx2(std::int64_t iters, float* out) {
  const float one = 1.0f;
  asm volatile(
      "vbroadcastss %[one], %%ymm14\n\t"
      "vbroadcastss %[one], %%ymm15\n\t" ST_REP12(ST_ZERO_Y)
      "1:\n\t" ST_REP12(ST_FMA_Y)
      "dec %[n]\n\t"
      "jnz 1b\n\t"
      "vpxor %%ymm13, %%ymm13, %%ymm13\n\t" ST_REP12(ST_SUM_Y)
      "vmovss %%xmm13, %[out]\n\t"
      : [n] "+r"(iters), [out] "=m"(*out)
      : [one] "m"(one)
      : ST_REP12(ST_CLOBBER_Y) "xmm13", "xmm14", "xmm15", "cc");
}

using Probe = void (*)(std::int64_t, float*);

// Best rate (GFLOP/s) of `rounds` runs of about `seconds` each. flops_per_iter:
// FLOPs of one loop iteration; lane_gain: what one iteration adds to a lane's sum
// over the chains (checked exactly; iteration counts keep it below 2^24).
double best_rate(Probe probe, double flops_per_iter, double lane_gain, double seconds, int rounds,
                 const char* name) {
  using clock = std::chrono::steady_clock;
  std::int64_t iters = 1 << 12;
  float sum = 0;
  // Calibrate: grow the iteration count until one run takes about `seconds`.
  for (;;) {
    const auto t0 = clock::now();
    probe(iters, &sum);
    const double dt = std::chrono::duration<double>(clock::now() - t0).count();
    if (dt >= seconds || iters >= (std::int64_t{1} << 18)) {
      if (dt < seconds && dt > 0) iters = std::max<std::int64_t>(iters, static_cast<std::int64_t>(iters * seconds / dt));
      break;
    }
    iters *= 2;
  }
  double best = 0;
  const std::int64_t per_call = std::int64_t{1} << 18;  // keeps each lane's sum exact in fp32
  for (int r = 0; r < rounds; ++r) {
    std::int64_t left = iters;
    const auto t0 = clock::now();
    while (left > 0) {
      const std::int64_t n = std::min(left, per_call);
      probe(n, &sum);
      SHARDTRAIN_CHECK(static_cast<double>(sum) == lane_gain * static_cast<double>(n),
                       std::string("core peak probe ") + name + ": the chains hold " + std::to_string(sum) +
                           " after " + std::to_string(n) + " iterations, expected " +
                           std::to_string(lane_gain * static_cast<double>(n)));
      left -= n;
    }
    const double dt = std::chrono::duration<double>(clock::now() - t0).count();
    best = std::max(best, flops_per_iter * static_cast<double>(iters) / dt / 1e9);
  }
  return best;
}

}  // namespace

CorePeak measure_core_peak(double seconds, int rounds) {
  SHARDTRAIN_CHECK(seconds > 0 && rounds >= 1, "measure_core_peak: seconds > 0 and rounds >= 1");
  const double each = seconds / (2.0 * rounds);
  CorePeak p;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    // 24 instructions x 16 lanes x 2 FLOPs; each lane of each chain gains 1.
    p.fp32_gflops = best_rate(fma_avx512, 24.0 * 16 * 2, 24.0, each, rounds, "fp32 avx512");
    p.fp32_isa = "avx512";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    p.fp32_gflops = best_rate(fma_avx2, 12.0 * 8 * 2, 12.0, each, rounds, "fp32 avx2");
    p.fp32_isa = "avx2";
  } else {
    p.fp32_isa = "none";
  }
  if (__builtin_cpu_supports("avx512bf16")) {
    // 24 instructions x 16 lanes x 2 pairs x 2 FLOPs; each lane gains 2 per chain.
    p.bf16_gflops = best_rate(dpbf16_avx512, 24.0 * 16 * 4, 48.0, each, rounds, "bf16 avx512");
  }
  return p;
}

}  // namespace shardtrain
