// The end-of-job reports: memory, --profile and communication (see run_reports.hpp),
// appended to the report text that rank 0 writes to RUN_DIR/report.txt.
#include "rundir/run_reports.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "parallel/mpi/agreement.hpp"

namespace shardtrain {

std::string report_memory(Communicator& comm, const MemoryTracker& memory, const MemoryPlan& run_plan,
                          std::int64_t activation_high_water, RunDirectory* dir, std::string& out) {
  constexpr int kCats = MemoryTracker::kCategories;
  const int n = comm.size();
  std::vector<std::int64_t> peaks(static_cast<std::size_t>(n) * (kCats + 1), 0);
  for (int c = 0; c < kCats; ++c)
    peaks[comm.rank() * (kCats + 1) + c] = static_cast<std::int64_t>(memory.peak(static_cast<MemCategory>(c)));
  peaks[comm.rank() * (kCats + 1) + kCats] = static_cast<std::int64_t>(memory.peak_total());
  comm.all_reduce(std::span<std::int64_t>(peaks), ReduceOp::Sum);
  std::vector<std::int64_t> rss(static_cast<std::size_t>(n), 0);
  rss[comm.rank()] = process_peak_rss_bytes();
  comm.all_reduce(std::span<std::int64_t>(rss), ReduceOp::Sum);
  // Activations as the model measured using them (the recompute stack's
  // high-water, max over steps and micro-batches), beside the tracked
  // allocation, which is the arena the plan sized; the plan's value last.
  std::vector<std::int64_t> used(static_cast<std::size_t>(n) + 1, 0);
  used[comm.rank()] = activation_high_water;
  comm.all_reduce(std::span<std::int64_t>(used), ReduceOp::Sum);
  if (comm.rank() != 0) return {};
  constexpr int kActs = static_cast<int>(MemCategory::Activations);
  used[n] = run_plan.bytes[kActs];
  std::vector<std::int64_t> plan(run_plan.bytes.begin(), run_plan.bytes.end());
  plan.push_back(run_plan.total());
  dir->write_memory(peaks, plan, used);
  auto row = [&out](const std::string& who, const std::int64_t* p, std::int64_t measured) {
    auto mib = [](std::int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
    out += fmt::format("  {:>4} {:>10.3f} {:>10.3f} {:>10.3f} {:>11.3f} {:>10.3f} {:>10.3f} {:>8.3f} {:>8.3f} {:>10.3f}\n",
               who, mib(p[0]), mib(p[1]), mib(p[2]), mib(p[3]), mib(measured), mib(p[4]), mib(p[5]), mib(p[6]),
               mib(p[kCats]));
  };
  out += fmt::format("peak memory per rank (MiB, tracked allocator; activations also as measured: the model's "
             "high-water in its arena; also {}/memory.csv and, for the process, process_memory.csv):\n",
             dir->path());
  out += fmt::format("  {:>4} {:>10} {:>10} {:>10} {:>11} {:>10} {:>10} {:>8} {:>8} {:>10}\n", "rank", "params",
             "grads", "optimizer", "activations", "(measured)", "workspace", "comm", "data", "total");
  for (int r = 0; r < n; ++r) row(std::to_string(r), &peaks[r * (kCats + 1)], used[r]);
  row("plan", plan.data(), used[n]);
  std::string differ;
  for (int r = 0; r < n; ++r)
    if (used[r] != used[n]) differ += fmt::format(" rank {} {} bytes;", r, used[r]);
  if (differ.empty())
    out += fmt::format("activations measured: the high-water equals the plan ({} bytes) on every rank\n", used[n]);
  else
    out += fmt::format("activations measured: the high-water differs from the plan ({} bytes):{}\n", used[n],
               differ.substr(0, differ.size() - 1));
  // The process: VmHWM per rank against the predicted process peak (the
  // measured terms of run_plan.process plus the tracked plan; the same on every
  // rank); also process_memory.csv (bytes).
  auto mib = [](std::int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  auto per_rank = [n](const std::function<std::string(int)>& cell) {
    std::string t;
    for (int r = 0; r < n; ++r) {
      t += ' ';
      t += cell(r);
    }
    return t;
  };
  const ProcessMemory& pm = run_plan.process;
  auto of_rank = [](const std::vector<std::int64_t>& v, int r) {
    return r < static_cast<int>(v.size()) ? v[static_cast<std::size_t>(r)] : std::int64_t{0};
  };
  // Per rank: its own measured terms plus the tracked plan; the limit uses
  // their maximum over ranks (run_plan.process_peak()).
  auto predicted = [&](int r) {
    return of_rank(pm.before_model, r) + run_plan.total() + pm.scratch_of(r);
  };
  out += fmt::format("process RSS before the model per rank (MiB):{}\n",
             per_rank([&](int r) { return fmt::format("{:.1f}", mib(of_rank(pm.before_model, r))); }));
  out += fmt::format("MPI collective scratch per rank (MiB, probed before the model):{}\n",
             pm.collective_scratch.empty()
                 ? std::string(" not probed (device collectives)")
                 : per_rank([&](int r) { return fmt::format("{:.1f}", mib(of_rank(pm.collective_scratch, r))); }));
  out += fmt::format("checkpoint I/O scratch per rank (MiB, probed before the model):{}\n",
             pm.io_scratch.empty()
                 ? std::string(" not probed")
                 : per_rank([&](int r) { return fmt::format("{:.1f}", mib(of_rank(pm.io_scratch, r))); }));
  out += fmt::format("predicted process peak per rank (MiB, RSS before the model + {:.1f} tracked plan + the larger scratch; "
             "train.memory_limit_mb is checked against their maximum, {:.1f}):{}\n",
             mib(run_plan.total()), mib(run_plan.process_peak()),
             per_rank([&](int r) { return fmt::format("{:.1f}", mib(predicted(r))); }));
  out += fmt::format("process peak RSS per rank (MiB, VmHWM: the above plus code, libraries, MPI and untracked heap):{}\n",
             per_rank([&](int r) { return rss[r] < 0 ? std::string("n/a") : fmt::format("{:.1f}", mib(rss[r])); }));
  out += fmt::format("VmHWM / predicted process peak per rank:{}\n", per_rank([&](int r) {
               return rss[r] < 0 || predicted(r) <= 0
                          ? std::string("n/a")
                          : fmt::format("{:.3f}", static_cast<double>(rss[r]) / static_cast<double>(predicted(r)));
             }));
  std::string csv =
      "rank,rss_before_model,collective_scratch,tracked_plan,predicted_process_peak,vmhwm,io_scratch\n";
  for (int r = 0; r < n; ++r)
    csv += fmt::format("{},{},{},{},{},{},{}\n", r, of_rank(pm.before_model, r), of_rank(pm.collective_scratch, r),
                       run_plan.total(), predicted(r), rss[r], of_rank(pm.io_scratch, r));
  dir->write_file("process_memory.csv", csv);
  // The one line of the short summary: the largest rank's figures.
  std::int64_t tracked = 0, hwm = -1, pred = 0;
  for (int r = 0; r < n; ++r) {
    tracked = std::max(tracked, peaks[r * (kCats + 1) + kCats]);
    hwm = std::max(hwm, rss[r]);
    pred = std::max(pred, predicted(r));
  }
  std::string line = fmt::format("peak {:.1f} MiB tracked per rank (plan {:.1f} MiB)", mib(tracked),
                                 mib(run_plan.total()));
  if (hwm >= 0 && pred > 0)
    line += fmt::format("; process peak RSS {:.1f} MiB per rank (predicted {:.1f} MiB, {:.3f}x)", mib(hwm), mib(pred),
                        static_cast<double>(hwm) / static_cast<double>(pred));
  return line;
}

void report_profile(MpiCommunicator& comm, const Profiler& profiler, const FlopFloor& floor, RunDirectory* dir,
                    std::string& report) {
  // Per op: seconds summed over ranks (for the mean) and the largest rank's.
  const Profiler::Totals& t = profiler.totals();
  constexpr int kOps = Profiler::kOps;
  std::vector<double> mine(t.seconds.begin(), t.seconds.end());
  mine.push_back(t.step_seconds);
  std::vector<double> sum(mine.size()), max(mine.size());
  reduce_to_root(comm.comm(), mine, sum, ReduceOp::Sum);
  reduce_to_root(comm.comm(), mine, max, ReduceOp::Max);
  if (comm.rank() != 0) return;
  const double ranks = comm.size(), steps = static_cast<double>(t.steps);
  std::string out;
  if (t.steps == 0) {
    out = "profile: no step to report (the job's first step is warm-up and is not timed)\n";
  } else {
    const double step_ms = 1e3 * sum[kOps] / ranks / steps;
    out += fmt::format("profile of {} training steps (--profile; the job's first step and evaluations excluded), "
                       "{} rank(s):\n", t.steps, comm.size());
    out += fmt::format("  step time {:.3f} ms (mean over ranks)", step_ms);
    if (floor.ms_per_step > 0) out += fmt::format(" = {:.3f}x the FLOP floor", step_ms / floor.ms_per_step);
    out += "\n  " + format_flop_floor(floor);
    out += fmt::format("  {:<16} {:<14} {:>10} {:>12} {:>14} {:>7}\n", "op", "class", "calls/step", "ms/step",
                       "max rank ms", "share");
    std::array<double, static_cast<int>(ProfileClass::Count)> by_class{};
    double timed = 0.0;
    for (int i = 0; i < kOps; ++i) {
      if (t.calls[i] == 0 && sum[i] == 0.0) continue;
      const auto op = static_cast<ProfileOp>(i);
      const double ms = 1e3 * sum[i] / ranks / steps;
      by_class[static_cast<int>(profile_op_class(op))] += ms;
      timed += ms;
      out += fmt::format("  {:<16} {:<14} {:>10.1f} {:>12.2f} {:>14.2f} {:>6.1f}%\n", profile_op_name(op),
                         profile_class_name(profile_op_class(op)), static_cast<double>(t.calls[i]) / steps, ms,
                         1e3 * max[i] / steps, 100.0 * ms / step_ms);
    }
    out += fmt::format("  {:<16} {:<14} {:>10} {:>12.2f} {:>14} {:>6.1f}%\n", "(untimed)", "other", "",
                       step_ms - timed, "", 100.0 * (step_ms - timed) / step_ms);
    out += "  by class:";
    for (int c = 0; c < static_cast<int>(ProfileClass::Count); ++c)
      out += fmt::format(" {} {:.1f}% |", profile_class_name(static_cast<ProfileClass>(c)),
                         100.0 * by_class[c] / step_ms);
    out += fmt::format(" other {:.1f}%\n", 100.0 * (step_ms - timed) / step_ms);
  }
  fmt::print("{}", out);  // asked for with --profile: printed, and in the report
  report += out;
  if (dir) {
    dir->write_file("profile.txt", out);
    fmt::print("  (also {}/profile.txt)\n", dir->path());
  }
  std::fflush(stdout);
}

namespace {

// "123" when v divides by steps, else "123.45": a mean per step.
std::string per_step(double v, std::int64_t steps) {
  const double m = v / static_cast<double>(steps);
  return m == std::floor(m) ? fmt::format("{:.0f}", m) : fmt::format("{:.2f}", m);
}

// What the ring figure is for each kind's payload p at N ranks: all-reduce
// 2 (N-1)/N p, reduce-scatter (N-1)/N p (p: the whole input), all-gather (N-1) p
// (p: the own block), broadcast p at the root; 0 at one rank.
double ring_bytes(Collective kind, double payload, double n) {
  if (n <= 1) return 0.0;
  switch (kind) {
    case Collective::AllReduce: return 2.0 * (n - 1) / n * payload;
    case Collective::ReduceScatter: return (n - 1) / n * payload;
    case Collective::AllGather: return (n - 1) * payload;
    case Collective::Broadcast: return payload;
    case Collective::Barrier: return 0.0;
  }
  return 0.0;
}

}  // namespace

// Per rank and per step of this job: the payload per kind of collective, the
// ring figure for that payload, the model's wire bytes (the bytes the rank
// sends under the algorithm Open MPI picks: MpiCommunicator, parallel/mpi/wire_model.hpp)
// with the algorithm named where they differ from the ring figure, and ZeRO's
// theory k Psi (N-1)/N elements, Psi the padded parameter count: k = 2 for
// stages 0-1 (all-reduce; or reduce-scatter + all-gather), M + 1 for stage 2
// (a reduce-scatter per micro-batch, M micro-batches, + the all-gather) and
// 3 M for stage 3 (parameters gathered for forward and backward, gradients
// reduce-scattered, per micro-batch; groups kept from forward to backward are
// not gathered again, so stage 3 moves less than its theory). Then every
// rank's whole tally since the communicators were created (every collective
// they ran, checks and evaluation included): what Open MPI's pml monitoring
// dump measures for the job, less the raw MPI calls outside the communicator
// (start-up, these reports), which the same job with more steps cancels.
void report_communication(MpiCommunicator& comm, const CommTally& job, const CommTally& all_time, std::int64_t steps,
                          const CommReportLayout& run, std::string& report) {
  constexpr int kFields = 5 * kCollectives + 3;
  std::vector<std::uint64_t> mine;
  for (const auto* a : {&job.calls, &job.async, &job.payload, &job.model, &job.unmodelled})
    mine.insert(mine.end(), a->begin(), a->end());
  mine.push_back(all_time.payload_total());
  mine.push_back(all_time.model_total());
  mine.push_back(all_time.unmodelled_total());
  const int n = comm.size();
  std::vector<std::uint64_t> all(comm.rank() == 0 ? static_cast<std::size_t>(n) * kFields : 0);
  gather_to_root(comm.comm(), mine, all);
  if (comm.rank() != 0) return;
  const int stage = run.zero_stage;
  const std::int64_t m = run.micro_batches;
  const std::int64_t k = stage <= 1 ? 2 : stage == 2 ? m + 1 : 3 * m;
  const double psi = static_cast<double>(run.layout.padded_size());
  const double theory = static_cast<double>(k) * psi * (n - 1) / n * run.element_bytes;
  const bool modelled = comm.wire_modelled();
  // The layout the payload follows (for checks that recompute it): group g
  // spans [first, end) of the flat vector.
  std::string groups;
  for (int g = 0; g < run.layout.num_groups(); ++g) {
    const auto [lo, hi] = run.layout.group_range(g);
    groups += fmt::format(" {}:{}-{}", g, lo, hi);
  }
  std::string out = fmt::format(
      "communication layout: {} ranks, stage {}, {} bytes per element, bucket_mb {}, {} micro-batch(es) per step, "
      "padded {}, groups{}\n",
      n, stage, run.element_bytes, run.bucket_mb, m, run.layout.padded_size(), groups);
  out += fmt::format(
      "communication per step per rank ({} steps, {} micro-batch(es) each; payload: bytes handed to MPI; ring: what "
      "ring algorithms send for that payload; model: bytes the rank sends under the algorithm MPI picks; ZeRO "
      "theory {}*Psi*(N-1)/N, Psi = {} padded):\n",
      steps, m, k, run.layout.padded_size());
  std::array<bool, kCollectives> differs{};
  for (int r = 0; r < n; ++r) {
    const std::uint64_t* v = all.data() + static_cast<std::size_t>(r) * kFields;
    const auto calls = [&](int c) { return v[c]; };
    const auto payload = [&](int c) { return v[2 * kCollectives + c]; };
    const auto model = [&](int c) { return v[3 * kCollectives + c]; };
    const auto unpriced = [&](int c) { return v[4 * kCollectives + c]; };
    std::string kinds, models;
    double payload_sum = 0, ring_sum = 0, model_sum = 0;
    std::uint64_t unpriced_sum = 0;
    for (int c = 0; c < kCollectives; ++c) {
      if (calls(c) == 0) continue;
      const auto kind = static_cast<Collective>(c);
      const double ring = ring_bytes(kind, static_cast<double>(payload(c)), n);
      payload_sum += static_cast<double>(payload(c));
      ring_sum += ring;
      model_sum += static_cast<double>(model(c));
      unpriced_sum += unpriced(c);
      kinds += fmt::format("{}{} {}x {} B", kinds.empty() ? "" : ", ", collective_name(kind),
                           per_step(static_cast<double>(calls(c)), steps), per_step(static_cast<double>(payload(c)), steps));
      models += fmt::format("{}{} {} B", models.empty() ? "" : ", ", collective_name(kind),
                            per_step(static_cast<double>(model(c)), steps));
      if (modelled && static_cast<double>(model(c)) != ring) differs[c] = true;
    }
    out += fmt::format("  rank {}: payload {} B/step [{}] | ring {} B/step", r, per_step(payload_sum, steps), kinds,
                       per_step(ring_sum, steps));
    if (modelled) {
      out += fmt::format(" | model {} B/step [{}]", per_step(model_sum, steps), models);
      if (unpriced_sum > 0) out += fmt::format(" ({} calls not modelled)", unpriced_sum);
    }
    out += fmt::format(" | ZeRO theory {} B/step\n", per_step(theory * static_cast<double>(steps), steps));
  }
  for (int c = 0; c < kCollectives; ++c)
    if (differs[c])
      out += fmt::format("  model != ring for {}: {}\n", collective_name(static_cast<Collective>(c)),
                         comm.wire_algorithms(static_cast<Collective>(c)));
  out += fmt::format("communication since start per rank (every collective of the communicator{}):\n",
                     run.device_comm ? "s" : "");
  for (int r = 0; r < n; ++r) {
    const std::uint64_t* v = all.data() + static_cast<std::size_t>(r) * kFields + 5 * kCollectives;
    out += fmt::format("  rank {}: total payload {} B | total model {} B | not modelled {} calls\n", r, v[0], v[1], v[2]);
  }
  out += fmt::format("  {}{}\n", comm.wire_model_status(),
                     run.device_comm ? "; the NCCL traffic of the model state is not modelled" : "");
  report += out;
}

}  // namespace shardtrain
