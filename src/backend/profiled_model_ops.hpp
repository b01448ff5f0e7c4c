// shardtrain/backend/profiled_model_ops.hpp
// Owns the `--profile` wrap of a model's op table: a table whose every entry
// (every line of backend/model_ops.def, none written out here) calls the same
// entry of the backend's table, timed under the op's ProfileOp
// (core/profiler.hpp). make_model_ops wraps the table when the backend has a
// profiler; without one there is no wrapper and no cost.
#pragma once

#include <memory>
#include <utility>

#include "backend/model_ops.hpp"
#include "core/profiler.hpp"

namespace shardtrain {

// What a profiled table's entries are bound to: the backend's table and the timers.
template <class T>
struct ProfiledModelOps {
  std::unique_ptr<ModelOps<T>> inner;
  Profiler* profiler = nullptr;
};

template <class T>
std::unique_ptr<ModelOps<T>> profiled_model_ops(std::unique_ptr<ModelOps<T>> inner, Profiler* profiler) {
  auto timed = std::make_unique<ProfiledModelOps<T>>(ProfiledModelOps<T>{std::move(inner), profiler});
  ProfiledModelOps<T>& self = *timed;
  auto ops = std::make_unique<ModelOps<T>>(std::move(timed), self.inner->memory());
#define SHARDTRAIN_MODEL_OP(name, profile_op, signature)                                       \
  ops->name.bind(self, [](ProfiledModelOps<T>& p, auto&&... args) -> decltype(auto) {          \
    Profiler::Scope timed_op(p.profiler, ProfileOp::profile_op);                               \
    return p.inner->name(std::forward<decltype(args)>(args)...);                               \
  });
#include "backend/model_ops.def"
  return ops;
}

}  // namespace shardtrain
