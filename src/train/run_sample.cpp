// train.sample_every: the weights brought to rank 0 and the task's text (run_sample.hpp).
#include "train/run_sample.hpp"

#include <climits>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/half.hpp"
#include "train/host_staging.hpp"

namespace shardtrain {

template <class P>
std::string sample_line(ModelState<P>& state, const Task<P>& task, MPI_Comm comm, std::int64_t step) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const auto [lo, hi] = state.param_range();
  const std::int64_t n = hi - lo, total = state.layout().padded_size();
  std::vector<unsigned char> stage;
  const P* p = to_host(state.backend(), state.params().data(), static_cast<std::size_t>(n), stage);
  std::vector<float> mine(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) mine[static_cast<std::size_t>(i)] = to_float(p[i]);
  std::vector<float> whole;
  if (n == total) {  // stages 0-2 (and one rank): every parameter is here
    whole = std::move(mine);
  } else {
    SHARDTRAIN_CHECK(total <= INT_MAX, "train.sample_every: more than 2^31 parameters to gather");
    std::vector<std::int64_t> ranges(2 * static_cast<std::size_t>(size));
    const std::int64_t mine_range[2] = {lo, n};
    MPI_Gather(mine_range, 2, MPI_INT64_T, ranges.data(), 2, MPI_INT64_T, 0, comm);
    std::vector<int> counts(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) {
      displs[r] = static_cast<int>(ranges[2 * r]);
      counts[r] = static_cast<int>(ranges[2 * r + 1]);
    }
    if (rank == 0) whole.resize(static_cast<std::size_t>(total));
    MPI_Gatherv(mine.data(), static_cast<int>(n), MPI_FLOAT, whole.data(), counts.data(), displs.data(), MPI_FLOAT,
                0, comm);
  }
  if (rank != 0) return {};
  std::string text = task.sample_text(state.layout(), whole.data());
  std::string shown;
  for (const char c : text) {
    if (c == '\n') shown += "\\n";
    else shown += c;
  }
  return fmt::format("sample step {}: {}", step, shown);
}

template std::string sample_line<float>(ModelState<float>&, const Task<float>&, MPI_Comm, std::int64_t);
template std::string sample_line<f16>(ModelState<f16>&, const Task<f16>&, MPI_Comm, std::int64_t);
template std::string sample_line<bf16>(ModelState<bf16>&, const Task<bf16>&, MPI_Comm, std::int64_t);

}  // namespace shardtrain
