// shardtrain/tests/support/kokkos_environment.cpp
// Initialises Kokkos once per test executable (GTest global environment registered
// by a static initializer). Linked (library shardtrain_kokkos_gtest_env) into every test that uses Kokkos, next
// to GTest::gtest_main, so tests need no main() of their own.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

namespace {

class KokkosEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { Kokkos::initialize(); }
  void TearDown() override { Kokkos::finalize(); }
};

[[maybe_unused]] ::testing::Environment* const kKokkosEnvironment =
    ::testing::AddGlobalTestEnvironment(new KokkosEnvironment);

}  // namespace
