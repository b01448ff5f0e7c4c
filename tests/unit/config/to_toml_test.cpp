// tests/unit/config/to_toml_test.cpp
// to_toml writes every key, and parse_run_config(to_toml(c)) gives back c exactly,
// floats bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "config/parse.hpp"
#include "config_test_support.hpp"

namespace shardtrain {
namespace {

void expect_same_double(double a, double b, const char* name) {
  EXPECT_EQ(std::bit_cast<std::uint64_t>(a), std::bit_cast<std::uint64_t>(b))
      << name << ": " << a << " vs " << b;
}

// Field-by-field equality (RunConfig has no operator==); doubles bit-identical.
void expect_same(const RunConfig& a, const RunConfig& b) {
  EXPECT_EQ(a.model.type, b.model.type);
  EXPECT_EQ(a.model.n_layer, b.model.n_layer);
  EXPECT_EQ(a.model.n_head, b.model.n_head);
  EXPECT_EQ(a.model.d_model, b.model.d_model);
  EXPECT_EQ(a.model.seq_len, b.model.seq_len);
  expect_same_double(a.model.init_std, b.model.init_std, "init_std");
  expect_same_double(a.model.layernorm_eps, b.model.layernorm_eps, "layernorm_eps");
  EXPECT_EQ(a.data.path, b.data.path);
  EXPECT_EQ(a.train.steps, b.train.steps);
  EXPECT_EQ(a.train.batch_size, b.train.batch_size);
  EXPECT_EQ(a.train.micro_batch, b.train.micro_batch);
  EXPECT_EQ(a.train.seed, b.train.seed);
  EXPECT_EQ(a.train.eval_every, b.train.eval_every);
  EXPECT_EQ(a.train.eval_windows, b.train.eval_windows);
  EXPECT_EQ(a.train.log_every, b.train.log_every);
  EXPECT_EQ(a.train.run_dir, b.train.run_dir);
  EXPECT_EQ(a.optim.type, b.optim.type);
  expect_same_double(a.optim.lr, b.optim.lr, "lr");
  expect_same_double(a.optim.min_lr, b.optim.min_lr, "min_lr");
  EXPECT_EQ(a.optim.warmup_steps, b.optim.warmup_steps);
  EXPECT_EQ(a.optim.schedule, b.optim.schedule);
  expect_same_double(a.optim.weight_decay, b.optim.weight_decay, "weight_decay");
  expect_same_double(a.optim.beta1, b.optim.beta1, "beta1");
  expect_same_double(a.optim.beta2, b.optim.beta2, "beta2");
  expect_same_double(a.optim.eps, b.optim.eps, "eps");
  expect_same_double(a.optim.grad_clip, b.optim.grad_clip, "grad_clip");
  EXPECT_EQ(a.parallel.zero_stage, b.parallel.zero_stage);
  expect_same_double(a.train.time_limit_minutes, b.train.time_limit_minutes, "time_limit");
  expect_same_double(a.parallel.collective_timeout_s, b.parallel.collective_timeout_s, "collective_timeout_s");
  EXPECT_EQ(a.checkpoint.dir, b.checkpoint.dir);
  EXPECT_EQ(a.checkpoint.every_steps, b.checkpoint.every_steps);
  expect_same_double(a.checkpoint.every_minutes, b.checkpoint.every_minutes, "every_minutes");
  EXPECT_EQ(a.checkpoint.keep_last, b.checkpoint.keep_last);
  EXPECT_EQ(a.checkpoint.max_failures, b.checkpoint.max_failures);
  EXPECT_EQ(a.checkpoint.io_timeout_s, b.checkpoint.io_timeout_s);
  EXPECT_EQ(a.checkpoint.resume, b.checkpoint.resume);
}

class ConfigToToml : public ::testing::Test {
 protected:
  test::ScratchDir m_dir;
  std::string m_data = m_dir.file("train.h5", "x");
};

TEST_F(ConfigToToml, DefaultsRoundTrip) {
  const RunConfig a = parse_run_config("[data]\npath = \"" + m_data + "\"\n", "inputs/quick.toml");
  const std::string text = to_toml(a);
  const RunConfig b = parse_run_config(text, "resolved.toml");
  expect_same(a, b);
  EXPECT_EQ(b.train.run_dir, "runs/quick");  // written out, not re-derived from the new name
  EXPECT_EQ(to_toml(b), text);
}

TEST_F(ConfigToToml, WritesEverySectionAndKeyWithDefaults) {
  const RunConfig a = parse_run_config("[data]\npath = \"" + m_data + "\"\n", "inputs/quick.toml");
  const std::string text = to_toml(a);
  for (const char* line : {"[model]\n",
                           "\ntype = \"gpt\"\n",
                           "\nn_layer = 4\n",
                           "\nn_head = 4\n",
                           "\nd_model = 128\n",
                           "\nseq_len = 128\n",
                           "\ninit_std = 0.02\n",
                           "\nlayernorm_eps = 1e-05\n",
                           "[data]\n",
                           "[train]\n",
                           "\nsteps = 1000\n",
                           "\nbatch_size = 32\n",
                           "\nmicro_batch = 8\n",
                           "\nseed = 1234\n",
                           "\neval_every = 100\n",
                           "\neval_windows = 0\n",
                           "\nlog_every = 10\n",
                           "\nrun_dir = \"runs/quick\"\n",
                           "[optim]\n",
                           "\ntype = \"adamw\"\n",
                           "\nlr = 0.001\n",
                           "\nmin_lr = 0.0001\n",
                           "\nwarmup_steps = 100\n",
                           "\nschedule = \"cosine\"\n",
                           "\nweight_decay = 0.1\n",
                           "\nbeta1 = 0.9\n",
                           "\nbeta2 = 0.95\n",
                           "\neps = 1e-08\n",
                           "\ngrad_clip = 1.0\n",
                           "[parallel]\n",
                           "\nzero_stage = 0\n",
                           "[checkpoint]\n",
                           "\ndir = \"runs/quick/checkpoints\"\n",
                           "\nevery_steps = 0\n",
                           "\nevery_minutes = 0.0\n",
                           "\nkeep_last = 3\n",
                           "\nresume = \"auto\"\n"})
    EXPECT_NE(text.find(line), std::string::npos) << "missing " << line << " in\n" << text;
}

TEST_F(ConfigToToml, AwkwardValuesRoundTripExactly) {
  const std::string path = m_dir.file("data \"q\" \\ é.h5", "x");
  RunConfig a;
  a.model.n_layer = 12;
  a.model.n_head = 3;
  a.model.d_model = 2147483646;
  a.model.seq_len = 2;
  a.model.init_std = 1.0 / 3.0;
  a.model.layernorm_eps = std::numeric_limits<double>::denorm_min();
  a.data.path = path;
  a.train.steps = 2305843009213693951;  // steps * batch_size * seq_len = 2^63 - 4
  a.train.batch_size = 2;
  a.train.micro_batch = 1;
  a.train.seed = 9223372036854775807ull;
  a.train.eval_every = 0;
  a.train.eval_windows = 7;
  a.train.log_every = 1;
  a.train.run_dir = "runs/tab\there \"quoted\" back\\slash\nnewline ü";
  a.optim.lr = 0.7;
  a.optim.min_lr = 0.1 + 0.2;  // 0.30000000000000004: needs all 17 digits
  a.optim.warmup_steps = 0;
  a.optim.schedule = LrSchedule::Constant;
  a.optim.weight_decay = 1e300;
  a.optim.beta1 = 0.0;
  a.optim.beta2 = std::nextafter(1.0, 0.0);
  a.optim.eps = 2.2250738585072014e-308;
  a.optim.grad_clip = std::numeric_limits<double>::max();
  a.train.time_limit_minutes = 1.0 / 3.0;
  a.parallel.collective_timeout_s = 0.1;
  a.checkpoint.dir = "ckpt dir \"q\" é";
  a.checkpoint.every_steps = 9223372036854775807;
  a.checkpoint.every_minutes = 0.1 + 0.2;
  a.checkpoint.keep_last = 1;
  a.checkpoint.resume = "never";
  a.checkpoint.max_failures = 7;
  a.checkpoint.io_timeout_s = 1.0 / 7.0;
  const RunConfig b = parse_run_config(to_toml(a), "x.toml");
  expect_same(a, b);
  EXPECT_EQ(to_toml(b), to_toml(a));
}

TEST_F(ConfigToToml, OneThousandthComesBackBitIdentical) {
  RunConfig a;
  a.data.path = m_data;
  a.train.run_dir = "runs/r";
  for (double lr : {1e-3, 3e-4, 6e-4, 0.1, 2.5e-4, 1e-2 / 3.0, 123456789.123456789}) {
    a.optim.lr = lr;
    a.optim.min_lr = lr / 10;
    const RunConfig b = parse_run_config(to_toml(a), "x.toml");
    expect_same_double(a.optim.lr, b.optim.lr, "lr");
    expect_same_double(a.optim.min_lr, b.optim.min_lr, "min_lr");
  }
}

}  // namespace
}  // namespace shardtrain
