// shardtrain/config/schema.cpp
// The config schema's rows (schema.hpp): every input key, once.
// This file is long because each row carries its key's documentation (config.md's Meaning cell).
// The code is the few helpers at the end.
// A row: SHARDTRAIN_CONFIG_KEY(section, field) names the key after its RunConfig
// field; then, in declaration order, the KeySpec members that differ from their
// defaults. The table is checked at compile time (rows_are_consistent).
#include "config/schema.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

#include "config/toml_text.hpp"

namespace shardtrain {
namespace {

// The key `key_` of [section_], filling config.section_.key_.
#define SHARDTRAIN_CONFIG_KEY(section_, key_) \
  .section = #section_, .key = #key_,         \
  .field = config_field<&RunConfig::section_, &decltype(RunConfig::section_)::key_>()

constexpr std::int64_t k_int_max = std::numeric_limits<int>::max();

// The model types that use a key (KeySpec::model_types).
using enum ModelType;
constexpr ModelType k_transformers[] = {Gpt, EncoderClassifier};
constexpr ModelType k_encoder[] = {EncoderClassifier};
constexpr ModelType k_gpt[] = {Gpt};
constexpr ModelType k_encoder_cnn[] = {EncoderClassifier, Cnn};
constexpr ModelType k_mlp_cnn[] = {Mlp, Cnn};
constexpr ModelType k_cnn[] = {Cnn};
constexpr ModelType k_classifiers[] = {EncoderClassifier, Mlp, Cnn};

// "runs/<stem of the input file>", or "runs/run" when the name has no stem.
void derive_run_dir(RunConfig& c) {
  const std::string stem = std::filesystem::path(c.source_name).stem().string();
  c.train.run_dir = stem.empty() || stem == "." || stem == ".." || stem == "-" ? "runs/run" : "runs/" + stem;
}

std::string check_data_path(const RunConfig& c) {
  std::error_code ec;
  const auto status = std::filesystem::status(c.data.path, ec);
  if (!std::filesystem::exists(status)) return fmt::format("no such file '{}'", printable(c.data.path));
  if (!std::filesystem::is_regular_file(status)) return fmt::format("'{}' is not a regular file", printable(c.data.path));
  return "";
}

std::string check_init_scale(const RunConfig& c) {
  if (c.precision.init_scale <= 3.4e38) return "";
  return fmt::format("must fit in a float (<= 3.4e38), got {}", show(c.precision.init_scale));
}

std::string check_share_device(const RunConfig& c) {
  if (!c.parallel.share_device || c.parallel.device_collectives == DeviceCollectives::Mpi) return "";
  return "needs parallel.device_collectives = \"mpi\" (NCCL refuses two ranks on one device)";
}

std::string check_init_from(const RunConfig& c) {
  std::error_code ec;
  const auto status = std::filesystem::status(c.model.init_from, ec);
  if (!std::filesystem::exists(status)) return fmt::format("no such file '{}'", printable(c.model.init_from));
  if (std::filesystem::is_directory(status)) {  // a Hugging Face model folder
    if (!std::filesystem::is_regular_file(std::filesystem::path(c.model.init_from) / "model.safetensors", ec))
      return fmt::format("the folder '{}' has no model.safetensors (a Hugging Face model folder holds "
                         "model.safetensors and config.json)", printable(c.model.init_from));
    return "";
  }
  if (!std::filesystem::is_regular_file(status))
    return fmt::format("'{}' is not a regular file", printable(c.model.init_from));
  return "";
}

std::string check_resume(const RunConfig& c) {
  const std::string& resume = c.checkpoint.resume;
  std::error_code ec;
  if (resume == "auto" || resume == "never" || std::filesystem::exists(resume, ec)) return "";
  return fmt::format("must be \"auto\", \"never\" or an existing checkpoint file or directory; "
                     "no such file or directory '{}'",
                     printable(resume));
}

// A row names only the members that differ from their defaults (GCC's -Wextra
// would want every member spelled out).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
constexpr KeySpec k_schema[] = {
    // [model]
    {SHARDTRAIN_CONFIG_KEY(model, type), .choices = k_model_type_names,
     .doc = "`gpt`: GPT-2-style decoder, next-token loss. `encoder_classifier`: bidirectional transformer "
            "encoder (pre-LayerNorm blocks, attention masked to each document's length), pooled, a linear "
            "head. `mlp`: Linear-ReLU layers. `cnn`: conv-ReLU-max-pool stages, then Linear-ReLU-dropout "
            "layers. The classifiers' loss is the cross-entropy of the class label."},
    {SHARDTRAIN_CONFIG_KEY(model, n_layer), .ints = {1, k_int_max}, .model_types = k_transformers,
     .doc = "Number of transformer blocks L."},
    {SHARDTRAIN_CONFIG_KEY(model, n_head), .ints = {1, k_int_max}, .model_types = k_transformers,
     .range_doc = "divides `d_model`", .doc = "Attention heads. Each head has width `d_model / n_head`."},
    {SHARDTRAIN_CONFIG_KEY(model, d_model), .ints = {1, k_int_max}, .model_types = k_transformers,
     .range_doc = "multiple of `n_head`", .doc = "Residual width C."},
    {SHARDTRAIN_CONFIG_KEY(model, seq_len), .ints = {2, k_int_max}, .written_when_set = true,
     .model_types = k_transformers,
     .derive = [](RunConfig& c) {
       if (c.model.type != ModelType::Gpt) c.model.seq_len = 0;  // 0: the data set's length
     },
     .default_doc = "gpt `128`; encoder_classifier: the data set's",
     .doc = "gpt: context length T, in tokens. encoder_classifier: tokens of every document the model reads "
            "(the first `seq_len` of the stored row; at most the row's length). A row cut short ends in the "
            "set's `[SEP]` where it records one (`sep_id`: WordPiece imports), so it is `[CLS]` + the first "
            "`seq_len - 2` pieces + `[SEP]`, as an import at `--seq-len seq_len` gives it."},
    {SHARDTRAIN_CONFIG_KEY(model, init_std), .numbers = {0, false}, .model_types = k_transformers,
     .doc = "Weights start from N(0, init_std). Residual projections are scaled by 1/√(2L)."},
    {SHARDTRAIN_CONFIG_KEY(model, layernorm_eps), .numbers = {0, true}, .model_types = k_transformers,
     .doc = "Epsilon of every LayerNorm."},
    {SHARDTRAIN_CONFIG_KEY(model, attention), .choices = k_attention_names, .model_types = k_gpt,
     .doc = "How the blocks compute attention. `\"auto\"` (the default): `\"fused\"` where the run computes "
            "on a CUDA device in fp16 or bf16 and cuDNN takes the shape (below), `\"unfused\"` everywhere else "
            "(the host, fp32, other shapes); the model line of the start-up banner says which runs. "
            "`\"unfused\"`: batched GEMMs and a softmax kernel; the (B, H, T, "
            "T) probabilities are kept for backward (host and CUDA). `\"fused\"`: cuDNN's fused flash-attention "
            "graphs, the deterministic backward (bitwise repeatable); backward recomputes the probabilities "
            "from q, k and one fp32 statistic per row, so a block "
            "keeps 2 x B x H x T elements instead of B x H x T x T (the memory plan counts it). Needs a CUDA "
            "device (refused on the host, exit 2), `precision.mode` `\"fp16\"` or `\"bf16\"` (cuDNN's flash "
            "engines have no fp32), a head width `d_model / n_head` that is a multiple of 8 and at most 128, "
            "and a `seq_len` that is a multiple of 8 (the 16-byte alignment of the buffers cuDNN reads). "
            "Measured on an H200 (gpu.md): the 124M GPT's bf16 step 49.9 ms against 77.4 unfused. "
            "`\"flash\"`: our own tiled "
            "attention (kernels/cuda/flash_attention.cuh): an online softmax over tiles of 32 keys, no T x T "
            "matrix in memory, the tiles above the causal diagonal skipped; the forward keeps q, k, v and one "
            "fp32 log-sum-exp per row (the memory plan counts it, as for `\"fused\"`) and the backward "
            "recomputes the probabilities; bitwise deterministic (no atomics). Any `precision.mode`, any "
            "`seq_len`, a head width of at most 128; needs a CUDA device (refused on the host, exit 2: the "
            "host has its own per-head attention, `\"unfused\"`). Correct on an H200 but slow (SIMT fp32 "
            "without tensor cores: 284 ms a 124M bf16 step), so `\"auto\"` never picks it (gpu.md)."},
    {SHARDTRAIN_CONFIG_KEY(model, gemm), .choices = k_gemm_names,
     .doc = "How a CUDA device runs the Linear layers (every model type). `\"auto\"` (the default): "
            "`\"cublaslt\"` where the run computes on a CUDA device; the host has its own GEMMs and ignores it. "
            "`\"cublaslt\"`: cuBLASLt (kernels/cuda/lt_linear.cuh): the bias added by the matmul's epilogue and "
            "its gradient written by the dW matmul's epilogue, each algorithm chosen once per shape by "
            "cuBLASLt's heuristic with a 32 MiB workspace and cached, split-K refused so two runs are bitwise "
            "equal; a shape cuBLASLt has no algorithm for runs the `\"cublas\"` path; 1.13x the 124M bf16 step "
            "of `\"cublas\"` on an H200 (gpu.md). Needs a CUDA device (refused on the host, exit 2). "
            "`\"cublas\"`: `cublasGemmEx` with the default algorithm and no workspace, the bias added by a "
            "separate pass and its gradient by a column-sum kernel (the default before 2026-11-30)."},
    {SHARDTRAIN_CONFIG_KEY(model, gelu), .choices = k_gelu_names, .model_types = k_gpt,
     .doc = "Where the MLP's GELU (GPT-2's tanh form) runs. `\"separate\"` (the default): its own pass after "
            "the first Linear, forward and backward (every device). `\"epilogue\"`: inside the MLP's cuBLASLt "
            "GEMMs (kernels/cuda/lt_linear.cuh): the first Linear's matmul applies the bias and the GELU in its "
            "epilogue (`CUBLASLT_EPILOGUE_GELU_AUX_BIAS`) and also writes the pre-activation, which the "
            "backward needs; the second Linear's dx matmul multiplies by the GELU's derivative in its epilogue "
            "(`CUBLASLT_EPILOGUE_DGELU`), so neither GELU pass runs. Same algorithm cache and no split-K as "
            "`model.gemm = \"cublaslt\"` (bitwise repeatable); a shape cuBLASLt has no GELU algorithm for "
            "runs the separate pass for that call. In 16 bits the GELU is applied before the sum is rounded, "
            "so results differ from `\"separate\"` within rounding. Needs a CUDA device (refused on the host, "
            "exit 2) and `model.gemm` `\"cublaslt\"` or `\"auto\"` (refused with `\"cublas\"`). Not yet run on "
            "a device (gpu.md). Only the GPT takes it: the encoder classifier's BERT layouts use GELU's erf "
            "form, which the epilogue does not compute."},
    {SHARDTRAIN_CONFIG_KEY(model, pooling), .choices = k_pooling_names, .model_types = k_encoder,
     .doc = "`cls`: the final LayerNorm's output at position 0 (the data set's [CLS] token; refused if it has "
            "none). `mean`: the average over each document's valid positions."},
    {SHARDTRAIN_CONFIG_KEY(model, layout), .choices = k_encoder_layout_names, .model_types = k_encoder,
     .doc = "The encoder's layout. `pre_ln`: pre-LayerNorm blocks, a final LayerNorm, a linear head (trains "
            "from scratch). `bert` and `distilbert`: the layouts that hold Hugging Face's weights "
            "(`model.init_from`): word and learned position embeddings (`bert`: plus token-type embeddings, "
            "type 0) and an embedding LayerNorm, post-LayerNorm blocks (x = LN(x + attention(x)); x = LN(x + "
            "FFN(x))) with GELU's exact erf form, then on the [CLS] position `bert`'s tanh pooler or "
            "`distilbert`'s pre-classifier Linear + ReLU, dropout and the classifier. Both need `pooling = "
            "\"cls\"`; set `layernorm_eps = 1e-12` as Hugging Face does."},
    {SHARDTRAIN_CONFIG_KEY(model, max_positions), .ints = {0, k_int_max}, .model_types = k_encoder,
     .range_doc = "0 or at least the sequence length",
     .doc = "Rows of the learned position table (Hugging Face's `max_position_embeddings`, 512 for BERT and "
            "DistilBERT), of which the model reads the first `seq_len`. `0`: `seq_len`."},
    {SHARDTRAIN_CONFIG_KEY(model, hidden), .ints = {1, 1 << 24}, .max_entries = 16, .model_types = k_mlp_cnn,
     .doc = "Widths of the fully connected hidden layers (ReLU), e.g. `[300, 100]`. Empty: the input (mlp) or "
            "the flattened feature map (cnn) goes straight to the output layer."},
    {SHARDTRAIN_CONFIG_KEY(model, conv_channels), .ints = {1, 1 << 16}, .max_entries = 16,
     .model_types = k_cnn, .range_doc = "not empty",
     .doc = "Output channels of each convolution (stride 1), each followed by ReLU and max-pooling."},
    {SHARDTRAIN_CONFIG_KEY(model, conv_kernel), .ints = {1, 1024}, .model_types = k_cnn,
     .doc = "Square kernel size of every convolution."},
    {SHARDTRAIN_CONFIG_KEY(model, conv_padding), .ints = {0, 1024}, .model_types = k_cnn,
     .doc = "Zero padding on every side of every convolution."},
    {SHARDTRAIN_CONFIG_KEY(model, pool), .ints = {1, 1024}, .model_types = k_cnn,
     .doc = "Max-pool window and stride after every convolution; `1`: no pooling. A stack that shrinks the "
            "image below 1x1 is refused naming the layer."},
    {SHARDTRAIN_CONFIG_KEY(model, dropout), .numbers = {0, false, 1.0}, .model_types = k_encoder_cnn,
     .doc = "Dropout probability. cnn: after every hidden fully connected layer. encoder_classifier: on the "
            "embeddings, after every attention projection and MLP (as BERT) and before the head. Masks depend "
            "only on the seed, the site and the global sample index: not on the rank count or micro-batch "
            "split, and a resumed run draws the same ones. Off in evaluation."},

    {SHARDTRAIN_CONFIG_KEY(model, init_from), .written_when_set = true, .check = check_init_from,
     .default_doc = "none",
     .range_doc = "an existing `.safetensors`, `.h5` or `.hdf5` file, or a Hugging Face model folder",
     .doc = "Start from the weights of this file instead of random ones: a safetensors file under our names "
            "or GPT-2's, or an HDF5 file, as `trainer-ckpt export` writes them. Every tensor of the model must be "
            "there in its shape (GPT-2's Conv1D weights transposed), and nothing else; a gpt's vocabulary must "
            "be the data set's. An encoder_classifier with `layout = \"bert\"` or `\"distilbert\"` also reads "
            "Hugging Face's files: a folder (or its model.safetensors) with config.json beside it, of "
            "BertForSequenceClassification / DistilBertForSequenceClassification or BertModel / DistilBertModel "
            "(float32), whose dimensions config.json must give as the model.* keys and the data set do; a head "
            "the file lacks starts fresh (the log names it). Optimizer state starts fresh and training at step 0, at any rank count and ZeRO "
            "stage; each rank reads only its shard's bytes. A run that resumes from a checkpoint ignores it "
            "(the log says so). See checkpoint-format.md, \"Starting from exported weights\"."},

    // [data]
    {SHARDTRAIN_CONFIG_KEY(data, path), .required = true, .check = check_data_path,
     .range_doc = "an existing regular file", .doc = "The HDF5 data set written by `trainer-data`."},
    {SHARDTRAIN_CONFIG_KEY(data, in_memory), .choices = k_in_memory_names,
     .choices_note = " (or true / false, read as \"on\" / \"off\")", .model_types = k_classifiers,
     .range_doc = "also `true` (= `\"on\"`), `false` (= `\"off\"`)",
     .doc = "Where the classifiers' samples come from. `\"on\"`: every rank reads both splits of the data set "
            "into memory once at start-up (one read per dataset; every label, token id and length checked "
            "then, a bad one reported with the file, split and row as at read time) and serves each "
            "micro-batch from there. `\"off\"`: each micro-batch is read from the file (one HDF5 read of "
            "its rows; costs about 30-50 us per random row). `\"auto\"`: `\"on\"` when the data set takes at "
            "most `in_memory_limit_mb` per rank, else `\"off\"`. The held bytes (images 1 byte per pixel, "
            "token ids 4 bytes, plus 4 per label and length) are part of the memory plan's `data` category "
            "and of `train.memory_limit_mb`; the start-up line says which was chosen. The samples are the "
            "same bits either way, so the run is too."},
    {SHARDTRAIN_CONFIG_KEY(data, in_memory_limit_mb), .numbers = {0, false}, .model_types = k_classifiers,
     .doc = "The most MiB per rank `in_memory = \"auto\"` holds in memory. Every rank holds its own copy, so "
            "a node with R ranks needs R times that."},

    // [train]
    {SHARDTRAIN_CONFIG_KEY(train, steps), .ints = {1}, .doc = "Optimizer steps in the run."},
    {SHARDTRAIN_CONFIG_KEY(train, batch_size), .ints = {1},
     .doc = "**Global** sequences (classifiers: samples) per optimizer step, summed over all ranks and "
            "micro-batches."},
    {SHARDTRAIN_CONFIG_KEY(train, micro_batch), .ints = {1},
     .doc = "Sequences per rank per forward/backward pass. A rank accumulates gradients over as many "
            "micro-batches as its share of `batch_size` needs. It need not divide `batch_size`: the last "
            "micro-batch may be smaller."},
    {SHARDTRAIN_CONFIG_KEY(train, seed), .ints = {0},
     .doc = "Seed for initialization and data order. The order of the samples does not depend on the number "
            "of ranks."},
    {SHARDTRAIN_CONFIG_KEY(train, eval_every), .ints = {0},
     .doc = "Steps between validation passes. `0` means only one pass, at the end of the run."},
    {SHARDTRAIN_CONFIG_KEY(train, eval_windows), .ints = {0},
     .doc = "Validation windows (gpt) or samples (classifiers) per periodic pass. `0` means the whole "
            "validation split. The pass after the last step always covers the whole split."},
    {SHARDTRAIN_CONFIG_KEY(train, log_every), .ints = {1}, .doc = "Steps between progress lines."},
    {SHARDTRAIN_CONFIG_KEY(train, run_dir), .derive = derive_run_dir, .default_doc = "`\"runs/<stem>\"`",
     .doc = "Directory for checkpoints, logs and the resolved `config.toml`. One job at a time: a job holds "
            "`shardtrain.lock` there (host, PID, Slurm job id) and a second job is refused while the first "
            "lives. See the note below the table."},
    {SHARDTRAIN_CONFIG_KEY(train, memory_limit_mb), .numbers = {0, false},
     .doc = "Per-rank memory cap in MiB (1 MiB = 2^20 bytes); `0` means none. It applies to the **predicted "
            "process peak** per rank (what VmHWM should reach), not to the tracked buffers alone: the memory "
            "plan (every buffer of every category, as `trainer --plan` prints it) plus two measured terms, "
            "the process's RSS just before the model is allocated (MPI, Kokkos, libraries, code, the opened "
            "data set) and the MPI library's scratch in the step's largest gradient collective (probed once "
            "on a temporary buffer of that size; host collectives only), each the maximum over the job's "
            "ranks. Before anything large is allocated the trainer refuses to start, with exit code 2 and a "
            "message naming every term and the shortfall, if that prediction exceeds the cap; the check is "
            "made once with the fixed term and again after the probe. `trainer --plan` gives the same "
            "prediction only when it runs at the job's rank count (`mpirun -n N trainer --plan`); with "
            "`--ranks N` in a smaller job the measured terms are that job's and the collective is not "
            "probed. See training.md, \"Process memory\"."},
    {.section = "train", .key = "time_limit",
     .field = config_field<&RunConfig::train, &TrainConfig::time_limit_minutes>(), .numbers = {0, false},
     .time_string = true,
     .range_doc = "in minutes, or `\"MM\"`, `\"MM:SS\"`, `\"HH:MM:SS\"`, `\"D-HH\"`, `\"D-HH:MM\"`, "
                  "`\"D-HH:MM:SS\"` (Slurm's `--time` forms)",
     .doc = "Wall time this job may run, counted from the trainer's start; `0`: none. At every step boundary "
            "rank 0 checks what is left (the earlier of this and `SLURM_JOB_END_TIME`, Unix seconds: newer "
            "Slurm versions set it; on Slurm 22.05 the scripts in `jobs/` export it from `squeue`); when it is "
            "less than two of the longest steps plus two checkpoints (the last one's measured time; before "
            "the first, its bytes at 100 MB/s plus 0.5 s) plus one second, every rank writes a checkpoint and "
            "the trainer exits with code 75, so that the job can be requeued and resume."},
    {SHARDTRAIN_CONFIG_KEY(train, device), .choices = k_device_names,
     .doc = "Where the run computes. `\"cpu\"`: the host (Kokkos kernels, oneDNN, MPI). `\"cuda\"`: one "
            "CUDA device per rank (kernels/cuda, cuBLAS, NCCL; trainer built with "
            "`-DSHARDTRAIN_ENABLE_CUDA=ON`, see gpu.md); no device, or fewer devices than ranks on a node, "
            "stops the job with exit code 1 before anything is allocated. `\"auto\"`: `\"cuda\"` in a CUDA "
            "build, `\"cpu\"` otherwise. `\"cuda\"` in a build without CUDA is refused (exit 2)."},
    {SHARDTRAIN_CONFIG_KEY(train, device_kernels), .choices = k_device_kernels_names,
     .doc = "On a CUDA device: `\"validated\"` (the default) runs the kernels that have run on a device; "
            "`\"candidate\"` also those written since and not yet run on one (gpu.md, \"Candidate kernels\": "
            "today the gradient norm's sums of squares and AdamW over the whole shard in one launch each, "
            "bitwise the per-tensor launches' results; LayerNorm with rows held in registers and its backward "
            "in one pass; cross-entropy's backward on the forward's row statistics), so that one device call "
            "can A/B them; a device run "
            "that passes makes them the default. Refused on the host (exit 2), which has its own kernels."},

    {SHARDTRAIN_CONFIG_KEY(train, sample_every), .ints = {0}, .model_types = k_gpt,
     .doc = "gpt: at each validation pass after a step that is a multiple of this, rank 0 prints one line "
            "`sample step N: ...`: `sample_tokens` tokens continuing `sample_prompt`, generated from the run's "
            "weights as `trainer-ckpt sample` does (a key/value cache, in double). `0`: never. Its draws come "
            "from (`train.seed`, token index) alone, so it changes nothing in training. Rank 0 holds one copy of "
            "the weights (in double) while it samples; at ZeRO stage 3 the shards are gathered to it."},
    {SHARDTRAIN_CONFIG_KEY(train, sample_tokens), .ints = {1, 1 << 20}, .model_types = k_gpt,
     .doc = "Tokens each `sample_every` line generates."},
    {SHARDTRAIN_CONFIG_KEY(train, sample_prompt), .written_when_set = true, .model_types = k_gpt,
     .default_doc = "none", .range_doc = "char and byte data sets only",
     .doc = "Text the samples continue, encoded with the data set's tokenizer. None: a gpt2 data set starts "
            "from its end-of-text token (its last id), a char or byte one from token 0 of its vocabulary. A gpt2 data set takes no "
            "prompt (the trainer has no BPE merges; use `trainer-ckpt sample --bpe`)."},
    {SHARDTRAIN_CONFIG_KEY(train, sample_temperature), .numbers = {0, false}, .model_types = k_gpt,
     .doc = "Softmax temperature of the samples; `0`: greedy (the most likely token)."},

    // [optim]
    {SHARDTRAIN_CONFIG_KEY(optim, type), .choices = k_optimizer_names,
     .choices_note = " (the only optimizer implemented so far)",
     .doc = "Optimizer. Only AdamW is implemented so far."},
    {SHARDTRAIN_CONFIG_KEY(optim, lr), .numbers = {0, true}, .range_doc = "≥ `min_lr`",
     .doc = "Peak learning rate."},
    {SHARDTRAIN_CONFIG_KEY(optim, min_lr), .numbers = {0, false}, .range_doc = "≤ `lr`",
     .doc = "Floor of the cosine decay."},
    {SHARDTRAIN_CONFIG_KEY(optim, warmup_steps), .ints = {0},
     .doc = "Linear warm-up from `lr/warmup_steps` to `lr`. `0` means no warm-up."},
    {SHARDTRAIN_CONFIG_KEY(optim, schedule), .choices = k_schedule_names,
     .doc = "After warm-up: `cosine` decay from `lr` to `min_lr` at the last step, `constant` (stay at `lr`), or "
            "`linear` decay from `lr` to `min_lr` at the last step (Hugging Face's fine-tuning schedule)."},
    {SHARDTRAIN_CONFIG_KEY(optim, weight_decay), .numbers = {0, false},
     .doc = "Decoupled weight decay. It is not applied to biases, LayerNorm parameters or embeddings."},
    {SHARDTRAIN_CONFIG_KEY(optim, beta1), .numbers = {0, false, 1.0}, .doc = "Adam first-moment decay."},
    {SHARDTRAIN_CONFIG_KEY(optim, beta2), .numbers = {0, false, 1.0}, .doc = "Adam second-moment decay."},
    {SHARDTRAIN_CONFIG_KEY(optim, eps), .numbers = {0, true}, .doc = "Adam epsilon."},
    {SHARDTRAIN_CONFIG_KEY(optim, grad_clip), .numbers = {0, false},
     .doc = "Maximum global gradient norm. `0` turns clipping off."},

    // [parallel]
    {SHARDTRAIN_CONFIG_KEY(parallel, zero_stage), .ints = {0, 3, true},
     .doc = "ZeRO stage. `0`: plain data parallelism, every rank holds the full model state and gradients are "
            "all-reduced. `1`: optimizer state sharded; gradients reduce-scattered once per step, parameters "
            "all-gathered after the update. `2`: also gradients sharded, reduce-scattered group by group "
            "during backward. `3`: also parameters sharded, each group gathered just before use."},
    {SHARDTRAIN_CONFIG_KEY(parallel, overlap),
     .doc = "Stages 2 and 3: `true` starts each bucket's gradient reduce-scatter without waiting, as soon as "
            "backward is done with every group in it, and lets backward go on; `false` waits for each "
            "reduction before backward continues (to measure what overlap buys)."},
    {SHARDTRAIN_CONFIG_KEY(parallel, bucket_mb), .numbers = {0, false},
     .doc = "Stages 2 and 3: size of a communication bucket in MiB. Consecutive parameter groups (the "
            "embeddings, each transformer block, the final LayerNorm) are coalesced into one bucket while it "
            "stays within `bucket_mb`; a group larger than that is a bucket by itself, never split. `0` makes "
            "every group its own bucket. Larger buckets mean fewer, larger collectives; smaller buckets mean "
            "less memory: each rank holds three gradient buffers (stage 3: and three parameter-gather "
            "buffers) the size of the largest buckets, shown as `communication` by `trainer --plan`."},
    {SHARDTRAIN_CONFIG_KEY(parallel, threads), .ints = {1, 1024},
     .doc = "Threads per rank for the heavy host ops (the GEMMs and convolutions, run by oneDNN; the "
            "trainer sets oneDNN's OpenMP pool and OpenBLAS's to this, whatever `OMP_NUM_THREADS` says). "
            "The default, one rank per core with one thread each, is the fastest layout measured here "
            "(share/doc/benchmarks.md); with fewer ranks than cores, set ranks x threads = cores. The other "
            "host kernels run in Kokkos' host space: one thread per rank with Debian's Kokkos (Serial); with "
            "an OpenMP Kokkos (`-DSHARDTRAIN_KOKKOS_ROOT`, share/doc/kokkos.md) on this many threads too, "
            "unless `--kokkos-threads=N` is given. Ignored on GPUs."},
    {SHARDTRAIN_CONFIG_KEY(parallel, collective_timeout_s), .numbers = {0, false},
     .doc = "Watchdog: when a blocking collective (all-reduce, reduce-scatter, all-gather, broadcast, "
            "barrier, or the wait for a non-blocking one) has not completed after this many seconds, each "
            "waiting rank prints `error (rank R): watchdog: all_reduce (27600 x F32) at step 5 has not "
            "completed after 300.0 s ...` and ends; the launcher then ends the other ranks. A rank that "
            "stalls or dies cannot hang the job for longer. `0` turns the watchdog off. Checkpoint I/O is "
            "watched by its own deadline (`checkpoint.io_timeout_s`), which the watchdog adds to its own while "
            "a checkpoint is in flight."},

    {SHARDTRAIN_CONFIG_KEY(parallel, device_collectives), .choices = k_device_collectives_names,
     .doc = "On GPUs (`train.device` = `\"cuda\"`): what moves device memory between ranks. `\"nccl\"` (the "
            "default): NCCL, one device per rank. `\"mpi\"`: the host MPI library; each collective copies "
            "the rank's piece to pinned host memory on the collective stream, runs the host engine's collective "
            "(its fixed reduction order, its fp32-combined bf16/fp16 sums: the results equal a host run's bit for "
            "bit) and copies the result back; with a CUDA-aware MPI (detected at run time) broadcasts and "
            "all-gathers pass the device pointers. Slower than NCCL between GPUs; it is what lets ranks share "
            "a device (`share_device`). Ignored on the host."},
    {SHARDTRAIN_CONFIG_KEY(parallel, share_device), .check = check_share_device,
     .range_doc = "`true` needs `device_collectives = \"mpi\"`",
     .doc = "On GPUs: `true` lets several ranks of a node share one device when there are more ranks than "
            "devices (ranks go to devices round-robin in node-local rank order; each rank has its own streams). "
            "Only with `device_collectives = \"mpi\"` (NCCL refuses two ranks on one device). The default, "
            "`false`, stops the job when ranks would share a device. The memory plan then counts what all the "
            "sharers need of the device: `train.memory_limit_mb` is checked against the plan of one rank "
            "times the ranks on its device, too (share/doc/gpu.md, \"Many ranks on one GPU\")."},

    // [precision]
    {SHARDTRAIN_CONFIG_KEY(precision, mode), .choices = k_precision_names,
     .doc = "Storage precision of parameters, activations and gradients. `\"fp16\"` and `\"bf16\"` store "
            "them in 16 bits and compute in fp32: on a CPU with AVX512-BF16, bf16 GEMMs run natively on the bf16 "
            "operands (fp32 accumulation) and bf16 is the fastest mode; fp16 GEMMs, and bf16 ones on other CPUs, "
            "convert tiles to fp32 and call the fp32 GEMM (slower than fp32, memory only); the "
            "optimizer keeps fp32 master weights and moments for the range it owns; gradient reductions "
            "between ranks combine pairs in fp32 and round once per combine. Model-state bytes per "
            "parameter: 16 at stage 0, 4 + 12/N at stage 1, 2 + 14/N at stage 2, 16/N at stage 3. `\"fp16\"` "
            "also scales the loss (the keys below); `\"bf16\"` has fp32's range and needs no scaling."},
    {SHARDTRAIN_CONFIG_KEY(precision, init_scale), .numbers = {0, true}, .check = check_init_scale,
     .range_doc = "≤ 3.4e38, ≥ `min_scale`", .doc = "fp16: loss scale of the first step."},
    {SHARDTRAIN_CONFIG_KEY(precision, growth_interval), .ints = {1},
     .doc = "fp16: the scale is multiplied by `growth_factor` after this many steps in a row without an "
            "overflow."},
    {SHARDTRAIN_CONFIG_KEY(precision, growth_factor), .numbers = {1, true},
     .doc = "fp16: see `growth_interval`."},
    {SHARDTRAIN_CONFIG_KEY(precision, backoff_factor), .numbers = {0, true, 1.0},
     .doc = "fp16: the scale is multiplied by this on an overflow (once `hysteresis` is used up), never below "
            "`min_scale`."},
    {SHARDTRAIN_CONFIG_KEY(precision, hysteresis), .ints = {1, 1000000},
     .doc = "fp16: overflows tolerated before the scale backs off. With 2, the first overflow after a growth "
            "(or the start) only skips the step; that one and every later overflow back off. Reset by a "
            "growth."},
    {SHARDTRAIN_CONFIG_KEY(precision, min_scale), .numbers = {0, true},
     .doc = "fp16: the scale never goes below this. At the minimum, overflowing steps are still skipped, with "
            "a warning each."},
    {SHARDTRAIN_CONFIG_KEY(precision, max_consecutive_skips), .ints = {1},
     .doc = "fp16: the run stops (exit code 1, one message) when this many steps in a row were skipped: the "
            "model has diverged."},

    // [recompute]
    {SHARDTRAIN_CONFIG_KEY(recompute, policy), .choices = k_recompute_policy_names,
     .doc = "Which activations of the transformer blocks (of `gpt` and `encoder_classifier`, every layout) are "
            "kept through the forward pass and which are "
            "recomputed in backward. `\"none\"`: keep everything. `\"full\"`: keep only each block's input; "
            "every block but the last is run forward again just before its backward. `\"sqrt\"`: keep every "
            "ceil(sqrt(L))-th block input; each segment is recomputed once. `\"budget\"`: the schedule with "
            "the fewest recomputed forward FLOPs whose activations fit `budget_mb`, found by dynamic "
            "programming over the chain of blocks (Rotor/revolve style; it may recompute a segment from a "
            "checkpoint recomputed itself, i.e. more than one level). Every policy gives bitwise the same "
            "losses and gradients. `trainer --plan` prints the schedule, the activation peak and the extra "
            "forward FLOPs. Dropout inside a recomputed block draws the masks of its first forward (they are "
            "a function of the seed and the element's global index). `mlp` and `cnn` have no blocks: any "
            "policy but `\"none\"` with them is refused (exit 2)."},
    {SHARDTRAIN_CONFIG_KEY(recompute, budget_mb), .numbers = {0, false},
     .range_doc = "> 0 with policy `\"budget\"`, else 0",
     .doc = "Activation memory per rank in MiB (the whole `activations` category of the plan: the embeddings "
            "and the head, which are always kept, plus the blocks). If no schedule fits, the trainer and "
            "`--plan` say how much the smallest needs and exit with code 2."},

    // [checkpoint]
    {SHARDTRAIN_CONFIG_KEY(checkpoint, dir), .written_when_set = true,
     .derive = [](RunConfig& c) { c.checkpoint.dir = (std::filesystem::path(c.train.run_dir) / "checkpoints").string(); },
     .default_doc = "`\"<train.run_dir>/checkpoints\"`",
     .doc = "Directory of the checkpoints: `step_NNNNNNNN.h5` files, `latest` (the name of the one the run "
            "continues from), `lineage` (each checkpoint's parent) and, while one is being written, "
            "`step_NNNNNNNN.h5.partial`. One job per directory (locked like `train.run_dir` when outside it). "
            "Must be writable when checkpoints are on (checked before training)."},
    {SHARDTRAIN_CONFIG_KEY(checkpoint, every_steps), .ints = {0},
     .doc = "Write a checkpoint after every `every_steps`-th optimizer step (counted from the start of "
            "training, so a resumed run keeps the same grid). `0`: not by step count."},
    {SHARDTRAIN_CONFIG_KEY(checkpoint, every_minutes), .numbers = {0, false},
     .doc = "Write a checkpoint when this much wall time has passed since the last one (or the start of this "
            "job); rank 0's clock decides for all. `0`: not by time. Both keys may be set; either triggers."},
    {SHARDTRAIN_CONFIG_KEY(checkpoint, keep_last), .ints = {1},
     .doc = "Complete checkpoints of the run's lineage kept; older ones of it are deleted, but only after a "
            "new one is complete and `latest` names it. Checkpoints of an abandoned lineage (a run rolled back "
            "to an older checkpoint) are left alone."},
    {SHARDTRAIN_CONFIG_KEY(checkpoint, async),
     .doc = "`true`: a scheduled checkpoint copies this rank's shard of the state into a staging buffer at the "
            "step boundary and training goes on while a background thread writes the same file (at most one "
            "write in flight; the next checkpoint, a stop signal, the wall-time guard and the end of the run "
            "wait for it). The staging buffer is a second copy of the rank's state shard (12 bytes per "
            "parameter / ranks, 14 with fp16/bf16), planned as the `ckpt_staging` category (host memory); hence "
            "`false` by default, which writes synchronously and needs no extra memory. A checkpoint a stop "
            "signal asks for without a schedule is always synchronous."},
    {SHARDTRAIN_CONFIG_KEY(checkpoint, max_failures), .ints = {1},
     .doc = "A scheduled checkpoint that fails on any rank (an I/O error: EIO, ENOSPC, EDQUOT ...) is "
            "abandoned on every rank (its `.partial` file removed, `latest` untouched), rank 0 prints a warning "
            "naming the failing rank, the file, the phase and the system error, and training goes on; the next "
            "scheduled checkpoint tries again. After `max_failures` failures in a row the job ends with exit "
            "code 1. A checkpoint the job cannot do without (a stop signal, the wall-time guard, the end of the "
            "run) that fails always ends the job with exit code 1 (never 75: a requeue would resume from older "
            "state), naming the step of the last good checkpoint."},
    {SHARDTRAIN_CONFIG_KEY(checkpoint, io_timeout_s), .numbers = {0, true},
     .doc = "Deadline of checkpoint I/O: every phase of a checkpoint (create and lay out the file, write the "
            "shards, fsync, the commit) must end on every rank within this many seconds; when "
            "storage stops answering, the rank that waits prints `error (rank R): checkpoint I/O: phase "
            "'fsync' of FILE has not finished after 600.0 s ...` and ends, and the launcher ends the other "
            "ranks (exit code 1). It must exceed the longest phase on the slowest storage expected (one rank's "
            "shard written at its bandwidth). While a checkpoint is in flight the collective watchdog "
            "(`parallel.collective_timeout_s`) allows this much longer, so slow storage trips this deadline, "
            "not the watchdog."},
    {SHARDTRAIN_CONFIG_KEY(checkpoint, resume), .check = check_resume,
     .range_doc = "`\"auto\"`, `\"never\"` or an existing file or directory",
     .doc = "`\"auto\"`: continue from the checkpoint `latest` in `dir` names, if there is one (none: start "
            "from step 0); a damaged one is reported and its parent is tried, then the parent's, never a "
            "checkpoint of another lineage (newer ones of a run rolled back are ignored; without `latest`, the "
            "newest complete checkpoint first). `\"never\"`: start from "
            "step 0; refused when checkpointing is on and `dir` already holds checkpoints (two runs would "
            "mix: pick another `dir`). A path: that checkpoint file, or the newest complete one in that "
            "directory; any problem with it is an error."},

    // [guard]
    {SHARDTRAIN_CONFIG_KEY(guard, non_finite), .choices = k_non_finite_policy_names,
     .doc = "A step whose loss or gradient norm is inf or NaN (bf16, fp32; fp16: when its loss scaler gives "
            "up, see `min_scale_steps` and `precision.max_consecutive_skips`). `\"skip\"`: the step's update "
            "is dropped and training goes on (at most `max_skips` in a row). `\"rollback\"`: every rank "
            "reloads the last checkpoint, the data cursor moves past the samples from that checkpoint to the "
            "faulty step, and training goes on from the checkpoint's step (at most `max_rollbacks` per job; "
            "needs checkpoints). `\"abort\"`: exit code 1 with one message naming the step, the tensor and "
            "the ranks whose own gradient or loss was not finite. Any fault beyond its bound ends the run as "
            "`\"abort\"` does."},
    {SHARDTRAIN_CONFIG_KEY(guard, loss_spike), .choices = k_loss_spike_policy_names,
     .doc = "A step whose loss exceeds `spike_factor` times the mean loss of the last `spike_window` steps "
            "that updated the model, after step `spike_warmup`: `\"off\"` (no check), or a policy as for "
            "`non_finite`. The loss is on the host at every step already, so the check costs a comparison."},
    {SHARDTRAIN_CONFIG_KEY(guard, spike_factor), .numbers = {1, true},
     .doc = "See `loss_spike`."},
    {SHARDTRAIN_CONFIG_KEY(guard, spike_window), .ints = {1, 100000},
     .doc = "See `loss_spike`. The window starts empty at the start of a job (no spike is reported until it is "
            "full) and keeps its losses over a rollback (a faulty step's loss never enters it)."},
    {SHARDTRAIN_CONFIG_KEY(guard, spike_warmup), .ints = {0},
     .doc = "See `loss_spike`: steps (counted from the start of training) with no spike check, for the early "
            "steps whose loss falls fast."},
    {SHARDTRAIN_CONFIG_KEY(guard, replica), .choices = k_replica_policy_names,
     .doc = "The ranks' replicas of the parameters differ (silent data corruption: a flipped bit). At ZeRO "
            "stage 0 every rank holds the whole fp32 weights, at stages 1-2 the whole 16-bit (or fp32) "
            "parameters; their CRCs are compared at the steps `replica_every` names (and at stage 0 at every "
            "metrics row, as the weights CRC of metrics.csv is computed there), and the ranks that differ from "
            "the majority are named. `\"rollback\"` or `\"abort\"` as for `non_finite` (nothing to skip)."},
    {SHARDTRAIN_CONFIG_KEY(guard, replica_every), .ints = {0},
     .doc = "Compare the replicas (stages 0-2) after every `replica_every`-th step and before every "
            "checkpoint, so that a checkpoint holds state the replicas agreed on. `0`: only stage 0's "
            "comparison at each metrics row. Stage 3 holds no replica: the key does nothing there."},
    {SHARDTRAIN_CONFIG_KEY(guard, max_rollbacks), .ints = {0},
     .doc = "Rollbacks one job may do; the next fault whose policy is `\"rollback\"` ends the run (exit code "
            "1) with a message saying what to change, so a run that diverges for good ends instead of "
            "looping."},
    {SHARDTRAIN_CONFIG_KEY(guard, max_skips), .ints = {1},
     .doc = "Steps in a row the guard may skip (`\"skip\"`); the next fault in a row ends the run (exit "
            "code 1)."},
    {SHARDTRAIN_CONFIG_KEY(guard, min_scale_steps), .ints = {0},
     .doc = "fp16: this many overflowing steps in a row at `precision.min_scale` are a non-finite fault, "
            "handled by `non_finite` (`\"skip\"`: the loss scaler goes on skipping). `0`: only "
            "`precision.max_consecutive_skips` ends the run, as before."},
};

#pragma GCC diagnostic pop
#undef SHARDTRAIN_CONFIG_KEY

// Facts the rows must agree on; a violation stops the build at the failing line.
template <class T>
constexpr bool fits(const IntRange& r) {
  return r.lo <= r.hi && r.lo >= static_cast<std::int64_t>(std::numeric_limits<T>::min()) &&
         static_cast<std::uint64_t>(r.hi) <= static_cast<std::uint64_t>(std::numeric_limits<T>::max());
}

// The value type of a ConfigField.
template <class F>
struct field_value;
template <class T>
struct field_value<ConfigField<T>> {
  using type = T;
};

// AnyConfigField's alternatives are enums from k_first_enum_field on, and only those.
template <std::size_t... I>
constexpr bool enums_from_first_enum_field(std::index_sequence<I...>) {
  return ((std::is_enum_v<typename field_value<std::variant_alternative_t<I, AnyConfigField>>::type> ==
           (I >= k_first_enum_field)) &&
          ...);
}
static_assert(enums_from_first_enum_field(std::make_index_sequence<std::variant_size_v<AnyConfigField>>{}));

constexpr bool rows_are_consistent() {
  for (const KeySpec& k : k_schema) {
    const std::size_t type = k.field.index();  // AnyConfigField's order
    const bool integer = type <= 2, number = type == 3, string = type == 5, list = type == 6,
               enumerated = type >= k_first_enum_field;
    if (type == 0 && !fits<int>(k.ints)) throw "an int field's range must fit in int";
    if (type == 2 && !fits<std::uint64_t>(k.ints)) throw "an unsigned field's range must not go below 0";
    if ((integer || list) && k.ints.lo > k.ints.hi) throw "empty integer range";
    if (list != (k.max_entries > 0)) throw "max_entries is for integer arrays, and they need it";
    if (!string && !enumerated && (!k.choices.empty() || !k.choices_note.empty()))
      throw "choices are for string and enum keys";
    if (enumerated && !std::visit(
                          [&k](const auto& field) {
                            using T = std::remove_cvref_t<decltype(field.get(std::declval<const RunConfig&>()))>;
                            if constexpr (std::is_enum_v<T>)
                              return k.choices.data() == enum_names(T{}).data() &&
                                     k.choices.size() == enum_names(T{}).size();
                            else
                              return false;
                          },
                          k.field))
      throw "an enum key's choices are its enum's names (enum_names)";
    if (k.time_string && !number) throw "time_string is for float keys";
    if (k.written_when_set && !(integer || string)) throw "written_when_set is for integer and string keys";
    if (k.required && (k.derive || !k.default_doc.empty())) throw "a required key has no default";
    if (k.derive && k.default_doc.empty()) throw "a derived default needs its default_doc";
    if (k.doc.empty()) throw "every key is documented";
  }
  return k_schema[0].section == "model" && k_schema[0].key == "type";  // read first: other rows depend on it
}
static_assert(rows_are_consistent());

std::vector<std::string_view> sections_in_order() {
  std::vector<std::string_view> out;
  for (const KeySpec& k : k_schema)
    if (std::find(out.begin(), out.end(), k.section) == out.end()) out.push_back(k.section);
  return out;
}

std::string int_list(const std::vector<std::int64_t>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += fmt::format("{}{}", i ? ", " : "", v[i]);
  return out + "]";
}

}  // namespace

std::span<const KeySpec> config_schema() { return k_schema; }

std::span<const std::string_view> config_sections() {
  static const std::vector<std::string_view> sections = sections_in_order();
  return sections;
}

const KeySpec* find_config_key(std::string_view section, std::string_view key) {
  for (const KeySpec& k : k_schema)
    if (k.section == section && k.key == key) return &k;
  return nullptr;
}

std::string dotted_name(const KeySpec& k) { return fmt::format("{}.{}", k.section, k.key); }

bool used_by_model_type(const KeySpec& k, ModelType model_type) {
  return k.model_types.empty() ||
         std::find(k.model_types.begin(), k.model_types.end(), model_type) != k.model_types.end();
}

std::string toml_value(const KeySpec& k, const RunConfig& config) {
  return std::visit(
      [&](const auto& field) -> std::string {
        const auto& v = field.get(config);
        using T = std::remove_cvref_t<decltype(v)>;
        if constexpr (std::is_same_v<T, double>)
          return toml_float(v);
        else if constexpr (std::is_same_v<T, bool>)
          return v ? "true" : "false";
        else if constexpr (std::is_same_v<T, std::string>)
          return toml_string(v);
        else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>)
          return int_list(v);
        else if constexpr (std::is_enum_v<T>)
          return toml_string(enum_names(T{})[static_cast<std::size_t>(v)]);
        else
          return fmt::format("{}", v);  // an integer
      },
      k.field);
}

}  // namespace shardtrain
