// StagingCommunicator (parallel/mpi/staging_communicator.hpp) with the host stager
// against the plain MpiCommunicator, at any rank count: every collective the ZeRO
// engine uses (in place and not, blocking and non-blocking, completed by wait(),
// by polling test(), and by destroying the request), every DType and reduction,
// counts that do not divide the rank count (and an empty block): the results, bit
// for bit, and the tally are the MPI communicator's. The stager's byte counts
// check what is staged (this rank's piece in, the result out). Run twice: staging
// every call, and passing the caller's buffers as a CUDA-aware MPI would.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/half.hpp"
#include "parallel/mpi/mpi_communicator.hpp"
#include "parallel/mpi/staging_communicator.hpp"

namespace shardtrain {
namespace {

using Bytes = std::vector<unsigned char>;

constexpr DType kTypes[] = {DType::F32, DType::F64, DType::I32, DType::I64, DType::U8, DType::F16, DType::BF16};
constexpr ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min};

std::string type_name(DType t) { return std::string(numpy_name(t)); }

// `count` elements of `type` that differ per rank, per element and per `salt`;
// floats with many mantissa bits, so a changed summation order changes bits.
Bytes values(DType type, std::size_t count, int rank, int salt) {
  Bytes b(count * dtype_size(type));
  for (std::size_t i = 0; i < count; ++i) {
    const double x = std::sin(0.37 * static_cast<double>(i) + 1.3 * rank + 0.11 * salt) * (1.0 + 0.01 * i) + 0.001 * rank;
    unsigned char* at = b.data() + i * dtype_size(type);
    const auto put = [&](auto v) { std::memcpy(at, &v, sizeof v); };
    switch (type) {
      case DType::F32: put(static_cast<float>(x)); break;
      case DType::F64: put(x); break;
      case DType::I32: put(static_cast<std::int32_t>(x * 1e6)); break;
      case DType::I64: put(static_cast<std::int64_t>(x * 1e12)); break;
      case DType::U8: put(static_cast<std::uint8_t>(static_cast<int>(std::fabs(x) * 60.0) + rank)); break;
      case DType::F16: put(f16(static_cast<float>(x))); break;
      case DType::BF16: put(bf16(static_cast<float>(x))); break;
    }
  }
  return b;
}

// The blocks of the variable collectives: 7 + 4r elements, rank 1's empty (at 3
// ranks or more), so the total divides by no rank count here.
std::vector<std::size_t> block_counts(int n) {
  std::vector<std::size_t> c(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) c[static_cast<std::size_t>(r)] = (r == 1 && n >= 3) ? 0 : 7 + 4 * static_cast<std::size_t>(r);
  return c;
}
std::size_t displ_of(const std::vector<std::size_t>& c, int r) {
  std::size_t d = 0;
  for (int q = 0; q < r; ++q) d += c[static_cast<std::size_t>(q)];
  return d;
}

// How a non-blocking call is completed.
enum class Finish { Wait, Poll, Destroy };
void finish(RequestPtr request, Finish how) {
  if (how == Finish::Wait) request->wait();
  if (how == Finish::Poll)
    while (!request->test()) {
    }
  request.reset();  // Destroy: the destructor completes it
}

class StagingVsMpi : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    auto stager = std::make_unique<HostStager>(/*passes_buffers=*/GetParam());
    m_stager = stager.get();
    m_staging = std::make_unique<StagingCommunicator>(MPI_COMM_WORLD, std::move(stager));
  }
  // Runs `call` on the MPI communicator with `input` and on the staging one with
  // a copy; the buffers after the call, and the tallies, must be equal bit for bit.
  void expect_same(const std::string& what, const Bytes& input,
                   const std::function<void(Communicator&, unsigned char*)>& call) {
    Bytes a = input, b = input;
    const CommTally before_a = m_mpi.tally(), before_b = m_staging->tally();
    call(m_mpi, a.data());
    call(*m_staging, b.data());
    EXPECT_TRUE(a == b) << what << " at rank " << m_mpi.rank() << " of " << m_mpi.size()
                        << ": the staged result differs from MPI's";
    const CommTally da = m_mpi.tally() - before_a, db = m_staging->tally() - before_b;
    EXPECT_EQ(da.calls, db.calls) << what;
    EXPECT_EQ(da.async, db.async) << what;
    EXPECT_EQ(da.payload, db.payload) << what;
    EXPECT_EQ(da.model, db.model) << what;
  }
  MpiCommunicator m_mpi{MPI_COMM_WORLD};
  HostStager* m_stager = nullptr;
  std::unique_ptr<StagingCommunicator> m_staging;
};

TEST_P(StagingVsMpi, AllReduceAndBroadcast) {
  const int r = m_mpi.rank(), n = m_mpi.size();
  const std::size_t count = 1001;  // 7 * 11 * 13: divides by no rank count here
  for (DType t : kTypes) {
    for (ReduceOp op : kOps) {
      const std::string what = "all_reduce " + type_name(t) + " op " + std::to_string(static_cast<int>(op));
      expect_same(what, values(t, count, r, 1),
                  [&](Communicator& c, unsigned char* p) { c.all_reduce(p, count, t, op); });
      for (Finish how : {Finish::Wait, Finish::Poll, Finish::Destroy})
        expect_same("i" + what, values(t, count, r, 2),
                    [&](Communicator& c, unsigned char* p) { finish(c.iall_reduce(p, count, t, op), how); });
    }
    for (int root = 0; root < n; ++root)
      expect_same("broadcast " + type_name(t) + " from " + std::to_string(root), values(t, count, r, 3),
                  [&](Communicator& c, unsigned char* p) { c.broadcast(p, count, t, root); });
  }
  float loss = 0.5f + static_cast<float>(r) * 0.25f;
  EXPECT_EQ(m_staging->all_reduce_value(loss), m_mpi.all_reduce_value(loss));
  m_staging->barrier();
}

TEST_P(StagingVsMpi, ReduceScatterFixedBlocks) {
  const int r = m_mpi.rank(), n = m_mpi.size();
  const std::size_t block = 13;
  for (DType t : kTypes) {
    const std::size_t e = dtype_size(t);
    for (ReduceOp op : kOps) {
      const std::string what = type_name(t) + " op " + std::to_string(static_cast<int>(op));
      // in place: the rank's own block of the flat vector
      expect_same("reduce_scatter in place " + what, values(t, n * block, r, 4), [&](Communicator& c, unsigned char* p) {
        c.reduce_scatter(p, p + r * block * e, block, t, op);
      });
      // into a separate buffer (the tail of the test buffer)
      expect_same("reduce_scatter " + what, values(t, (n + 1) * block, r, 5), [&](Communicator& c, unsigned char* p) {
        c.reduce_scatter(p, p + n * block * e, block, t, op);
      });
      for (Finish how : {Finish::Wait, Finish::Poll, Finish::Destroy})
        expect_same("ireduce_scatter " + what, values(t, (n + 1) * block, r, 6),
                    [&](Communicator& c, unsigned char* p) {
                      finish(c.ireduce_scatter(p, p + n * block * e, block, t, op), how);
                    });
    }
  }
}

TEST_P(StagingVsMpi, AllGatherFixedBlocks) {
  const int r = m_mpi.rank(), n = m_mpi.size();
  const std::size_t block = 13;
  for (DType t : kTypes) {
    const std::size_t e = dtype_size(t);
    expect_same("all_gather in place " + type_name(t), values(t, n * block, r, 7),
                [&](Communicator& c, unsigned char* p) { c.all_gather(p + r * block * e, p, block, t); });
    for (Finish how : {Finish::Wait, Finish::Poll, Finish::Destroy})
      expect_same("iall_gather " + type_name(t), values(t, (n + 1) * block, r, 8),
                  [&](Communicator& c, unsigned char* p) { finish(c.iall_gather(p + n * block * e, p, block, t), how); });
  }
}

TEST_P(StagingVsMpi, VariableBlocksAsTheZeroEngineCallsThem) {
  const int r = m_mpi.rank(), n = m_mpi.size();
  const std::vector<std::size_t> counts = block_counts(n);
  const std::size_t total = displ_of(counts, n), own = displ_of(counts, r);
  for (DType t : kTypes) {
    const std::size_t e = dtype_size(t);
    for (Finish how : {Finish::Wait, Finish::Poll, Finish::Destroy}) {
      for (ReduceOp op : kOps)  // the engine's bucket: in place, into the rank's own block
        expect_same("ireduce_scatter_v in place " + type_name(t), values(t, total, r, 9),
                    [&](Communicator& c, unsigned char* p) {
                      finish(c.ireduce_scatter_v(p, p + own * e, counts, t, op), how);
                    });
      expect_same("ireduce_scatter_v " + type_name(t), values(t, total + counts[r], r, 10),
                  [&](Communicator& c, unsigned char* p) {
                    finish(c.ireduce_scatter_v(p, p + total * e, counts, t, ReduceOp::Sum), how);
                  });
      // the engine's parameter gather: the rank's shard from elsewhere into the bucket
      expect_same("iall_gather_v " + type_name(t), values(t, total + counts[r], r, 11),
                  [&](Communicator& c, unsigned char* p) { finish(c.iall_gather_v(p + total * e, p, counts, t), how); });
      expect_same("iall_gather_v in place " + type_name(t), values(t, total, r, 12),
                  [&](Communicator& c, unsigned char* p) { finish(c.iall_gather_v(p + own * e, p, counts, t), how); });
    }
  }
}

// Several requests in flight at once, completed out of order: each result is
// still MPI's (the staging buffers of requests in flight are distinct).
TEST_P(StagingVsMpi, RequestsInFlightTogether) {
  const int r = m_mpi.rank(), n = m_mpi.size();
  const std::vector<std::size_t> counts = block_counts(n);
  const std::size_t total = displ_of(counts, n), own = displ_of(counts, r);
  const DType t = DType::BF16;
  const std::size_t e = dtype_size(t);
  expect_same("four buckets in flight", values(t, 4 * total, r, 13), [&](Communicator& c, unsigned char* p) {
    std::vector<RequestPtr> pending;
    for (int k = 0; k < 4; ++k)
      pending.push_back(c.ireduce_scatter_v(p + k * total * e, p + (k * total + own) * e, counts, t, ReduceOp::Sum));
    for (int k = 3; k >= 0; --k) pending[static_cast<std::size_t>(k)]->wait();
  });
}

// What is staged: a reduce-scatter stages the whole input and copies back this
// rank's block; an all-gather stages this rank's block and copies back the whole.
TEST_P(StagingVsMpi, StagesEachRanksPiece) {
  const int r = m_mpi.rank(), n = m_mpi.size();
  const std::vector<std::size_t> counts = block_counts(n);
  const std::size_t total = displ_of(counts, n), own = displ_of(counts, r);
  const DType t = DType::F32;
  const std::size_t e = dtype_size(t);
  Bytes buf = values(t, total, r, 14);
  std::size_t in = m_stager->bytes_to_host(), out = m_stager->bytes_to_buffer();
  m_staging->ireduce_scatter_v(buf.data(), buf.data() + own * e, counts, t, ReduceOp::Sum)->wait();
  EXPECT_EQ(m_stager->bytes_to_host() - in, total * e);
  EXPECT_EQ(m_stager->bytes_to_buffer() - out, counts[r] * e);
  in = m_stager->bytes_to_host();
  out = m_stager->bytes_to_buffer();
  m_staging->iall_gather_v(buf.data() + own * e, buf.data(), counts, t)->wait();
  if (GetParam()) {  // passed through: nothing staged
    EXPECT_EQ(m_stager->bytes_to_host() - in, 0u);
    EXPECT_EQ(m_stager->bytes_to_buffer() - out, 0u);
  } else {
    EXPECT_EQ(m_stager->bytes_to_host() - in, counts[r] * e);
    EXPECT_EQ(m_stager->bytes_to_buffer() - out, total * e);
  }
}

INSTANTIATE_TEST_SUITE_P(Stager, StagingVsMpi, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "PassesBuffers" : "Stages"; });

}  // namespace
}  // namespace shardtrain
