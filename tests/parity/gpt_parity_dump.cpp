// Writes what the PyTorch parity check (tests/parity/gpt_parity.py,
// share/reference/gpt_torch.py) compares against: a tiny GPT built and
// initialised exactly as the trainer does (gpt_layout, gpt_init_params), one
// batch of windows from a token data set, and our fp32 forward/backward on it.
// Output (plain HDF5, read with h5py):
//   attrs n_layer, n_head, d_model, seq_len, vocab, batch, loss (mean per token)
//   /tokens, /targets (batch, seq_len) int32
//   /params/<name>, /grads/<name>  float32 in the tensor's shape (d loss_mean / d param);
//                                  params/<name> has attribute weight_decay (0/1)
//   then 10 AdamW steps (optim/adamw.hpp; constant lr, no clipping) on training
//   windows (s*batch + i) * seq_len of steps s = 0..9:
//   attrs lr, weight_decay, beta1, beta2, eps; /train_tokens, /train_targets
//   (10, batch, seq_len); /train_losses (10) the mean loss of each step's batch
//   before its update
// Usage: gpt_parity_dump DATA.h5 OUT.h5 [n_layer d_model n_head seq_len batch seed]
#include <hdf5.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "io/token_dataset.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "gpt_parity_dump: %s failed\n", what);
    std::exit(1);
  }
}

hid_t write(hid_t where, const std::string& name, hid_t type, const std::vector<hsize_t>& shape, const void* data,
            bool keep_open = false) {
  const hid_t space = H5Screate_simple(static_cast<int>(shape.size()), shape.data(), nullptr);
  const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  const hid_t ds = H5Dcreate2(where, name.c_str(), type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
  check(ds >= 0 && H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0, name.c_str());
  H5Pclose(lcpl);
  H5Sclose(space);
  if (keep_open) return ds;
  H5Dclose(ds);
  return -1;
}

void attr(hid_t file, const char* name, hid_t type, const void* value);

// Windows starting at `starts` of `split`, cut into inputs and targets (appended).
void batch(const shardtrain::TokenDataset& data, shardtrain::Split split, const std::vector<std::int64_t>& starts,
           std::int64_t t, std::vector<shardtrain::TokenIndex>& tokens, std::vector<shardtrain::TokenIndex>& targets) {
  std::vector<shardtrain::TokenIndex> windows(starts.size() * static_cast<std::size_t>(t + 1));
  data.read_windows(split, starts, t + 1, windows.data());
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const shardtrain::TokenIndex* w = windows.data() + i * static_cast<std::size_t>(t + 1);
    tokens.insert(tokens.end(), w, w + t);
    targets.insert(targets.end(), w + 1, w + t + 1);
  }
}

void attr(hid_t file, const char* name, hid_t type, const void* value) {
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  check(a >= 0 && H5Awrite(a, type, value) >= 0, name);
  H5Aclose(a);
  H5Sclose(space);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    if (argc != 3 && argc != 9) {
      std::fprintf(stderr, "usage: gpt_parity_dump DATA.h5 OUT.h5 [n_layer d_model n_head seq_len batch seed]\n");
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    using namespace shardtrain;
    const auto arg = [&](int i, long def) { return argc == 9 ? std::stol(argv[i]) : def; };
    const TokenDataset data(argv[1], MPI_COMM_WORLD);
    GptDims d;
    d.n_layer = arg(3, 2);
    d.channels = arg(4, 32);
    d.n_head = arg(5, 4);
    d.seq_len = arg(6, 16);
    d.max_batch = arg(7, 4);
    d.vocab = data.vocab_size();
    const std::uint64_t seed = static_cast<std::uint64_t>(arg(8, 7));
    const std::int64_t b = d.max_batch, t = d.seq_len;

    ParamLayout layout = gpt_layout(d);
    layout.finalize(1);
    const auto n = static_cast<std::size_t>(layout.padded_size());
    std::vector<float> params(n), grads(n, 0.0f);
    gpt_init_params<float>(layout, d, 0.02, seed, params.data(), 0, layout.padded_size());

    // Validation windows 0..b-1 (stride seq_len from the split's start), as the trainer evaluates.
    std::vector<std::int64_t> starts(static_cast<std::size_t>(b));
    for (std::int64_t i = 0; i < b; ++i) starts[static_cast<std::size_t>(i)] = i * t;
    std::vector<TokenIndex> tokens, targets;
    batch(data, Split::Val, starts, t, tokens, targets);

    MemoryTracker memory;
    Gpt<float> model(d, layout, 1e-5, memory);
    model.bind(params.data(), grads.data());
    const double loss = model.forward(tokens.data(), targets.data(), b) / static_cast<double>(b * t);
    model.backward(1.0f / static_cast<float>(b * t));  // the gradient of the mean loss

    const hid_t file = H5Fcreate(argv[2], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    check(file >= 0, "creating the output file");
    const long long dims[] = {d.n_layer, d.n_head, d.channels, d.seq_len, d.vocab, b};
    const char* names[] = {"n_layer", "n_head", "d_model", "seq_len", "vocab", "batch"};
    for (int i = 0; i < 6; ++i) attr(file, names[i], H5T_NATIVE_LLONG, &dims[i]);
    attr(file, "loss", H5T_NATIVE_DOUBLE, &loss);
    write(file, "tokens", H5T_NATIVE_INT32, {static_cast<hsize_t>(b), static_cast<hsize_t>(t)}, tokens.data());
    write(file, "targets", H5T_NATIVE_INT32, {static_cast<hsize_t>(b), static_cast<hsize_t>(t)}, targets.data());
    for (const auto& e : layout.entries()) {
      std::vector<hsize_t> shape(e.shape.begin(), e.shape.end());
      const hid_t ds = write(file, "params/" + e.name, H5T_NATIVE_FLOAT, shape, params.data() + e.offset, true);
      const int decay = e.weight_decay ? 1 : 0;
      attr(ds, "weight_decay", H5T_NATIVE_INT, &decay);
      H5Dclose(ds);
      write(file, "grads/" + e.name, H5T_NATIVE_FLOAT, shape, grads.data() + e.offset);
    }

    // 10 AdamW steps from the same initial weights.
    constexpr int kSteps = 10;
    OptimConfig ocfg;
    ocfg.beta1 = 0.9;
    ocfg.beta2 = 0.95;
    ocfg.eps = 1e-8;
    ocfg.weight_decay = 0.1;
    const double lr = 3e-3;
    const AdamW adamw(ocfg, layout);
    std::vector<float> exp_avg(n, 0.0f), exp_avg_sq(n, 0.0f);
    // The whole vector; an fp32 model's weights are its parameters.
    const ShardView<float> state{0, layout.padded_size(), params, grads, params, exp_avg, exp_avg_sq};
    std::vector<TokenIndex> train_tokens, train_targets;
    std::vector<double> losses;
    for (int s = 0; s < kSteps; ++s) {
      std::vector<std::int64_t> at(static_cast<std::size_t>(b));
      for (std::int64_t i = 0; i < b; ++i) at[static_cast<std::size_t>(i)] = (s * b + i) * t;
      std::vector<TokenIndex> tk, tg;
      batch(data, Split::Train, at, t, tk, tg);
      std::fill(grads.begin(), grads.end(), 0.0f);
      losses.push_back(model.forward(tk.data(), tg.data(), b) / static_cast<double>(b * t));
      model.backward(1.0f / static_cast<float>(b * t));
      adamw.step(state, lr, 1.0f, s);
      train_tokens.insert(train_tokens.end(), tk.begin(), tk.end());
      train_targets.insert(train_targets.end(), tg.begin(), tg.end());
    }
    const std::vector<hsize_t> bt{kSteps, static_cast<hsize_t>(b), static_cast<hsize_t>(t)};
    write(file, "train_tokens", H5T_NATIVE_INT32, bt, train_tokens.data());
    write(file, "train_targets", H5T_NATIVE_INT32, bt, train_targets.data());
    write(file, "train_losses", H5T_NATIVE_DOUBLE, {kSteps}, losses.data());
    const double hyper[] = {lr, ocfg.weight_decay, ocfg.beta1, ocfg.beta2, ocfg.eps};
    const char* hyper_names[] = {"lr", "weight_decay", "beta1", "beta2", "eps"};
    for (int i = 0; i < 5; ++i) attr(file, hyper_names[i], H5T_NATIVE_DOUBLE, &hyper[i]);
    H5Fclose(file);
    std::printf("gpt_parity_dump: %s: L=%lld C=%lld H=%lld T=%lld V=%lld B=%lld, loss %.9f, %zu tensors\n", argv[2],
                dims[0], dims[2], dims[1], dims[3], dims[4], dims[5], loss, layout.entries().size());
  }
  MPI_Finalize();
  return status;
}
