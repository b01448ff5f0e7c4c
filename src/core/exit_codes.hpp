// shardtrain/core/exit_codes.hpp
// The exit codes of `trainer` and `trainer-ckpt` (and the job scripts' contract,
// share/doc/slurm.md).
#pragma once

namespace shardtrain {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitRequeue = 75;  // EX_TEMPFAIL: checkpointed, requeue the job to continue

}  // namespace shardtrain
