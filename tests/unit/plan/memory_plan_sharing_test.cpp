// check_memory_limit (plan/memory_plan.hpp): the predicted process peak against
// train.memory_limit_mb, and, when ranks share a device (parallel.share_device),
// the device bytes of all of them together against the limit and the device's
// memory; the data and the checkpoint staging are host memory, not counted there.
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "plan/memory_plan.hpp"

namespace shardtrain {
namespace {

constexpr std::int64_t kMiB = 1024 * 1024;

MemoryPlan plan_of(std::int64_t params_mib, std::int64_t data_mib) {
  MemoryPlan p;
  p.bytes[static_cast<int>(MemCategory::Parameters)] = params_mib * kMiB;
  p.bytes[static_cast<int>(MemCategory::Data)] = data_mib * kMiB;
  return p;
}

std::string error_of(const MemoryPlan& p, const RunConfig& c, int sharers, std::size_t device_bytes) {
  try {
    check_memory_limit(p, c, sharers, device_bytes);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(CheckMemoryLimit, RanksSharingADeviceAreCountedTogether) {
  RunConfig c;
  c.source_name = "x.toml";
  c.train.memory_limit_mb = 250;
  const MemoryPlan p = plan_of(100, 40);  // 100 MiB on the device, 40 of data on the host
  EXPECT_EQ(error_of(p, c, 1, 0), "");    // one rank: 140 MiB <= 250
  EXPECT_EQ(error_of(p, c, 2, 0), "");    // two ranks: 200 MiB of the device <= 250
  const std::string three = error_of(p, c, 3, 0);  // 300 MiB > 250
  EXPECT_NE(three.find("3 ranks share this rank's device"), std::string::npos) << three;
  EXPECT_NE(three.find("together need 300.00 MiB"), std::string::npos) << three;
  EXPECT_NE(three.find("train.memory_limit_mb = 250 MiB"), std::string::npos) << three;
  // No limit: the device's own memory bounds them.
  c.train.memory_limit_mb = 0;
  EXPECT_EQ(error_of(p, c, 3, 0), "");
  EXPECT_EQ(error_of(p, c, 3, 300 * kMiB), "");
  const std::string small = error_of(p, c, 3, 299 * kMiB);
  EXPECT_NE(small.find("above the device's 299.00 MiB"), std::string::npos) << small;
}

}  // namespace
}  // namespace shardtrain
