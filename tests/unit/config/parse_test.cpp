// tests/unit/config/parse_test.cpp
// This file is long because every class of input error has its own test with its exact message.
// parse_run_config on files: a full valid config, defaults, and every class of
// input error with its exact one-line "FILE:LINE:COL: message"; data.in_memory's
// booleans ("on" / "off") and its errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <string>
#include <utility>

#include "config/parse.hpp"
#include "config_test_support.hpp"

namespace shardtrain {
namespace {

using test::error_of;

class ConfigParse : public ::testing::Test {
 protected:
  test::ScratchDir m_dir;
  std::string m_data = m_dir.file("train.h5", "not really hdf5");
  // A [data] section pointing at an existing file; append it last so it does not
  // shift the line numbers the tests expect.
  std::string data_section() const { return "[data]\npath = \"" + m_data + "\"\n"; }
};

TEST_F(ConfigParse, FullConfigSetsEveryField) {
  const std::string text =
      "[model]\ntype = \"gpt\"\nn_layer = 6\nn_head = 6\nd_model = 384\nseq_len = 256\n"
      "init_std = 0.01\nlayernorm_eps = 1e-6\n"
      "[train]\nsteps = 5000\nbatch_size = 64\nmicro_batch = 4\nseed = 42\neval_every = 250\n"
      "eval_windows = 20\nlog_every = 5\nrun_dir = \"runs/custom\"\n"
      "[optim]\ntype = \"adamw\"\nlr = 6e-4\nmin_lr = 6e-5\nwarmup_steps = 200\n"
      "schedule = \"constant\"\nweight_decay = 0.05\nbeta1 = 0.8\nbeta2 = 0.99\neps = 1e-9\n"
      "grad_clip = 0.5\n"
      "[parallel]\nzero_stage = 0\n" +
      data_section();
  const RunConfig c = parse_run_config(text, "inputs/full.toml");
  EXPECT_EQ(c.model.type, ModelType::Gpt);
  EXPECT_EQ(c.model.n_layer, 6);
  EXPECT_EQ(c.model.n_head, 6);
  EXPECT_EQ(c.model.d_model, 384);
  EXPECT_EQ(c.model.seq_len, 256);
  EXPECT_EQ(c.model.init_std, 0.01);
  EXPECT_EQ(c.model.layernorm_eps, 1e-6);
  EXPECT_EQ(c.data.path, m_data);
  EXPECT_EQ(c.train.steps, 5000);
  EXPECT_EQ(c.train.batch_size, 64);
  EXPECT_EQ(c.train.micro_batch, 4);
  EXPECT_EQ(c.train.seed, 42u);
  EXPECT_EQ(c.train.eval_every, 250);
  EXPECT_EQ(c.train.eval_windows, 20);
  EXPECT_EQ(c.train.log_every, 5);
  EXPECT_EQ(c.train.run_dir, "runs/custom");
  EXPECT_EQ(c.optim.type, OptimizerType::AdamW);
  EXPECT_EQ(c.optim.lr, 6e-4);
  EXPECT_EQ(c.optim.min_lr, 6e-5);
  EXPECT_EQ(c.optim.warmup_steps, 200);
  EXPECT_EQ(c.optim.schedule, LrSchedule::Constant);
  EXPECT_EQ(c.optim.weight_decay, 0.05);
  EXPECT_EQ(c.optim.beta1, 0.8);
  EXPECT_EQ(c.optim.beta2, 0.99);
  EXPECT_EQ(c.optim.eps, 1e-9);
  EXPECT_EQ(c.optim.grad_clip, 0.5);
  EXPECT_EQ(c.parallel.zero_stage, 0);
  EXPECT_EQ(c.source_name, "inputs/full.toml");
  EXPECT_EQ(c.source_text, text);
}

TEST_F(ConfigParse, OnlyDataPathGivesTheDefaults) {
  const RunConfig c = parse_run_config(data_section(), "inputs/quickstart.toml");
  const RunConfig d;  // the defaults written in run_config.hpp
  EXPECT_EQ(c.model.type, d.model.type);
  EXPECT_EQ(c.model.n_layer, d.model.n_layer);
  EXPECT_EQ(c.model.n_head, d.model.n_head);
  EXPECT_EQ(c.model.d_model, d.model.d_model);
  EXPECT_EQ(c.model.seq_len, d.model.seq_len);
  EXPECT_EQ(c.model.init_std, d.model.init_std);
  EXPECT_EQ(c.model.layernorm_eps, d.model.layernorm_eps);
  EXPECT_EQ(c.train.steps, d.train.steps);
  EXPECT_EQ(c.train.batch_size, d.train.batch_size);
  EXPECT_EQ(c.train.micro_batch, d.train.micro_batch);
  EXPECT_EQ(c.train.seed, d.train.seed);
  EXPECT_EQ(c.train.eval_every, d.train.eval_every);
  EXPECT_EQ(c.train.eval_windows, d.train.eval_windows);
  EXPECT_EQ(c.train.log_every, d.train.log_every);
  EXPECT_EQ(c.optim.type, d.optim.type);
  EXPECT_EQ(c.optim.lr, d.optim.lr);
  EXPECT_EQ(c.optim.min_lr, d.optim.min_lr);
  EXPECT_EQ(c.optim.warmup_steps, d.optim.warmup_steps);
  EXPECT_EQ(c.optim.schedule, d.optim.schedule);
  EXPECT_EQ(c.optim.weight_decay, d.optim.weight_decay);
  EXPECT_EQ(c.optim.beta1, d.optim.beta1);
  EXPECT_EQ(c.optim.beta2, d.optim.beta2);
  EXPECT_EQ(c.optim.eps, d.optim.eps);
  EXPECT_EQ(c.optim.grad_clip, d.optim.grad_clip);
  EXPECT_EQ(c.parallel.zero_stage, d.parallel.zero_stage);
  // The documented values, so a silent change of run_config.hpp is noticed here.
  EXPECT_EQ(c.model.n_layer, 4);
  EXPECT_EQ(c.train.steps, 1000);
  EXPECT_EQ(c.optim.lr, 1e-3);
  EXPECT_EQ(c.optim.schedule, LrSchedule::Cosine);
  EXPECT_EQ(c.train.run_dir, "runs/quickstart");
}

TEST_F(ConfigParse, RunDirDefaultFallsBackWhenTheSourceHasNoStem) {
  EXPECT_EQ(parse_run_config(data_section(), "").train.run_dir, "runs/run");
  EXPECT_EQ(parse_run_config(data_section(), "-").train.run_dir, "runs/run");
  EXPECT_EQ(parse_run_config(data_section(), "dir/").train.run_dir, "runs/run");
  EXPECT_EQ(parse_run_config(data_section(), "a/b/c.d.toml").train.run_dir, "runs/c.d");
}

TEST_F(ConfigParse, IntegersAreAcceptedForFloats) {
  const RunConfig c = parse_run_config("[optim]\nlr = 1\nmin_lr = 0\n" + data_section(), "x.toml");
  EXPECT_EQ(c.optim.lr, 1.0);
  EXPECT_EQ(c.optim.min_lr, 0.0);
}

TEST_F(ConfigParse, LargestSeedIsAccepted) {
  const RunConfig c =
      parse_run_config("[train]\nseed = 9223372036854775807\n" + data_section(), "x.toml");
  EXPECT_EQ(c.train.seed, 9223372036854775807ull);
}

TEST_F(ConfigParse, RelativeDataPathIsRelativeToTheWorkingDirectory) {
  m_dir.file("relative.h5", "x");
  const auto old_cwd = std::filesystem::current_path();
  std::filesystem::current_path(m_dir.path());
  const std::string ok = error_of("[data]\npath = \"relative.h5\"\n");
  std::filesystem::current_path(old_cwd);
  EXPECT_EQ(ok, "<no error>");
  EXPECT_EQ(error_of("[data]\npath = \"relative.h5\"\n"),
            "inputs/x.toml:2:8: data.path: no such file 'relative.h5'");
}

// ------------------------------------------------------------------ syntax errors

TEST_F(ConfigParse, SyntaxErrorHasTomlLocation) {
  EXPECT_EQ(error_of("[model]\nn_layer = 4\nlayers = 6 6\n" + data_section()),
            "inputs/x.toml:3:12: Error while parsing key-value pair: expected a comment or "
            "whitespace, saw '6'");
}

TEST_F(ConfigParse, IntegerLiteralTooLargeIsASyntaxError) {
  EXPECT_EQ(error_of("[train]\nsteps = 99999999999999999999\n"),
            "inputs/x.toml:2:29: Error while parsing decimal integer: '99999999999999999999' is "
            "not representable in 64 bits");
}

TEST_F(ConfigParse, DuplicateKeyIsASyntaxError) {
  EXPECT_EQ(error_of("[train]\nsteps = 1\nsteps = 2\n"),
            "inputs/x.toml:3:9: Error while parsing key-value pair: cannot redefine existing "
            "integer 'steps'");
}

// --------------------------------------------------------- unknown keys/sections

TEST_F(ConfigParse, UnknownKeySuggestsTheClosestKey) {
  EXPECT_EQ(error_of("[model]\nd_model = 128\nn_layers = 6\n" + data_section()),
            "inputs/x.toml:3:1: unknown key model.n_layers (did you mean model.n_layer?)");
}

TEST_F(ConfigParse, UnknownKeySuggestsAKeyOfAnotherSection) {
  EXPECT_EQ(error_of("[train]\n  lr = 0.1\n" + data_section()),
            "inputs/x.toml:2:3: unknown key train.lr (did you mean optim.lr?)");
}

TEST_F(ConfigParse, UnknownKeyWithoutCloseMatchListsTheSectionsKeys) {
  EXPECT_EQ(error_of("[parallel]\ntensor_parallel = 2\n" + data_section()),
            "inputs/x.toml:2:1: unknown key parallel.tensor_parallel (keys of [parallel] are "
            "zero_stage, overlap, bucket_mb, threads, collective_timeout_s, device_collectives, share_device)");
}

TEST_F(ConfigParse, UnknownSection) {
  EXPECT_EQ(error_of(data_section() + "[optimizer]\nlr = 1\n"),
            "inputs/x.toml:3:2: unknown section [optimizer] (did you mean [optim]?)");
  EXPECT_EQ(error_of("[logging]\nlevel = 1\n" + data_section()),
            "inputs/x.toml:1:2: unknown section [logging] (sections are [model], [data], "
            "[train], [optim], [parallel], [precision], [recompute], [checkpoint], [guard])");
}

TEST_F(ConfigParse, KeyOutsideAnySection) {
  EXPECT_EQ(error_of("steps = 10\n" + data_section()),
            "inputs/x.toml:1:1: unknown key steps (did you mean train.steps?)");
}

TEST_F(ConfigParse, SectionThatIsNotATable) {
  EXPECT_EQ(error_of("model = 3\n" + data_section()),
            "inputs/x.toml:1:9: model: expected a table ([model]), got integer");
}

// ------------------------------------------------------------------- wrong types

TEST_F(ConfigParse, StringForInteger) {
  EXPECT_EQ(error_of("[train]\nsteps = \"1000\"\n" + data_section()),
            "inputs/x.toml:2:9: train.steps: expected an integer, got string");
}

TEST_F(ConfigParse, FloatIsNotAcceptedForInteger) {
  EXPECT_EQ(error_of("[train]\nbatch_size = 32.0\n" + data_section()),
            "inputs/x.toml:2:14: train.batch_size: expected an integer, got float (write it "
            "without a decimal point or exponent)");
  EXPECT_EQ(error_of("[train]\nbatch_size = 32.5\n" + data_section()),
            "inputs/x.toml:2:14: train.batch_size: expected an integer, got float");
}

TEST_F(ConfigParse, BooleansNeverCoerce) {
  EXPECT_EQ(error_of("[optim]\nlr = true\n" + data_section()),
            "inputs/x.toml:2:6: optim.lr: expected a number, got boolean");
  EXPECT_EQ(error_of("[model]\nn_layer = false\n" + data_section()),
            "inputs/x.toml:2:11: model.n_layer: expected an integer, got boolean");
  EXPECT_EQ(error_of("[optim]\nschedule = true\n" + data_section()),
            "inputs/x.toml:2:12: optim.schedule: expected a string, got boolean");
}

TEST_F(ConfigParse, Device) {
  EXPECT_EQ(parse_run_config(data_section(), "inputs/x.toml").train.device, TrainDevice::Auto);
  EXPECT_EQ(parse_run_config("[train]\ndevice = \"cuda\"\n" + data_section(), "inputs/x.toml").train.device, TrainDevice::Cuda);
  EXPECT_EQ(parse_run_config("[train]\ndevice = \"cpu\"\n" + data_section(), "inputs/x.toml").train.device, TrainDevice::Cpu);
  EXPECT_EQ(error_of("[train]\ndevice = \"gpu\"\n" + data_section()),
            "inputs/x.toml:2:10: train.device: must be \"auto\" or \"cpu\" or \"cuda\", got \"gpu\"");
  EXPECT_EQ(error_of("[train]\ndevice = 0\n" + data_section()),
            "inputs/x.toml:2:10: train.device: expected a string, got integer");
}

TEST_F(ConfigParse, ArrayForString) {
  EXPECT_EQ(error_of("[data]\npath = [\"a\", \"b\"]\n"),
            "inputs/x.toml:2:8: data.path: expected a string, got array");
}

// ------------------------------------------------------------------------ ranges

TEST_F(ConfigParse, NegativeLearningRate) {
  EXPECT_EQ(error_of("# x\n\n[model]\nn_layer = 2\n\n[optim]\nlr = -0.001\n" + data_section()),
            "inputs/x.toml:7:6: optim.lr: must be > 0, got -0.001");
}

TEST_F(ConfigParse, NonFiniteFloat) {
  EXPECT_EQ(error_of("[optim]\nlr = inf\n" + data_section()),
            "inputs/x.toml:2:6: optim.lr: must be a finite number, got inf");
  EXPECT_EQ(error_of("[optim]\ngrad_clip = nan\n" + data_section()),
            "inputs/x.toml:2:13: optim.grad_clip: must be a finite number, got nan");
}

TEST_F(ConfigParse, BetaMustBeBelowOne) {
  EXPECT_EQ(error_of("[optim]\nbeta1 = 1.0\n" + data_section()),
            "inputs/x.toml:2:9: optim.beta1: must be in [0, 1), got 1");
  EXPECT_EQ(error_of("[optim]\nbeta2 = -0.5\n" + data_section()),
            "inputs/x.toml:2:9: optim.beta2: must be in [0, 1), got -0.5");
}

TEST_F(ConfigParse, IntegerLowerBounds) {
  EXPECT_EQ(error_of("[model]\nseq_len = 1\n" + data_section()),
            "inputs/x.toml:2:11: model.seq_len: must be >= 2, got 1");
  EXPECT_EQ(error_of("[train]\nmicro_batch = 0\n" + data_section()),
            "inputs/x.toml:2:15: train.micro_batch: must be >= 1, got 0");
  EXPECT_EQ(error_of("[train]\nseed = -1\n" + data_section()),
            "inputs/x.toml:2:8: train.seed: must be >= 0, got -1");
  EXPECT_EQ(error_of("[optim]\nwarmup_steps = -5\n" + data_section()),
            "inputs/x.toml:2:16: optim.warmup_steps: must be >= 0, got -5");
}

TEST_F(ConfigParse, IntFieldMustFitInInt) {
  EXPECT_EQ(error_of("[model]\nn_layer = 2147483648\n" + data_section()),
            "inputs/x.toml:2:11: model.n_layer: must be <= 2147483647, got 2147483648");
}

TEST_F(ConfigParse, NHeadMustDivideDModel) {
  EXPECT_EQ(error_of("[model]\nn_head = 6\nd_model = 128\n" + data_section()),
            "inputs/x.toml:2:10: model.n_head: must divide model.d_model (128), got 6");
  // Only d_model given: reported at d_model, against the default n_head = 4.
  EXPECT_EQ(error_of("[model]\nd_model = 130\n" + data_section()),
            "inputs/x.toml:2:11: model.d_model: must be a multiple of model.n_head (4), got 130");
}

// model.attention = "fused" is cuDNN's flash attention: 16-bit storage and a head width
// that is a multiple of 8, at most 128 (the device check is the trainer's: the config
// does not know where the run computes).
TEST_F(ConfigParse, FusedAttentionNeedsSixteenBitsAndAHeadWidthCudnnTakes) {
  EXPECT_EQ(parse_run_config(data_section(), "inputs/x.toml").model.attention, AttentionImpl::Auto);
  const std::string bf16 = "[precision]\nmode = \"bf16\"\n";
  EXPECT_EQ(parse_run_config("[model]\nattention = \"fused\"\n" + bf16 + data_section(), "inputs/x.toml").model.attention,
            AttentionImpl::Fused);  // d_model 128 / n_head 4 = 32
  EXPECT_EQ(error_of("[model]\nattention = \"fused\"\n" + data_section()),
            "inputs/x.toml:2:13: model.attention: \"fused\" (cuDNN's flash attention) needs precision.mode = "
            "\"fp16\" or \"bf16\": cuDNN has no fp32 flash-attention engine; use model.attention = \"unfused\" "
            "(or \"auto\") for fp32");
  EXPECT_EQ(error_of("[model]\nattention = \"fused\"\nn_head = 8\nd_model = 96\n" + bf16 + data_section()),
            "inputs/x.toml:2:13: model.attention: \"fused\" (cuDNN's flash attention) needs a head width d_model "
            "/ n_head that is a multiple of 8 and at most 128, got 96 / 8 = 12");
  EXPECT_EQ(error_of("[model]\nattention = \"fused\"\nn_head = 1\nd_model = 256\n" + bf16 + data_section()),
            "inputs/x.toml:2:13: model.attention: \"fused\" (cuDNN's flash attention) needs a head width d_model "
            "/ n_head that is a multiple of 8 and at most 128, got 256 / 1 = 256");
  EXPECT_EQ(error_of("[model]\nattention = \"fused\"\nseq_len = 100\n" + bf16 + data_section()),
            "inputs/x.toml:2:13: model.attention: \"fused\" (cuDNN's flash attention) needs model.seq_len to be a "
            "multiple of 8 (the 16-byte alignment of its buffers), got 100");
  EXPECT_EQ(error_of("[model]\nattention = \"sdpa\"\n" + data_section()),
            "inputs/x.toml:2:13: model.attention: must be \"unfused\" or \"fused\" or \"flash\" or \"auto\", got \"sdpa\"");
  EXPECT_EQ(error_of("[model]\ntype = \"mlp\"\nattention = \"fused\"\n" + data_section()),
            "inputs/x.toml:3:13: model.attention: is not used by model.type = \"mlp\" (only by gpt)");
}

// model.attention = "auto" (the default) is "fused" for a GPT on a CUDA device in fp16
// or bf16 whose shape cuDNN takes, "unfused" everywhere else; an explicit choice stays.
TEST_F(ConfigParse, AutoAttentionIsFusedOnlyWhereCudnnTakesTheRun) {
  const std::string bf16 = "[precision]\nmode = \"bf16\"\n";
  const auto resolved = [&](const std::string& text, bool on_cuda) {
    return resolve_attention(parse_run_config(text + data_section(), "inputs/x.toml"), on_cuda);
  };
  EXPECT_EQ(resolved(bf16, true), AttentionImpl::Fused);
  EXPECT_EQ(resolved("[precision]\nmode = \"fp16\"\n", true), AttentionImpl::Fused);
  EXPECT_EQ(resolved(bf16, false), AttentionImpl::Unfused);  // the host
  EXPECT_EQ(resolved("", true), AttentionImpl::Unfused);     // fp32
  EXPECT_EQ(resolved("[model]\nn_head = 8\nd_model = 96\n" + bf16, true), AttentionImpl::Unfused);  // head 12
  EXPECT_EQ(resolved("[model]\nn_head = 1\nd_model = 256\n" + bf16, true), AttentionImpl::Unfused);  // head 256
  EXPECT_EQ(resolved("[model]\nseq_len = 100\n" + bf16, true), AttentionImpl::Unfused);
  EXPECT_EQ(resolved("[model]\nattention = \"unfused\"\n" + bf16, true), AttentionImpl::Unfused);
  EXPECT_EQ(resolved("[model]\nattention = \"flash\"\n", true), AttentionImpl::Flash);
  EXPECT_EQ(resolved("[model]\nattention = \"fused\"\n" + bf16, true), AttentionImpl::Fused);
  EXPECT_EQ(resolved("[model]\ntype = \"mlp\"\n" + bf16, true), AttentionImpl::Unfused);
}

// model.attention = "flash" is our tiled CUDA attention: any storage type and seq_len,
// a head width of at most 128 (its 4 accumulators per lane).
TEST_F(ConfigParse, FlashAttentionTakesAnyPrecisionAndHeadsUpTo128) {
  EXPECT_EQ(parse_run_config("[model]\nattention = \"flash\"\nseq_len = 100\n" + data_section(), "inputs/x.toml")
                .model.attention,
            AttentionImpl::Flash);  // fp32, T not a multiple of 8
  EXPECT_EQ(error_of("[model]\nattention = \"flash\"\nn_head = 8\nd_model = 96\n" + data_section()), "<no error>");
  EXPECT_EQ(error_of("[model]\nattention = \"flash\"\nn_head = 1\nd_model = 256\n" + data_section()),
            "inputs/x.toml:2:13: model.attention: \"flash\" (our tiled attention) needs a head width d_model / "
            "n_head of at most 128, got 256 / 1 = 256");
}

// model.gelu = "epilogue" runs the GPT's tanh GELU in cuBLASLt's epilogues: it needs
// a cuBLASLt Linear ("cublaslt" or "auto", refused with "cublas", reported at the key
// the user gave), and only the GPT takes the key (the BERT layouts' GELU is the erf
// form). The device check is the trainer's (trainer_bad_gelu_epilogue_on_host).
TEST_F(ConfigParse, GeluEpilogueNeedsACublasLtLinearAndAGpt) {
  EXPECT_EQ(parse_run_config(data_section(), "inputs/x.toml").model.gelu, GeluImpl::Separate);
  EXPECT_EQ(error_of("[model]\ngelu = \"epilogue\"\n" + data_section()), "<no error>");  // gemm "auto"
  EXPECT_EQ(error_of("[model]\ngelu = \"epilogue\"\ngemm = \"cublaslt\"\n" + data_section()), "<no error>");
  EXPECT_EQ(error_of("[model]\ngelu = \"separate\"\ngemm = \"cublas\"\n" + data_section()), "<no error>");
  const std::string refusal = "model.gelu = \"epilogue\" runs the GELU in the epilogues of cuBLASLt's matmuls and "
                              "needs model.gemm = \"cublaslt\" or \"auto\", but model.gemm = \"cublas\"";
  EXPECT_EQ(error_of("[model]\ngelu = \"epilogue\"\ngemm = \"cublas\"\n" + data_section()),
            "inputs/x.toml:2:8: model.gelu: " + refusal);
  EXPECT_EQ(error_of("[model]\ngemm = \"cublas\"\n" + data_section(), {"model.gelu=epilogue"}),
            "--set model.gelu=epilogue: model.gelu: " + refusal);
  EXPECT_EQ(error_of("[model]\ngelu = \"fused\"\n" + data_section()),
            "inputs/x.toml:2:8: model.gelu: must be \"separate\" or \"epilogue\", got \"fused\"");
  EXPECT_EQ(error_of("[model]\ntype = \"encoder_classifier\"\ngelu = \"epilogue\"\n" + data_section()),
            "inputs/x.toml:3:8: model.gelu: is not used by model.type = \"encoder_classifier\" (only by gpt)");
}

TEST_F(ConfigParse, MicroBatchNeedNotDivideBatchSize) {
  // The trainer splits the global batch unevenly over ranks and micro-batches.
  EXPECT_EQ(error_of("[train]\nbatch_size = 32\nmicro_batch = 6\n" + data_section()), "<no error>");
  EXPECT_EQ(error_of("[train]\nbatch_size = 4\nmicro_batch = 64\n" + data_section()), "<no error>");
}

TEST_F(ConfigParse, MinLrAboveLr) {
  EXPECT_EQ(error_of("[optim]\nlr = 1e-4\nmin_lr = 1e-3\n" + data_section()),
            "inputs/x.toml:3:10: optim.min_lr: must be <= optim.lr (0.0001), got 0.001");
  // Only lr given, below the default min_lr = 1e-4: reported at lr.
  EXPECT_EQ(error_of("[optim]\nlr = 1e-5\n" + data_section()),
            "inputs/x.toml:2:6: optim.lr: must be >= optim.min_lr (0.0001), got 1e-05");
}

TEST_F(ConfigParse, StepsTimesBatchSizeOverflow) {
  EXPECT_EQ(error_of("[train]\nsteps = 4611686018427387904\nbatch_size = 2\nmicro_batch = 1\n" +
                     data_section()),
            "inputs/x.toml:2:9: train.steps: train.steps * train.batch_size (sequences in the "
            "run) must fit in int64, got 4611686018427387904 * 2");
  // One below the limit fits as sequences but not as tokens (x seq_len = 128).
  EXPECT_EQ(error_of("[train]\nsteps = 4611686018427387903\nbatch_size = 2\nmicro_batch = 1\n" +
                     data_section()),
            "inputs/x.toml:2:9: train.steps: train.steps * train.batch_size * model.seq_len "
            "(tokens in the run) must fit in int64, got 4611686018427387903 * 2 * 128");
  // Exactly at the limit of tokens: fine.
  EXPECT_EQ(error_of("[model]\nseq_len = 2\n[train]\nsteps = 2305843009213693951\n"
                     "batch_size = 2\nmicro_batch = 1\n" +
                     data_section()),
            "<no error>");
}

TEST_F(ConfigParse, ModelTypesAndAdamw) {
  EXPECT_EQ(error_of("[model]\ntype = \"bert\"\n" + data_section()),
            "inputs/x.toml:2:8: model.type: must be \"gpt\" or \"encoder_classifier\" or \"mlp\" or \"cnn\", "
            "got \"bert\"");
  EXPECT_EQ(error_of("[optim]\ntype = \"sgd\"\n" + data_section()),
            "inputs/x.toml:2:8: optim.type: must be \"adamw\" (the only optimizer implemented so "
            "far), got \"sgd\"");
}

TEST_F(ConfigParse, ScheduleMustBeKnown) {
  EXPECT_EQ(
      error_of("[optim]\nschedule = \"step\"\n" + data_section()),
      "inputs/x.toml:2:12: optim.schedule: must be \"cosine\" or \"constant\" or \"linear\", got \"step\"");
}

TEST_F(ConfigParse, PrecisionKeys) {
  const RunConfig c = parse_run_config(
      "[precision]\nmode = \"fp16\"\ninit_scale = 1024\ngrowth_interval = 10\nhysteresis = 1\n"
      "min_scale = 0.5\nmax_consecutive_skips = 7\n" + data_section(), "x.toml");
  EXPECT_EQ(c.precision.mode, PrecisionMode::Fp16);
  EXPECT_EQ(c.precision.init_scale, 1024.0);
  EXPECT_EQ(c.precision.growth_interval, 10);
  EXPECT_EQ(c.precision.hysteresis, 1);
  EXPECT_EQ(c.precision.min_scale, 0.5);
  EXPECT_EQ(c.precision.max_consecutive_skips, 7);
  EXPECT_EQ(parse_run_config(data_section(), "x.toml").precision.mode, PrecisionMode::Fp32);
  EXPECT_EQ(error_of("[precision]\nmode = \"fp8\"\n" + data_section()),
            "inputs/x.toml:2:8: precision.mode: must be \"fp32\" or \"fp16\" or \"bf16\", got \"fp8\"");
  EXPECT_EQ(error_of("[precision]\nmin_scale = 4096\ninit_scale = 1024\n" + data_section()),
            "inputs/x.toml:2:13: precision.min_scale: precision.min_scale (4096) must be <= "
            "precision.init_scale (1024)");
  EXPECT_EQ(error_of("[precision]\nbackoff_factor = 1\n" + data_section()),
            "inputs/x.toml:2:18: precision.backoff_factor: must be in [0, 1), got 1");
  EXPECT_EQ(error_of("[precision]\ngrowth_interval = 0\n" + data_section()),
            "inputs/x.toml:2:19: precision.growth_interval: must be >= 1, got 0");
}

// parallel.device_collectives (NCCL the default) and parallel.share_device, which
// only the MPI device collectives allow.
TEST_F(ConfigParse, DeviceCollectivesAndSharingADevice) {
  const RunConfig d = parse_run_config(data_section(), "x.toml");
  EXPECT_EQ(d.parallel.device_collectives, DeviceCollectives::Nccl);
  EXPECT_FALSE(d.parallel.share_device);
  const RunConfig c = parse_run_config(
      "[parallel]\ndevice_collectives = \"mpi\"\nshare_device = true\n" + data_section(), "x.toml");
  EXPECT_EQ(c.parallel.device_collectives, DeviceCollectives::Mpi);
  EXPECT_TRUE(c.parallel.share_device);
  EXPECT_EQ(error_of("[parallel]\ndevice_collectives = \"gloo\"\n" + data_section()),
            "inputs/x.toml:2:22: parallel.device_collectives: must be \"nccl\" or \"mpi\", got \"gloo\"");
  EXPECT_NE(error_of("[parallel]\nshare_device = true\n" + data_section())
                .find("parallel.share_device: needs parallel.device_collectives = \"mpi\""),
            std::string::npos)
      << error_of("[parallel]\nshare_device = true\n" + data_section());
}

TEST_F(ConfigParse, RecomputeKeys) {
  const RunConfig c = parse_run_config(
      "[recompute]\npolicy = \"budget\"\nbudget_mb = 12.5\n" + data_section(), "x.toml");
  EXPECT_EQ(c.recompute.policy, RecomputePolicy::Budget);
  EXPECT_EQ(c.recompute.budget_mb, 12.5);
  EXPECT_EQ(parse_run_config("[recompute]\npolicy = \"sqrt\"\n" + data_section(), "x.toml").recompute.policy,
            RecomputePolicy::Sqrt);
  EXPECT_EQ(error_of("[recompute]\npolicy = \"budget\"\n" + data_section()),
            "inputs/x.toml:2:10: recompute.policy: recompute.policy = \"budget\" needs "
            "recompute.budget_mb > 0 (activation MiB per rank)");
  EXPECT_EQ(error_of("[recompute]\npolicy = \"full\"\nbudget_mb = 5\n" + data_section()),
            "inputs/x.toml:3:13: recompute.budget_mb: is only used by recompute.policy = \"budget\", "
            "but the policy is \"full\"");
  EXPECT_EQ(error_of("[recompute]\npolicy = \"some\"\n" + data_section()),
            "inputs/x.toml:2:10: recompute.policy: must be \"none\" or \"full\" or \"sqrt\" or "
            "\"budget\", got \"some\"");
}

// [guard]: each fault's own choices (a replica mismatch has no "skip", only the spike
// check may be "off"), and "rollback" needs checkpoints to roll back to.
TEST_F(ConfigParse, GuardPolicies) {
  const RunConfig c = parse_run_config("[checkpoint]\nevery_steps = 5\n[guard]\nnon_finite = \"rollback\"\n"
                                       "loss_spike = \"skip\"\nreplica = \"rollback\"\n" + data_section(), "x.toml");
  EXPECT_EQ(c.guard.non_finite, NonFinitePolicy::Rollback);
  EXPECT_EQ(c.guard.loss_spike, LossSpikePolicy::Skip);
  EXPECT_EQ(c.guard.replica, ReplicaPolicy::Rollback);
  EXPECT_EQ(error_of("[guard]\nreplica = \"skip\"\n" + data_section()),
            "inputs/x.toml:2:11: guard.replica: must be \"abort\" or \"rollback\", got \"skip\"");
  EXPECT_EQ(error_of("[guard]\nnon_finite = \"off\"\n" + data_section()),
            "inputs/x.toml:2:14: guard.non_finite: must be \"skip\" or \"rollback\" or \"abort\", got \"off\"");
  EXPECT_EQ(error_of("[guard]\nloss_spike = \"rollback\"\n" + data_section()),
            "inputs/x.toml:2:14: guard.loss_spike: \"rollback\" reloads the last checkpoint, but checkpoints are "
            "off: set checkpoint.every_steps (or checkpoint.every_minutes)");
}

// Each choice key's every name, written in the file, reads as the enum value of
// that meaning (not merely the value at the name's index: a name table in the
// wrong order fails here), and the defaults are the documented ones.
TEST_F(ConfigParse, ChoiceKeysReadAsTheirEnumValues) {
  auto parse = [&](const std::string& section, const std::string& line) {
    return parse_run_config("[" + section + "]\n" + line + "\n" + data_section(), "x.toml");
  };
  const std::string bf16 = "[precision]\nmode = \"bf16\"\n";
  EXPECT_EQ(parse("model", "attention = \"unfused\"").model.attention, AttentionImpl::Unfused);
  EXPECT_EQ(parse_run_config("[model]\nattention = \"fused\"\n" + bf16 + data_section(), "x.toml").model.attention,
            AttentionImpl::Fused);
  EXPECT_EQ(parse("model", "gemm = \"cublas\"").model.gemm, GemmImpl::Cublas);
  EXPECT_EQ(parse("model", "gemm = \"cublaslt\"").model.gemm, GemmImpl::Cublaslt);
  EXPECT_EQ(parse("model", "gemm = \"auto\"").model.gemm, GemmImpl::Auto);
  EXPECT_EQ(parse("model", "type = \"mlp\"\ngemm = \"cublaslt\"").model.gemm, GemmImpl::Cublaslt);  // every type
  EXPECT_EQ(parse("model", "gelu = \"separate\"").model.gelu, GeluImpl::Separate);
  EXPECT_EQ(parse("model", "gelu = \"epilogue\"").model.gelu, GeluImpl::Epilogue);
  EXPECT_EQ(error_of("[model]\ngemm = \"lt\"\n" + data_section()),
            "inputs/x.toml:2:8: model.gemm: must be \"cublas\" or \"cublaslt\" or \"auto\", got \"lt\"");
  const std::string encoder = "type = \"encoder_classifier\"\n";
  EXPECT_EQ(parse("model", encoder + "pooling = \"cls\"").model.pooling, Pooling::Cls);
  EXPECT_EQ(parse("model", encoder + "pooling = \"mean\"").model.pooling, Pooling::Mean);
  const std::string cnn = "[model]\ntype = \"cnn\"\n";
  for (const auto& [name, value] : {std::pair{"auto", DataInMemory::Auto}, std::pair{"on", DataInMemory::On},
                                    std::pair{"off", DataInMemory::Off}})
    EXPECT_EQ(parse_run_config(cnn + data_section() + "in_memory = \"" + name + "\"\n", "x.toml").data.in_memory,
              value)
        << name;
  for (const auto& [name, value] : {std::pair{"auto", TrainDevice::Auto}, std::pair{"cpu", TrainDevice::Cpu},
                                    std::pair{"cuda", TrainDevice::Cuda}})
    EXPECT_EQ(parse("train", "device = \"" + std::string(name) + "\"").train.device, value) << name;
  EXPECT_EQ(parse("train", "device_kernels = \"candidate\"").train.device_kernels, DeviceKernels::Candidate);
  EXPECT_EQ(parse("train", "device_kernels = \"validated\"").train.device_kernels, DeviceKernels::Validated);
  EXPECT_EQ(parse("optim", "type = \"adamw\"").optim.type, OptimizerType::AdamW);
  EXPECT_EQ(parse("optim", "schedule = \"cosine\"").optim.schedule, LrSchedule::Cosine);
  EXPECT_EQ(parse("optim", "schedule = \"constant\"").optim.schedule, LrSchedule::Constant);
  for (const auto& [name, value] : {std::pair{"none", RecomputePolicy::None}, std::pair{"full", RecomputePolicy::Full},
                                    std::pair{"sqrt", RecomputePolicy::Sqrt}})
    EXPECT_EQ(parse("recompute", "policy = \"" + std::string(name) + "\"").recompute.policy, value) << name;
  EXPECT_EQ(parse("recompute", "policy = \"budget\"\nbudget_mb = 1").recompute.policy, RecomputePolicy::Budget);

  const RunConfig d = parse_run_config(data_section(), "x.toml");
  EXPECT_EQ(d.model.attention, AttentionImpl::Auto);
  EXPECT_EQ(d.model.pooling, Pooling::Cls);
  EXPECT_EQ(d.model.gemm, GemmImpl::Auto);
  EXPECT_EQ(d.train.device_kernels, DeviceKernels::Validated);
  EXPECT_EQ(d.model.gelu, GeluImpl::Separate);
  EXPECT_EQ(d.data.in_memory, DataInMemory::Auto);
  EXPECT_EQ(d.train.device, TrainDevice::Auto);
  EXPECT_EQ(d.optim.type, OptimizerType::AdamW);
  EXPECT_EQ(d.optim.schedule, LrSchedule::Cosine);
  EXPECT_EQ(d.recompute.policy, RecomputePolicy::None);
}

TEST_F(ConfigParse, CheckpointKeys) {
  const RunConfig d = parse_run_config("[train]\nrun_dir = \"r/x\"\n" + data_section(), "x.toml");
  EXPECT_EQ(d.checkpoint.dir, "r/x/checkpoints");  // default: inside the run directory
  EXPECT_EQ(d.checkpoint.every_steps, 0);
  EXPECT_EQ(d.checkpoint.every_minutes, 0.0);
  EXPECT_EQ(d.checkpoint.keep_last, 3);
  EXPECT_EQ(d.checkpoint.resume, "auto");
  const RunConfig c = parse_run_config(
      "[checkpoint]\ndir = \"ck\"\nevery_steps = 50\nevery_minutes = 2.5\nkeep_last = 1\n"
      "resume = \"" + m_data + "\"\n" + data_section(), "x.toml");
  EXPECT_EQ(c.checkpoint.dir, "ck");
  EXPECT_EQ(c.checkpoint.every_steps, 50);
  EXPECT_EQ(c.checkpoint.every_minutes, 2.5);
  EXPECT_EQ(c.checkpoint.keep_last, 1);
  EXPECT_EQ(c.checkpoint.resume, m_data);
  EXPECT_EQ(parse_run_config("[checkpoint]\nresume = \"never\"\n" + data_section(), "x.toml").checkpoint.resume,
            "never");
  EXPECT_EQ(error_of("[checkpoint]\nkeep_last = 0\n" + data_section()),
            "inputs/x.toml:2:13: checkpoint.keep_last: must be >= 1, got 0");
  // Checkpoint storage faults (issue 34): failures survived in a row, and the I/O deadline.
  EXPECT_EQ(d.checkpoint.max_failures, 3);
  EXPECT_EQ(d.checkpoint.io_timeout_s, 600.0);
  const RunConfig f = parse_run_config("[checkpoint]\nmax_failures = 1\nio_timeout_s = 2.5\n" + data_section(), "x.toml");
  EXPECT_EQ(f.checkpoint.max_failures, 1);
  EXPECT_EQ(f.checkpoint.io_timeout_s, 2.5);
  EXPECT_EQ(error_of("[checkpoint]\nmax_failures = 0\n" + data_section()),
            "inputs/x.toml:2:16: checkpoint.max_failures: must be >= 1, got 0");
  EXPECT_EQ(error_of("[checkpoint]\nio_timeout_s = 0.0\n" + data_section()),
            "inputs/x.toml:2:16: checkpoint.io_timeout_s: must be > 0, got 0");
  EXPECT_EQ(error_of("[checkpoint]\nevery_steps = -5\n" + data_section()),
            "inputs/x.toml:2:15: checkpoint.every_steps: must be >= 0, got -5");
  EXPECT_EQ(error_of("[checkpoint]\nevery_minutes = -1.0\n" + data_section()),
            "inputs/x.toml:2:17: checkpoint.every_minutes: must be >= 0, got -1");
  EXPECT_EQ(error_of("[checkpoint]\nresume = \"no/such/ckpt.h5\"\n" + data_section()),
            "inputs/x.toml:2:10: checkpoint.resume: must be \"auto\", \"never\" or an existing "
            "checkpoint file or directory; no such file or directory 'no/such/ckpt.h5'");
  EXPECT_EQ(error_of("[checkpoint]\nresume = true\n" + data_section()),
            "inputs/x.toml:2:10: checkpoint.resume: expected a string, got boolean");
  EXPECT_EQ(error_of("[checkpoint]\nevery = 5\n" + data_section()).substr(0, 52),
            "inputs/x.toml:2:1: unknown key checkpoint.every (did");
}

TEST_F(ConfigParse, TimeLimitTakesMinutesOrSlurmTimes) {
  auto minutes = [&](const std::string& v) {
    return parse_run_config("[train]\ntime_limit = " + v + "\n" + data_section(), "x.toml").train.time_limit_minutes;
  };
  EXPECT_EQ(minutes("90"), 90.0);
  EXPECT_EQ(minutes("2.5"), 2.5);
  EXPECT_EQ(minutes("\"30\""), 30.0);                        // MM
  EXPECT_EQ(minutes("\"10:30\""), 10.5);                     // MM:SS
  EXPECT_EQ(minutes("\"02:00:30\""), 120.5);                 // HH:MM:SS
  EXPECT_EQ(minutes("\"1-00\""), 1440.0);                    // D-HH
  EXPECT_EQ(minutes("\"1-02:30\""), 1590.0);                 // D-HH:MM
  EXPECT_EQ(minutes("\"2-00:00:30\""), 2 * 1440.0 + 0.5);    // D-HH:MM:SS
  EXPECT_EQ(parse_run_config(data_section(), "x.toml").train.time_limit_minutes, 0.0);
  EXPECT_EQ(error_of("[train]\ntime_limit = \"1h\"\n" + data_section()),
            "inputs/x.toml:2:14: train.time_limit: expected minutes (a number) or a time like \"HH:MM:SS\" or "
            "\"D-HH:MM:SS\", got \"1h\"");
  EXPECT_EQ(error_of("[train]\ntime_limit = \"1:2:3:4\"\n" + data_section()).substr(0, 50),
            "inputs/x.toml:2:14: train.time_limit: expected min");
  EXPECT_EQ(error_of("[train]\ntime_limit = -5\n" + data_section()),
            "inputs/x.toml:2:14: train.time_limit: must be >= 0, got -5");
  EXPECT_EQ(parse_run_config("[parallel]\ncollective_timeout_s = 0\n" + data_section(), "x.toml")
                .parallel.collective_timeout_s,
            0.0);
  EXPECT_EQ(parse_run_config(data_section(), "x.toml").parallel.collective_timeout_s, 300.0);
  EXPECT_EQ(error_of("[parallel]\ncollective_timeout_s = -1\n" + data_section()),
            "inputs/x.toml:2:24: parallel.collective_timeout_s: must be >= 0, got -1");
}

TEST_F(ConfigParse, ZeroStageRange) {
  for (int stage = 0; stage <= 3; ++stage)
    EXPECT_EQ(parse_run_config("[parallel]\nzero_stage = " + std::to_string(stage) + "\n" + data_section(), "x.toml")
                  .parallel.zero_stage,
              stage);
  EXPECT_FALSE(parse_run_config("[parallel]\noverlap = false\n" + data_section(), "x.toml").parallel.overlap);
  EXPECT_EQ(error_of("[parallel]\noverlap = 1\n" + data_section()),
            "inputs/x.toml:2:11: parallel.overlap: expected a boolean, got integer");
  EXPECT_EQ(error_of("[parallel]\nzero_stage = 7\n" + data_section()),
            "inputs/x.toml:2:14: parallel.zero_stage: must be 0, 1, 2 or 3, got 7");
  EXPECT_EQ(error_of("[parallel]\nzero_stage = -1\n" + data_section()),
            "inputs/x.toml:2:14: parallel.zero_stage: must be >= 0, got -1");
  EXPECT_EQ(parse_run_config("[parallel]\nbucket_mb = 0.5\n" + data_section(), "x.toml").parallel.bucket_mb, 0.5);
  EXPECT_EQ(error_of("[parallel]\nbucket_mb = -1\n" + data_section()),
            "inputs/x.toml:2:13: parallel.bucket_mb: must be >= 0, got -1");
  EXPECT_EQ(error_of("[parallel]\nbucket_mb = \"big\"\n" + data_section()),
            "inputs/x.toml:2:13: parallel.bucket_mb: expected a number, got string");
}

TEST_F(ConfigParse, EmptyRunDir) {
  EXPECT_EQ(error_of("[train]\nrun_dir = \"\"\n" + data_section()),
            "inputs/x.toml:2:11: train.run_dir: must not be empty");
}

// --------------------------------------------------------------------- data.path

TEST_F(ConfigParse, MissingDataPath) {
  EXPECT_EQ(error_of("[model]\nn_layer = 2\n"), "inputs/x.toml: missing required key data.path");
  EXPECT_EQ(error_of("[model]\nn_layer = 2\n[data]\n"),
            "inputs/x.toml:3:1: missing required key data.path");
}

TEST_F(ConfigParse, DataPathToAMissingFile) {
  EXPECT_EQ(error_of("[data]\npath = \"does/not/exist.h5\"\n"),
            "inputs/x.toml:2:8: data.path: no such file 'does/not/exist.h5'");
}

TEST_F(ConfigParse, DataPathToADirectory) {
  const std::string dir = m_dir.path().string();
  EXPECT_EQ(error_of("[data]\npath = \"" + dir + "\"\n"),
            "inputs/x.toml:2:8: data.path: '" + dir + "' is not a regular file");
}

// ------------------------------------------------------------- several at once

TEST_F(ConfigParse, EveryProblemIsReportedOnItsOwnLineInFileOrder) {
  EXPECT_EQ(error_of("[train]\nsteps = 0\n[optim]\nlr = -1\n[model]\nn_layerz = 3\n"),
            "inputs/x.toml:2:9: train.steps: must be >= 1, got 0\n"
            "inputs/x.toml:4:6: optim.lr: must be > 0, got -1\n"
            "inputs/x.toml:6:1: unknown key model.n_layerz (did you mean model.n_layer?)\n"
            "inputs/x.toml: missing required key data.path");
}

TEST_F(ConfigParse, ErrorIsAnInputError) {
  EXPECT_THROW(parse_run_config("[train]\nsteps = 0\n" + data_section(), "x.toml"), InputError);
}

// The classifiers' keys (issue 9): lists, per-type keys, defaults, round trip.
TEST_F(ConfigParse, ClassifierModels) {
  const std::string data = data_section();
  const RunConfig mlp = parse_run_config("[model]\ntype = \"mlp\"\nhidden = [300, 100]\n" + data, "x.toml");
  EXPECT_EQ(mlp.model.type, ModelType::Mlp);
  EXPECT_EQ(mlp.model.hidden, (std::vector<std::int64_t>{300, 100}));
  const RunConfig cnn = parse_run_config(
      "[model]\ntype = \"cnn\"\nconv_channels = [6, 16]\nconv_kernel = 3\nconv_padding = 1\npool = 1\n"
      "hidden = [84]\ndropout = 0.5\n" + data, "x.toml");
  EXPECT_EQ(cnn.model.conv_channels, (std::vector<std::int64_t>{6, 16}));
  EXPECT_EQ(cnn.model.conv_kernel, 3);
  EXPECT_EQ(cnn.model.conv_padding, 1);
  EXPECT_EQ(cnn.model.pool, 1);
  EXPECT_EQ(cnn.model.dropout, 0.5);
  const RunConfig enc = parse_run_config("[model]\ntype = \"encoder_classifier\"\npooling = \"mean\"\n" + data,
                                         "x.toml");
  EXPECT_EQ(enc.model.seq_len, 0);  // the data set's length
  EXPECT_EQ(enc.model.pooling, Pooling::Mean);
  EXPECT_EQ(parse_run_config(data, "x.toml").model.seq_len, 128);  // the GPT's default is unchanged
  // Round trip: to_toml writes only the type's keys and reads back the same.
  for (const RunConfig* c : {&mlp, &cnn, &enc}) {
    const RunConfig again = parse_run_config(to_toml(*c), "config.toml");
    EXPECT_EQ(to_toml(again), to_toml(*c));
    EXPECT_EQ(again.model.hidden, c->model.hidden);
    EXPECT_EQ(again.model.conv_channels, c->model.conv_channels);
  }
  // A list on the command line.
  const std::vector<std::string> set{"model.hidden=[32, 16, 8]"};
  EXPECT_EQ(parse_run_config("[model]\ntype = \"mlp\"\n" + data, "x.toml", set).model.hidden,
            (std::vector<std::int64_t>{32, 16, 8}));
}

// data.in_memory: a string choice that also takes a TOML boolean ("on" / "off"),
// classifiers only; its limit.
TEST_F(ConfigParse, DataInMemory) {
  const std::string cnn = "[model]\ntype = \"cnn\"\n" + data_section();
  const RunConfig d = parse_run_config(cnn, "x.toml");
  EXPECT_EQ(d.data.in_memory, DataInMemory::Auto);
  EXPECT_EQ(d.data.in_memory_limit_mb, 1024.0);
  EXPECT_EQ(parse_run_config(cnn + "in_memory = true\n", "x.toml").data.in_memory, DataInMemory::On);
  EXPECT_EQ(parse_run_config(cnn + "in_memory = false\n", "x.toml").data.in_memory, DataInMemory::Off);
  EXPECT_EQ(parse_run_config(cnn + "in_memory = \"off\"\nin_memory_limit_mb = 8\n", "x.toml").data.in_memory_limit_mb,
            8.0);
  const std::vector<std::string> set{"data.in_memory=false"};
  const RunConfig off = parse_run_config(cnn, "x.toml", set);
  EXPECT_EQ(off.data.in_memory, DataInMemory::Off);
  const RunConfig again = parse_run_config(to_toml(off), "config.toml");
  EXPECT_EQ(again.data.in_memory, DataInMemory::Off);
  EXPECT_EQ(to_toml(again), to_toml(off));
  EXPECT_NE(error_of(cnn + "in_memory = \"yes\"\n")
                .find("data.in_memory: must be \"auto\" or \"on\" or \"off\" (or true / false, read as \"on\" / "
                      "\"off\"), got \"yes\""),
            std::string::npos)
      << error_of(cnn + "in_memory = \"yes\"\n");
  EXPECT_NE(error_of(cnn + "in_memory = 1\n").find("data.in_memory: expected a string, got integer"), std::string::npos);
  EXPECT_NE(error_of(cnn + "in_memory_limit_mb = -1\n").find("data.in_memory_limit_mb: must be >= 0"),
            std::string::npos);
  EXPECT_NE(error_of(data_section() + "in_memory = true\n")
                .find("data.in_memory: is not used by model.type = \"gpt\" (only by encoder_classifier/mlp/cnn)"),
            std::string::npos);
  // Other string keys still refuse booleans (BooleansNeverCoerce).
  EXPECT_NE(error_of(cnn + "[train]\ndevice = true\n").find("train.device: expected a string, got boolean"),
            std::string::npos);
}

TEST_F(ConfigParse, ClassifierModelErrors) {
  const std::string data = data_section();
  EXPECT_EQ(error_of("[model]\nhidden = [300]\n" + data),
            "inputs/x.toml:2:10: model.hidden: is not used by model.type = \"gpt\" (only by mlp/cnn)");
  EXPECT_EQ(error_of("[model]\ntype = \"mlp\"\nn_layer = 2\n" + data),
            "inputs/x.toml:3:11: model.n_layer: is not used by model.type = \"mlp\" (only by gpt/encoder_classifier)");
  EXPECT_EQ(error_of("[model]\ntype = \"mlp\"\nhidden = 300\n" + data),
            "inputs/x.toml:3:10: model.hidden: expected an array of integers like [300, 100], got integer");
  EXPECT_EQ(error_of("[model]\ntype = \"mlp\"\nhidden = [300, 0]\n" + data),
            "inputs/x.toml:3:10: model.hidden: entry 2 must be in [1, 16777216], got 0");
  EXPECT_EQ(error_of("[model]\ntype = \"mlp\"\nhidden = [300, 1.5]\n" + data),
            "inputs/x.toml:3:10: model.hidden: entry 2 must be an integer, got float");
  EXPECT_EQ(error_of("[model]\ntype = \"cnn\"\nconv_channels = []\n" + data),
            "inputs/x.toml:3:17: model.conv_channels: model.type = \"cnn\" needs at least one convolution (use "
            "model.type = \"mlp\" for none)");
  EXPECT_EQ(error_of("[model]\ntype = \"cnn\"\ndropout = 1.0\n" + data),
            "inputs/x.toml:3:11: model.dropout: must be in [0, 1), got 1");
  EXPECT_EQ(error_of("[model]\ntype = \"encoder_classifier\"\npooling = \"max\"\n" + data),
            "inputs/x.toml:3:11: model.pooling: must be \"cls\" or \"mean\", got \"max\"");
}

}  // namespace
}  // namespace shardtrain
