// shardtrain/tests/support/kokkos_environment.cpp
// Initialises Kokkos once per test executable (GTest global environment registered
// by a static initializer). Linked (library shardtrain_kokkos_gtest_env) into every test that uses Kokkos, next
// to GTest::gtest_main, so tests need no main() of their own.
// SHARDTRAIN_EXPECT_BF16_NATIVE=0/1 (CTest's *_no_bf16_isa runs): the executable
// exits with an error when cpu_bf16_native() says otherwise, so a run meant to
// test the fallback path cannot silently test the native one.
// SHARDTRAIN_EXPECT_KOKKOS_THREADS=N (the *_omp<N> runs of an OpenMP-Kokkos build):
// the executable exits with an error unless Kokkos' host space runs N threads.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/cpu_compute.hpp"

namespace {

class KokkosEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    Kokkos::initialize();
    if (const char* want = std::getenv("SHARDTRAIN_EXPECT_KOKKOS_THREADS")) {
      const int threads = Kokkos::DefaultHostExecutionSpace().concurrency();
      if (std::string(want) != std::to_string(threads)) {
        std::fprintf(stderr, "SHARDTRAIN_EXPECT_KOKKOS_THREADS=%s but Kokkos' host space (%s) runs %d\n", want,
                     Kokkos::DefaultHostExecutionSpace::name(), threads);
        std::exit(1);
      }
      std::printf("Kokkos host space: %s, %d threads\n", Kokkos::DefaultHostExecutionSpace::name(), threads);
    }
    if (const char* want = std::getenv("SHARDTRAIN_EXPECT_BF16_NATIVE")) {
      const bool native = shardtrain::cpu_bf16_native();
      if (std::string(want) != (native ? "1" : "0")) {
        std::fprintf(stderr, "SHARDTRAIN_EXPECT_BF16_NATIVE=%s but cpu_bf16_native() is %d (%s)\n", want,
                     native ? 1 : 0, shardtrain::cpu_compute_describe().c_str());
        std::exit(1);
      }
      std::printf("cpu compute: %s\n", shardtrain::cpu_compute_describe().c_str());
    }
  }
  void TearDown() override { Kokkos::finalize(); }
};

[[maybe_unused]] ::testing::Environment* const kKokkosEnvironment =
    ::testing::AddGlobalTestEnvironment(new KokkosEnvironment);

}  // namespace
