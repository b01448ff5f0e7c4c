// Confusion matrix and the metrics derived from it (classification_metrics.hpp).
#include "task/classification_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <span>

#include <fmt/format.h>

#include "core/error.hpp"
#include "parallel/communicator.hpp"

namespace shardtrain {

std::int64_t argmax_first(const float* x, std::int64_t n) {
  std::int64_t best = 0;
  for (std::int64_t i = 1; i < n; ++i)
    if (x[i] > x[best] || (std::isnan(x[best]) && !std::isnan(x[i]))) best = i;
  return best;
}

ConfusionMatrix::ConfusionMatrix(std::int64_t num_classes) : m_k(num_classes) {
  SHARDTRAIN_CHECK(num_classes >= 2, "a classifier needs at least 2 classes");
  m_counts.assign(static_cast<std::size_t>(num_classes * num_classes), 0);
}

void ConfusionMatrix::add(std::int64_t label, std::int64_t predicted) {
  SHARDTRAIN_CHECK(label >= 0 && label < m_k, fmt::format("label {} out of [0, {})", label, m_k));
  SHARDTRAIN_CHECK(predicted >= 0 && predicted < m_k, fmt::format("prediction {} out of [0, {})", predicted, m_k));
  ++m_counts[static_cast<std::size_t>(label * m_k + predicted)];
}

void ConfusionMatrix::add_logits(const float* logits, const std::int32_t* labels, std::int64_t rows) {
  for (std::int64_t r = 0; r < rows; ++r)
    if (labels[r] >= 0) add(labels[r], argmax_first(logits + r * m_k, m_k));
}

void ConfusionMatrix::all_reduce(Communicator& comm) {
  comm.all_reduce(std::span<std::int64_t>(m_counts), ReduceOp::Sum);
}

std::int64_t ConfusionMatrix::total() const {
  std::int64_t t = 0;
  for (std::int64_t c : m_counts) t += c;
  return t;
}

double ConfusionMatrix::accuracy() const {
  std::int64_t correct = 0;
  for (std::int64_t c = 0; c < m_k; ++c) correct += count(c, c);
  const std::int64_t t = total();
  return t > 0 ? static_cast<double>(correct) / static_cast<double>(t) : 0.0;
}

double ConfusionMatrix::precision(std::int64_t c) const {
  std::int64_t predicted = 0;
  for (std::int64_t l = 0; l < m_k; ++l) predicted += count(l, c);
  return predicted > 0 ? static_cast<double>(count(c, c)) / static_cast<double>(predicted) : 0.0;
}

double ConfusionMatrix::recall(std::int64_t c) const {
  std::int64_t actual = 0;
  for (std::int64_t p = 0; p < m_k; ++p) actual += count(c, p);
  return actual > 0 ? static_cast<double>(count(c, c)) / static_cast<double>(actual) : 0.0;
}

std::string ConfusionMatrix::format(const std::vector<std::string>& names) const {
  auto name = [&](std::int64_t c) { return c < static_cast<std::int64_t>(names.size()) ? names[c] : std::to_string(c); };
  std::size_t width = 6;
  for (std::int64_t c = 0; c < m_k; ++c) width = std::max(width, name(c).size());
  for (std::int64_t v : m_counts) width = std::max(width, std::to_string(v).size());
  std::string s = fmt::format("confusion matrix (rows: true class, columns: predicted), {} samples\n", total());
  s += fmt::format("  {:>{}}", "", width);
  for (std::int64_t p = 0; p < m_k; ++p) s += fmt::format(" {:>{}}", name(p), width);
  s += fmt::format(" {:>9} {:>9}\n", "precision", "recall");
  for (std::int64_t l = 0; l < m_k; ++l) {
    s += fmt::format("  {:>{}}", name(l), width);
    for (std::int64_t p = 0; p < m_k; ++p) s += fmt::format(" {:>{}}", count(l, p), width);
    s += fmt::format(" {:>9.4f} {:>9.4f}\n", precision(l), recall(l));
  }
  s += fmt::format("accuracy {:.4f} ({} of {})\n", accuracy(),
                   static_cast<std::int64_t>(std::llround(accuracy() * static_cast<double>(total()))), total());
  return s;
}

}  // namespace shardtrain
