// tests/unit/backend/model_ops_test.cpp
// The op table (src/backend/model_ops.hpp), on the host, walked line by line
// through backend/model_ops.def so a new op is covered without editing this file:
//  - the host backend's tables (float, double, f16, bf16), plain and profiled,
//    have every entry bound;
//  - the `--profile` wrap (profiled_model_ops.hpp) sends every op to the same
//    op of the table it wraps, and times it once under the op's ProfileOp and
//    under no other.
// (The CUDA table is checked when it is compiled: a missing method or kernel
// does not build; share/test.sh --all builds it, `ctest -L cuda-build`.)
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/model_ops.hpp"
#include "backend/profiled_model_ops.hpp"
#include "core/profiler.hpp"

namespace shardtrain {
namespace {

// The names of the entries of `ops` that are not bound.
template <class T>
std::vector<std::string> unbound_ops(const ModelOps<T>& ops) {
  std::vector<std::string> unbound;
#define SHARDTRAIN_MODEL_OP(name, profile_op, signature) \
  if (!ops.name) unbound.push_back(#name);
#include "backend/model_ops.def"
  return unbound;
}

ModelOpsLimits small_limits() {
  ModelOpsLimits l;
  l.max_batch = 2;
  l.seq_len = 4;
  l.channels = 8;
  l.n_head = 2;
  l.vocab = 16;
  l.max_input_elems = 8;
  return l;
}

template <class T>
void expect_host_tables_complete() {
  MemoryTracker memory;
  Backend& host = host_backend();
  EXPECT_EQ(unbound_ops(*make_model_ops<T>(host, small_limits(), memory)), std::vector<std::string>{});
  Profiler profiler;
  host.set_profiler(&profiler);
  auto profiled = make_model_ops<T>(host, small_limits(), memory);
  host.set_profiler(nullptr);
  EXPECT_EQ(unbound_ops(*profiled), std::vector<std::string>{});
}

TEST(ModelOps, HostTablesBindEveryOp) {
  expect_host_tables_complete<float>();
  expect_host_tables_complete<double>();
  expect_host_tables_complete<f16>();
  expect_host_tables_complete<bf16>();
}

// Stands in for a backend: every op records its name and returns a value-initialized result.
struct Recorder {
  std::vector<std::string> calls;
};

template <class Entry>
struct EntryTypes;
template <class R, class... A>
struct EntryTypes<OpEntry<R(A...)>> {
  using Result = R;
  // Calls the entry with value-initialized arguments (null pointers, zero shapes).
  static R call(const OpEntry<R(A...)>& entry) { return entry(std::remove_cvref_t<A>()...); }
};

TEST(ModelOps, ProfiledTableTimesEveryOpOnceUnderItsProfileOp) {
  auto recorder = std::make_unique<Recorder>();
  Recorder& rec = *recorder;
  auto inner = std::make_unique<ModelOps<float>>(std::move(recorder), nullptr);
#define SHARDTRAIN_MODEL_OP(name, profile_op, signature)                    \
  inner->name.bind(rec, [](Recorder& r, auto&&...) {                        \
    r.calls.push_back(#name);                                               \
    return typename EntryTypes<decltype(ModelOps<float>::name)>::Result(); \
  });
#include "backend/model_ops.def"
  ASSERT_EQ(unbound_ops(*inner), std::vector<std::string>{});

  Profiler profiler;
  auto ops = profiled_model_ops<float>(std::move(inner), &profiler);
  ASSERT_EQ(unbound_ops(*ops), std::vector<std::string>{});
  profiler.begin_step();
  int n_ops = 0;
#define SHARDTRAIN_MODEL_OP(name, profile_op, signature)                                                    \
  {                                                                                                         \
    SCOPED_TRACE(#name);                                                                                    \
    const Profiler::Totals before = profiler.totals();                                                      \
    EntryTypes<decltype(ModelOps<float>::name)>::call(ops->name);                                           \
    ASSERT_EQ(rec.calls.size(), static_cast<std::size_t>(++n_ops));                                         \
    EXPECT_EQ(rec.calls.back(), #name);                                                                     \
    for (int op = 0; op < Profiler::kOps; ++op)                                                             \
      EXPECT_EQ(profiler.totals().calls[op] - before.calls[op],                                            \
                std::int64_t{op == static_cast<int>(ProfileOp::profile_op) ? 1 : 0})                        \
          << profile_op_name(static_cast<ProfileOp>(op));                                                   \
  }
#include "backend/model_ops.def"
  profiler.end_step();
}

}  // namespace
}  // namespace shardtrain
