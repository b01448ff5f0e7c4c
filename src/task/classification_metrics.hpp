// shardtrain/task/classification_metrics.hpp
// Owns the metrics of a classifier's evaluation: the confusion matrix
// (rows = true class, columns = predicted class) accumulated over a rank's
// samples and summed over ranks, and what follows from it: accuracy,
// per-class precision and recall, and a printable table. The prediction of a
// sample is the arg max of its logits, the FIRST maximum on ties (so the result
// does not depend on how the logits were computed as long as they are equal).
// Invariants: counts are exact integers (int64), so the sum over ranks, and so
// every metric, is independent of the rank count and of the order samples were
// seen in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardtrain {

class Communicator;

// Index of the first maximum of x[0, n); NaN never wins (an all-NaN row gives 0).
std::int64_t argmax_first(const float* x, std::int64_t n);

class ConfusionMatrix {
 public:
  explicit ConfusionMatrix(std::int64_t num_classes);

  std::int64_t num_classes() const { return m_k; }
  // One sample: label in [0, num_classes) (checked), prediction in range (checked).
  void add(std::int64_t label, std::int64_t predicted);
  // rows x num_classes logits (row-major), one label per row; labels < 0 are skipped.
  void add_logits(const float* logits, const std::int32_t* labels, std::int64_t rows);
  // Sums the counts over every rank of `comm` (collective).
  void all_reduce(Communicator& comm);

  std::int64_t count(std::int64_t label, std::int64_t predicted) const { return m_counts[label * m_k + predicted]; }
  std::int64_t total() const;
  double accuracy() const;                   // correct / total (0 when empty)
  double precision(std::int64_t c) const;    // of predictions c, the share that are c (0 if none predicted)
  double recall(std::int64_t c) const;       // of samples c, the share predicted c (0 if none)

  // The matrix with class names, then accuracy and per-class precision/recall.
  std::string format(const std::vector<std::string>& class_names) const;

 private:
  std::int64_t m_k;
  std::vector<std::int64_t> m_counts;  // m_k * m_k
};

}  // namespace shardtrain
