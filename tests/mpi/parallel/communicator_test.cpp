// MpiCommunicator at any rank count: all-reduce (sum/max/min, float/double/int64),
// broadcast from every root, buffers whose length does not divide by the rank
// count, determinism of repeated reductions, the reduce-scatter's fixed summation
// order, and the byte accounting.
#include <cstdio>
#include <cstdlib>
#include <gtest/gtest.h>
#include <mpi.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "parallel/mpi/mpi_communicator.hpp"

namespace shardtrain {
namespace {

TEST(MpiCommunicator, AllReduceSumMaxMin) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int r = comm.rank(), n = comm.size();
  std::vector<double> d(1001);  // 1001 = 7*11*13: no rank count here divides it
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = (r + 1) * 0.5 + static_cast<double>(i);
  comm.all_reduce(std::span<double>(d), ReduceOp::Sum);
  for (std::size_t i = 0; i < d.size(); ++i)
    EXPECT_DOUBLE_EQ(d[i], 0.25 * n * (n + 1) + static_cast<double>(n * i)) << i;

  std::vector<std::int64_t> v{r, -r, 5};
  comm.all_reduce(std::span<std::int64_t>(v), ReduceOp::Max);
  EXPECT_EQ(v, (std::vector<std::int64_t>{n - 1, 0, 5}));
  EXPECT_EQ(comm.all_reduce_value<std::int64_t>(r, ReduceOp::Min), 0);
  EXPECT_FLOAT_EQ(comm.all_reduce_value<float>(1.5f), 1.5f * n);
}

TEST(MpiCommunicator, RepeatedReductionsAreBitwiseIdentical) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  std::vector<float> base(4099);
  for (std::size_t i = 0; i < base.size(); ++i)
    base[i] = std::sin(static_cast<float>(i * (comm.rank() + 3))) * 1e-3f + 1.0f;
  std::vector<float> a = base, b = base;
  comm.all_reduce(std::span<float>(a));
  comm.all_reduce(std::span<float>(b));
  EXPECT_EQ(a, b);
}

TEST(MpiCommunicator, BroadcastFromEveryRoot) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  for (int root = 0; root < comm.size(); ++root) {
    std::vector<std::int32_t> x(37, comm.rank() == root ? root * 10 + 1 : -1);
    comm.broadcast(std::span<std::int32_t>(x), root);
    for (auto e : x) EXPECT_EQ(e, root * 10 + 1);
  }
  comm.barrier();
}

std::uint64_t payload_of(const Communicator& c, Collective k) { return c.tally().payload[static_cast<int>(k)]; }
std::uint64_t calls_of(const Communicator& c, Collective k) { return c.tally().calls[static_cast<int>(k)]; }
std::uint64_t async_of(const Communicator& c, Collective k) { return c.tally().async[static_cast<int>(k)]; }
std::uint64_t model_of(const Communicator& c, Collective k) { return c.tally().model[static_cast<int>(k)]; }

// Payload (communicator.hpp) of every kind, exactly, on every rank; and the
// wire model of the non-blocking calls: ireduce_scatter_v is our pairwise
// exchange (each other rank's block sent to it once); iallgatherv is libnbc's
// fixed linear algorithm (Open MPI 4.1, ompi/mca/coll/libnbc), the own block to
// every other rank. (The model against measured bytes: tests/mpi/parallel/wire_check.py.)
TEST(MpiCommunicator, CountsPayloadPerKindAndModelOfNonBlockingCalls) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int r = comm.rank(), n = comm.size();
  ASSERT_TRUE(comm.wire_modelled());
  std::vector<float> x(1200, 1.0f);
  comm.all_reduce(std::span<float>(x));
  comm.iall_reduce(x.data(), 300, DType::F32, ReduceOp::Sum)->wait();
  EXPECT_EQ(payload_of(comm, Collective::AllReduce), (1200u + 300u) * 4);
  EXPECT_EQ(calls_of(comm, Collective::AllReduce), 2u);
  EXPECT_EQ(async_of(comm, Collective::AllReduce), 1u);
  for (int root = 0; root < n; ++root) comm.broadcast(std::span<float>(x.data(), 10), root);
  EXPECT_EQ(payload_of(comm, Collective::Broadcast), 10u * 4);  // once, as the root
  EXPECT_EQ(calls_of(comm, Collective::Broadcast), static_cast<std::uint64_t>(n));
  comm.barrier();
  EXPECT_EQ(calls_of(comm, Collective::Barrier), 1u);
  EXPECT_EQ(payload_of(comm, Collective::Barrier), 0u);

  // Variable blocks: rank q owns 3 + 2q elements (odd total at 2 and 4 ranks).
  std::vector<std::size_t> counts(n);
  std::size_t total = 0, displ = 0;
  for (int q = 0; q < n; ++q) {
    counts[q] = 3 + 2 * static_cast<std::size_t>(q);
    if (q < r) displ += counts[q];
    total += counts[q];
  }
  std::vector<float> buf(total, 1.0f);
  const std::uint64_t rs_wire0 = model_of(comm, Collective::ReduceScatter);
  comm.ireduce_scatter_v(buf.data(), buf.data() + displ, counts, DType::F32, ReduceOp::Sum)->wait();
  EXPECT_EQ(payload_of(comm, Collective::ReduceScatter), total * 4);
  const std::uint64_t ag_wire0 = model_of(comm, Collective::AllGather);
  comm.iall_gather_v(buf.data() + displ, buf.data(), counts, DType::F32)->wait();
  EXPECT_EQ(payload_of(comm, Collective::AllGather), counts[r] * 4);
  EXPECT_EQ(async_of(comm, Collective::ReduceScatter), 1u);
  EXPECT_EQ(async_of(comm, Collective::AllGather), 1u);
  {
    const std::uint64_t rs = (total - counts[r]) * 4;
    EXPECT_EQ(model_of(comm, Collective::ReduceScatter) - rs_wire0, rs) << "pairwise reduce-scatter";
    EXPECT_EQ(model_of(comm, Collective::AllGather) - ag_wire0, (n - 1) * counts[r] * 4) << "libnbc iallgatherv";
  }
  std::printf("rank %d: payload all_reduce %llu reduce_scatter %llu all_gather %llu broadcast %llu B; model %llu B\n", r,
              static_cast<unsigned long long>(payload_of(comm, Collective::AllReduce)),
              static_cast<unsigned long long>(payload_of(comm, Collective::ReduceScatter)),
              static_cast<unsigned long long>(payload_of(comm, Collective::AllGather)),
              static_cast<unsigned long long>(payload_of(comm, Collective::Broadcast)),
              static_cast<unsigned long long>(comm.tally().model_total()));
}

// Block r of the reduce-scatter result equals the sum over ranks of block r.
TEST(MpiCommunicator, ReduceScatterBlockingAndNonBlocking) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int r = comm.rank(), n = comm.size();
  const std::size_t block = 7;  // 7 per rank: the full buffer 7n divides by no other count
  std::vector<float> send(block * n);
  for (std::size_t i = 0; i < send.size(); ++i) send[i] = static_cast<float>(i + 100 * r);
  auto expect = [&](const std::vector<float>& recv) {
    for (std::size_t j = 0; j < block; ++j)
      EXPECT_FLOAT_EQ(recv[j], static_cast<float>(n * (r * block + j)) + 50.0f * n * (n - 1)) << j;
  };
  std::vector<float> recv(block, -1.0f);
  const auto before = payload_of(comm, Collective::ReduceScatter);
  comm.reduce_scatter(std::span<const float>(send), std::span<float>(recv));
  expect(recv);
  EXPECT_EQ(payload_of(comm, Collective::ReduceScatter) - before, n * block * sizeof(float));  // the whole input

  std::vector<float> recv2(block, -1.0f);
  RequestPtr req = comm.ireduce_scatter(send.data(), recv2.data(), block, DType::F32, ReduceOp::Sum);
  req->wait();
  expect(recv2);  // (blocking and non-blocking may use different algorithms: not bitwise)
}

// The reduce-scatter's summation order is fixed (mpi_communicator.cpp,
// PairwiseReduceScatter): own block, then the contributions of rank - 1, rank - 2,
// ... (mod N), each added as `theirs + sum so far`. Values of very different
// magnitudes make any other order give other bits from 3 ranks on.
TEST(MpiCommunicator, ReduceScatterSumsInAFixedOrder) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int r = comm.rank(), n = comm.size();
  const std::size_t block = 7;
  auto value = [](int src, int dst, std::size_t i) {
    const float big[4] = {1.0e8f, 3.25f, -1.0e8f, 0.0078125f};
    return big[src % 4] + 0.37f * static_cast<float>(i + 1) * static_cast<float>(src + 1) +
           0.011f * static_cast<float>(dst);
  };
  std::vector<float> send(n * block);
  for (int q = 0; q < n; ++q)
    for (std::size_t i = 0; i < block; ++i) send[q * block + i] = value(r, q, i);
  std::vector<float> want(block);
  for (std::size_t i = 0; i < block; ++i) {
    float acc = value(r, r, i);
    for (int s = 1; s < n; ++s) acc = value((r - s + n) % n, r, i) + acc;
    want[i] = acc;
  }
  std::vector<float> got(block), got_nb(block);
  comm.reduce_scatter(send.data(), got.data(), block, DType::F32, ReduceOp::Sum);
  RequestPtr req = comm.ireduce_scatter(send.data(), got_nb.data(), block, DType::F32, ReduceOp::Sum);
  while (!req->test()) {
  }
  for (std::size_t i = 0; i < block; ++i) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i]))
        << "blocking, rank " << r << " element " << i << ": " << got[i] << " want " << want[i];
    EXPECT_EQ(std::bit_cast<std::uint32_t>(got_nb[i]), std::bit_cast<std::uint32_t>(want[i]))
        << "non-blocking, rank " << r << " element " << i;
  }
}

TEST(MpiCommunicator, ReduceScatterInPlaceLeavesResultAtOwnBlock) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int r = comm.rank(), n = comm.size();
  const std::size_t block = 6;
  std::vector<double> buf(block * n), ref(block);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = 0.5 * static_cast<double>(i) + r;
  for (std::size_t j = 0; j < block; ++j)
    ref[j] = n * 0.5 * static_cast<double>(r * block + j) + 0.5 * n * (n - 1);
  comm.reduce_scatter(buf.data(), buf.data() + r * block, block, DType::F64, ReduceOp::Sum);
  for (std::size_t j = 0; j < block; ++j) EXPECT_DOUBLE_EQ(buf[r * block + j], ref[j]) << j;
}

// Variable blocks, including empty ones, as ZeRO buckets straddling shards need.
TEST(MpiCommunicator, VariableBlockReduceScatterAndAllGather) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int r = comm.rank(), n = comm.size();
  std::vector<std::size_t> counts(n);
  for (int q = 0; q < n; ++q) counts[q] = (q % 2 == 0) ? 3 + q : 0;  // odd ranks own nothing
  std::size_t total = 0, displ = 0;
  for (int q = 0; q < n; ++q) { if (q < r) displ += counts[q]; total += counts[q]; }
  std::vector<float> send(total);
  for (std::size_t i = 0; i < total; ++i) send[i] = static_cast<float>(i) + 0.25f * r;
  std::vector<float> recv(counts[r] + 1, -7.0f);
  const auto before = payload_of(comm, Collective::ReduceScatter);
  comm.ireduce_scatter_v(send.data(), recv.data(), counts, DType::F32, ReduceOp::Sum)->wait();
  EXPECT_EQ(payload_of(comm, Collective::ReduceScatter) - before, total * sizeof(float));
  for (std::size_t j = 0; j < counts[r]; ++j)
    EXPECT_FLOAT_EQ(recv[j], n * static_cast<float>(displ + j) + 0.125f * n * (n - 1)) << j;
  EXPECT_EQ(recv[counts[r]], -7.0f);  // nothing written past the block

  std::vector<float> mine(counts[r]);
  for (std::size_t j = 0; j < counts[r]; ++j) mine[j] = 100.0f * r + j;
  std::vector<float> all(total, -1.0f), expected;
  for (int q = 0; q < n; ++q)
    for (std::size_t j = 0; j < counts[q]; ++j) expected.push_back(100.0f * q + j);
  comm.iall_gather_v(mine.data(), all.data(), counts, DType::F32)->wait();
  EXPECT_EQ(all, expected);
  std::vector<float> inplace(total, -1.0f);
  std::copy(mine.begin(), mine.end(), inplace.begin() + displ);
  comm.iall_gather_v(inplace.data() + displ, inplace.data(), counts, DType::F32)->wait();
  EXPECT_EQ(inplace, expected);
}

// In place, non-blocking: the result must land in the rank's own block (MPI
// leaves it at the buffer start; the request moves it on completion, whether
// completion is seen by wait() or by test()).
TEST(MpiCommunicator, NonBlockingReduceScatterInPlaceLeavesResultAtOwnBlock) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int r = comm.rank(), n = comm.size();
  // Uneven blocks (rank q owns q + 2 elements) and a fixed-block variant.
  std::vector<std::size_t> counts(n);
  std::size_t total = 0, displ = 0;
  for (int q = 0; q < n; ++q) {
    counts[q] = static_cast<std::size_t>(q) + 2;
    if (q < r) displ += counts[q];
    total += counts[q];
  }
  for (int poll = 0; poll < 2; ++poll) {
    std::vector<float> buf(total);
    for (std::size_t i = 0; i < total; ++i) buf[i] = static_cast<float>(i) + 0.5f * r;
    RequestPtr req = comm.ireduce_scatter_v(buf.data(), buf.data() + displ, counts, DType::F32,
                                            ReduceOp::Sum);
    if (poll) {
      while (!req->test()) {}
    } else {
      req->wait();
    }
    for (std::size_t j = 0; j < counts[r]; ++j)
      EXPECT_FLOAT_EQ(buf[displ + j], n * static_cast<float>(displ + j) + 0.25f * n * (n - 1))
          << "poll " << poll << " element " << j;
  }
  const std::size_t block = 5;
  std::vector<double> buf(block * n);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<double>(i) - r;
  comm.ireduce_scatter(buf.data(), buf.data() + r * block, block, DType::F64, ReduceOp::Sum)->wait();
  for (std::size_t j = 0; j < block; ++j)
    EXPECT_DOUBLE_EQ(buf[r * block + j], n * static_cast<double>(r * block + j) - 0.5 * n * (n - 1))
        << j;
}

// 16-bit types: sums in fp32 rounded once per pairwise combine. With small
// integers every partial sum is exact in both formats, so results are exact;
// one element is chosen so that the fp16 sum overflows to inf (65504 is the
// largest finite fp16) and the bf16 sum does not.
template <class H>
void check_half_reductions(MpiCommunicator& comm) {
  const int r = comm.rank(), n = comm.size();
  const std::size_t count = 7;
  std::vector<H> buf(count);
  for (std::size_t i = 0; i < count; ++i) buf[i] = H(static_cast<float>(i) + r);
  buf[count - 1] = H(40000.0f);
  comm.all_reduce(buf.data(), count, dtype_of<H>(), ReduceOp::Sum);
  for (std::size_t i = 0; i + 1 < count; ++i)
    EXPECT_EQ(static_cast<float>(buf[i]), n * static_cast<float>(i) + 0.5f * n * (n - 1)) << i;
  const float big = static_cast<float>(buf[count - 1]), one = static_cast<float>(H(40000.0f));
  if (n == 1) EXPECT_EQ(big, one);
  else if (std::is_same_v<H, f16>) EXPECT_TRUE(std::isinf(big)) << big;
  else EXPECT_EQ(big, static_cast<float>(H(one * static_cast<float>(n))));  // exact for n <= 4

  std::vector<H> mx(3, H(static_cast<float>(r)));
  comm.all_reduce(mx.data(), mx.size(), dtype_of<H>(), ReduceOp::Max);
  EXPECT_EQ(static_cast<float>(mx[1]), static_cast<float>(n - 1));
  comm.all_reduce(mx.data(), mx.size(), dtype_of<H>(), ReduceOp::Min);
  EXPECT_EQ(static_cast<float>(mx[2]), static_cast<float>(n - 1));  // all equal now

  // Variable-block reduce-scatter in place, then all-gather back.
  std::vector<std::size_t> counts(n);
  std::size_t total = 0, displ = 0;
  for (int q = 0; q < n; ++q) {
    counts[q] = static_cast<std::size_t>(q % 3) + 1;
    if (q < r) displ += counts[q];
    total += counts[q];
  }
  std::vector<H> v(total);
  for (std::size_t i = 0; i < total; ++i) v[i] = H(static_cast<float>(i % 5) - 2.0f);
  comm.ireduce_scatter_v(v.data(), v.data() + displ, counts, dtype_of<H>(), ReduceOp::Sum)->wait();
  for (std::size_t j = 0; j < counts[r]; ++j)
    EXPECT_EQ(static_cast<float>(v[displ + j]), n * (static_cast<float>((displ + j) % 5) - 2.0f)) << j;
  comm.iall_gather_v(v.data() + displ, v.data(), counts, dtype_of<H>())->wait();
  for (std::size_t i = 0; i < total; ++i)
    EXPECT_EQ(static_cast<float>(v[i]), n * (static_cast<float>(i % 5) - 2.0f)) << i;
}

// A long 16-bit sum (the user op's vector loop and its tail: 1003 elements) of
// values that need rounding: at 2 ranks each result is the fp32 sum of the two
// widened operands rounded once, bit for bit; at other counts (the combine order is
// MPI's) within the few roundings of a chain of n - 1 combines.
template <class H>
void check_long_half_sum(MpiCommunicator& comm) {
  const int r = comm.rank(), n = comm.size();
  const std::size_t count = 1003;
  auto value = [](int rank, std::size_t i) {
    return H(0.37f * static_cast<float>(static_cast<int>((i * 7919 + 13 * rank) % 211) - 105) / 7.0f + 0.001f * rank);
  };
  std::vector<H> buf(count);
  for (std::size_t i = 0; i < count; ++i) buf[i] = value(r, i);
  comm.all_reduce(buf.data(), count, dtype_of<H>(), ReduceOp::Sum);
  for (std::size_t i = 0; i < count; ++i) {
    if (n == 2) {
      const H want = H(static_cast<float>(value(0, i)) + static_cast<float>(value(1, i)));
      ASSERT_EQ(buf[i].bits, want.bits) << i;
    } else {
      // Each of the n - 1 combines rounds once, by at most half a unit of its
      // partial sum, and no partial sum exceeds the sum of the magnitudes.
      double exact = 0.0, magnitude = 0.0;
      for (int q = 0; q < n; ++q) {
        exact += static_cast<float>(value(q, i));
        magnitude += std::fabs(static_cast<float>(value(q, i)));
      }
      const double half_unit = std::is_same_v<H, f16> ? 1.0 / 2048 : 1.0 / 256;  // relative
      ASSERT_NEAR(static_cast<float>(buf[i]), exact, (n - 1) * half_unit * magnitude + 1e-30) << i;
    }
  }
}

// Out of place, the first contribution and the rank's own block are summed in one
// pass (sum_into) instead of a copy and MPI_Reduce_local: the result must be the
// in-place path's (MPI_Reduce_local only) bit for bit, for every floating type, on
// values whose sums round (planted: sum_into's 16-bit sum as in + 2 own -> caught
// at 2, 3 and 4 ranks).
template <class T>
void check_out_of_place_sum_bits(MpiCommunicator& comm) {
  const int r = comm.rank(), n = comm.size();
  std::vector<std::size_t> counts(n);
  std::size_t total = 0, displ = 0;
  for (int q = 0; q < n; ++q) {
    counts[q] = 37 + 3 * static_cast<std::size_t>(q);  // uneven blocks
    if (q < r) displ += counts[q];
    total += counts[q];
  }
  std::vector<T> send(total);
  for (std::size_t i = 0; i < total; ++i)
    send[i] = T(std::ldexp(0.3 + 0.7 * static_cast<double>((i * 7919 + 31 * r) % 997) / 997.0,
                           static_cast<int>((i + r) % 9) - 4));
  std::vector<T> out(counts[r]), inplace = send;
  comm.ireduce_scatter_v(send.data(), out.data(), counts, dtype_of<T>(), ReduceOp::Sum)->wait();
  comm.ireduce_scatter_v(inplace.data(), inplace.data() + displ, counts, dtype_of<T>(), ReduceOp::Sum)->wait();
  ASSERT_EQ(std::memcmp(out.data(), inplace.data() + displ, counts[r] * sizeof(T)), 0)
      << sizeof(T) << "-byte " << (std::is_same_v<T, bf16> ? "bf16" : "") << ": out of place differs from in place";
}

TEST(MpiCommunicator, OutOfPlaceReduceScatterIsTheInPlaceBits) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  check_out_of_place_sum_bits<float>(comm);
  check_out_of_place_sum_bits<double>(comm);
  check_out_of_place_sum_bits<f16>(comm);
  check_out_of_place_sum_bits<bf16>(comm);
}

TEST(MpiCommunicator, HalfPrecisionLongSums) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  check_long_half_sum<f16>(comm);
  check_long_half_sum<bf16>(comm);
}

TEST(MpiCommunicator, HalfPrecisionReductionsInFp32) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  check_half_reductions<f16>(comm);
  check_half_reductions<bf16>(comm);
  const auto before = payload_of(comm, Collective::AllReduce);
  std::vector<f16> x(10);
  comm.all_reduce(x.data(), x.size(), DType::F16, ReduceOp::Sum);
  EXPECT_EQ(payload_of(comm, Collective::AllReduce) - before, 10u * 2);  // 16-bit words
}

TEST(MpiCommunicator, AllGatherOutOfPlaceInPlaceAndNonBlocking) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int r = comm.rank(), n = comm.size();
  const std::size_t block = 5;
  std::vector<double> mine(block);
  for (std::size_t j = 0; j < block; ++j) mine[j] = r * 10.0 + j;
  std::vector<double> expected(block * n);
  for (int q = 0; q < n; ++q)
    for (std::size_t j = 0; j < block; ++j) expected[q * block + j] = q * 10.0 + j;

  std::vector<double> out(block * n, -1.0);
  const auto before = payload_of(comm, Collective::AllGather);
  comm.all_gather(std::span<const double>(mine), std::span<double>(out));
  EXPECT_EQ(out, expected);
  EXPECT_EQ(payload_of(comm, Collective::AllGather) - before, block * sizeof(double));  // the own block

  // In place: the rank's own block already sits at its offset (a ZeRO shard).
  std::vector<double> inplace(block * n, -1.0);
  std::copy(mine.begin(), mine.end(), inplace.begin() + r * block);
  comm.all_gather(inplace.data() + r * block, inplace.data(), block, DType::F64);
  EXPECT_EQ(inplace, expected);

  std::vector<double> out2(block * n, -1.0);
  RequestPtr req = comm.iall_gather(mine.data(), out2.data(), block, DType::F64);
  while (!req->test()) {
  }
  EXPECT_EQ(out2, expected);
}

TEST(MpiCommunicator, NonBlockingAllReduceOverlapsAndMatchesBlocking) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  std::vector<float> a(1003), b;
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = 0.001f * static_cast<float>(i * (comm.rank() + 1));
  b = a;
  RequestPtr req = comm.iall_reduce(a.data(), a.size(), DType::F32, ReduceOp::Sum);
  comm.all_reduce(std::span<float>(b));  // another collective while the first is pending
  req->wait();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6f * std::abs(b[i])) << i;
}

}  // namespace
}  // namespace shardtrain
