// tests/unit/config/parse_set_test.cpp
// `--set section.key=value` overrides: values are TOML (or bare strings), they win
// over the file, and their errors name the argument instead of a file position.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/parse.hpp"
#include "config_test_support.hpp"

namespace shardtrain {
namespace {

using test::error_of;

class ConfigSet : public ::testing::Test {
 protected:
  test::ScratchDir m_dir;
  std::string m_data = m_dir.file("train.h5", "x");
  std::string m_other = m_dir.file("other.h5", "y");
  std::string data_section() const { return "[data]\npath = \"" + m_data + "\"\n"; }

  RunConfig parse(const std::string& text, const std::vector<std::string>& overrides) const {
    return parse_run_config(text, "inputs/x.toml", overrides);
  }
};

TEST_F(ConfigSet, OverridesIntegerFloatAndQuotedString) {
  const RunConfig c = parse("[train]\nsteps = 10\n[optim]\nlr = 1e-3\n" + data_section(),
                            {"train.steps=20", "optim.lr=3e-4", "optim.schedule=\"constant\"",
                             "data.path=\"" + m_other + "\""});
  EXPECT_EQ(c.train.steps, 20);
  EXPECT_EQ(c.optim.lr, 3e-4);
  EXPECT_EQ(c.optim.schedule, LrSchedule::Constant);
  EXPECT_EQ(c.data.path, m_other);
}

TEST_F(ConfigSet, BareStringIsAcceptedWhenTheValueIsNotToml) {
  const RunConfig c = parse(data_section(), {"data.path=" + m_other, "train.run_dir=runs/a-b"});
  EXPECT_EQ(c.data.path, m_other);
  EXPECT_EQ(c.train.run_dir, "runs/a-b");
  EXPECT_EQ(parse(data_section(), {"optim.schedule=constant"}).optim.schedule, LrSchedule::Constant);
}

TEST_F(ConfigSet, IntegerOverrideForAFloatKey) {
  EXPECT_EQ(parse(data_section(), {"optim.grad_clip=2"}).optim.grad_clip, 2.0);
}

TEST_F(ConfigSet, SpacesAroundKeyAndValueAreIgnored) {
  EXPECT_EQ(parse(data_section(), {" train.steps = 7 "}).train.steps, 7);
}

TEST_F(ConfigSet, LaterOverrideWins) {
  EXPECT_EQ(parse(data_section(), {"train.steps=5", "train.steps=6"}).train.steps, 6);
}

TEST_F(ConfigSet, OverrideSuppliesARequiredKeyMissingFromTheFile) {
  EXPECT_EQ(parse("[model]\nn_layer = 2\n", {"data.path=" + m_data}).data.path, m_data);
}

TEST_F(ConfigSet, OverrideReplacesABadFileValue) {
  EXPECT_EQ(parse("[optim]\nlr = -1\n" + data_section(), {"optim.lr=0.01"}).optim.lr, 0.01);
}

TEST_F(ConfigSet, UnknownKey) {
  EXPECT_EQ(error_of(data_section(), {"optim.lrr=1"}),
            "--set optim.lrr=1: unknown key optim.lrr (did you mean optim.lr?)");
  EXPECT_EQ(error_of(data_section(), {"trainer.steps=1"}),
            "--set trainer.steps=1: unknown key trainer.steps (did you mean train.steps?)");
}

TEST_F(ConfigSet, MalformedWithoutEquals) {
  EXPECT_EQ(error_of(data_section(), {"optim.lr"}),
            "--set optim.lr: expected section.key=value (no '=' found)");
}

TEST_F(ConfigSet, MalformedWithoutSection) {
  EXPECT_EQ(error_of(data_section(), {"lr=1"}),
            "--set lr=1: expected section.key=value, got key 'lr' without a section");
}

TEST_F(ConfigSet, MissingValue) {
  EXPECT_EQ(error_of(data_section(), {"train.steps="}),
            "--set train.steps=: train.steps: missing value after '='");
}

TEST_F(ConfigSet, BrokenQuotedValue) {
  EXPECT_EQ(error_of(data_section(), {"data.path=\"x.h5"}),
            "--set data.path=\"x.h5: data.path: not a valid TOML value: Error while parsing "
            "string: encountered end-of-file");
}

TEST_F(ConfigSet, BadValuesAreCheckedLikeFileValues) {
  EXPECT_EQ(error_of(data_section(), {"optim.lr=-1"}),
            "--set optim.lr=-1: optim.lr: must be > 0, got -1");
  EXPECT_EQ(error_of(data_section(), {"train.steps=abc"}),
            "--set train.steps=abc: train.steps: expected an integer, got string");
  EXPECT_EQ(error_of(data_section(), {"train.steps=1.5"}),
            "--set train.steps=1.5: train.steps: expected an integer, got float");
  EXPECT_EQ(error_of(data_section(), {"data.path=nowhere.h5"}),
            "--set data.path=nowhere.h5: data.path: no such file 'nowhere.h5'");
}

TEST_F(ConfigSet, CrossChecksPointAtTheOverride) {
  EXPECT_EQ(error_of("[model]\nd_model = 128\n" + data_section(), {"model.n_head=6"}),
            "--set model.n_head=6: model.n_head: must divide model.d_model (128), got 6");
}

TEST_F(ConfigSet, FileErrorsKeepTheirPositionAndComeBeforeOverrideErrors) {
  EXPECT_EQ(error_of("[train]\nsteps = 0\n" + data_section(), {"optim.lr=0", "bogus"}),
            "inputs/x.toml:2:9: train.steps: must be >= 1, got 0\n"
            "--set optim.lr=0: optim.lr: must be > 0, got 0\n"
            "--set bogus: expected section.key=value (no '=' found)");
}

}  // namespace
}  // namespace shardtrain
