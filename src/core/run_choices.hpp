// shardtrain/core/run_choices.hpp
// The input file's small choice keys as values: each an enum whose names
// (enum_names, in the order of the enum: a value is its index) are the key's
// choices, as input files, to_toml, share/doc/config.md and the printed text
// spell them (name_of, enum_named: core/named_enum.hpp). The config schema reads
// them generically (config/schema.cpp); code switches over the values, never
// compares names. In core because the config and the layers below it that
// act on a choice (parallel: the device; model: the recompute policy and the
// pooling) all name them. One header for all of them: each is a name table and
// nothing more (model.type and precision.mode, which carry more, have their own:
// model_type.hpp, precision.hpp).
// Adding a choice: a value here and its name at the same index, then every
// switch over the enum (-Wall warns where one misses it) and share/doc/config.md
// (regenerated; the config_doc_current test says how).
#pragma once

#include <cstddef>
#include <iterator>
#include <span>
#include <string_view>

#include "core/named_enum.hpp"

namespace shardtrain {

// model.attention (gpt): batched GEMMs and a softmax kernel, cuDNN's fused
// flash attention (a CUDA device, 16-bit storage), our own tiled attention
// (kernels/cuda/flash_attention.cuh: a CUDA device, any storage type), or "auto"
// (the default): "fused" where the run computes on a CUDA device in fp16 or bf16
// and cuDNN takes the shape, else "unfused" (resolve_attention, config/parse.hpp).
enum class AttentionImpl : unsigned char { Unfused, Fused, Flash, Auto };
inline constexpr std::string_view k_attention_names[] = {"unfused", "fused", "flash", "auto"};
constexpr std::span<const std::string_view> enum_names(AttentionImpl) { return k_attention_names; }
static_assert(std::size(k_attention_names) == 1 + static_cast<std::size_t>(AttentionImpl::Auto), "a name per value");

// model.gemm: how a CUDA device runs the models' Linear layers: cuBLAS's
// cublasGemmEx with a separate bias pass and column-sum kernel, or cuBLASLt with
// the bias and bias-gradient epilogues (kernels/cuda/lt_linear.cuh; 1.13x the
// 124M bf16 step on an H200, 2026-11-29). "auto" (the default) is cuBLASLt on a
// CUDA device; the host has its own GEMMs and ignores it. "cublaslt" is refused
// where the run computes on the host.
enum class GemmImpl : unsigned char { Cublas, Cublaslt, Auto };
inline constexpr std::string_view k_gemm_names[] = {"cublas", "cublaslt", "auto"};
constexpr std::span<const std::string_view> enum_names(GemmImpl) { return k_gemm_names; }
static_assert(std::size(k_gemm_names) == 1 + static_cast<std::size_t>(GemmImpl::Auto), "a name per value");

// model.gelu (gpt): where the MLP's GELU (GPT-2's tanh form) runs: its own
// pass after the first Linear ("separate", the default, every device), or in the
// epilogues of the MLP's cuBLASLt GEMMs ("epilogue": GELU_AUX_BIAS in the first
// Linear's forward, DGELU in the second's dx matmul; kernels/cuda/lt_linear.cuh),
// which needs a CUDA device and a cuBLASLt Linear (model.gemm "cublaslt" or
// "auto"). Not yet run on a device (2026-11-30), hence not the default.
enum class GeluImpl : unsigned char { Separate, Epilogue };
inline constexpr std::string_view k_gelu_names[] = {"separate", "epilogue"};
constexpr std::span<const std::string_view> enum_names(GeluImpl) { return k_gelu_names; }
static_assert(std::size(k_gelu_names) == 1 + static_cast<std::size_t>(GeluImpl::Epilogue), "a name per value");

// model.pooling (encoder_classifier): the [CLS] position, or the mean over each
// document's valid positions.
enum class Pooling : unsigned char { Cls, Mean };
inline constexpr std::string_view k_pooling_names[] = {"cls", "mean"};
constexpr std::span<const std::string_view> enum_names(Pooling) { return k_pooling_names; }
static_assert(std::size(k_pooling_names) == 1 + static_cast<std::size_t>(Pooling::Mean), "a name per value");

// model.layout (encoder_classifier): our pre-LayerNorm encoder, or the BERT
// family's post-LayerNorm layout that holds Hugging Face's weights: "bert"
// (token-type embeddings, tanh pooler) or "distilbert" (pre-classifier + ReLU).
enum class EncoderLayout : unsigned char { PreLn, Bert, Distilbert };
inline constexpr std::string_view k_encoder_layout_names[] = {"pre_ln", "bert", "distilbert"};
constexpr std::span<const std::string_view> enum_names(EncoderLayout) { return k_encoder_layout_names; }
static_assert(std::size(k_encoder_layout_names) == 1 + static_cast<std::size_t>(EncoderLayout::Distilbert),
              "a name per value");

// data.in_memory (classifiers): hold both splits in memory when they fit
// in_memory_limit_mb, always, or never. The input file may also write true /
// false for "on" / "off" (config/resolver.cpp).
enum class DataInMemory : unsigned char { Auto, On, Off };
inline constexpr std::string_view k_in_memory_names[] = {"auto", "on", "off"};
constexpr std::span<const std::string_view> enum_names(DataInMemory) { return k_in_memory_names; }
static_assert(std::size(k_in_memory_names) == 1 + static_cast<std::size_t>(DataInMemory::Off), "a name per value");

// train.device: a CUDA device in a CUDA build and the host otherwise, the host,
// or one CUDA device per rank.
enum class TrainDevice : unsigned char { Auto, Cpu, Cuda };
inline constexpr std::string_view k_device_names[] = {"auto", "cpu", "cuda"};
constexpr std::span<const std::string_view> enum_names(TrainDevice) { return k_device_names; }
static_assert(std::size(k_device_names) == 1 + static_cast<std::size_t>(TrainDevice::Cuda), "a name per value");

// train.device_kernels: on a CUDA device, the kernels that have run on one
// ("validated", the default) or also those written since and not yet run on a
// device ("candidate": share/doc/gpu.md lists them), so that one device call can
// A/B them; the next device run that passes makes them the default. Refused on
// the host, which has its own kernels.
enum class DeviceKernels : unsigned char { Validated, Candidate };
inline constexpr std::string_view k_device_kernels_names[] = {"validated", "candidate"};
constexpr std::span<const std::string_view> enum_names(DeviceKernels) { return k_device_kernels_names; }
static_assert(std::size(k_device_kernels_names) == 1 + static_cast<std::size_t>(DeviceKernels::Candidate),
              "a name per value");

// parallel.device_collectives: what moves device memory between ranks on GPUs.
// nccl: NCCL (one device per rank); mpi: the host MPI library through pinned
// staging buffers (parallel/mpi/staging_communicator.hpp), bit for bit the host
// engine's reductions, and the only one that lets ranks share a device
// (parallel.share_device).
enum class DeviceCollectives : unsigned char { Nccl, Mpi };
inline constexpr std::string_view k_device_collectives_names[] = {"nccl", "mpi"};
constexpr std::span<const std::string_view> enum_names(DeviceCollectives) { return k_device_collectives_names; }
static_assert(std::size(k_device_collectives_names) == 1 + static_cast<std::size_t>(DeviceCollectives::Mpi),
              "a name per value");

// optim.type: the optimizer (only AdamW so far).
enum class OptimizerType : unsigned char { AdamW };
inline constexpr std::string_view k_optimizer_names[] = {"adamw"};
constexpr std::span<const std::string_view> enum_names(OptimizerType) { return k_optimizer_names; }
static_assert(std::size(k_optimizer_names) == 1 + static_cast<std::size_t>(OptimizerType::AdamW), "a name per value");

// optim.schedule: the learning rate after warm-up, a cosine decay to min_lr,
// constant, or a linear decay to min_lr (Hugging Face's fine-tuning default).
enum class LrSchedule : unsigned char { Cosine, Constant, Linear };
inline constexpr std::string_view k_schedule_names[] = {"cosine", "constant", "linear"};
constexpr std::span<const std::string_view> enum_names(LrSchedule) { return k_schedule_names; }
static_assert(std::size(k_schedule_names) == 1 + static_cast<std::size_t>(LrSchedule::Linear), "a name per value");

// recompute.policy: which block activations the forward pass keeps
// (model/recompute.hpp makes each policy's schedule).
enum class RecomputePolicy : unsigned char { None, Full, Sqrt, Budget };
inline constexpr std::string_view k_recompute_policy_names[] = {"none", "full", "sqrt", "budget"};
constexpr std::span<const std::string_view> enum_names(RecomputePolicy) { return k_recompute_policy_names; }
static_assert(std::size(k_recompute_policy_names) == 1 + static_cast<std::size_t>(RecomputePolicy::Budget), "a name per value");

// guard.non_finite, guard.loss_spike, guard.replica: what a run does about a
// numerical fault (session/numeric_guard.hpp): nothing (the spike check only),
// drop the step's update (not for replicas: there is no update to drop), reload
// the last checkpoint and skip the data window, or end the run.
enum class NonFinitePolicy : unsigned char { Skip, Rollback, Abort };
inline constexpr std::string_view k_non_finite_policy_names[] = {"skip", "rollback", "abort"};
constexpr std::span<const std::string_view> enum_names(NonFinitePolicy) { return k_non_finite_policy_names; }
static_assert(std::size(k_non_finite_policy_names) == 1 + static_cast<std::size_t>(NonFinitePolicy::Abort),
              "a name per value");
enum class LossSpikePolicy : unsigned char { Off, Skip, Rollback, Abort };
inline constexpr std::string_view k_loss_spike_policy_names[] = {"off", "skip", "rollback", "abort"};
constexpr std::span<const std::string_view> enum_names(LossSpikePolicy) { return k_loss_spike_policy_names; }
static_assert(std::size(k_loss_spike_policy_names) == 1 + static_cast<std::size_t>(LossSpikePolicy::Abort),
              "a name per value");
enum class ReplicaPolicy : unsigned char { Abort, Rollback };
inline constexpr std::string_view k_replica_policy_names[] = {"abort", "rollback"};
constexpr std::span<const std::string_view> enum_names(ReplicaPolicy) { return k_replica_policy_names; }
static_assert(std::size(k_replica_policy_names) == 1 + static_cast<std::size_t>(ReplicaPolicy::Rollback),
              "a name per value");

}  // namespace shardtrain
