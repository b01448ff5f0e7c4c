// The measured terms of the predicted process peak: VmRSS before the model and
// the MPI library's scratch in the step's gradient collective.
#include "rundir/process_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/state_vectors.hpp"
#include "parallel/zero_engine.hpp"
#include "io/checkpoint.hpp"

namespace shardtrain {

namespace {

// Every rank's `mine`, in rank order, on every rank.
std::vector<std::int64_t> gather(std::int64_t mine, MpiCommunicator& comm) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(comm.size()), 0);
  all[static_cast<std::size_t>(comm.rank())] = mine;
  comm.all_reduce(std::span<std::int64_t>(all), ReduceOp::Sum);
  return all;
}

std::size_t dtype_bytes(DType t) {
  switch (t) {
    case DType::F16:
    case DType::BF16: return 2;
    case DType::F64:
    case DType::I64: return 8;
    case DType::U8: return 1;
    default: return 4;
  }
}

}  // namespace

void measure_process_before_model(MemoryPlan& plan, MpiCommunicator& comm, const RunConfig& config,
                                  const ParamLayout& layout) {
  // A run that writes checkpoints on a schedule probes where they go; one that
  // does not (it writes one only when stopped by a signal) probes in its run
  // directory, so a checkpoint.dir it never uses on schedule (read-only, say)
  // does not matter to it.
  const bool scheduled = config.checkpoint.every_steps > 0 || config.checkpoint.every_minutes > 0;
  const std::string& io_dir = scheduled ? config.checkpoint.dir : config.train.run_dir;
  if (!io_dir.empty()) {
    namespace fs = std::filesystem;
    // The nearest existing directory on that path (rank 0 decides: one file
    // for the whole job), and whether a file can be created there.
    std::string dir, error;
    if (comm.rank() == 0) {
      std::error_code ec;
      fs::path p = fs::absolute(io_dir, ec);
      while (!p.empty() && !fs::is_directory(p, ec) && p != p.parent_path()) p = p.parent_path();
      dir = p.string();
      const std::string probe = (p / fmt::format(".shardtrain-write-test-{}", ::getpid())).string();
      const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd >= 0) {
        ::close(fd);
        ::unlink(probe.c_str());
      } else {
        error = fmt::format("{}: {}: cannot write to '{}': {}", config.source_name,
                            scheduled ? "checkpoint.dir" : "train.run_dir", dir, std::strerror(errno));
      }
    }
    // Rank 0's strings in buffers of one fixed size, so that every job of a
    // configuration hands MPI the same bytes here whatever its run directory is
    // called (the wire-accounting tests compare two jobs in two directories).
    constexpr std::size_t kBytes = 4096;
    if (comm.rank() == 0 && dir.size() >= kBytes && error.empty())
      error = fmt::format("{}: the path '{}' is longer than {} bytes", config.source_name, dir, kBytes - 1);
    auto share = [&comm](std::string& s) {
      if (s.size() >= kBytes) s.resize(kBytes - 1);
      std::string buf(kBytes, '\0');
      std::copy(s.begin(), s.end(), buf.begin());
      comm.broadcast(buf.data(), buf.size(), DType::U8, 0);
      s.assign(buf.c_str());
    };
    share(dir);
    share(error);
    if (!error.empty()) throw InputError(error);
    // HDF5 and MPI-IO take transient memory while a file is written (metadata
    // caches, collective buffers) and give it back at close: VmHWM's rise
    // above VmRSS in the probe is this rank's checkpoint I/O scratch.
    // What a checkpoint of this run holds (session/checkpoint_session.cpp save), with one
    // element per tensor.
    CheckpointMeta like;
    like.zero_stage = config.parallel.zero_stage;
    like.precision = name_of(config.precision.mode);
    // Strings of a fixed size, so that the probe moves the same bytes in every
    // job of a configuration (the wire-accounting tests compare two jobs that
    // differ in their run directory); the config text is about 2 KiB.
    like.data_path = "probe";
    like.config_text = std::string(4096, '#');
    like.created_utc = "1970-01-01T00:00:00Z";
    like.version = "probe";
    // A run that writes checkpoints on a schedule gets the model's structure
    // (HDF5's cost grows with the tensors: about 8 MiB for 290 of them); one
    // that does not (it writes one only when stopped by a signal) a single
    // tensor, so its prediction is not raised by a write it will not make.
    std::vector<std::string> names;
    if (scheduled)
      for (const auto& e : layout.entries()) names.push_back(e.name);
    else
      names.push_back("probe");
    std::vector<std::pair<std::string, DType>> vectors;
    for (const SavedVector* v : saved_vectors(precision_dtype(config.precision.mode)))
      vectors.emplace_back(v->name, v->type);
    const std::int64_t rss = process_rss_bytes();
    warm_checkpoint_io(dir, comm.comm(), like, names, vectors);
    const std::int64_t peak = process_peak_rss_bytes();
    plan.process.io_scratch = gather(rss >= 0 && peak >= 0 ? std::max<std::int64_t>(0, peak - rss) : 0, comm);
  } else {
    plan.process.io_scratch.clear();
  }
  // oneDNN's code and OpenMP pool, and the 16-bit GELU tables, are part of the
  // fixed term, not of the model (the first GEMM or GELU would load them).
  warm_up_host_compute(precision_dtype(config.precision.mode));
  plan.process.before_model = gather(process_rss_bytes(), comm);
  plan.process.collective_scratch.clear();
}

void measure_collective_scratch(MemoryPlan& plan, const RunConfig& config, const ParamLayout& layout, DType type,
                                MpiCommunicator& comm) {
  const int stage = config.parallel.zero_stage, n = comm.size();
  const std::size_t f = dtype_bytes(type);
  // The collective's elements: the whole padded gradient vector (stages 0, 1)
  // or the largest bucket (stages 2, 3: ZeroEngine's spans, zero_plan_buckets),
  // `in_flight` of them at once (stages 2, 3: as many as the planned
  // communication buffers hold, since overlapped buckets reduce concurrently).
  std::int64_t elems = layout.padded_size(), in_flight = 1;
  if (stage >= 2) {
    elems = 0;
    for (const auto& [first, last] : zero_plan_buckets(layout, config.parallel.bucket_mb, f))
      elems = std::max(elems, layout.group_range(last).second - layout.group_range(first).first);
    const std::int64_t buffers = plan.of(MemCategory::Communication) / static_cast<std::int64_t>(f) / (stage == 3 ? 2 : 1);
    if (elems > 0) in_flight = std::max<std::int64_t>(1, (buffers + elems / 2) / elems);
  }
  std::int64_t scratch = 0;
  if (n > 1 && elems > 0) {
    // mmap'd (not malloc'd, so glibc's mmap threshold stays as a run would
    // find it) and written, so VmRSS holds the buffers before the collective.
    const std::size_t bytes = static_cast<std::size_t>(elems) * f * static_cast<std::size_t>(in_flight);
    void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    SHARDTRAIN_CHECK(mapped != MAP_FAILED, "cannot map the collective probe's buffer");
    std::memset(mapped, 0, bytes);
    const std::int64_t with_buffer = process_rss_bytes();
    std::vector<std::size_t> counts(static_cast<std::size_t>(n), static_cast<std::size_t>(elems / n));
    counts.back() += static_cast<std::size_t>(elems % n);
    std::size_t own = 0;
    for (int r = 0; r < comm.rank(); ++r) own += counts[static_cast<std::size_t>(r)];
    auto buffer = [&](std::int64_t i) { return static_cast<char*>(mapped) + static_cast<std::size_t>(i * elems) * f; };
    if (stage == 0) {
      comm.all_reduce(buffer(0), static_cast<std::size_t>(elems), type, ReduceOp::Sum);
    } else if (stage == 1) {
      const std::size_t block = static_cast<std::size_t>(elems / n);  // padded: a multiple of n
      comm.reduce_scatter(buffer(0), buffer(0) + comm.rank() * block * f, block, type, ReduceOp::Sum);
    } else {
      std::vector<RequestPtr> pending;
      for (std::int64_t i = 0; i < in_flight; ++i)
        pending.push_back(comm.ireduce_scatter_v(buffer(i), buffer(i) + own * f, counts, type, ReduceOp::Sum));
      for (auto& r : pending) r->wait();
      pending.clear();
      if (stage == 3) {
        for (std::int64_t i = 0; i < in_flight; ++i)
          pending.push_back(comm.iall_gather_v(buffer(i) + own * f, buffer(i), counts, type));
        for (auto& r : pending) r->wait();
      }
    }
    const std::int64_t peak = process_peak_rss_bytes();
    munmap(mapped, bytes);
    if (with_buffer >= 0 && peak >= 0) scratch = std::max<std::int64_t>(0, peak - with_buffer);
  }
  plan.process.collective_scratch = gather(scratch, comm);
}

}  // namespace shardtrain
