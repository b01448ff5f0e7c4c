// shardtrain/kernels/half_scratch.cpp
// Owns the binding of the fp32 scratch arena of the 16-bit kernel paths (see
// half_scratch.hpp for why it is global and why it is not thread-safe).
// Invariant: the binding is a (pointer, size) pair that only half_scratch_bind
// changes; nothing here allocates or frees.
#include "kernels/half_scratch.hpp"

#include <string>

#include "core/error.hpp"

namespace shardtrain {
namespace {

struct Binding {
  float* data = nullptr;
  std::size_t elems = 0;
};

Binding g_binding;  // process-wide (half_scratch.hpp says why)

}  // namespace

void half_scratch_bind(float* data, std::size_t elems) {
  SHARDTRAIN_CHECK(data != nullptr || elems == 0,
                   "half_scratch_bind: null buffer with " + std::to_string(elems) + " floats");
  g_binding = Binding{data, data == nullptr ? 0 : elems};
}

std::size_t half_scratch_size() { return g_binding.elems; }

float* half_scratch(std::size_t elems, const char* op) {
  SHARDTRAIN_CHECK(
      g_binding.data != nullptr && elems <= g_binding.elems,
      std::string(op) + " needs " + std::to_string(elems) + " floats of 16-bit scratch, " +
          (g_binding.data == nullptr ? std::string("but no scratch is bound")
                                     : std::to_string(g_binding.elems) + " are bound") +
          " (bind the max of the *_half_scratch_elems sizes with "
          "half_scratch_bind before the first step)");
  return g_binding.data;
}

}  // namespace shardtrain
