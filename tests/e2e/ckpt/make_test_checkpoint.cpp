// make_test_checkpoint: writes a small synthetic checkpoint with
// io/checkpoint.hpp write_checkpoint, from values a test can recompute, for the
// trainer-ckpt end-to-end tests (tests/e2e/ckpt/CMakeLists.txt).
//   make_test_checkpoint OUT [--bf16]        (singleton or under mpirun -n N)
// Layout: a one-block GPT with nanoGPT names (V = 65, T = 16, C = 12), offsets
// aligned up to 16 elements as ParamLayout does, so there is padding between
// tensors, and the total padded to a multiple of world_size * 16 (P elements).
// Rank r writes its shard [cut(r), cut(r+1)) with cut(r) = floor(P r (r+1) /
// (world (world+1))): shards grow with the rank (at 2 ranks 554 and 1110
// elements, at 3 ranks 280, 560 and 840), so the CRC pieces the writer
// combines have different lengths.
// Values, for global element index g inside a tensor (padding is 0):
//   master[g]     = float32(sin(g))
//   exp_avg[g]    = float32(0.01 * cos(g))
//   exp_avg_sq[g] = float32(1e-4 * (1 + g))
//   params_bf16   = master rounded to bfloat16 (nearest, ties to even), with --bf16
// check_ckpt.py holds the same layout and formulas; keep the two in step.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "io/checkpoint.hpp"

namespace {

using namespace shardtrain;

constexpr std::int64_t kAlignment = 16;
constexpr std::int64_t V = 65, T = 16, C = 12;

std::uint16_t to_bf16(float x) {
  std::uint32_t u = 0;
  std::memcpy(&u, &x, 4);
  u += 0x7FFF + ((u >> 16) & 1);  // round to nearest even (no NaN in these values)
  return static_cast<std::uint16_t>(u >> 16);
}

int run(int argc, char** argv) {
  CLI::App app{"Write a synthetic shardtrain checkpoint with known values (a test fixture).",
               "make_test_checkpoint"};
  std::string out;
  bool bf16 = false;
  app.add_option("OUT", out, "Checkpoint file to write")->required();
  app.add_flag("--bf16", bf16, "precision bf16: also write /state/params_bf16");
  CLI11_PARSE(app, argc, argv);

  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);

  const std::vector<std::pair<std::string, std::vector<std::int64_t>>> tensors = {
      {"wte.weight", {V, C}},
      {"wpe.weight", {T, C}},
      {"h.0.ln_1.weight", {C}},
      {"h.0.ln_1.bias", {C}},
      {"h.0.attn.c_attn.weight", {3 * C, C}},
      {"h.0.attn.c_attn.bias", {3 * C}},
      {"h.0.attn.c_proj.weight", {C, C}},
      {"ln_f.weight", {C}},
  };
  std::vector<CheckpointTensor> layout;
  std::int64_t end = 0, params = 0;
  for (const auto& [name, shape] : tensors) {
    CheckpointTensor t;
    t.name = name;
    t.shape = shape;
    t.offset = (end + kAlignment - 1) / kAlignment * kAlignment;
    t.numel = 1;
    for (std::int64_t d : shape) t.numel *= d;
    end = t.offset + t.numel;
    params += t.numel;
    layout.push_back(t);
  }
  const std::int64_t unit = kAlignment * world;
  const std::int64_t padded = (end + unit - 1) / unit * unit;
  auto cut = [&](std::int64_t r) { return padded * r * (r + 1) / (std::int64_t{world} * (world + 1)); };
  const std::int64_t lo = cut(rank), hi = cut(rank + 1), shard = hi - lo;

  std::vector<float> master(shard, 0.0f), m(shard, 0.0f), v(shard, 0.0f);
  std::vector<std::uint16_t> half(shard, 0);
  for (const auto& t : layout)
    for (std::int64_t g = std::max(lo, t.offset); g < std::min(hi, t.offset + t.numel); ++g) {
      const double x = static_cast<double>(g);
      master[g - lo] = static_cast<float>(std::sin(x));
      m[g - lo] = static_cast<float>(0.01 * std::cos(x));
      v[g - lo] = static_cast<float>(1e-4 * (1.0 + x));
      half[g - lo] = to_bf16(master[g - lo]);
    }

  CheckpointMeta meta;
  meta.step = 42;
  meta.samples_seen = 1344;
  meta.tokens_seen = 1344 * T;
  meta.optimizer_updates = 40;
  meta.sampler_seed = 1234;
  meta.world_size = world;
  meta.zero_stage = 1;
  meta.precision = bf16 ? "bf16" : "fp32";
  meta.alignment = kAlignment;
  meta.padded_size = padded;
  meta.loss_scale = 1.0;
  meta.scaler_good_steps = 0;
  meta.scaler_hysteresis_left = 2;
  meta.scaler_consecutive_skips = 0;
  meta.data_path = "data/synthetic.h5";
  meta.data_train_tokens = 100000;
  meta.data_vocab_size = V;
  meta.seq_len = T;
  meta.config_text =
      "# synthetic checkpoint (tests/e2e/ckpt/make_test_checkpoint.cpp)\n"
      "[model]\nkind = \"gpt\"\nlayers = 1\nd_model = 12\nheads = 3\nseq_len = 16\n"
      "[parallel]\nzero_stage = 1\n";
  meta.created_utc = "2026-11-23T12:00:00Z";
  meta.version = "test";

  std::vector<CheckpointVectorOut> vectors = {
      {"master", DType::F32, master.data()},
      {"exp_avg", DType::F32, m.data()},
      {"exp_avg_sq", DType::F32, v.data()},
  };
  if (bf16) vectors.push_back({"params_bf16", DType::BF16, half.data()});
  write_checkpoint(out, MPI_COMM_WORLD, meta, layout, vectors, lo, hi);
  if (rank == 0)
    std::printf("%s: %zu tensors, %lld parameters, padded %lld, %d rank(s)%s\n", out.c_str(), layout.size(),
                static_cast<long long>(params), static_cast<long long>(padded), world, bf16 ? ", params_bf16" : "");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int code = 1;
  try {
    code = run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return code;
}
