// shardtrain/core/vectorize.hpp
// Owns the compiler macros of the vectorised host loops: the x86-64 target clones
// of a hot function and the forced inlining of the helpers it calls. Used by the
// kernels (kernels/vec_math.hpp) and by the bulk f16/bf16 conversions (core/half.cpp).
#pragma once

// Marks a hot row/span function to be compiled for AVX-512 (x86-64-v4), AVX2
// (x86-64-v3) and baseline x86-64, with the best one picked once at load time
// (GCC ifunc). The kernels are built with -ffp-contract=off, so no clone fuses
// a*b+c into an FMA and every clone returns the same bits: only vector width
// differs. Other compilers/targets get the plain function.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && defined(__x86_64__) && \
    defined(__linux__) && !defined(SHARDTRAIN_NO_TARGET_CLONES)
#define SHARDTRAIN_TARGET_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SHARDTRAIN_TARGET_CLONES
#endif

// Helpers called from a cloned function are forced inline so that they are
// compiled inside each clone (a plain call would run the baseline version).
#if defined(__GNUC__)
#define SHARDTRAIN_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define SHARDTRAIN_ALWAYS_INLINE inline
#endif
