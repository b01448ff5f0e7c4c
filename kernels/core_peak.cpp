// shardtrain/kernels/core_peak.cpp
// Owns the instruction-throughput probes of core_peak.hpp and the choice of the
// floors' units. Invariants: each probe is one inline-assembly loop whose only
// work is the instruction measured, on registers the asm block declares
// clobbered; every output of every chain is stored and summed, and the sum is
// checked exactly against the unit's geometry (kGeometry), the same geometry that
// counts its FLOPs, so a loop that did not run its count, or a wrong
// FLOPs-per-instruction, cannot report a rate. The AVX-512, AVX512-FP16 and AMX
// probes are compiled everywhere (target attributes; the assembler knows them)
// and run only where cpu_features() says so; this project's test machine (AVX2
// Zen 3) runs only the AVX2 one.
#include "kernels/core_peak.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "kernels/cpu_compute.hpp"

namespace shardtrain {
namespace {

#define ST_REP24(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) \
                    M(12) M(13) M(14) M(15) M(16) M(17) M(18) M(19) M(20) M(21) M(22) M(23)
#define ST_REP12(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11)

// What one instruction of a unit computes: `outputs` results (vector lanes or
// tile elements), each the sum of `products` products; the probe runs `chains`
// independent accumulators. max_iters: iterations per probe call that keep every
// output and the sum over the chains exact in the accumulator's format.
struct Geometry {
  int outputs;
  int products;
  int chains;
  std::int64_t max_iters;
};

constexpr Geometry geometry(PeakUnit u) {
  switch (u) {
    case PeakUnit::Avx2Fma: return {8, 1, 12, std::int64_t{1} << 18};
    case PeakUnit::Avx512Fma: return {16, 1, 24, std::int64_t{1} << 18};
    case PeakUnit::Avx512Bf16Dot: return {16, 2, 24, std::int64_t{1} << 18};
    // fp16 chains: integers are exact up to 2048.
    case PeakUnit::Avx512Fp16Fma: return {32, 1, 24, std::int64_t{1} << 11};
    // Each fp32 tile element gains 32 an instruction: exact up to 2^24 / 32 = 2^19.
    case PeakUnit::AmxBf16: return {16 * 16, 32, 6, std::int64_t{1} << 18};
    case PeakUnit::None: break;
  }
  return {0, 0, 0, 0};
}

double lane_sum(const float* v, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += v[i];
  return s;
}

// Each probe runs `iters` iterations (every chain once per iteration) from zeroed
// chains and returns the sum of every output of every chain.

// --- AVX-512: 24 chains in zmm0-23, operands in zmm30/zmm31, sum in zmm29 ------
#define ST_ZERO_Z(i) "vpxord %%zmm" #i ", %%zmm" #i ", %%zmm" #i "\n\t"
#define ST_FMA_Z(i) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #i "\n\t"
#define ST_DP_Z(i) "vdpbf16ps %%zmm30, %%zmm31, %%zmm" #i "\n\t"
#define ST_FMAPH_Z(i) "vfmadd231ph %%zmm30, %%zmm31, %%zmm" #i "\n\t"
#define ST_SUM_Z(i) "vaddps %%zmm" #i ", %%zmm29, %%zmm29\n\t"
// fp16 chains: both halves of each widened to fp32 (exact) into zmm29.
#define ST_SUMPH_Z(i) "vcvtph2ps %%ymm" #i ", %%zmm28\n\t" \
                      "vaddps %%zmm28, %%zmm29, %%zmm29\n\t" \
                      "vextracti64x4 $1, %%zmm" #i ", %%ymm28\n\t" \
                      "vcvtph2ps %%ymm28, %%zmm28\n\t" \
                      "vaddps %%zmm28, %%zmm29, %%zmm29\n\t"
#define ST_CLOBBER_Z(i) "xmm" #i,

__attribute__((target("avx512f"))) double fma_avx512(std::int64_t iters) {
  const float one = 1.0f;
  float out[16];
  asm volatile(
      "vbroadcastss %[one], %%zmm30\n\t"
      "vbroadcastss %[one], %%zmm31\n\t" ST_REP24(ST_ZERO_Z)
      "1:\n\t" ST_REP24(ST_FMA_Z)
      "dec %[n]\n\t"
      "jnz 1b\n\t"
      "vpxord %%zmm29, %%zmm29, %%zmm29\n\t" ST_REP24(ST_SUM_Z)
      "vmovups %%zmm29, %[out]\n\t"
      : [n] "+r"(iters), [out] "=m"(out)
      : [one] "m"(one)
      : ST_REP24(ST_CLOBBER_Z) "xmm29", "xmm30", "xmm31", "cc");
  return lane_sum(out, 16);
}

// bf16 1.0 is 0x3F80; a dword of two of them is 0x3F803F80.
__attribute__((target("avx512f,avx512bf16"))) double dpbf16_avx512(std::int64_t iters) {
  const std::uint32_t ones = 0x3F803F80u;
  float out[16];
  asm volatile(
      "vpbroadcastd %[ones], %%zmm30\n\t"
      "vpbroadcastd %[ones], %%zmm31\n\t" ST_REP24(ST_ZERO_Z)
      "1:\n\t" ST_REP24(ST_DP_Z)
      "dec %[n]\n\t"
      "jnz 1b\n\t"
      "vpxord %%zmm29, %%zmm29, %%zmm29\n\t" ST_REP24(ST_SUM_Z)
      "vmovups %%zmm29, %[out]\n\t"
      : [n] "+r"(iters), [out] "=m"(out)
      : [ones] "m"(ones)
      : ST_REP24(ST_CLOBBER_Z) "xmm29", "xmm30", "xmm31", "cc");
  return lane_sum(out, 16);
}

// fp16 1.0 is 0x3C00.
__attribute__((target("avx512f,avx512bw,avx512fp16"))) double fmaph_avx512(std::int64_t iters) {
  const std::uint32_t ones = 0x3C003C00u;
  float out[16];
  asm volatile(
      "vpbroadcastd %[ones], %%zmm30\n\t"
      "vpbroadcastd %[ones], %%zmm31\n\t" ST_REP24(ST_ZERO_Z)
      "1:\n\t" ST_REP24(ST_FMAPH_Z)
      "dec %[n]\n\t"
      "jnz 1b\n\t"
      "vpxord %%zmm29, %%zmm29, %%zmm29\n\t" ST_REP24(ST_SUMPH_Z)
      "vmovups %%zmm29, %[out]\n\t"
      : [n] "+r"(iters), [out] "=m"(out)
      : [ones] "m"(ones)
      : ST_REP24(ST_CLOBBER_Z) "xmm28", "xmm29", "xmm30", "xmm31", "cc");
  return lane_sum(out, 16);
}

// --- AVX2 + FMA: 12 chains in ymm0-11, operands in ymm14/ymm15, sum in ymm13 ---
#define ST_ZERO_Y(i) "vpxor %%ymm" #i ", %%ymm" #i ", %%ymm" #i "\n\t"
#define ST_FMA_Y(i) "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #i "\n\t"
#define ST_SUM_Y(i) "vaddps %%ymm" #i ", %%ymm13, %%ymm13\n\t"
#define ST_CLOBBER_Y(i) "xmm" #i,

__attribute__((target("avx2,fma"))) double fma_avx2(std::int64_t iters) {
  const float one = 1.0f;
  float out[8];
  asm volatile(
      "vbroadcastss %[one], %%ymm14\n\t"
      "vbroadcastss %[one], %%ymm15\n\t" ST_REP12(ST_ZERO_Y)
      "1:\n\t" ST_REP12(ST_FMA_Y)
      "dec %[n]\n\t"
      "jnz 1b\n\t"
      "vpxor %%ymm13, %%ymm13, %%ymm13\n\t" ST_REP12(ST_SUM_Y)
      "vmovups %%ymm13, %[out]\n\t"
      : [n] "+r"(iters), [out] "=m"(out)
      : [one] "m"(one)
      : ST_REP12(ST_CLOBBER_Y) "xmm13", "xmm14", "xmm15", "cc");
  return lane_sum(out, 8);
}

// --- AMX-BF16: 6 accumulator tiles tmm0-5 (16 rows x 16 fp32), A in tmm6 and B
// in tmm7 (16 rows x 32 bf16 each, all ones): tdpbf16ps adds 32 products of 1 x 1
// to every element. Needs request_amx_permission() granted first.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
  std::uint16_t colsb[16] = {};  // bytes per row of each tile
  std::uint8_t rows[16] = {};
};

#define ST_TZERO(i) "tilezero %%tmm" #i "\n\t"
#define ST_TDP(i) "tdpbf16ps %%tmm7, %%tmm6, %%tmm" #i "\n\t"

__attribute__((target("amx-tile,amx-bf16"))) double tdpbf16_amx(std::int64_t iters) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  alignas(64) std::uint16_t ones[16 * 32];
  std::fill(ones, ones + 16 * 32, std::uint16_t{0x3F80});
  alignas(64) float out[6][16 * 16];
  const std::int64_t stride = 64;
  asm volatile(
      "ldtilecfg %[cfg]\n\t"
      "tileloadd (%[a],%[s],1), %%tmm6\n\t"
      "tileloadd (%[a],%[s],1), %%tmm7\n\t"
      ST_TZERO(0) ST_TZERO(1) ST_TZERO(2) ST_TZERO(3) ST_TZERO(4) ST_TZERO(5)
      "1:\n\t"
      ST_TDP(0) ST_TDP(1) ST_TDP(2) ST_TDP(3) ST_TDP(4) ST_TDP(5)
      "dec %[n]\n\t"
      "jnz 1b\n\t"
      "tilestored %%tmm0, (%[c0],%[s],1)\n\t"
      "tilestored %%tmm1, (%[c1],%[s],1)\n\t"
      "tilestored %%tmm2, (%[c2],%[s],1)\n\t"
      "tilestored %%tmm3, (%[c3],%[s],1)\n\t"
      "tilestored %%tmm4, (%[c4],%[s],1)\n\t"
      "tilestored %%tmm5, (%[c5],%[s],1)\n\t"
      "tilerelease\n\t"
      : [n] "+r"(iters)
      : [cfg] "m"(cfg), [a] "r"(ones), [s] "r"(stride), [c0] "r"(out[0]), [c1] "r"(out[1]), [c2] "r"(out[2]),
        [c3] "r"(out[3]), [c4] "r"(out[4]), [c5] "r"(out[5]), "m"(ones)
      : "memory", "cc");
  return lane_sum(&out[0][0], 6 * 16 * 16);
}

using Probe = double (*)(std::int64_t);

// Best rate (GFLOP/s) of `rounds` runs of about `seconds` each; every call's sum
// checked against the unit's geometry.
double best_rate(PeakUnit unit, Probe probe, double seconds, int rounds) {
  using clock = std::chrono::steady_clock;
  const Geometry g = geometry(unit);
  const double flops_per_iter = static_cast<double>(g.chains) * peak_unit_flops_per_instruction(unit);
  const double gain_per_iter = static_cast<double>(g.chains) * g.outputs * g.products;
  auto run = [&](std::int64_t n) {
    const double sum = probe(n);
    SHARDTRAIN_CHECK(sum == gain_per_iter * static_cast<double>(n),
                     std::string("core peak probe ") + peak_unit_name(unit) + ": the chains' outputs sum to " +
                         std::to_string(sum) + " after " + std::to_string(n) + " iterations, expected " +
                         std::to_string(gain_per_iter * static_cast<double>(n)) + " (" + std::to_string(g.chains) +
                         " chains x " + std::to_string(g.outputs) + " outputs x " + std::to_string(g.products) +
                         " products of 1 x 1 an iteration)");
  };
  // Calibrate: grow the iteration count until one run takes about `seconds`.
  std::int64_t iters = std::min<std::int64_t>(1 << 10, g.max_iters);
  for (;;) {
    std::int64_t left = iters;
    const auto t0 = clock::now();
    while (left > 0) {
      const std::int64_t n = std::min(left, g.max_iters);
      run(n);
      left -= n;
    }
    const double dt = std::chrono::duration<double>(clock::now() - t0).count();
    if (dt >= seconds || iters >= (std::int64_t{1} << 24)) break;
    if (dt > seconds / 8) {
      iters = static_cast<std::int64_t>(static_cast<double>(iters) * seconds / dt) + 1;
      break;
    }
    iters *= 2;
  }
  double best = 0;
  for (int r = 0; r < rounds; ++r) {
    std::int64_t left = iters;
    const auto t0 = clock::now();
    while (left > 0) {
      const std::int64_t n = std::min(left, g.max_iters);
      run(n);
      left -= n;
    }
    const double dt = std::chrono::duration<double>(clock::now() - t0).count();
    best = std::max(best, flops_per_iter * static_cast<double>(iters) / dt / 1e9);
  }
  return best;
}

}  // namespace

const char* peak_unit_token(PeakUnit u) {
  switch (u) {
    case PeakUnit::Avx2Fma: return "avx2-fma";
    case PeakUnit::Avx512Fma: return "avx512-fma";
    case PeakUnit::Avx512Bf16Dot: return "avx512bf16-vdpbf16ps";
    case PeakUnit::Avx512Fp16Fma: return "avx512fp16-vfmadd231ph";
    case PeakUnit::AmxBf16: return "amx-tdpbf16ps";
    case PeakUnit::None: break;
  }
  return "none";
}

const char* peak_unit_name(PeakUnit u) {
  switch (u) {
    case PeakUnit::Avx2Fma: return "AVX2 FMA vfmadd231ps";
    case PeakUnit::Avx512Fma: return "AVX-512 FMA vfmadd231ps";
    case PeakUnit::Avx512Bf16Dot: return "AVX512-BF16 vdpbf16ps";
    case PeakUnit::Avx512Fp16Fma: return "AVX512-FP16 vfmadd231ph";
    case PeakUnit::AmxBf16: return "AMX tdpbf16ps";
    case PeakUnit::None: break;
  }
  return "none";
}

double peak_unit_flops_per_instruction(PeakUnit u) {
  const Geometry g = geometry(u);
  return 2.0 * g.outputs * g.products;
}

FloorUnits choose_floor_units(const CpuFeatures& cpu, bool amx_granted, std::uint32_t onednn_isa) {
  auto has = [onednn_isa](std::uint32_t isa) { return (onednn_isa & isa) == isa; };
  FloorUnits u;
  if (cpu.avx512f && has(kOnednnIsaAvx512Core)) u.fp32 = PeakUnit::Avx512Fma;
  else if (cpu.avx2_fma) u.fp32 = PeakUnit::Avx2Fma;  // also under a oneDNN capped below AVX2: the core's bound
  else if (cpu.avx512f) u.fp32 = PeakUnit::Avx512Fma;
  if (cpu.amx_bf16 && amx_granted && has(kOnednnIsaAvx512CoreAmx)) {
    u.bf16 = PeakUnit::AmxBf16;
    u.bf16_native = true;
  } else if (cpu.avx512_bf16 && has(kOnednnIsaAvx512CoreBf16)) {
    u.bf16 = PeakUnit::Avx512Bf16Dot;
    u.bf16_native = true;
  } else {
    u.bf16 = u.fp32;
  }
  return u;
}

std::string floor_unit_label(const char* precision, PeakUnit unit, bool native) {
  std::string s = std::string(precision) + " on " + peak_unit_name(unit);
  if (!native) s += " (no native bf16: bf16 GEMMs run in fp32 on converted tiles)";
  return s;
}

CorePeak measure_core_peak(double seconds, int rounds) {
  SHARDTRAIN_CHECK(seconds > 0 && rounds >= 1, "measure_core_peak: seconds > 0 and rounds >= 1");
  const double each = seconds / (2.0 * rounds);
  CorePeak p;
  p.cpu = cpu_features();
  const AmxPermission amx = request_amx_permission();
  p.amx = amx.what;
  p.amx_error = amx.error;
  p.onednn_isa = cpu_onednn_isa_name();
  p.units = choose_floor_units(p.cpu, amx.granted, cpu_onednn_isa_bits());
  switch (p.units.fp32) {
    case PeakUnit::Avx512Fma:
      p.fp32_gflops = best_rate(PeakUnit::Avx512Fma, fma_avx512, each, rounds);
      p.fp32_isa = "avx512";
      break;
    case PeakUnit::Avx2Fma:
      p.fp32_gflops = best_rate(PeakUnit::Avx2Fma, fma_avx2, each, rounds);
      p.fp32_isa = "avx2";
      break;
    default: p.fp32_isa = "none";
  }
  if (p.cpu.avx512_bf16) p.bf16_gflops = best_rate(PeakUnit::Avx512Bf16Dot, dpbf16_avx512, each, rounds);
  if (p.cpu.avx512_fp16) p.fp16_gflops = best_rate(PeakUnit::Avx512Fp16Fma, fmaph_avx512, each, rounds);
  if (p.cpu.amx_bf16 && amx.granted) p.amx_bf16_gflops = best_rate(PeakUnit::AmxBf16, tdpbf16_amx, each, rounds);
  switch (p.units.bf16) {
    case PeakUnit::AmxBf16: p.bf16_floor_gflops = p.amx_bf16_gflops; break;
    case PeakUnit::Avx512Bf16Dot: p.bf16_floor_gflops = p.bf16_gflops; break;
    default: p.bf16_floor_gflops = p.fp32_gflops;
  }
  return p;
}

}  // namespace shardtrain
