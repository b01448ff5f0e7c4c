// Writes what share/reference/bert_torch.py parity compares with its PyTorch
// BERT / DistilBERT: our encoder_classifier in the BERT family's layouts
// (model.layout = "bert" | "distilbert"), run data-parallel over the MPI ranks
// at a ZeRO stage through ModelState and ZeroEngine as the trainer runs it:
// the global batch's rows split into contiguous pieces, one per rank (a rank
// may get none), each rank's forward and backward with dloss = 1 / batch, the
// engine's reduction, then every rank's shard of the gradients and its logits
// gathered on rank 0. fp32, dropout off.
// The weights are encoder_init_params' with init_std 0.2 and every LayerNorm
// weight and bias moved off 1 / 0 (deterministic in the global index, so every
// shard split gives the same vector).
// Output (rank 0, plain HDF5): attrs layout (string), n_head, eps, loss (mean
// per row), ranks, stage; /tokens (batch, T) int32, /lengths, /labels, /logits
// (batch, K) float32; /params/<name>, /grads/<name> float32 (d mean loss / d param).
// Usage: mpiexec -n N bert_parity_dump bert|distilbert STAGE OUT.h5
#include <hdf5.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "model/encoder_classifier.hpp"
#include "parallel/model_state.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "parallel/zero_engine.hpp"

namespace {

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "bert_parity_dump: %s failed\n", what.c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

void write(hid_t where, const std::string& name, hid_t type, const std::vector<hsize_t>& shape, const void* data) {
  const hid_t space = H5Screate_simple(static_cast<int>(shape.size()), shape.data(), nullptr);
  const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  const hid_t ds = H5Dcreate2(where, name.c_str(), type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
  check(ds >= 0 && H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0, name);
  H5Dclose(ds);
  H5Pclose(lcpl);
  H5Sclose(space);
}

template <class V>
void attr(hid_t file, const char* name, hid_t type, const V& value) {
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  check(a >= 0 && H5Awrite(a, type, &value) >= 0, name);
  H5Aclose(a);
  H5Sclose(space);
}

void attr_string(hid_t file, const char* name, const std::string& value) {
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, value.size());
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  check(a >= 0 && H5Awrite(a, type, value.data()) >= 0, name);
  H5Aclose(a);
  H5Sclose(space);
  H5Tclose(type);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    using namespace shardtrain;
    const std::string kind = argc == 4 ? argv[1] : "";
    if (kind != "bert" && kind != "distilbert") {
      std::fprintf(stderr, "usage: bert_parity_dump bert|distilbert STAGE OUT.h5\n");
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const int stage = std::stoi(argv[2]);
    MpiCommunicator comm(MPI_COMM_WORLD);
    const int rank = comm.rank(), world = comm.size();
    const std::int64_t batch = 6, seed = 13;
    const double eps = 1e-12;
    EncoderDims d;
    d.layout = kind == "bert" ? EncoderLayout::Bert : EncoderLayout::Distilbert;
    d.vocab = 29, d.seq_len = 7, d.positions = 10, d.n_layer = 2, d.channels = 16, d.n_head = 4, d.classes = 3;
    d.pooling = Pooling::Cls;
    // This rank's rows [r0, r1) of the global batch.
    const std::int64_t r0 = batch * rank / world, r1 = batch * (rank + 1) / world, mine = r1 - r0;
    d.max_batch = batch;
    ParamLayout layout = encoder_layout(d);
    layout.finalize(world);
    MemoryTracker memory;
    ModelState<float> state(layout, stage, rank, memory);
    const auto [plo, phi] = state.param_range();
    std::vector<float> init(static_cast<std::size_t>(phi - plo));
    encoder_init_params<float>(layout, d, 0.2, seed, init.data(), plo, phi);
    for (const auto& e : layout.entries()) {
      if (e.name.find("ln_") == std::string::npos) continue;
      for (std::int64_t i = std::max(plo, e.offset); i < std::min(phi, e.offset + e.numel); ++i)
        init[static_cast<std::size_t>(i - plo)] += static_cast<float>(0.1 * normal(seed, 77, static_cast<std::uint64_t>(i)));
    }
    for (std::int64_t i = plo; i < phi; ++i) *state.params_at(i) = init[static_cast<std::size_t>(i - plo)];
    ZeroEngine<float> engine(state, ZeroEngine<float>::Options{true, 0.0}, comm, memory);
    EncoderClassifier<float> model(d, layout, eps, memory);
    model.bind(engine);

    // The global batch: [CLS] (vocab - 1), random ids, [PAD] (0) after each length.
    const std::vector<std::int32_t> lengths{7, 3, 1, 5, 2, 6};
    const std::vector<TokenIndex> labels{0, 2, 1, 1, 0, 2};
    std::vector<TokenIndex> tokens(static_cast<std::size_t>(batch * d.seq_len));
    for (std::int64_t r = 0; r < batch; ++r)
      for (std::int64_t t = 0; t < d.seq_len; ++t)
        tokens[static_cast<std::size_t>(r * d.seq_len + t)] =
            t == 0 ? static_cast<TokenIndex>(d.vocab - 1)
            : t < lengths[static_cast<std::size_t>(r)]
                ? static_cast<TokenIndex>(1 + hash64(seed, 98, static_cast<std::uint64_t>(r * 100 + t)) % (d.vocab - 2))
                : TokenIndex(0);
    SampleBatch b;
    b.batch = mine;
    b.tokens = tokens.data() + r0 * d.seq_len;
    b.lengths = lengths.data() + r0;
    b.labels = labels.data() + r0;
    b.first_sample = static_cast<std::uint64_t>(r0);
    engine.begin_step();
    const double local_loss = model.forward(b);
    std::vector<float> logits;
    model.logits(logits);
    logits.resize(static_cast<std::size_t>(mine * d.classes));
    model.backward(1.0f / static_cast<float>(batch));
    engine.finish_gradients();
    double loss = 0.0;
    MPI_Allreduce(&local_loss, &loss, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    loss /= static_cast<double>(batch);

    // Gather logits and the gradient / parameter shards on rank 0.
    auto gather = [&](const float* local, int n, std::vector<float>& all) {
      std::vector<int> counts(world), displs(world, 0);
      MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
      int total = 0;
      for (int r = 0; r < world; ++r) displs[r] = total, total += counts[r];
      all.assign(static_cast<std::size_t>(rank == 0 ? total : 0), 0.0f);
      MPI_Gatherv(local, n, MPI_FLOAT, all.data(), counts.data(), displs.data(), MPI_FLOAT, 0, MPI_COMM_WORLD);
    };
    const auto [slo, shi] = state.shard_range();
    std::vector<float> all_logits, grads, params;
    gather(logits.data(), static_cast<int>(logits.size()), all_logits);
    gather(shi > slo ? state.grads_at(slo) : nullptr, static_cast<int>(shi - slo), grads);
    gather(shi > slo ? state.params_at(slo) : nullptr, static_cast<int>(shi - slo), params);
    if (rank == 0) {
      check(static_cast<std::int64_t>(grads.size()) == layout.padded_size(), "the shards cover the layout");
      const hid_t file = H5Fcreate(argv[3], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
      check(file >= 0, "creating the output file");
      attr_string(file, "layout", kind);
      attr(file, "n_head", H5T_NATIVE_LLONG, static_cast<long long>(d.n_head));
      attr(file, "ranks", H5T_NATIVE_LLONG, static_cast<long long>(world));
      attr(file, "stage", H5T_NATIVE_LLONG, static_cast<long long>(stage));
      attr(file, "eps", H5T_NATIVE_DOUBLE, eps);
      attr(file, "loss", H5T_NATIVE_DOUBLE, loss);
      write(file, "tokens", H5T_NATIVE_INT32, {static_cast<hsize_t>(batch), static_cast<hsize_t>(d.seq_len)},
            tokens.data());
      write(file, "lengths", H5T_NATIVE_INT32, {static_cast<hsize_t>(batch)}, lengths.data());
      write(file, "labels", H5T_NATIVE_INT32, {static_cast<hsize_t>(batch)}, labels.data());
      write(file, "logits", H5T_NATIVE_FLOAT, {static_cast<hsize_t>(batch), static_cast<hsize_t>(d.classes)},
            all_logits.data());
      for (const auto& e : layout.entries()) {
        std::vector<hsize_t> shape(e.shape.begin(), e.shape.end());
        write(file, "params/" + e.name, H5T_NATIVE_FLOAT, shape, params.data() + e.offset);
        write(file, "grads/" + e.name, H5T_NATIVE_FLOAT, shape, grads.data() + e.offset);
      }
      H5Fclose(file);
      std::printf("bert_parity_dump: %s: %s at %d ranks, stage %d, loss %.9f\n", argv[3], kind.c_str(), world,
                  stage, loss);
    }
  }
  MPI_Finalize();
  return 0;
}
