// shardtrain/config/run_config.hpp
// The validated, immutable description of one run: plain structs, no TOML types.
// Produced only by parse_run_config() (config/parse.hpp); every field has been
// range-checked there, so the rest of the program may trust it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardtrain {

// share/doc/config.md#model. Which keys apply depends on the type; a key
// given for a type that does not use it is an error.
struct ModelConfig {
  std::string type = "gpt";        // "gpt" | "encoder_classifier" | "mlp" | "cnn"
  // gpt, encoder_classifier:
  int n_layer = 4;                 // transformer blocks, >= 1
  int n_head = 4;                  // attention heads, >= 1, divides d_model
  int d_model = 128;               // residual width C, >= 1
  int seq_len = 128;               // gpt: context length T, >= 2 (default 128); encoder: tokens read
                                   // per sample, >= 2 (rows are cut to it; 0, the default: the data set's)
  double init_std = 0.02;          // N(0, init_std) init; residual projections scaled by 1/sqrt(2L)
  double layernorm_eps = 1e-5;     // > 0
  std::string pooling = "cls";     // encoder_classifier: "cls" (position 0) | "mean" (valid positions)
  // mlp, cnn:
  std::vector<std::int64_t> hidden;          // fully connected hidden widths (ReLU); may be empty
  // cnn: conv (stride 1) -> ReLU -> max-pool per entry of conv_channels, then the hidden layers
  std::vector<std::int64_t> conv_channels = {20, 50};
  int conv_kernel = 5;             // square kernels, >= 1
  int conv_padding = 0;            // zero padding, >= 0
  int pool = 2;                    // max-pool window = stride; 1 = no pooling
  // cnn, encoder_classifier: dropout probability in [0, 1) (cnn: after each hidden layer)
  double dropout = 0.0;
};

struct DataConfig {
  std::string path;                // HDF5 data set written by trainer-data; required, must exist
};

struct TrainConfig {
  std::int64_t steps = 1000;       // optimizer steps, >= 1
  std::int64_t batch_size = 32;    // GLOBAL sequences per optimizer step, >= 1
  std::int64_t micro_batch = 8;    // sequences per rank per forward/backward, >= 1
  std::uint64_t seed = 1234;       // init, data order
  std::int64_t eval_every = 100;   // steps between validation passes; 0 = only at the end
  std::int64_t eval_windows = 0;   // validation windows (gpt) or samples (classifiers) per pass; 0 = the whole split
  std::int64_t log_every = 10;     // steps between progress lines, >= 1
  std::string run_dir;             // default "runs/<input file stem>"
  double memory_limit_mb = 0.0;    // per-rank cap on the planned bytes (MiB); 0 = none; >= 0
  double time_limit_minutes = 0.0; // wall time from the trainer's start; checkpoint + exit 75 before it ends; 0 = none
  std::string device = "auto";     // "auto" (cuda in a CUDA build, else cpu) | "cpu" | "cuda" (one GPU per rank)
};

struct OptimConfig {
  std::string type = "adamw";      // only "adamw" for now
  double lr = 1e-3;                // peak learning rate, > 0
  double min_lr = 1e-4;            // floor of the cosine decay, 0 <= min_lr <= lr
  std::int64_t warmup_steps = 100; // linear warmup from lr/warmup_steps to lr, >= 0
  std::string schedule = "cosine"; // "cosine" | "constant"
  double weight_decay = 0.1;       // decoupled; not applied to biases, LayerNorm or embeddings; >= 0
  double beta1 = 0.9;              // [0, 1)
  double beta2 = 0.95;             // [0, 1)
  double eps = 1e-8;               // > 0
  double grad_clip = 1.0;          // max global grad norm; 0 = no clipping; >= 0
};

struct ParallelConfig {
  int zero_stage = 0;              // 0-3 (dist/zero_engine.hpp)
  bool overlap = true;             // stages 2-3: reduce gradients while backward goes on
  double bucket_mb = 4.0;          // stages 2-3: coalesce groups into buckets up to this; >= 0
  double collective_timeout_s = 300.0;  // watchdog: a blocking collective stalled this long ends the job; 0 = off
};

// Mixed precision (share/doc/config.md#precision). fp16 and bf16 store
// parameters, activations and gradients in 16 bits, with fp32 master weights
// and moments in the optimizer; fp16 also scales the loss (optim/loss_scaler.hpp).
struct PrecisionConfig {
  std::string mode = "fp32";                 // "fp32" | "fp16" | "bf16"
  double init_scale = 65536.0;               // fp16 loss scale at step 1; >= min_scale
  std::int64_t growth_interval = 2000;       // clean steps before the scale grows, >= 1
  double growth_factor = 2.0;                // > 1
  double backoff_factor = 0.5;               // in (0, 1)
  int hysteresis = 2;                        // overflows before the first back-off, >= 1
  double min_scale = 1.0;                    // > 0
  std::int64_t max_consecutive_skips = 100;  // abort after this many skipped steps in a row, >= 1
};

// Activation recompute (model/recompute.hpp, share/doc/config.md#recompute).
struct RecomputeConfig {
  std::string policy = "none";     // "none" | "full" | "sqrt" | "budget"
  double budget_mb = 0.0;          // policy "budget": activation MiB per rank, > 0
};

// Sharded checkpoints (train/checkpointing.hpp, share/doc/config.md#checkpoint).
// Checkpointing is on when every_steps > 0 or every_minutes > 0; a final
// checkpoint is then also written when training ends.
struct CheckpointConfig {
  std::string dir;                 // default "<train.run_dir>/checkpoints"
  std::int64_t every_steps = 0;    // write after every N-th step; 0 = not by step count; >= 0
  double every_minutes = 0.0;      // write when this much wall time passed since the last; 0 = off; >= 0
  std::int64_t keep_last = 3;      // complete checkpoints kept (older ones pruned), >= 1
  std::string resume = "auto";     // "auto" (latest complete in dir, if any) | "never" | a file or directory
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
  std::string source_name;         // the input file as given on the command line
  std::string source_text;         // its text, as broadcast by rank 0
};

}  // namespace shardtrain
