// shardtrain/task/task_factory.hpp
// Internal to train/: the constructors of the tasks of task/task.hpp and what
// they share.
#pragma once

#include <memory>

#include "task/task.hpp"

namespace shardtrain {

template <class P>
std::unique_ptr<Task<P>> make_gpt_task(const RunConfig& config, MpiCommunicator& comm, int plan_world);
template <class P>
std::unique_ptr<Task<P>> make_classifier_task(const RunConfig& config, MpiCommunicator& comm, int plan_world);

// Micro-batches per rank for `count` samples split over `world` ranks (the
// largest slice): every rank runs this many, a rank whose slice is used up
// runs empty ones (sharded ZeRO stages reduce per micro-batch).
inline std::int64_t micro_batches(std::int64_t count, int world, std::int64_t max_batch) {
  const std::int64_t largest = (count + world - 1) / world;
  return (largest + max_batch - 1) / max_batch;
}

}  // namespace shardtrain
