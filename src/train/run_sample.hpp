// shardtrain/train/run_sample.hpp
// Owns train.sample_every: at an evaluation after a step that is a multiple of
// it, the run's parameters (compute precision, as fp32) are brought whole to
// rank 0 -- its own copy at ZeRO stages 0-2, which keep every parameter on
// every rank; a gather of the shards at stage 3 -- and the task writes one line
// of text with them (Task::sample_text: infer/gpt_kv.hpp's forward, its draws
// from (train.seed, token index) alone). Nothing of the run's state is written:
// the training that follows is bitwise the same with or without it.
// Memory: rank 0 holds the fp32 vector and the model in double while it samples
// (12 bytes per parameter, beyond the memory plan); other ranks one fp32 copy of
// their shard (stage 3).
// Collective over `comm` (a plain MPI communicator, outside the training tally).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

#include "dist/model_state.hpp"
#include "train/task.hpp"

namespace shardtrain {

// Rank 0's line "sample step N: TEXT" (newlines in TEXT shown as \n); "" elsewhere.
template <class P>
std::string sample_line(ModelState<P>& state, const Task<P>& task, MPI_Comm comm, std::int64_t step);

}  // namespace shardtrain
