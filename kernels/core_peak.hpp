// shardtrain/kernels/core_peak.hpp
// Owns the measurement of this core's own arithmetic limit, the denominator of
// every "FLOP floor" shardtrain prints (`trainer --plan`, `--profile`,
// tests/bench/core_peak, share/doc/benchmarks.md): not a library's GEMM rate,
// the rate of the core's fused multiply-add and bf16 dot-product instructions.
// How: independent accumulator chains (more than latency x issue width of any
// current x86 core: 24 zmm or 12 ymm registers) of one instruction, written as
// inline assembly so that the compiler can neither spill them nor drop them,
// run for a fixed time on the calling thread:
//   fp32: vfmadd231ps (16 lanes x 2 FLOPs on AVX-512, 8 x 2 on AVX2+FMA);
//   bf16: vdpbf16ps (16 fp32 lanes x 2 bf16 pairs x 2 FLOPs) on AVX512-BF16.
// Each measurement checks its own arithmetic: the chains start at 0 and add
// 1 * 1 (or two bf16 pairs of 1 * 1) per instruction, so after n iterations every
// lane must hold exactly n (2n), or the call throws. A rate of 0 means the CPU
// lacks the instruction set.
#pragma once

#include <string>

namespace shardtrain {

struct CorePeak {
  double fp32_gflops = 0;  // one thread, FMA chains (AVX-512 if present, else AVX2)
  double bf16_gflops = 0;  // one thread, vdpbf16ps chains; 0 without AVX512-BF16
  std::string fp32_isa;    // "avx512", "avx2" or "none"
};

// Measures both rates on the calling thread, each the best of `rounds` timed
// runs of about `seconds` / rounds. Throws shardtrain::Error if a chain's result
// is wrong.
CorePeak measure_core_peak(double seconds = 0.3, int rounds = 5);

}  // namespace shardtrain
