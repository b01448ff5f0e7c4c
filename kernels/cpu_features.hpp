// shardtrain/kernels/cpu_features.hpp
// Owns what this CPU's vector and matrix units are, as the core-peak probe
// (core_peak.hpp) needs to know them: read from cpuid and XCR0, not from
// __builtin_cpu_supports (gcc 12 knows no AMX there).
//   AVX2 + FMA    cpuid(7,0).EBX bit 5, cpuid(1).ECX bits 12 (FMA) and 28 (AVX)
//   AVX-512F      cpuid(7,0).EBX bit 16
//   AVX512-BF16   cpuid(7,1).EAX bit 5 (vdpbf16ps)
//   AVX512-FP16   cpuid(7,0).EDX bit 23 (vfmadd231ph)
//   AMX-BF16      cpuid(7,0).EDX bit 22 (tdpbf16ps)
//   AMX-TILE      cpuid(7,0).EDX bit 24 (ldtilecfg, tileloadd, ...)
// and the OS's part (cpuid(1).ECX bit 27 OSXSAVE, then XCR0 = xgetbv(0)): AVX
// state is XCR0 bits 1-2, AVX-512 state bits 5-7 (opmask, ZMM0-15 upper halves,
// ZMM16-31), AMX state bits 17-18 (TILECFG, TILEDATA). A unit is usable only when
// the CPU has it AND the OS saves its state.
// Invariants:
//  - decode_cpu_features is a pure function of the raw registers (so a unit test
//    feeds it every CPU: tests/unit/kernels/cpu_features_test.cpp); leaves and
//    subleaves above the CPU's maximum are ignored whatever the registers hold.
//  - Linux additionally requires a process to ask for AMX's tile data state
//    (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) before its first AMX
//    instruction, or the kernel kills it with SIGILL: request_amx_permission does
//    that once per process (the kernel's grant is per process, so the answer is
//    kept in a function-local static), and a refusal is an answer with its errno,
//    never a crash.
#pragma once

#include <cstdint>
#include <string>

namespace shardtrain {

// The registers the decoding reads, as the CPU returns them.
struct CpuidRegisters {
  std::uint32_t max_leaf = 0;           // cpuid(0).EAX: the highest standard leaf
  std::uint32_t leaf1_ecx = 0;          // cpuid(1).ECX
  std::uint32_t leaf7_max_subleaf = 0;  // cpuid(7,0).EAX
  std::uint32_t leaf7_ebx = 0;          // cpuid(7,0).EBX
  std::uint32_t leaf7_edx = 0;          // cpuid(7,0).EDX
  std::uint32_t leaf7_1_eax = 0;        // cpuid(7,1).EAX
  std::uint64_t xcr0 = 0;               // xgetbv(0); 0 when OSXSAVE is clear
};

struct CpuFeatures {
  // The CPU has the instructions (cpuid), whether or not the OS enables them.
  bool cpu_avx2_fma = false, cpu_avx512f = false, cpu_avx512_bf16 = false, cpu_avx512_fp16 = false,
       cpu_amx_tile = false, cpu_amx_bf16 = false;
  // The OS saves the state (XCR0).
  bool os_avx = false, os_avx512 = false, os_amx = false;
  // Usable: the CPU has them and the OS saves their state. The AVX-512 extensions
  // need AVX-512F; AMX-BF16 needs AMX-TILE.
  bool avx2_fma = false, avx512f = false, avx512_bf16 = false, avx512_fp16 = false, amx_tile = false,
       amx_bf16 = false;
};

CpuFeatures decode_cpu_features(const CpuidRegisters& r);

// This CPU's registers (cpuid / xgetbv on the calling thread) and their decoding.
CpuidRegisters read_cpuid_registers();
CpuFeatures cpu_features();

// The usable units in /proc/cpuinfo's names, comma-separated ("avx2,fma,avx512f,
// avx512_bf16,avx512_fp16,amx_tile,amx_bf16"; "none"), then, where the CPU has a
// unit the OS does not enable, "(amx_tile: no OS state)" style notes (no spaces).
std::string describe_cpu_features(const CpuFeatures& f);

struct AmxPermission {
  bool granted = false;
  int error = 0;      // errno of a refused request; 0 otherwise
  std::string what;   // "granted", "no AMX-TILE on this CPU", "refused: arch_prctl(...) errno 95 (...)"
};

// Asks Linux once per process for AMX tile data (only where cpu_features() has a
// usable AMX-TILE; the answer is cached).
AmxPermission request_amx_permission();
// The request itself, every call, whatever the CPU: what the kernel answers
// (a CPU without AMX is refused with an errno). For the tests.
AmxPermission request_amx_permission_now();

}  // namespace shardtrain
