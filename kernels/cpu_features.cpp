// shardtrain/kernels/cpu_features.cpp
// Owns the cpuid / XCR0 decoding and the AMX permission request of
// cpu_features.hpp. Invariant: the bit positions live only in this file's
// constants (Intel SDM vol. 2A, CPUID; vol. 1 13.3 for XCR0).
#include "kernels/cpu_features.hpp"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace shardtrain {
namespace {

constexpr bool bit(std::uint64_t reg, int n) { return ((reg >> n) & 1u) != 0; }

// cpuid(1).ECX
constexpr int kFma = 12, kOsxsave = 27, kAvx = 28;
// cpuid(7,0).EBX
constexpr int kAvx2 = 5, kAvx512f = 16;
// cpuid(7,0).EDX
constexpr int kAmxBf16 = 22, kAvx512Fp16 = 23, kAmxTile = 24;
// cpuid(7,1).EAX
constexpr int kAvx512Bf16 = 5;
// XCR0: SSE 1, AVX 2; opmask 5, ZMM_Hi256 6, Hi16_ZMM 7; XTILECFG 17, XTILEDATA 18.
constexpr std::uint64_t kXcr0Avx = (1u << 1) | (1u << 2);
constexpr std::uint64_t kXcr0Avx512 = kXcr0Avx | (1u << 5) | (1u << 6) | (1u << 7);
constexpr std::uint64_t kXcr0Amx = (1u << 17) | (1u << 18);

// Linux's arch_prctl code and the state component of AMX tile data
// (arch/x86/include/uapi/asm/prctl.h; XFEATURE_XTILEDATA).
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

}  // namespace

CpuFeatures decode_cpu_features(const CpuidRegisters& r) {
  CpuFeatures f;
  const bool leaf1 = r.max_leaf >= 1, leaf7 = r.max_leaf >= 7, leaf7_1 = leaf7 && r.leaf7_max_subleaf >= 1;
  const std::uint32_t ecx1 = leaf1 ? r.leaf1_ecx : 0;
  const std::uint32_t ebx7 = leaf7 ? r.leaf7_ebx : 0, edx7 = leaf7 ? r.leaf7_edx : 0;
  const std::uint32_t eax71 = leaf7_1 ? r.leaf7_1_eax : 0;
  const std::uint64_t xcr0 = bit(ecx1, kOsxsave) ? r.xcr0 : 0;

  f.cpu_avx2_fma = bit(ecx1, kAvx) && bit(ecx1, kFma) && bit(ebx7, kAvx2);
  f.cpu_avx512f = bit(ebx7, kAvx512f);
  f.cpu_avx512_bf16 = f.cpu_avx512f && bit(eax71, kAvx512Bf16);
  f.cpu_avx512_fp16 = f.cpu_avx512f && bit(edx7, kAvx512Fp16);
  f.cpu_amx_tile = bit(edx7, kAmxTile);
  f.cpu_amx_bf16 = f.cpu_amx_tile && bit(edx7, kAmxBf16);

  f.os_avx = (xcr0 & kXcr0Avx) == kXcr0Avx;
  f.os_avx512 = (xcr0 & kXcr0Avx512) == kXcr0Avx512;
  f.os_amx = (xcr0 & kXcr0Amx) == kXcr0Amx;

  f.avx2_fma = f.cpu_avx2_fma && f.os_avx;
  f.avx512f = f.cpu_avx512f && f.os_avx512;
  f.avx512_bf16 = f.cpu_avx512_bf16 && f.os_avx512;
  f.avx512_fp16 = f.cpu_avx512_fp16 && f.os_avx512;
  f.amx_tile = f.cpu_amx_tile && f.os_amx;
  f.amx_bf16 = f.cpu_amx_bf16 && f.os_amx;
  return f;
}

CpuidRegisters read_cpuid_registers() {
  CpuidRegisters r;
  unsigned a = 0, b = 0, c = 0, d = 0;
  __cpuid(0, a, b, c, d);
  r.max_leaf = a;
  if (r.max_leaf >= 1) {
    __cpuid(1, a, b, c, d);
    r.leaf1_ecx = c;
  }
  if (r.max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    r.leaf7_max_subleaf = a;
    r.leaf7_ebx = b;
    r.leaf7_edx = d;
    if (r.leaf7_max_subleaf >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      r.leaf7_1_eax = a;
    }
  }
  if (bit(r.leaf1_ecx, kOsxsave)) {
    std::uint32_t lo = 0, hi = 0;
    asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    r.xcr0 = (std::uint64_t{hi} << 32) | lo;
  }
  return r;
}

CpuFeatures cpu_features() { return decode_cpu_features(read_cpuid_registers()); }

std::string describe_cpu_features(const CpuFeatures& f) {
  std::string s;
  auto add = [&s](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ',';
    s += name;
  };
  add(f.avx2_fma, "avx2,fma");
  add(f.avx512f, "avx512f");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx512_fp16, "avx512_fp16");
  add(f.amx_tile, "amx_tile");
  add(f.amx_bf16, "amx_bf16");
  if (s.empty()) s = "none";
  auto note = [&s](bool cpu, bool usable, const char* name) {
    if (cpu && !usable) s += std::string("(") + name + ":no-OS-state)";
  };
  note(f.cpu_avx512f, f.avx512f, "avx512f");
  note(f.cpu_amx_tile, f.amx_tile, "amx_tile");
  return s;
}

AmxPermission request_amx_permission_now() {
  AmxPermission p;
  errno = 0;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0) {
    p.granted = true;
    p.what = "granted";
    return p;
  }
  p.error = errno;
  p.what = "refused: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) errno " + std::to_string(p.error) + " (" +
           std::strerror(p.error) + ")";
  return p;
}

AmxPermission request_amx_permission() {
  static const AmxPermission answer = [] {
    const CpuFeatures f = cpu_features();
    if (!f.cpu_amx_tile) return AmxPermission{false, 0, "no AMX-TILE on this CPU"};
    if (!f.amx_tile) return AmxPermission{false, 0, "AMX-TILE present but the OS does not enable its state (XCR0 bits 17-18)"};
    return request_amx_permission_now();
  }();
  return answer;
}

}  // namespace shardtrain
