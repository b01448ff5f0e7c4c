// shardtrain/io/mnist_import.hpp
// Owns the MNIST importer of `trainer-data mnist`: the four idx files of MNIST
// (or of any data set in the same layout: single-channel uint8 images of any
// H x W up to 4096, labels 0..9) -> a labelled-sample data set (format
// "shardtrain-samples", kind "image", share/doc/dataset-format.md).
// Invariants:
//  - Streams: one image is in memory at a time (plus the writer's one chunk per
//    split), whatever the file sizes.
//  - Each idx file is validated before its samples are used: magic 0x00000803
//    (images, 3 dims) or 0x00000801 (labels, 1 dim), H and W in [1, 4096], image
//    and label counts equal, and the file size equal to what the header implies
//    (a truncated or padded file is refused). Every label is in [0, 9]. Each
//    failure is an InputError naming the file (and the sample for a bad label);
//    the output is then not created (atomic writer).
//  - A file may also be given gzipped, as NAME.gz (read through zlib), if NAME
//    itself is absent.
#pragma once

#include <cstdint>
#include <string>

namespace shardtrain {

struct MnistImportSummary {
  std::int64_t train = 0;   // samples in /train (from train-*)
  std::int64_t val = 0;     // samples in /val (from t10k-*)
  std::int64_t height = 0;
  std::int64_t width = 0;
};

// Imports DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] into OUTPUT.
MnistImportSummary import_mnist(const std::string& dir, const std::string& output);

}  // namespace shardtrain
