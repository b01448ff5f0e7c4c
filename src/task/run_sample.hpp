// shardtrain/task/run_sample.hpp
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
// Collective over `comm` (the gather is parallel/mpi/agreement.hpp's, on its
// MPI_Comm: outside the Communicator's tally, as the report gathers are).
#pragma once

#include <cstdint>
#include <string>

#include "parallel/model_state.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "task/task.hpp"

namespace shardtrain {

// Rank 0's line "sample step N (logprob L): TEXT" (L: the continuation's
// log-probability, as `trainer-ckpt sample --ids` prints it; newlines in TEXT
// shown as \n); "" elsewhere.
template <class P>
std::string sample_line(ModelState<P>& state, const Task<P>& task, const MpiCommunicator& comm, std::int64_t step);

}  // namespace shardtrain
