// StagingCommunicator: the host MpiCommunicator's collectives on staging copies
// of the caller's buffers (see the header for where each rank's piece sits and
// when a request completes). The copies themselves are the Stager's.
#include "parallel/mpi/staging_communicator.hpp"

#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace shardtrain {

struct StagingCommunicator::Shared {
  explicit Shared(std::unique_ptr<Stager> s) : stager(std::move(s)) {}
  ~Shared() {
    for (const Free& f : free) stager->free_host(f.data);
  }
  std::unique_ptr<Stager> stager;
  struct Free {
    void* data;
    std::size_t bytes;
  };
  std::vector<Free> free;  // staging buffers not in use, reused smallest-fit first
};

namespace {

using Shared = StagingCommunicator::Shared;

// One staging buffer, back to the pool when destroyed.
class Staging {
 public:
  Staging(std::shared_ptr<Shared> shared, std::size_t bytes) : m_shared(std::move(shared)) {
    auto& free = m_shared->free;
    std::size_t best = free.size();
    for (std::size_t i = 0; i < free.size(); ++i)
      if (free[i].bytes >= bytes && (best == free.size() || free[i].bytes < free[best].bytes)) best = i;
    if (best < free.size()) {
      m_data = free[best].data;
      m_bytes = free[best].bytes;
      free.erase(free.begin() + static_cast<std::ptrdiff_t>(best));
    } else {
      m_bytes = bytes > 0 ? bytes : 1;
      m_data = m_shared->stager->allocate_host(m_bytes);
    }
  }
  ~Staging() {
    if (m_data == nullptr) return;
    try {
      m_shared->free.push_back({m_data, m_bytes});
    } catch (...) {  // no memory for the list: freed instead
      m_shared->stager->free_host(m_data);
    }
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  char* data() const { return static_cast<char*>(m_data); }

 private:
  std::shared_ptr<Shared> m_shared;
  void* m_data = nullptr;
  std::size_t m_bytes = 0;
};

// A host collective on staging memory, then the copy of `bytes` from `from` (in
// the staging buffer) to the caller's `to`. Completes when both are done.
class StagedRequest final : public Request {
 public:
  StagedRequest(std::shared_ptr<Shared> shared, std::unique_ptr<Staging> staging, RequestPtr host,
                void* to, const char* from, std::size_t bytes)
      : m_staging(std::move(staging)), m_shared(std::move(shared)), m_host(std::move(host)), m_to(to),
        m_from(from), m_bytes(bytes) {}
  ~StagedRequest() override {
    if (m_done) return;
    try {
      wait();
    } catch (...) {  // never throws: the host request's destructor completes MPI;
      try {          // a queued copy back is waited for before the staging memory is reused
        if (m_back) m_back->wait();
      } catch (...) {
      }
    }
  }
  void wait() override {
    if (m_done) return;
    if (!m_back) {
      m_host->wait();
      copy_back();
    }
    m_back->wait();
    m_done = true;
  }
  bool test() override {
    if (m_done) return true;
    if (!m_back) {
      if (!m_host->test()) return false;
      copy_back();
    }
    if (!m_back->ready()) return false;
    m_done = true;
    return true;
  }

 private:
  void copy_back() {
    if (m_bytes > 0 && m_to != m_from) m_shared->stager->to_buffer(m_to, m_from, m_bytes);
    m_back = m_shared->stager->fence();
  }
  // Declared first, destroyed last: after the host request and the copy are done.
  std::unique_ptr<Staging> m_staging;
  std::shared_ptr<Shared> m_shared;
  RequestPtr m_host;
  void* m_to;
  const char* m_from;
  std::size_t m_bytes;
  StagerFencePtr m_back;
  bool m_done = false;
};

// displ(r) = counts[0] + ... + counts[r-1], and the total, as displ(size).
std::vector<std::size_t> displacements(std::span<const std::size_t> counts) {
  std::vector<std::size_t> displ(counts.size() + 1, 0);
  for (std::size_t q = 0; q < counts.size(); ++q) displ[q + 1] = displ[q] + counts[q];
  return displ;
}

}  // namespace

StagingCommunicator::StagingCommunicator(MPI_Comm comm, std::unique_ptr<Stager> stager)
    : m_shared(std::make_shared<Shared>(std::move(stager))), m_host(comm) {
  SHARDTRAIN_CHECK(m_shared->stager != nullptr, "StagingCommunicator needs a stager");
}

StagingCommunicator::~StagingCommunicator() = default;

Stager& StagingCommunicator::stager() { return *m_shared->stager; }

template <class Call>
auto StagingCommunicator::on_host(Call&& call) {
  const CommTally before = m_host.tally();
  if constexpr (std::is_void_v<decltype(call())>) {
    call();
    count_tally(m_host.tally() - before);
  } else {
    auto result = call();
    count_tally(m_host.tally() - before);
    return result;
  }
}

void StagingCommunicator::all_reduce(void* buffer, std::size_t count, DType type, ReduceOp op) {
  const std::size_t bytes = count * dtype_size(type);
  Staging s(m_shared, bytes);
  stager().to_host(s.data(), buffer, bytes);
  stager().fence()->wait();
  on_host([&] { m_host.all_reduce(s.data(), count, type, op); });
  stager().to_buffer(buffer, s.data(), bytes);
  stager().fence()->wait();
}

void StagingCommunicator::broadcast(void* buffer, std::size_t count, DType type, int root) {
  const std::size_t bytes = count * dtype_size(type);
  if (stager().passes_buffers()) {
    stager().fence()->wait();
    on_host([&] { m_host.broadcast(buffer, count, type, root); });
    return;
  }
  Staging s(m_shared, bytes);
  if (rank() == root) {
    stager().to_host(s.data(), buffer, bytes);
    stager().fence()->wait();
  }
  on_host([&] { m_host.broadcast(s.data(), count, type, root); });
  if (rank() != root) {
    stager().to_buffer(buffer, s.data(), bytes);
    stager().fence()->wait();
  }
}

void StagingCommunicator::barrier() {
  stager().fence()->wait();
  on_host([&] { m_host.barrier(); });
}

void StagingCommunicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                                         ReduceOp op) {
  const std::size_t block = recv_count * dtype_size(type);
  const std::size_t own = static_cast<std::size_t>(rank()) * block;
  Staging s(m_shared, static_cast<std::size_t>(size()) * block);
  stager().to_host(s.data(), send, static_cast<std::size_t>(size()) * block);
  stager().fence()->wait();
  on_host([&] { m_host.reduce_scatter(s.data(), s.data() + own, recv_count, type, op); });
  stager().to_buffer(recv, s.data() + own, block);
  stager().fence()->wait();
}

void StagingCommunicator::all_gather(const void* send, void* recv, std::size_t send_count, DType type) {
  const std::size_t block = send_count * dtype_size(type);
  if (stager().passes_buffers()) {
    stager().fence()->wait();
    on_host([&] { m_host.all_gather(send, recv, send_count, type); });
    return;
  }
  const std::size_t own = static_cast<std::size_t>(rank()) * block;
  Staging s(m_shared, static_cast<std::size_t>(size()) * block);
  stager().to_host(s.data() + own, send, block);
  stager().fence()->wait();
  on_host([&] { m_host.all_gather(s.data() + own, s.data(), send_count, type); });
  stager().to_buffer(recv, s.data(), static_cast<std::size_t>(size()) * block);
  stager().fence()->wait();
}

RequestPtr StagingCommunicator::iall_reduce(void* buffer, std::size_t count, DType type, ReduceOp op) {
  const std::size_t bytes = count * dtype_size(type);
  auto s = std::make_unique<Staging>(m_shared, bytes);
  stager().to_host(s->data(), buffer, bytes);
  stager().fence()->wait();
  RequestPtr host = on_host([&] { return m_host.iall_reduce(s->data(), count, type, op); });
  char* from = s->data();
  return std::make_unique<StagedRequest>(m_shared, std::move(s), std::move(host), buffer, from, bytes);
}

RequestPtr StagingCommunicator::ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                                                ReduceOp op) {
  const std::vector<std::size_t> counts(static_cast<std::size_t>(size()), recv_count);
  return staged_reduce_scatter(send, recv, counts, type, op, /*fixed=*/true);
}

RequestPtr StagingCommunicator::ireduce_scatter_v(const void* send, void* recv, std::span<const std::size_t> counts,
                                                  DType type, ReduceOp op) {
  SHARDTRAIN_CHECK(counts.size() == static_cast<std::size_t>(size()), "one count per rank");
  return staged_reduce_scatter(send, recv, counts, type, op, /*fixed=*/false);
}

RequestPtr StagingCommunicator::iall_gather(const void* send, void* recv, std::size_t send_count, DType type) {
  const std::vector<std::size_t> counts(static_cast<std::size_t>(size()), send_count);
  return staged_all_gather(send, recv, counts, type, /*fixed=*/true);
}

RequestPtr StagingCommunicator::iall_gather_v(const void* send, void* recv, std::span<const std::size_t> counts,
                                              DType type) {
  SHARDTRAIN_CHECK(counts.size() == static_cast<std::size_t>(size()), "one count per rank");
  return staged_all_gather(send, recv, counts, type, /*fixed=*/false);
}

// The whole input staged; the host reduce-scatter in place in it, so this rank's
// result is at displ(rank); copied back from there.
RequestPtr StagingCommunicator::staged_reduce_scatter(const void* send, void* recv,
                                                      std::span<const std::size_t> counts, DType type, ReduceOp op,
                                                      bool fixed) {
  const std::size_t esize = dtype_size(type);
  const std::vector<std::size_t> displ = displacements(counts);
  const std::size_t me = static_cast<std::size_t>(rank());
  auto s = std::make_unique<Staging>(m_shared, displ.back() * esize);
  stager().to_host(s->data(), send, displ.back() * esize);
  stager().fence()->wait();
  char* own = s->data() + displ[me] * esize;
  RequestPtr host = on_host([&] {
    return fixed ? m_host.ireduce_scatter(s->data(), own, counts[me], type, op)
                 : m_host.ireduce_scatter_v(s->data(), own, counts, type, op);
  });
  return std::make_unique<StagedRequest>(m_shared, std::move(s), std::move(host), recv, own, counts[me] * esize);
}

// This rank's block staged at displ(rank); the host all-gather in place; the
// whole staging buffer copied back. Passed through where MPI takes the buffers.
RequestPtr StagingCommunicator::staged_all_gather(const void* send, void* recv, std::span<const std::size_t> counts,
                                                  DType type, bool fixed) {
  const std::size_t esize = dtype_size(type);
  const std::size_t me = static_cast<std::size_t>(rank());
  if (stager().passes_buffers()) {
    stager().fence()->wait();
    return on_host([&] {
      return fixed ? m_host.iall_gather(send, recv, counts[me], type) : m_host.iall_gather_v(send, recv, counts, type);
    });
  }
  const std::vector<std::size_t> displ = displacements(counts);
  auto s = std::make_unique<Staging>(m_shared, displ.back() * esize);
  char* own = s->data() + displ[me] * esize;
  stager().to_host(own, send, counts[me] * esize);
  stager().fence()->wait();
  RequestPtr host = on_host([&] {
    return fixed ? m_host.iall_gather(own, s->data(), counts[me], type)
                 : m_host.iall_gather_v(own, s->data(), counts, type);
  });
  char* from = s->data();
  return std::make_unique<StagedRequest>(m_shared, std::move(s), std::move(host), recv, from,
                                         displ.back() * esize);
}

}  // namespace shardtrain
