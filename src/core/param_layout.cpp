// ParamLayout: offsets, alignment and padding of the flat parameter vector.
#include "core/param_layout.hpp"

#include <numeric>
#include <string>

#include "core/error.hpp"

namespace shardtrain {

namespace {
std::string too_large(const std::string& name, const std::vector<std::int64_t>& shape) {
  std::string dims;
  for (std::size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  return "the model is too large: parameter '" + name + "' of shape (" + dims +
         ") takes the parameter count past 2^48 (" + std::to_string(ParamLayout::kMaxElements) +
         ") elements, the most a layout (and a checkpoint) holds; lower the model.* sizes";
}
}  // namespace

int ParamLayout::add(std::string name, std::vector<std::int64_t> shape, bool weight_decay,
                     int group) {
  SHARDTRAIN_CHECK(m_padded == 0, "ParamLayout::add after finalize");
  // Checked: a model's sizes come from the input file, and a product past the
  // bound (or past int64) must be an input error, not a negative count.
  std::int64_t numel = 1;
  for (auto d : shape) {
    SHARDTRAIN_CHECK(d > 0, "parameter " + name + " has a non-positive dimension");
    if (d > kMaxElements / numel) throw InputError(too_large(name, shape));
    numel *= d;
  }
  const int last = m_entries.empty() ? -1 : m_entries.back().group;
  SHARDTRAIN_CHECK(group == last || group == last + 1,
                   "parameter " + name + ": groups must be contiguous and numbered from 0");
  ParamEntry e;
  e.offset = (m_end + m_alignment - 1) / m_alignment * m_alignment;
  e.name = std::move(name);
  e.shape = std::move(shape);
  e.numel = numel;
  e.weight_decay = weight_decay;
  e.group = group;
  if (e.offset > kMaxElements - numel) throw InputError(too_large(e.name, e.shape));
  m_end = e.offset + numel;
  m_entries.push_back(std::move(e));
  return static_cast<int>(m_entries.size()) - 1;
}

void ParamLayout::finalize(int world_size) {
  SHARDTRAIN_CHECK(m_padded == 0, "ParamLayout::finalize called twice");
  SHARDTRAIN_CHECK(world_size >= 1, "world size must be >= 1");
  m_world = world_size;
  const std::int64_t unit = m_alignment * world_size;
  m_padded = std::max<std::int64_t>(unit, (m_end + unit - 1) / unit * unit);
  for (const auto& e : m_entries) {
    if (e.group == static_cast<int>(m_groups.size())) m_groups.emplace_back(e.offset, e.offset);
    m_groups.back().second = e.offset + e.numel;
  }
}

const ParamEntry& ParamLayout::find(const std::string& name) const {
  for (const auto& e : m_entries)
    if (e.name == name) return e;
  SHARDTRAIN_FAIL("no parameter named '" + name + "'");
}

std::int64_t ParamLayout::num_parameters() const {
  return std::accumulate(m_entries.begin(), m_entries.end(), std::int64_t{0},
                         [](std::int64_t a, const ParamEntry& e) { return a + e.numel; });
}

}  // namespace shardtrain
