// shardtrain/config/run_config.hpp
// The validated, immutable description of one run: plain structs, no TOML types.
// Produced only by parse_run_config() (config/parse.hpp); every field has been
// range-checked there, so the rest of the program may trust it.
// The initializers below are the keys' defaults. Everything else about a key (its
// name, range, the model types that use it, its documentation) is its row in
// config/schema.cpp, which binds it to its field here; share/doc/config.md is
// generated from those rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model_type.hpp"
#include "core/precision.hpp"
#include "core/run_choices.hpp"

namespace shardtrain {

// [model]. Which keys apply depends on the type; a key given for a type that
// does not use it is an error.
struct ModelConfig {
  ModelType type = ModelType::Gpt;  // core/model_types.def
  // gpt, encoder_classifier:
  int n_layer = 4;
  int n_head = 4;
  int d_model = 128;
  int seq_len = 128;  // encoder_classifier: 0 (the data set's) unless given
  double init_std = 0.02;
  double layernorm_eps = 1e-5;
  AttentionImpl attention = AttentionImpl::Auto;  // gpt: auto, unfused, fused (cuDNN flash attention, CUDA) or flash (ours, CUDA)
  GemmImpl gemm = GemmImpl::Auto;  // every type: the device's Linear (auto = cublaslt on CUDA, cublas, or cublaslt: CUDA only)
  GeluImpl gelu = GeluImpl::Separate;  // gpt: the MLP's GELU as its own pass, or in cuBLASLt's epilogues (CUDA only)
  Pooling pooling = Pooling::Cls;  // encoder_classifier
  EncoderLayout layout = EncoderLayout::PreLn;  // encoder_classifier
  int max_positions = 0;  // encoder_classifier: rows of the position table; 0: seq_len
  // mlp, cnn:
  std::vector<std::int64_t> hidden;
  // cnn: conv (stride 1) -> ReLU -> max-pool per entry of conv_channels, then the hidden layers
  std::vector<std::int64_t> conv_channels = {20, 50};
  int conv_kernel = 5;
  int conv_padding = 0;
  int pool = 2;
  // cnn, encoder_classifier:
  double dropout = 0.0;
  // Start from the weights of this file (task/init_from.hpp): "" = none.
  std::string init_from;
};

struct DataConfig {
  std::string path;  // required
  // Classifiers (sample data sets): hold both splits in memory, read once at
  // start-up (On), read each micro-batch from the file (Off), or hold them
  // when they take at most in_memory_limit_mb per rank (Auto).
  DataInMemory in_memory = DataInMemory::Auto;
  double in_memory_limit_mb = 1024.0;
};

struct TrainConfig {
  std::int64_t steps = 1000;
  std::int64_t batch_size = 32;  // global, over all ranks and micro-batches
  std::int64_t micro_batch = 8;  // per rank
  std::uint64_t seed = 1234;
  std::int64_t eval_every = 100;
  std::int64_t eval_windows = 0;
  std::int64_t log_every = 10;
  std::string run_dir;              // default "runs/<input file stem>"
  double memory_limit_mb = 0.0;     // 0 = none
  double time_limit_minutes = 0.0;  // key train.time_limit; 0 = none
  TrainDevice device = TrainDevice::Auto;
  DeviceKernels device_kernels = DeviceKernels::Validated;  // CUDA only: "candidate" adds the kernels not yet run on a device
  // gpt: at each evaluation after a step that is a multiple of sample_every (0:
  // never), rank 0 prints sample_tokens tokens continuing sample_prompt
  // (task/run_sample.hpp).
  std::int64_t sample_every = 0;
  std::int64_t sample_tokens = 64;
  std::string sample_prompt;
  double sample_temperature = 0.0;
};

struct OptimConfig {
  OptimizerType type = OptimizerType::AdamW;
  double lr = 1e-3;
  double min_lr = 1e-4;
  std::int64_t warmup_steps = 100;
  LrSchedule schedule = LrSchedule::Cosine;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // 0 = no clipping
};

struct ParallelConfig {
  int zero_stage = 0;  // parallel/zero_engine.hpp
  bool overlap = true;
  double bucket_mb = 4.0;
  double collective_timeout_s = 300.0;  // 0 = off
  int threads = 1;  // oneDNN's (and OpenBLAS's) threads per rank (kernels/cpu_compute.hpp)
  DeviceCollectives device_collectives = DeviceCollectives::Nccl;  // parallel/device_context.hpp
  bool share_device = false;  // ranks of a node may share one GPU (device_collectives = "mpi" only)
};

// Mixed precision. fp16 and bf16 store parameters, activations and gradients in
// 16 bits, with fp32 master weights and moments in the optimizer; fp16 also
// scales the loss (optim/loss_scaler.hpp).
struct PrecisionConfig {
  PrecisionMode mode = PrecisionMode::Fp32;
  double init_scale = 65536.0;
  std::int64_t growth_interval = 2000;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int hysteresis = 2;
  double min_scale = 1.0;
  std::int64_t max_consecutive_skips = 100;
};

// Activation recompute (model/recompute.hpp, share/doc/config.md#recompute).
struct RecomputeConfig {
  RecomputePolicy policy = RecomputePolicy::None;
  double budget_mb = 0.0;  // policy Budget only
};

// Sharded checkpoints (session/checkpointing.hpp). Checkpointing is on when
// every_steps > 0 or every_minutes > 0; a final checkpoint is then also written
// when training ends.
struct CheckpointConfig {
  std::string dir;  // default "<train.run_dir>/checkpoints"
  std::int64_t every_steps = 0;
  double every_minutes = 0.0;
  std::int64_t keep_last = 3;
  std::string resume = "auto";  // "auto" | "never" | a file or directory
  bool async = false;           // write scheduled checkpoints in the background (session/background_checkpoint.hpp)
  std::int64_t max_failures = 3;  // scheduled checkpoints that may fail in a row before the job ends
  double io_timeout_s = 600.0;    // deadline of each checkpoint I/O phase on each rank (io/io_deadline.hpp)
};

// Numerical faults (session/numeric_guard.hpp, share/doc/training.md#numerical-faults):
// what is detected and what each fault does. The defaults are today's: a
// non-finite step ends the run (fp16: when its loss scaler gives up), no
// loss-spike check, the stage-0 replicas compared at each metrics row.
struct GuardConfig {
  NonFinitePolicy non_finite = NonFinitePolicy::Abort;
  LossSpikePolicy loss_spike = LossSpikePolicy::Off;
  double spike_factor = 3.0;                    // a spike: loss > spike_factor * the window's mean
  std::int64_t spike_window = 50;               // accepted steps the running mean is over
  std::int64_t spike_warmup = 100;              // no spike check at steps <= this
  ReplicaPolicy replica = ReplicaPolicy::Abort;
  std::int64_t replica_every = 0;               // compare replicas (stages 0-2) every N steps; 0: metrics rows, stage 0
  std::int64_t max_rollbacks = 3;               // rollbacks in one job before a fault aborts
  std::int64_t max_skips = 10;                  // guard skips in a row before a fault aborts
  std::int64_t min_scale_steps = 0;             // fp16: overflows in a row at precision.min_scale that are a fault; 0: off
};

struct RunConfig {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  OptimConfig optim;
  ParallelConfig parallel;
  PrecisionConfig precision;
  RecomputeConfig recompute;
  CheckpointConfig checkpoint;
  GuardConfig guard;
  std::string source_name;  // the input file as given on the command line
  std::string source_text;  // its text, as broadcast by rank 0
};

}  // namespace shardtrain
