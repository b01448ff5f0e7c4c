// Writes what tests/parity/classifier_parity.py compares with PyTorch for the
// classifiers (model/mlp, model/cnn, model/encoder_classifier): the model built
// and initialised as the trainer does, a seeded random batch (images in [0, 1),
// or token rows of mixed valid lengths, padded) with labels, and
// our fp32 forward/backward (dropout off: the masks are our own counter hash,
// which PyTorch cannot reproduce).
// Output (plain HDF5, read with h5py): attrs cnn (0/1), batch, channels, height,
// width, classes, loss (mean per sample), pool (cnn); /conv_padding (cnn);
// /inputs (batch, C, H, W) float32, /labels; /params/<name>, /grads/<name>
// float32 (d mean loss / d param). Layer shapes follow from the parameters.
// Encoder: attrs encoder 1, n_head, mean_pool (0: [CLS] = position 0); /tokens
// (batch, seq_len) int32, /lengths.
// Usage: classifier_parity_dump mlp|cnn|encoder-cls|encoder-mean OUT.h5
#include <hdf5.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "model/cnn.hpp"
#include "model/encoder_classifier.hpp"
#include "model/mlp.hpp"

namespace {

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "classifier_parity_dump: %s failed\n", what.c_str());
    std::exit(1);
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

void attr(hid_t file, const char* name, long long value) {
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(file, name, H5T_NATIVE_LLONG, space, H5P_DEFAULT, H5P_DEFAULT);
  check(a >= 0 && H5Awrite(a, H5T_NATIVE_LLONG, &value) >= 0, name);
  H5Aclose(a);
  H5Sclose(space);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    using namespace shardtrain;
    const std::string kind = argc == 3 ? argv[1] : "";
    const bool encoder = kind == "encoder-cls" || kind == "encoder-mean";
    if (kind != "mlp" && kind != "cnn" && !encoder) {
      std::fprintf(stderr, "usage: classifier_parity_dump mlp|cnn|encoder-cls|encoder-mean OUT.h5\n");
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const std::int64_t b = 5, c = 2, h = 10, w = 9, k = 4, seed = 11;
    MemoryTracker memory;
    std::unique_ptr<ParamLayout> layout;
    std::unique_ptr<Classifier<float>> model;
    CnnDims cnn;
    cnn.in_channels = c, cnn.height = h, cnn.width = w, cnn.convs = {{3, 3, 1}, {4, 3, 0}}, cnn.pool = 2;
    cnn.hidden = {7}, cnn.classes = k, cnn.max_batch = b;
    const MlpDims mlp{c * h * w, {12, 8}, k, b};
    EncoderDims enc;
    enc.vocab = 23, enc.seq_len = 7, enc.n_layer = 2, enc.channels = 16, enc.n_head = 2, enc.classes = k;
    enc.max_batch = b;
    enc.pooling = kind == "encoder-mean" ? EncoderDims::Pooling::Mean : EncoderDims::Pooling::Cls;
    if (kind == "cnn") layout = std::make_unique<ParamLayout>(cnn_layout(cnn));
    else if (encoder) layout = std::make_unique<ParamLayout>(encoder_layout(enc));
    else layout = std::make_unique<ParamLayout>(mlp_layout(mlp));
    layout->finalize(1);
    const auto n = static_cast<std::size_t>(layout->padded_size());
    std::vector<float> params(n), grads(n, 0.0f);
    if (kind == "cnn") {
      cnn_init_params<float>(*layout, seed, params.data(), 0, layout->padded_size());
      model = std::make_unique<Cnn<float>>(cnn, *layout, memory);
    } else if (encoder) {
      encoder_init_params<float>(*layout, enc, 0.02, seed, params.data(), 0, layout->padded_size());
      auto m = std::make_unique<EncoderClassifier<float>>(enc, *layout, 1e-5, memory);
      m->bind(params.data(), grads.data());
      model = std::move(m);
    } else {
      mlp_init_params<float>(*layout, seed, params.data(), 0, layout->padded_size());
      model = std::make_unique<Mlp<float>>(mlp, *layout, memory);
    }
    auto& bindable = *model;
    if (kind == "cnn") static_cast<Cnn<float>&>(bindable).bind(params.data(), grads.data());
    else if (kind == "mlp") static_cast<Mlp<float>&>(bindable).bind(params.data(), grads.data());

    std::vector<float> inputs(static_cast<std::size_t>(b * c * h * w));
    for (std::size_t i = 0; i < inputs.size(); ++i) inputs[i] = static_cast<float>(uniform01(hash64(seed, 99, i)));
    std::vector<TokenIndex> labels{0, 3, 1, 3, 2};
    // Token rows: [CLS] (vocab - 1) then random ids, [PAD] (vocab - 2) after each row's length.
    const std::vector<std::int32_t> lengths{7, 4, 1, 6, 2};
    std::vector<TokenIndex> tokens(static_cast<std::size_t>(b * enc.seq_len));
    for (std::int64_t r = 0; r < b; ++r)
      for (std::int64_t t = 0; t < enc.seq_len; ++t)
        tokens[static_cast<std::size_t>(r * enc.seq_len + t)] =
            t == 0 ? static_cast<TokenIndex>(enc.vocab - 1)
            : t < lengths[static_cast<std::size_t>(r)]
                ? static_cast<TokenIndex>(hash64(seed, 98, static_cast<std::uint64_t>(r * 100 + t)) % (enc.vocab - 2))
                : static_cast<TokenIndex>(enc.vocab - 2);
    SampleBatch batch;
    batch.batch = b;
    batch.values = encoder ? nullptr : inputs.data();
    batch.tokens = encoder ? tokens.data() : nullptr;
    batch.lengths = encoder ? lengths.data() : nullptr;
    batch.labels = labels.data();
    const double loss = model->forward(batch) / static_cast<double>(b);
    model->backward(1.0f / static_cast<float>(b));

    const hid_t file = H5Fcreate(argv[2], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    check(file >= 0, "creating the output file");
    attr(file, "cnn", kind == "cnn" ? 1 : 0);
    attr(file, "encoder", encoder ? 1 : 0);
    if (encoder) {
      attr(file, "n_head", enc.n_head);
      attr(file, "mean_pool", kind == "encoder-mean" ? 1 : 0);
      write(file, "tokens", H5T_NATIVE_INT32, {static_cast<hsize_t>(b), static_cast<hsize_t>(enc.seq_len)},
            tokens.data());
      write(file, "lengths", H5T_NATIVE_INT32, {static_cast<hsize_t>(b)}, lengths.data());
    }
    for (auto [name, value] : {std::pair{"batch", b}, {"channels", c}, {"height", h}, {"width", w}, {"classes", k}})
      attr(file, name, value);
    const hid_t space = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(file, "loss", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, H5P_DEFAULT);
    check(a >= 0 && H5Awrite(a, H5T_NATIVE_DOUBLE, &loss) >= 0, "loss");
    H5Aclose(a);
    H5Sclose(space);
    write(file, "inputs", H5T_NATIVE_FLOAT, {static_cast<hsize_t>(b), static_cast<hsize_t>(c), static_cast<hsize_t>(h),
                                            static_cast<hsize_t>(w)}, inputs.data());
    write(file, "labels", H5T_NATIVE_INT32, {static_cast<hsize_t>(b)}, labels.data());
    if (kind == "cnn") {
      std::vector<long long> pad;
      for (const auto& conv : cnn.convs) pad.push_back(conv.padding);
      write(file, "conv_padding", H5T_NATIVE_LLONG, {pad.size()}, pad.data());
      attr(file, "pool", cnn.pool);
    }
    for (const auto& e : layout->entries()) {
      std::vector<hsize_t> shape(e.shape.begin(), e.shape.end());
      write(file, "params/" + e.name, H5T_NATIVE_FLOAT, shape, params.data() + e.offset);
      write(file, "grads/" + e.name, H5T_NATIVE_FLOAT, shape, grads.data() + e.offset);
    }
    H5Fclose(file);
    std::printf("classifier_parity_dump: %s: %s, loss %.9f, %zu tensors\n", argv[2], kind.c_str(), loss,
                layout->entries().size());
  }
  MPI_Finalize();
  return 0;
}
