// shardtrain/kernels/core_peak.hpp
// Owns the measurement of this core's own arithmetic limit, the denominator of
// every "FLOP floor" shardtrain prints (`trainer --plan`, `--profile`,
// tests/bench/core_peak, share/doc/benchmarks.md): not a library's GEMM rate,
// the rate of the instruction that the heavy ops' library (oneDNN) runs on.
// Which units exist comes from cpuid and XCR0 (cpu_features.hpp). One probe per
// unit, each independent accumulator chains (more than latency x issue width of
// any current x86 core) of one instruction, written as inline assembly so that
// the compiler can neither spill them nor drop them, run on the calling thread:
//   AVX2 FMA            vfmadd231ps ymm, 12 chains: 8 lanes x 1 product x 2 FLOPs
//   AVX-512 FMA         vfmadd231ps zmm, 24 chains: 16 x 1 x 2
//   AVX512-BF16         vdpbf16ps zmm,   24 chains: 16 fp32 lanes x 2 bf16 pairs x 2
//   AVX512-FP16         vfmadd231ph zmm, 24 chains: 32 x 1 x 2
//   AMX-BF16            tdpbf16ps, 6 accumulator tiles: 16x16 fp32 outputs x 32
//                       bf16 products x 2 = 16384 FLOPs an instruction (Linux:
//                       after arch_prctl's grant, cpu_features.hpp)
// Each measurement checks its own arithmetic: the inputs are ones and the chains
// start at 0, so after n iterations the sum of EVERY output of every chain must be
// exactly chains x outputs x products x n, or the call throws; the FLOPs counted
// are 2 x outputs x products per instruction, the same geometry, so a wrong
// FLOPs-per-instruction fails the check on a CPU that runs the unit.
// The floors: fp32 on the widest FMA unit that both the CPU and oneDNN's effective
// ISA (which honours ONEDNN_MAX_CPU_ISA) have; bf16 on AMX where oneDNN runs AMX
// (the CPU has it and Linux granted it), else on vdpbf16ps where oneDNN runs
// AVX512-BF16, else on the fp32 unit: without native bf16 the kernels convert
// bf16 tiles to fp32 and run fp32 GEMMs (half_tiles.hpp), and the floor says so
// (oneDNN 2.6 itself has no bf16 matmul on an AVX2 CPU: creating one fails with
// "could not create a primitive descriptor iterator"; ONEDNN_VERBOSE there says
// "isa:Intel AVX2").
// Not run here: the AVX-512, AVX512-FP16 and AMX probes need such a CPU (this
// project's test machine is an AVX2 Zen 3); on one, the same tests run them.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cpu_features.hpp"

namespace shardtrain {

enum class PeakUnit : unsigned char { None, Avx2Fma, Avx512Fma, Avx512Bf16Dot, Avx512Fp16Fma, AmxBf16 };

// "avx2-fma", "avx512-fma", "avx512bf16-vdpbf16ps", "avx512fp16-vfmadd231ph",
// "amx-tdpbf16ps", "none": one token for machine-read lines.
const char* peak_unit_token(PeakUnit u);
// "AVX2 FMA vfmadd231ps", ..., "AMX tdpbf16ps", "none".
const char* peak_unit_name(PeakUnit u);
// FLOPs of one instruction of the unit (2 x outputs x products; 0 for None).
double peak_unit_flops_per_instruction(PeakUnit u);

// oneDNN's effective-ISA values (dnnl_cpu_isa_t: bit sets, each ISA includes the
// ones below it); dnnl_context.cpp checks them against oneDNN's header.
inline constexpr std::uint32_t kOnednnIsaAvx2 = 0x7;
inline constexpr std::uint32_t kOnednnIsaAvx512Core = 0x27;
inline constexpr std::uint32_t kOnednnIsaAvx512CoreBf16 = 0xe7;
inline constexpr std::uint32_t kOnednnIsaAvx512CoreAmx = 0x3e7;

struct FloorUnits {
  PeakUnit fp32 = PeakUnit::None;
  PeakUnit bf16 = PeakUnit::None;  // the fp32 unit when !bf16_native
  bool bf16_native = false;        // bf16 GEMMs run on bf16 instructions
};

// Pure: the units the floors use for a CPU, Linux's AMX answer and oneDNN's
// effective ISA (its dnnl_cpu_isa_t bits).
FloorUnits choose_floor_units(const CpuFeatures& cpu, bool amx_granted, std::uint32_t onednn_isa);

// "fp32 on AVX2 FMA vfmadd231ps"; "bf16 on AMX tdpbf16ps"; "bf16 on AVX2 FMA
// vfmadd231ps (no native bf16: bf16 GEMMs run in fp32 on converted tiles)".
std::string floor_unit_label(const char* precision, PeakUnit unit, bool native);

struct CorePeak {
  CpuFeatures cpu;
  std::string onednn_isa;            // oneDNN's effective ISA, e.g. "AVX2", "AVX-512 AMX"
  std::string amx;                   // request_amx_permission().what
  int amx_error = 0;                 // its errno when Linux refused
  FloorUnits units;
  double fp32_gflops = 0;            // one thread, the fp32 floor unit (units.fp32)
  std::string fp32_isa;              // "avx512", "avx2" or "none": units.fp32's register width
  double bf16_gflops = 0;            // one thread, vdpbf16ps; 0 without AVX512-BF16
  double fp16_gflops = 0;            // one thread, vfmadd231ph; 0 without AVX512-FP16
  double amx_bf16_gflops = 0;        // one thread, tdpbf16ps; 0 without granted AMX-BF16
  double bf16_floor_gflops = 0;      // the rate of units.bf16 (fp32_gflops without native bf16)
  std::string fp32_floor_label() const { return floor_unit_label("fp32", units.fp32, true); }
  std::string bf16_floor_label() const { return floor_unit_label("bf16", units.bf16, units.bf16_native); }
};

// Measures every unit the CPU has on the calling thread, each the best of
// `rounds` timed runs of about `seconds` / (2 x rounds). Throws shardtrain::Error
// if a chain's result is wrong.
CorePeak measure_core_peak(double seconds = 0.3, int rounds = 5);

}  // namespace shardtrain
