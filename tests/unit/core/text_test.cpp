// Unit tests of core/text.*: the edit distance with and without a limit,
// shapes as Python tuples, joins.
#include "core/text.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace shardtrain {
namespace {

TEST(Text, EditDistance) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("same", "same"), 0u);
  EXPECT_EQ(edit_distance("kitten", "sitting", 1), 2u);  // gave up: limit + 1
}

TEST(Text, ShapeText) {
  EXPECT_EQ(shape_text({}), "()");
  EXPECT_EQ(shape_text({5}), "(5,)");
  EXPECT_EQ(shape_text({3, 4}), "(3, 4)");
  EXPECT_EQ(shape_text({2, 3, 4}), "(2, 3, 4)");
}

TEST(Text, Join) {
  EXPECT_EQ(join(std::vector<std::string>{}, ", "), "");
  EXPECT_EQ(join(std::vector<std::string>{"a"}, ", "), "a");
  EXPECT_EQ(join(std::vector<std::string>{"a", "b", "c"}, ", "), "a, b, c");
  EXPECT_EQ(join(std::vector<std::int64_t>{1, -2, 30}, ","), "1,-2,30");
}

}  // namespace
}  // namespace shardtrain
