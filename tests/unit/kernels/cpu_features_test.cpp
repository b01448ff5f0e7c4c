// shardtrain/tests/unit/kernels/cpu_features_test.cpp
// decode_cpu_features (kernels/cpu_features.hpp) over the CPUs the trainer meets,
// from their raw cpuid / XCR0 registers written as literals (so that a wrong bit
// number in the decoder cannot agree with the test): AMD Zen 3 (this project's test
// machine, dumped here), Zen 4, Zen 5, an Intel Xeon of family 6 model 207 (AMX,
// AVX512-FP16, AVX512-BF16), the same Xeon under an OS without AMX state and
// without AVX-512 state, and the guards (OSXSAVE clear, leaf 7 or subleaf 1 beyond
// the CPU's maximum). Then every feature bit on its own: clearing it turns off
// that feature (and what needs it) only, and its neighbouring bits do not turn it on.
// And this CPU: the decoding of its own registers agrees with /proc/cpuinfo's flags
// (the kernel's own reading, which also drops what the OS does not enable), and
// the AMX permission request answers (granted only where AMX is usable) without a crash.
#include "kernels/cpu_features.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>

namespace shardtrain {
namespace {

// What the usable-feature set should be, in describe_cpu_features' order.
std::string usable(const CpuFeatures& f) {
  std::string s;
  s += f.avx2_fma ? "avx2_fma " : "";
  s += f.avx512f ? "avx512f " : "";
  s += f.avx512_bf16 ? "avx512_bf16 " : "";
  s += f.avx512_fp16 ? "avx512_fp16 " : "";
  s += f.amx_tile ? "amx_tile " : "";
  s += f.amx_bf16 ? "amx_bf16 " : "";
  return s;
}

// AMD EPYC (Zen 3, family 25 model 1) as this project's VM reports it.
CpuidRegisters zen3() { return {0x10, 0xfffa3203, 0, 0x219c07ab, 0x88000010, 0, 0x207}; }
// Zen 4: Zen 3's leaf 7 EBX plus AVX-512 F/DQ/IFMA/CD/BW/VL; subleaf 1 with AVX512-BF16 (bit 5).
CpuidRegisters zen4() { return {0x10, 0xfffa3203, 1, 0xf1bf07ab, 0x88000010, 0x00000020, 0x2e7}; }
// Zen 5: as Zen 4, plus AVX-VNNI (subleaf 1 bit 4); no AVX512-FP16, no AMX.
CpuidRegisters zen5() { return {0x10, 0xfffa3203, 1, 0xf1bf07ab, 0x98000510, 0x00000030, 0x2e7}; }
// Intel Xeon family 6 model 207 (Emerald Rapids; Sapphire Rapids alike): EDX with
// AMX-BF16 22, AVX512-FP16 23, AMX-TILE 24, AMX-INT8 25 among others; Linux >= 5.16
// enables AMX state (XCR0 bits 17-18).
CpuidRegisters xeon207() { return {0x20, 0x7ffefbff, 2, 0xf3bfbfff, 0xefd54530, 0x00001c30, 0x602e7}; }

TEST(CpuFeatures, Zen3HasAvx2FmaOnly) {
  const CpuFeatures f = decode_cpu_features(zen3());
  EXPECT_EQ(usable(f), "avx2_fma ");
  EXPECT_TRUE(f.os_avx);
  EXPECT_FALSE(f.os_avx512);
  EXPECT_FALSE(f.cpu_avx512f || f.cpu_amx_tile || f.cpu_avx512_bf16 || f.cpu_avx512_fp16);
  EXPECT_EQ(describe_cpu_features(f), "avx2,fma");
}

TEST(CpuFeatures, Zen4AndZen5HaveAvx512Bf16NoFp16NoAmx) {
  for (const CpuidRegisters& r : {zen4(), zen5()}) {
    const CpuFeatures f = decode_cpu_features(r);
    EXPECT_EQ(usable(f), "avx2_fma avx512f avx512_bf16 ");
    EXPECT_EQ(describe_cpu_features(f), "avx2,fma,avx512f,avx512_bf16");
  }
}

TEST(CpuFeatures, Xeon207HasEverything) {
  const CpuFeatures f = decode_cpu_features(xeon207());
  EXPECT_EQ(usable(f), "avx2_fma avx512f avx512_bf16 avx512_fp16 amx_tile amx_bf16 ");
  EXPECT_EQ(describe_cpu_features(f), "avx2,fma,avx512f,avx512_bf16,avx512_fp16,amx_tile,amx_bf16");
}

TEST(CpuFeatures, AnOsWithoutAmxStateHidesAmx) {
  CpuidRegisters r = xeon207();
  r.xcr0 = 0x2e7;  // a kernel before 5.16: no XTILECFG / XTILEDATA
  const CpuFeatures f = decode_cpu_features(r);
  EXPECT_EQ(usable(f), "avx2_fma avx512f avx512_bf16 avx512_fp16 ");
  EXPECT_TRUE(f.cpu_amx_tile && f.cpu_amx_bf16);
  EXPECT_FALSE(f.os_amx);
  EXPECT_EQ(describe_cpu_features(f), "avx2,fma,avx512f,avx512_bf16,avx512_fp16(amx_tile:no-OS-state)");
  r.xcr0 = 0x402e7;  // XTILEDATA without XTILECFG: still not usable
  EXPECT_EQ(usable(decode_cpu_features(r)), "avx2_fma avx512f avx512_bf16 avx512_fp16 ");
  r.xcr0 = 0x202e7;  // XTILECFG without XTILEDATA
  EXPECT_EQ(usable(decode_cpu_features(r)), "avx2_fma avx512f avx512_bf16 avx512_fp16 ");
}

TEST(CpuFeatures, AnOsWithoutAvx512StateHidesAvx512) {
  CpuidRegisters r = xeon207();
  r.xcr0 = 0x60007;  // x87, SSE, AVX; AMX state without AVX-512's
  const CpuFeatures f = decode_cpu_features(r);
  EXPECT_EQ(usable(f), "avx2_fma amx_tile amx_bf16 ");
  for (std::uint64_t missing : {0x20u, 0x40u, 0x80u}) {  // each of opmask, ZMM_Hi256, Hi16_ZMM
    r.xcr0 = 0x602e7 & ~missing;
    EXPECT_FALSE(decode_cpu_features(r).avx512f) << std::hex << r.xcr0;
  }
  r.xcr0 = 0x60003;  // no AVX state either (AMX state kept)
  EXPECT_EQ(usable(decode_cpu_features(r)), "amx_tile amx_bf16 ");
}

TEST(CpuFeatures, GuardsOsxsaveAndLeafLimits) {
  CpuidRegisters r = xeon207();
  r.leaf1_ecx &= ~(1u << 27);  // OSXSAVE clear: XCR0 is not read, nothing vector is usable
  const CpuFeatures f = decode_cpu_features(r);
  EXPECT_EQ(usable(f), "");
  EXPECT_TRUE(f.cpu_avx512f);
  r = xeon207();
  r.leaf7_max_subleaf = 0;  // subleaf 1 not there: its EAX is not AVX512-BF16
  EXPECT_EQ(usable(decode_cpu_features(r)), "avx2_fma avx512f avx512_fp16 amx_tile amx_bf16 ");
  r = xeon207();
  r.max_leaf = 6;  // leaf 7 not there
  EXPECT_EQ(usable(decode_cpu_features(r)), "");
  EXPECT_EQ(describe_cpu_features(decode_cpu_features(CpuidRegisters{})), "none");
}

// Every feature bit alone: (register, bit) -> what clearing it leaves.
TEST(CpuFeatures, EachBitAndItsNeighbours) {
  struct Case {
    const char* name;
    std::uint32_t CpuidRegisters::*reg;
    int bit;
    const char* without;
  };
  const Case cases[] = {
      {"FMA", &CpuidRegisters::leaf1_ecx, 12, "avx512f avx512_bf16 avx512_fp16 amx_tile amx_bf16 "},
      {"AVX", &CpuidRegisters::leaf1_ecx, 28, "avx512f avx512_bf16 avx512_fp16 amx_tile amx_bf16 "},
      {"AVX2", &CpuidRegisters::leaf7_ebx, 5, "avx512f avx512_bf16 avx512_fp16 amx_tile amx_bf16 "},
      {"AVX512F", &CpuidRegisters::leaf7_ebx, 16, "avx2_fma amx_tile amx_bf16 "},
      {"AVX512-BF16", &CpuidRegisters::leaf7_1_eax, 5, "avx2_fma avx512f avx512_fp16 amx_tile amx_bf16 "},
      {"AVX512-FP16", &CpuidRegisters::leaf7_edx, 23, "avx2_fma avx512f avx512_bf16 amx_tile amx_bf16 "},
      {"AMX-TILE", &CpuidRegisters::leaf7_edx, 24, "avx2_fma avx512f avx512_bf16 avx512_fp16 "},
      {"AMX-BF16", &CpuidRegisters::leaf7_edx, 22, "avx2_fma avx512f avx512_bf16 avx512_fp16 amx_tile "},
  };
  const std::string all = usable(decode_cpu_features(xeon207()));
  for (const Case& c : cases) {
    CpuidRegisters r = xeon207();
    r.*c.reg &= ~(1u << c.bit);
    EXPECT_EQ(usable(decode_cpu_features(r)), c.without) << c.name << " cleared";
    // The bit's neighbours set instead (where they are clear in the Xeon's register,
    // set them; where they are set, they already are): the feature stays off.
    r.*c.reg |= (1u << (c.bit + 1)) | (1u << (c.bit - 1));
    EXPECT_EQ(usable(decode_cpu_features(r)), c.without) << c.name << "'s neighbours set";
    r.*c.reg |= 1u << c.bit;
    EXPECT_EQ(usable(decode_cpu_features(r)), all) << c.name << " set again";
  }
}

std::set<std::string> proc_cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

// This CPU: our decoding against the kernel's. A test machine without
// /proc/cpuinfo fails here rather than skipping.
TEST(CpuFeatures, ThisCpuAgreesWithProcCpuinfo) {
  const std::set<std::string> flags = proc_cpuinfo_flags();
  ASSERT_FALSE(flags.empty()) << "no flags line in /proc/cpuinfo";
  const CpuFeatures f = cpu_features();
  auto has = [&flags](const char* n) { return flags.count(n) != 0; };
  EXPECT_EQ(f.avx2_fma, has("avx2") && has("fma"));
  EXPECT_EQ(f.avx512f, has("avx512f"));
  EXPECT_EQ(f.avx512_bf16, has("avx512_bf16"));
  EXPECT_EQ(f.avx512_fp16, has("avx512_fp16"));
  EXPECT_EQ(f.amx_tile, has("amx_tile"));
  EXPECT_EQ(f.amx_bf16, has("amx_bf16"));
  std::cout << "this CPU: " << describe_cpu_features(f) << "\n";
}

TEST(CpuFeatures, AmxPermissionAnswersWithoutCrashing) {
  const CpuFeatures f = cpu_features();
  const AmxPermission now = request_amx_permission_now();  // asked even where the CPU has no AMX
  EXPECT_EQ(now.granted, f.amx_tile) << now.what;
  if (!now.granted) {
    EXPECT_NE(now.error, 0);
    EXPECT_NE(now.what.find("errno " + std::to_string(now.error)), std::string::npos) << now.what;
  }
  const AmxPermission cached = request_amx_permission();
  EXPECT_EQ(cached.granted, f.amx_tile) << cached.what;
  if (!f.cpu_amx_tile) {
    EXPECT_EQ(cached.what, "no AMX-TILE on this CPU");
  }
  std::cout << "AMX permission: " << now.what << "; cached: " << cached.what << "\n";
}

}  // namespace
}  // namespace shardtrain
