// He-normal initialisation shared by the classifier models (param_init.hpp).
#include "model/param_init.hpp"

#include <algorithm>
#include <cmath>

#include "core/rng.hpp"
#include "core/types.hpp"
#include "core/half.hpp"

namespace shardtrain {

template <class T>
void he_normal_init(const ParamLayout& layout, std::uint64_t seed, T* params, std::int64_t lo, std::int64_t hi) {
  constexpr std::uint64_t kInitStream = 0x1417;  // as the GPT's "init" stream
  for (std::int64_t i = lo; i < hi; ++i) params[i - lo] = T(0);
  for (const auto& e : layout.entries()) {
    if (!e.name.ends_with(".weight")) continue;  // biases stay 0
    const std::int64_t a = std::max(lo, e.offset), b = std::min(hi, e.offset + e.numel);
    const double std_dev = std::sqrt(2.0 / static_cast<double>(e.numel / e.shape[0]));
    for (std::int64_t i = a; i < b; ++i)
      params[i - lo] = static_cast<T>(std_dev * normal(seed, kInitStream, static_cast<std::uint64_t>(i)));
  }
}

template void he_normal_init<float>(const ParamLayout&, std::uint64_t, float*, std::int64_t, std::int64_t);
template void he_normal_init<double>(const ParamLayout&, std::uint64_t, double*, std::int64_t, std::int64_t);
template void he_normal_init<f16>(const ParamLayout&, std::uint64_t, f16*, std::int64_t, std::int64_t);
template void he_normal_init<bf16>(const ParamLayout&, std::uint64_t, bf16*, std::int64_t, std::int64_t);

}  // namespace shardtrain
