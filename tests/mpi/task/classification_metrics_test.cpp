// ConfusionMatrix and argmax_first: the metrics of a known matrix, ties and NaN,
// checked labels, the text table, and the all-reduce over 1-4 ranks giving the
// same matrix whichever rank saw which sample (10 samples do not divide by 3 or 4).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "task/classification_metrics.hpp"

namespace shardtrain {
namespace {

TEST(ArgmaxFirst, FirstMaximumWinsAndNanNever) {
  const float a[] = {1.0f, 3.0f, 3.0f, -1.0f};
  EXPECT_EQ(argmax_first(a, 4), 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float b[] = {nan, -5.0f, -7.0f};
  EXPECT_EQ(argmax_first(b, 3), 1);
  const float c[] = {nan, nan};
  EXPECT_EQ(argmax_first(c, 2), 0);
}

TEST(ConfusionMatrix, MetricsOfAKnownMatrix) {
  ConfusionMatrix m(3);
  // true 0: predicted 0,0,1; true 1: 1,1,1,2; true 2: 2,0,2.
  for (auto [l, p] : std::vector<std::pair<int, int>>{{0, 0}, {0, 0}, {0, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 2},
                                                      {2, 2}, {2, 0}, {2, 2}})
    m.add(l, p);
  EXPECT_EQ(m.total(), 10);
  EXPECT_EQ(m.count(1, 2), 1);
  EXPECT_DOUBLE_EQ(m.accuracy(), 0.7);
  EXPECT_DOUBLE_EQ(m.precision(0), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.recall(1), 0.75);
  EXPECT_DOUBLE_EQ(m.precision(2), 2.0 / 3.0);
  const std::string text = m.format({"ham", "spam", "other"});
  EXPECT_NE(text.find("accuracy 0.7000 (7 of 10)"), std::string::npos) << text;
  EXPECT_NE(text.find("spam"), std::string::npos);
  EXPECT_THROW(m.add(3, 0), Error);
  EXPECT_THROW(m.add(0, -1), Error);
  EXPECT_THROW(ConfusionMatrix(1), Error);
}

TEST(ConfusionMatrix, FromLogitsSkipsIgnoredLabels) {
  ConfusionMatrix m(2);
  const float logits[] = {0.1f, 0.9f, 2.0f, -1.0f, 0.5f, 0.5f};
  const std::int32_t labels[] = {1, 1, -1};
  m.add_logits(logits, labels, 3);
  EXPECT_EQ(m.total(), 2);
  EXPECT_EQ(m.count(1, 1), 1);
  EXPECT_EQ(m.count(1, 0), 1);
}

TEST(ConfusionMatrix, SumOverRanksIsIndependentOfTheSplit) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const std::vector<std::pair<int, int>> samples{{0, 0}, {0, 1}, {1, 1}, {2, 2}, {2, 1},
                                                 {1, 0}, {0, 0}, {2, 2}, {1, 1}, {0, 2}};
  ConfusionMatrix whole(3), mine(3);
  for (std::size_t i = 0; i < samples.size(); ++i) {
    whole.add(samples[i].first, samples[i].second);
    if (static_cast<int>(i % comm.size()) == comm.rank()) mine.add(samples[i].first, samples[i].second);
  }
  mine.all_reduce(comm);
  for (int l = 0; l < 3; ++l)
    for (int p = 0; p < 3; ++p) EXPECT_EQ(mine.count(l, p), whole.count(l, p)) << l << "," << p;
  EXPECT_DOUBLE_EQ(mine.accuracy(), 0.6);
}

}  // namespace
}  // namespace shardtrain
