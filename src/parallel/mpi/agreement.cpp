// Agreements and report gathers over a plain MPI_Comm (see agreement.hpp).
#include "parallel/mpi/agreement.hpp"

#include <climits>
#include <exception>
#include <utility>

#include "core/error.hpp"
#include "core/mpi_check.hpp"

namespace shardtrain {

namespace {

int rank_of(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}

int size_of(MPI_Comm comm) {
  int n = 1;
  MPI_Comm_size(comm, &n);
  return n;
}

}  // namespace

Agreement agree_on_failure(MPI_Comm comm, const std::function<void()>& fn) {
  Outcome mine = Outcome::Ok;
  std::string message;
  try {
    fn();
  } catch (const InputError& e) {
    mine = Outcome::BadInput;
    message = e.what();
  } catch (const std::exception& e) {
    mine = Outcome::Failed;
    message = e.what();
  }
  const int n = size_of(comm), rank = rank_of(comm);
  int first_failing = mine != Outcome::Ok ? rank : n;
  MPI_Allreduce(MPI_IN_PLACE, &first_failing, 1, MPI_INT, MPI_MIN, comm);
  int worst = static_cast<int>(mine);
  MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_INT, MPI_MAX, comm);
  Agreement a;
  a.worst = static_cast<Outcome>(worst);
  if (first_failing < n) {  // every rank gets the failing rank's message
    a.first_failing = first_failing;
    int length = static_cast<int>(message.size());
    MPI_Bcast(&length, 1, MPI_INT, first_failing, comm);
    message.resize(static_cast<std::size_t>(length));
    MPI_Bcast(message.data(), length, MPI_CHAR, first_failing, comm);
    a.message = std::move(message);
  }
  return a;
}

std::string broadcast_string(MPI_Comm comm, std::string s) {
  long long n = static_cast<long long>(s.size());
  MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, comm);
  s.resize(static_cast<std::size_t>(n));
  if (n > 0) MPI_Bcast(s.data(), static_cast<int>(n), MPI_CHAR, 0, comm);
  return s;
}

void on_root(MPI_Comm comm, const std::function<void()>& fn) {
  int kind = 0;  // 0 ok, 1 failure, 2 input error
  std::string message;
  if (rank_of(comm) == 0) {
    try {
      fn();
    } catch (const InputError& e) {
      kind = 2;
      message = e.what();
    } catch (const std::exception& e) {
      kind = 1;
      message = e.what();
    }
  }
  MPI_Bcast(&kind, 1, MPI_INT, 0, comm);
  message = broadcast_string(comm, message);
  if (kind == 2) throw InputError(message);
  if (kind == 1) throw AgreedError(message);
}

void reduce_to_root(MPI_Comm comm, std::span<const double> mine, std::span<double> out, ReduceOp op) {
  SHARDTRAIN_CHECK(rank_of(comm) != 0 || out.size() >= mine.size(), "reduce_to_root: output too short");
  MPI_Op mpi_op = op == ReduceOp::Sum ? MPI_SUM : op == ReduceOp::Max ? MPI_MAX : MPI_MIN;
  SHARDTRAIN_MPI_CHECK(MPI_Reduce(mine.data(), out.data(), static_cast<int>(mine.size()), MPI_DOUBLE, mpi_op, 0,
                                  comm));
}

void gather_to_root(MPI_Comm comm, std::span<const std::uint64_t> mine, std::span<std::uint64_t> out) {
  SHARDTRAIN_CHECK(rank_of(comm) != 0 || out.size() >= mine.size() * static_cast<std::size_t>(size_of(comm)),
                   "gather_to_root: output too short");
  const int count = static_cast<int>(mine.size());
  SHARDTRAIN_MPI_CHECK(MPI_Gather(mine.data(), count, MPI_UINT64_T, out.data(), count, MPI_UINT64_T, 0, comm));
}

void gather_to_root(MPI_Comm comm, std::span<const float> mine, std::span<float> out) {
  SHARDTRAIN_CHECK(rank_of(comm) != 0 || out.size() >= mine.size() * static_cast<std::size_t>(size_of(comm)),
                   "gather_to_root: output too short");
  SHARDTRAIN_CHECK(mine.size() <= static_cast<std::size_t>(INT_MAX), "gather_to_root: more than 2^31 values per rank");
  const int count = static_cast<int>(mine.size());
  SHARDTRAIN_MPI_CHECK(MPI_Gather(mine.data(), count, MPI_FLOAT, out.data(), count, MPI_FLOAT, 0, comm));
}

}  // namespace shardtrain
