// trainer-data `mnist`: the four MNIST idx files -> a "shardtrain-samples" image
// data set (io/mnist_import.hpp). This file only parses the command line and
// prints the one-line summary.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "io/mnist_import.hpp"
#include "tools/data_commands.hpp"

namespace shardtrain {

std::vector<DataCommand> add_mnist_commands(CLI::App& app) {
  struct Args {
    std::string dir, output;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("mnist", "Import MNIST's four idx files as an image classification data set");
  sub->footer(
      "DIR holds train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and "
      "t10k-labels-idx1-ubyte (each may instead be gzipped, NAME.gz). train -> /train, t10k -> /val; "
      "classes \"0\"..\"9\"; images stay uint8 (the trainer scales them to [0, 1]). Every header, file "
      "size and label is checked. OUTPUT is written to OUTPUT.partial and renamed into place when "
      "complete. share/data/fetch-mnist.sh downloads MNIST and runs this.");
  sub->add_option("DIR", a->dir, "Directory with the four idx files")->required();
  sub->add_option("OUTPUT", a->output, "Data set file to write (.h5)")->required();
  return {{sub, [a] {
             const auto t0 = std::chrono::steady_clock::now();
             const MnistImportSummary s = import_mnist(a->dir, a->output);
             const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
             std::printf("%s: %lld images of 1x%lldx%lld, 10 classes, train %lld, val %lld, %.2f s\n",
                         a->output.c_str(), static_cast<long long>(s.train + s.val),
                         static_cast<long long>(s.height), static_cast<long long>(s.width),
                         static_cast<long long>(s.train), static_cast<long long>(s.val), secs);
           }}};
}

}  // namespace shardtrain
