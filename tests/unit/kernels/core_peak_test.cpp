// shardtrain/tests/unit/kernels/core_peak_test.cpp
// kernels/core_peak.hpp: the FLOPs each unit's instruction does (from the ISA
// manuals, as literals), the choice of the floors' units for every CPU kind and
// oneDNN ISA (a pure function), and the probe on this CPU: every unit the CPU has
// measured (its arithmetic checked exactly inside the probe), the units chosen
// matching this CPU's cpuid and oneDNN's effective ISA, and the labels naming them.
// This project's test machine is an AVX2 Zen 3: the AVX-512, AVX512-FP16 and AMX
// probes do not run here; on a CPU that has them this same test runs them.
#include "kernels/core_peak.hpp"

#include <gtest/gtest.h>

#include <iostream>
#include <string>

#include "kernels/cpu_compute.hpp"

namespace shardtrain {
namespace {

TEST(CorePeak, FlopsPerInstruction) {
  EXPECT_EQ(peak_unit_flops_per_instruction(PeakUnit::Avx2Fma), 8 * 2);           // 8 fp32 lanes, a*b+c
  EXPECT_EQ(peak_unit_flops_per_instruction(PeakUnit::Avx512Fma), 16 * 2);        // 16 lanes
  EXPECT_EQ(peak_unit_flops_per_instruction(PeakUnit::Avx512Bf16Dot), 16 * 2 * 2);  // 16 lanes x 2 bf16 pairs
  EXPECT_EQ(peak_unit_flops_per_instruction(PeakUnit::Avx512Fp16Fma), 32 * 2);    // 32 fp16 lanes
  EXPECT_EQ(peak_unit_flops_per_instruction(PeakUnit::AmxBf16), 16384);           // 16x32 x 32x16 -> 16x16
  EXPECT_EQ(peak_unit_flops_per_instruction(PeakUnit::None), 0);
}

CpuFeatures features(bool avx2, bool avx512, bool bf16, bool amx) {
  CpuFeatures f;
  f.cpu_avx2_fma = f.avx2_fma = avx2;
  f.cpu_avx512f = f.avx512f = avx512;
  f.cpu_avx512_bf16 = f.avx512_bf16 = bf16;
  f.cpu_amx_tile = f.amx_tile = f.cpu_amx_bf16 = f.amx_bf16 = amx;
  return f;
}

TEST(CorePeak, FloorUnitsPerCpuAndOnednnIsa) {
  struct Case {
    const char* cpu;
    CpuFeatures f;
    bool granted;
    std::uint32_t isa;
    PeakUnit fp32, bf16;
    bool native;
  };
  const CpuFeatures zen3 = features(true, false, false, false), zen4 = features(true, true, true, false),
                    xeon = features(true, true, true, true);
  const Case cases[] = {
      {"Zen 3", zen3, false, kOnednnIsaAvx2, PeakUnit::Avx2Fma, PeakUnit::Avx2Fma, false},
      {"Zen 4/5", zen4, false, kOnednnIsaAvx512CoreBf16, PeakUnit::Avx512Fma, PeakUnit::Avx512Bf16Dot, true},
      {"Xeon AMX", xeon, true, kOnednnIsaAvx512CoreAmx, PeakUnit::Avx512Fma, PeakUnit::AmxBf16, true},
      // Linux refused AMX (oneDNN then reports no AMX either): vdpbf16ps.
      {"Xeon, AMX refused", xeon, false, kOnednnIsaAvx512CoreBf16, PeakUnit::Avx512Fma, PeakUnit::Avx512Bf16Dot, true},
      // Refused to our probe while oneDNN reports AMX (not seen: both ask in the same
      // process): AMX cannot be measured, so the next unit, vdpbf16ps.
      {"Xeon, AMX refused, oneDNN at AMX", xeon, false, kOnednnIsaAvx512CoreAmx, PeakUnit::Avx512Fma,
       PeakUnit::Avx512Bf16Dot, true},
      // A CPU whose OS does not enable AMX state: no AMX whatever oneDNN says.
      {"Xeon, no OS AMX state", features(true, true, true, false), true, kOnednnIsaAvx512CoreAmx, PeakUnit::Avx512Fma,
       PeakUnit::Avx512Bf16Dot, true},
      // ONEDNN_MAX_CPU_ISA caps: the floor follows what oneDNN runs.
      {"Xeon, oneDNN at AVX512_CORE_BF16", xeon, true, kOnednnIsaAvx512CoreBf16, PeakUnit::Avx512Fma,
       PeakUnit::Avx512Bf16Dot, true},
      {"Xeon, oneDNN at AVX512_CORE", xeon, true, kOnednnIsaAvx512Core, PeakUnit::Avx512Fma, PeakUnit::Avx512Fma,
       false},
      {"Xeon, oneDNN at AVX2", xeon, true, kOnednnIsaAvx2, PeakUnit::Avx2Fma, PeakUnit::Avx2Fma, false},
      {"Zen 4, oneDNN at AVX512_CORE", zen4, false, kOnednnIsaAvx512Core, PeakUnit::Avx512Fma, PeakUnit::Avx512Fma,
       false},
      {"no AVX2", features(false, false, false, false), false, 0x3, PeakUnit::None, PeakUnit::None, false},
  };
  for (const Case& c : cases) {
    const FloorUnits u = choose_floor_units(c.f, c.granted, c.isa);
    EXPECT_EQ(peak_unit_token(u.fp32), std::string(peak_unit_token(c.fp32))) << c.cpu;
    EXPECT_EQ(peak_unit_token(u.bf16), std::string(peak_unit_token(c.bf16))) << c.cpu;
    EXPECT_EQ(u.bf16_native, c.native) << c.cpu;
  }
}

TEST(CorePeak, LabelsNameTheUnit) {
  EXPECT_EQ(floor_unit_label("bf16", PeakUnit::AmxBf16, true), "bf16 on AMX tdpbf16ps");
  EXPECT_EQ(floor_unit_label("bf16", PeakUnit::Avx512Bf16Dot, true), "bf16 on AVX512-BF16 vdpbf16ps");
  EXPECT_EQ(floor_unit_label("fp32", PeakUnit::Avx512Fma, true), "fp32 on AVX-512 FMA vfmadd231ps");
  EXPECT_EQ(floor_unit_label("bf16", PeakUnit::Avx2Fma, false),
            "bf16 on AVX2 FMA vfmadd231ps (no native bf16: bf16 GEMMs run in fp32 on converted tiles)");
}

// The probe on this CPU: the units it measured are the ones its cpuid has, the
// floors use what oneDNN runs, and every rate the CPU has is positive (each
// chain's sum checked exactly inside measure_core_peak, which throws otherwise).
TEST(CorePeak, ThisCpu) {
  const CorePeak p = measure_core_peak(0.1, 2);
  const CpuFeatures f = cpu_features();
  const unsigned isa = cpu_onednn_isa_bits();
  const AmxPermission amx = request_amx_permission();
  std::cout << "this CPU: " << describe_cpu_features(f) << "; oneDNN ISA " << p.onednn_isa << "; AMX: " << p.amx
            << "\n  " << p.fp32_floor_label() << " " << p.fp32_gflops << " GFLOP/s\n  " << p.bf16_floor_label() << " "
            << p.bf16_floor_gflops << " GFLOP/s\n  vdpbf16ps " << p.bf16_gflops << ", vfmadd231ph " << p.fp16_gflops
            << ", tdpbf16ps " << p.amx_bf16_gflops << " GFLOP/s\n";
  EXPECT_EQ(describe_cpu_features(p.cpu), describe_cpu_features(f));
  EXPECT_EQ(p.amx, amx.what);
  // fp32: AVX-512 where the CPU and oneDNN have it, else AVX2 (this Zen 3).
  const bool z = f.avx512f && (isa & kOnednnIsaAvx512Core) == kOnednnIsaAvx512Core;
  EXPECT_EQ(peak_unit_token(p.units.fp32), std::string(z ? "avx512-fma" : f.avx2_fma ? "avx2-fma" : "none"));
  EXPECT_EQ(p.fp32_isa, z ? "avx512" : f.avx2_fma ? "avx2" : "none");
  EXPECT_GT(p.fp32_gflops, 0);
  // Every unit the CPU has is measured; none it lacks.
  EXPECT_EQ(p.bf16_gflops > 0, f.avx512_bf16);
  EXPECT_EQ(p.fp16_gflops > 0, f.avx512_fp16);
  EXPECT_EQ(p.amx_bf16_gflops > 0, f.amx_bf16 && amx.granted);
  // bf16: the unit oneDNN runs bf16 GEMMs on, native exactly where oneDNN's ISA
  // has native bf16 (cpu_bf16_native: the kernels' own switch).
  EXPECT_EQ(p.units.bf16_native, cpu_bf16_native());
  const char* bf16 = !cpu_bf16_native() ? peak_unit_token(p.units.fp32)
                     : (f.amx_bf16 && amx.granted && (isa & kOnednnIsaAvx512CoreAmx) == kOnednnIsaAvx512CoreAmx)
                         ? "amx-tdpbf16ps"
                         : "avx512bf16-vdpbf16ps";
  EXPECT_EQ(peak_unit_token(p.units.bf16), std::string(bf16));
  const double want = p.units.bf16 == PeakUnit::AmxBf16         ? p.amx_bf16_gflops
                      : p.units.bf16 == PeakUnit::Avx512Bf16Dot ? p.bf16_gflops
                                                                 : p.fp32_gflops;
  EXPECT_EQ(p.bf16_floor_gflops, want);
  EXPECT_GT(p.bf16_floor_gflops, 0);
  if (!p.units.bf16_native) {
    EXPECT_NE(p.bf16_floor_label().find("no native bf16"), std::string::npos) << p.bf16_floor_label();
  }
}

}  // namespace
}  // namespace shardtrain
