// shardtrain/kernels/cpu_compute.hpp
// Owns how the host kernels use the CPU: the threads of the heavy ops (oneDNN's
// OpenMP pool, which runs the GEMMs and convolutions, and OpenBLAS's, which
// runs the double-precision GEMMs of the gradient checks), and what the CPU's
// vector units can do, as oneDNN sees them.
// Invariants:
//  - set_compute_threads(n) sets both pools to n threads for the calling
//    process; nothing else in shardtrain changes them. One rank per core is the
//    default (train: parallel.threads = 1), so that a job that forgets
//    OMP_NUM_THREADS does not run N ranks x (all cores) threads.
//  - cpu_bf16_native() is true when oneDNN's effective ISA executes bf16 dot
//    products in hardware (AVX512-BF16 or AMX). It honours ONEDNN_MAX_CPU_ISA /
//    DNNL_MAX_CPU_ISA, so DNNL_MAX_CPU_ISA=AVX512_CORE shows this machine as
//    one without AVX512-BF16 (how the fallback path is tested here).
//  - No oneDNN header here: only kernels/*.cpp that run oneDNN primitives
//    include kernels/dnnl_context.hpp.
#pragma once

#include <string>

namespace shardtrain {

// Threads of the heavy-op pools (n >= 1).
void set_compute_threads(int n);
int compute_threads();

// True when bf16 GEMMs and convolutions run on native bf16 instructions; the
// bf16 kernels then take their fast path (bf16 operands straight into oneDNN,
// fp32 accumulation). Without it they convert tiles to fp32 (half_tiles.hpp).
bool cpu_bf16_native();

// oneDNN's effective ISA (dnnl::get_effective_cpu_isa(), honouring
// ONEDNN_MAX_CPU_ISA): its dnnl_cpu_isa_t bits (the kOnednnIsa* values of
// core_peak.hpp) and its name ("AVX2", "AVX-512 BF16", "AVX-512 AMX").
unsigned cpu_onednn_isa_bits();
std::string cpu_onednn_isa_name();

// Loads what the first heavy op would: oneDNN's code and global state and the
// OpenMP pool, by running one tiny fp32 matmul (and a bf16 one with native bf16).
// The trainer calls it before it measures the process's RSS "before the model",
// so that the memory plan's fixed term includes the library, not just its
// mapping. Idempotent.
void warm_up_compute();

// One line for the start-up report: the ISA oneDNN uses, the thread count, and
// what bf16 and fp16 storage do on this CPU.
std::string cpu_compute_describe();

// The kernels the two host libraries chose for this CPU, as they report them:
// OpenBLAS's core (openblas_get_corename: its DYNAMIC_ARCH pick from CPUID, or
// OPENBLAS_CORETYPE's) and version, and oneDNN's ISA (dnnl_get_effective_cpu_isa
// by its dnnl_cpu_isa_t name: avx2, avx512_core_bf16, avx512_core_amx, ...;
// ONEDNN_MAX_CPU_ISA caps it) and version: "OpenBLAS core Haswell (OpenBLAS
// 0.3.21), oneDNN ISA avx2 (oneDNN 2.6.3)". tests/bench/blas_core_probe.py
// names PyTorch's the same way.
std::string cpu_libraries_describe();

}  // namespace shardtrain
