// train.sample_every: the weights brought to rank 0 and the task's text (run_sample.hpp).
#include "task/run_sample.hpp"

#include <span>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/half.hpp"
#include "parallel/mpi/agreement.hpp"
#include "backend/host_staging.hpp"

namespace shardtrain {

template <class P>
std::string sample_line(ModelState<P>& state, const Task<P>& task, const MpiCommunicator& comm, std::int64_t step) {
  const int rank = comm.rank(), size = comm.size();
  const auto [lo, hi] = state.param_range();
  const std::int64_t n = hi - lo, total = state.layout().padded_size();
  std::vector<unsigned char> stage;
  const P* p = to_host(state.backend(), state.params().data(), static_cast<std::size_t>(n), stage);
  std::vector<float> mine(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) mine[static_cast<std::size_t>(i)] = to_float(p[i]);
  std::vector<float> whole;
  if (n == total) {  // stages 0-2 (and one rank): every parameter is here
    whole = std::move(mine);
  } else {  // stage 3: the shards, all of one length (the layout is padded to a multiple of the ranks)
    SHARDTRAIN_CHECK(lo == rank * n && total == n * size, "train.sample_every: the shards are not of one length");
    if (rank == 0) whole.resize(static_cast<std::size_t>(total));
    gather_to_root(comm.comm(), std::span<const float>(mine), std::span<float>(whole));
  }
  if (rank != 0) return {};
  double logprob = 0.0;
  const std::string text = task.sample_text(state.layout(), whole.data(), logprob);
  std::string shown;
  for (const char c : text) {
    if (c == '\n') shown += "\\n";
    else shown += c;
  }
  return fmt::format("sample step {} (logprob {:.12e}): {}", step, logprob, shown);
}

template std::string sample_line<float>(ModelState<float>&, const Task<float>&, const MpiCommunicator&, std::int64_t);
template std::string sample_line<f16>(ModelState<f16>&, const Task<f16>&, const MpiCommunicator&, std::int64_t);
template std::string sample_line<bf16>(ModelState<bf16>&, const Task<bf16>&, const MpiCommunicator&, std::int64_t);

}  // namespace shardtrain
