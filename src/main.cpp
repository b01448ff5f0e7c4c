// trainer: the SPMD entry point. Thin on purpose:
//   MPI init -> Kokkos init -> command line -> config (rank 0 reads, all parse)
//   -> Trainer (set-up agreed on by all ranks) -> run -> finalize.
// Exit codes (session/lifecycle.hpp): 0 done, 2 bad input (command line, config,
// data), 1 any other failure, 75 stopped early by a signal or the wall-time
// guard after a complete checkpoint (requeue the job to continue).
// Stop signals (SIGUSR1, SIGTERM, SIGINT) are caught from the first line of main,
// before any thread exists: they are blocked there, so in every thread started
// later, and one watcher thread takes them (session/lifecycle.hpp).
// An error every rank sees is printed once, by the lowest failing rank; an error
// during training may be rank-local, so it is printed with its rank and the job
// is aborted, never left hanging in a collective.
#include <malloc.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.hpp"
#include "config/parse.hpp"
#include "core/error.hpp"
#include "core/mpi_world.hpp"
#include "parallel/mpi/agreement.hpp"
#include "plan/memory_plan.hpp"
#include "rundir/flop_floor.hpp"
#include "session/lifecycle.hpp"
#include "task/task.hpp"
#include "train/trainer.hpp"
#include "version.hpp"

namespace {

using namespace shardtrain;

// Parses a test hook's STEP[:RANK] (STEP >= 1, 0 <= RANK < world size, RANK
// defaulting to 0); prints the error on rank 0 and returns false when malformed.
bool parse_step_rank(const char* option, const std::string& value, std::int64_t& step, int& rank) {
  long long s = 0, r = 0;
  char tail = 0;
  const int n = std::sscanf(value.c_str(), "%lld:%lld%c", &s, &r, &tail);
  if (n < 1 || n > 2 || s < 1 || r < 0 || r >= world_size() || (n == 1 && value.find(':') != std::string::npos)) {
    if (world_rank() == 0)
      std::fprintf(stderr, "error: %s %s: expected STEP[:RANK] with STEP >= 1 and 0 <= RANK < %d\n", option,
                   value.c_str(), world_size());
    return false;
  }
  step = s;
  rank = static_cast<int>(r);
  return true;
}

// Runs `fn` on every rank and agrees on the outcome (parallel/mpi/agreement.hpp). If
// any rank threw, the lowest such rank prints its message and every rank returns
// the same exit code. `fn` must not start a collective after a point where it may
// throw on a subset of ranks.
int agree(const std::function<void()>& fn) {
  const Agreement a = agree_on_failure(MPI_COMM_WORLD, fn);
  if (world_rank() == a.first_failing) {
    std::fprintf(stderr, "error: %s\n", a.message.c_str());
    std::fflush(stderr);
  }
  switch (a.worst) {
    case Outcome::Ok: return kExitOk;
    case Outcome::Failed: return kExitFailure;
    case Outcome::BadInput: return kExitBadInput;
  }
  return kExitFailure;
}

// Rank 0 reads the input file and broadcasts its text (or the reason it could not).
std::string read_and_broadcast(const std::string& path) {
  std::string text, error;
  if (world_rank() == 0) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      error = path + ": cannot open input file";
    } else {
      std::ostringstream ss;
      ss << in.rdbuf();
      text = ss.str();
    }
  }
  for (std::string* s : {&error, &text}) *s = broadcast_string(MPI_COMM_WORLD, std::move(*s));
  if (!error.empty()) throw InputError(error);
  return text;
}

// kokkos_args: the --kokkos-* arguments after argv[0], then nullptr.
int run_main(int argc, char** argv, std::vector<char*>& kokkos_args) {
  const bool root = world_rank() == 0;
  CLI::App app{
      "shardtrain trainer: trains the model described by INPUT.toml on every rank of the MPI job.\n"
      "Launch with `mpirun -np N trainer INPUT.toml` or `srun trainer INPUT.toml`.\n"
      "[model] type: gpt (language model on a token data set), or a classifier on labelled samples:\n"
      "encoder_classifier (tokens), mlp or cnn (images); data sets come from trainer-data.\n"
      "Exit codes: 0 done, 1 failure (including no CUDA device for train.device = \"cuda\"), 2 bad input\n"
      "(command line, config or data), 75 stopped early by SIGUSR1/SIGTERM/SIGINT or the wall-time\n"
      "guard after writing a checkpoint (requeue the job; it resumes from the checkpoint).\n"
#ifdef SHARDTRAIN_WITH_CUDA
      "This trainer is the CUDA build: it trains on one GPU per rank (train.device = \"auto\" or\n"
      "\"cuda\"), or on the host with --set train.device=cpu.\n"
#else
      "This trainer is the host build (train.device = \"cpu\"; configure with\n"
      "-DSHARDTRAIN_ENABLE_CUDA=ON for GPUs).\n"
#endif
      "Arguments starting with --kokkos- go to Kokkos::initialize (e.g. --kokkos-help). Kokkos' host\n"
      "threads per rank are parallel.threads unless --kokkos-threads=N says otherwise.",
      "trainer"};
  std::string input;
  std::vector<std::string> overrides;
  app.add_option("input", input, "TOML input file (see share/doc/config.md)")->required();
  app.add_option("--set", overrides,
                 "Override a config key, e.g. --set optim.lr=3e-4 or --set model.hidden=[300,100] (repeatable; "
                 "wins over the file)")
      ->take_all()
      ->type_name("SECTION.KEY=VALUE");
  bool plan_only = false;
  int plan_ranks = 0;
  app.add_flag("--plan", plan_only,
               "Print the memory plan per rank (bytes per category), the process's measured RSS before the "
               "model and MPI collective scratch per rank, the predicted process peak (their sum: what "
               "train.memory_limit_mb limits), the activation recompute "
               "schedule (kept blocks, peak, extra forward FLOPs) and the compute per step (FLOPs), then "
               "exit without training; exit "
               "code 2 if the predicted process peak exceeds train.memory_limit_mb or recompute.budget_mb "
               "cannot be met");
  app.add_option("--ranks", plan_ranks,
                 "With --plan: plan for this many ranks (default: the MPI job's; the measured process "
                 "terms stay this job's)")
      ->check(CLI::PositiveNumber);
  bool profile = false;
  app.add_flag("--profile", profile,
               "Time every op of the training steps (layer kernels, gradient communication, the optimizer) "
               "and print the per-op breakdown at the end of the job: ms per step, share of the step, and "
               "the totals for GEMM, elementwise, communication and optimizer (also RUN_DIR/profile.txt). "
               "The job's first step (warm-up) and evaluations are not counted. On a GPU every op waits "
               "for the device, so the run is slower");
  std::string inject_overflow;
  app.add_option("--inject-overflow", inject_overflow,
                 "Test hook: at optimizer step STEP (1-based) rank RANK (default 0) plants an inf in "
                 "its gradient before the reduction, as a real fp16 overflow would")
      ->type_name("STEP[:RANK]");
  std::int64_t stop_after_step = 0;
  app.add_option("--stop-after-step", stop_after_step,
                 "End this job after optimizer step N (counted from the start of training, not from a "
                 "resumed checkpoint), writing a checkpoint first when [checkpoint] is on, as a job whose "
                 "time is up would (exit code 0); the learning-rate schedule still spans train.steps")
      ->type_name("N")
      ->check(CLI::PositiveNumber);
  std::int64_t pause_checkpoint = 0;
  app.add_option("--pause-in-checkpoint", pause_checkpoint,
                 "Test hook: while writing the checkpoint of step STEP, after its data and before the file "
                 "is closed, every rank writes <file>.partial.paused.<rank> (its PID) and sleeps 10 "
                 "minutes or until <file>.partial.resume exists, so a test can kill a rank mid-write "
                 "(with checkpoint.async the writer thread sleeps and training goes on)")
      ->type_name("STEP")
      ->check(CLI::PositiveNumber);
  std::string stall;
  app.add_option("--stall-in-collective", stall,
                 "Test hook: at optimizer step STEP rank RANK (default 0) sleeps 10 minutes instead of "
                 "entering the step's gradient reduction, so the other ranks' collective watchdog "
                 "(parallel.collective_timeout_s) reports the stalled collective and ends the job")
      ->type_name("STEP[:RANK]");
  std::string throw_at;
  app.add_option("--throw-at-step", throw_at,
                 "Test hook: rank RANK (default 0) throws an error during optimizer step STEP, as a "
                 "rank-local failure would; the job must end with that rank's message")
      ->type_name("STEP[:RANK]");
  std::string signal_at;
  app.add_option("--signal-at-step", signal_at,
                 "Test hook: rank RANK (default 0) acts as if SIGUSR1 arrived during optimizer step STEP")
      ->type_name("STEP[:RANK]");
  std::string perturb;
  app.add_option("--perturb-weights", perturb,
                 "Test hook: after the update of optimizer step STEP rank RANK (default 0) moves the first "
                 "fp32 weight its optimizer owns by one ulp; at ZeRO stage 0 its replica then differs from "
                 "the other ranks', which the weights CRC of the step's metrics row reports (exit code 1)")
      ->type_name("STEP[:RANK]");
  std::string inject_nan;
  app.add_option("--inject-nan", inject_nan,
                 "Test hook: as --inject-overflow, with a NaN: at optimizer step STEP rank RANK (default 0) "
                 "plants a NaN in its gradient before the reduction; in bf16 and fp32 the numeric guard "
                 "(guard.non_finite) acts on it, in fp16 the loss scaler skips the step first")
      ->type_name("STEP[:RANK]");
  std::string multiply_loss;
  app.add_option("--multiply-loss", multiply_loss,
                 "Test hook: in optimizer step STEP rank RANK (default 0) multiplies its loss and its backward "
                 "seed by FACTOR (default 1000): the loss spike a bad batch gives (guard.loss_spike)")
      ->type_name("STEP[:RANK][xFACTOR]");
  std::string flip_bit;
  app.add_option("--flip-bit", flip_bit,
                 "Test hook: after optimizer step STEP rank RANK (default 0) flips the highest mantissa bit "
                 "of one element of its replica of the parameters (stage 0: fp32 weight 0; stages 1-2: a "
                 "parameter outside its own shard), as silent data corruption would (guard.replica)")
      ->type_name("STEP[:RANK]");
  app.set_version_flag("--version", std::string("shardtrain ") + kVersion + " (" + host_kokkos_describe() + ")");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::ostringstream sink;
    const int code = root ? app.exit(e) : app.exit(e, sink, sink);
    return code == 0 ? kExitOk : kExitBadInput;
  }

  RunOptions hooks;
  if (!inject_overflow.empty() &&
      !parse_step_rank("--inject-overflow", inject_overflow, hooks.overflow_step, hooks.overflow_rank))
    return kExitBadInput;
  if (!stall.empty() && !parse_step_rank("--stall-in-collective", stall, hooks.stall_step, hooks.stall_rank))
    return kExitBadInput;
  if (!throw_at.empty() && !parse_step_rank("--throw-at-step", throw_at, hooks.throw_step, hooks.throw_rank))
    return kExitBadInput;
  if (!signal_at.empty() && !parse_step_rank("--signal-at-step", signal_at, hooks.signal_step, hooks.signal_rank))
    return kExitBadInput;
  if (!perturb.empty() && !parse_step_rank("--perturb-weights", perturb, hooks.perturb_step, hooks.perturb_rank))
    return kExitBadInput;

  if (!inject_nan.empty() && !parse_step_rank("--inject-nan", inject_nan, hooks.nan_step, hooks.nan_rank))
    return kExitBadInput;
  if (!flip_bit.empty() && !parse_step_rank("--flip-bit", flip_bit, hooks.flip_step, hooks.flip_rank))
    return kExitBadInput;
  if (!multiply_loss.empty()) {
    const std::size_t x = multiply_loss.find('x');
    const std::string at = multiply_loss.substr(0, x);
    char* tail = nullptr;
    if (x != std::string::npos) {
      const std::string f = multiply_loss.substr(x + 1);
      hooks.loss_factor = std::strtod(f.c_str(), &tail);
    }
    if (!parse_step_rank("--multiply-loss", at, hooks.loss_factor_step, hooks.loss_factor_rank))
      return kExitBadInput;
    if ((tail && *tail != '\0') || !std::isfinite(hooks.loss_factor) || hooks.loss_factor <= 0) {
      if (root) std::fprintf(stderr, "error: --multiply-loss %s: expected STEP[:RANK][xFACTOR] with FACTOR > 0\n",
                             multiply_loss.c_str());
      return kExitBadInput;
    }
  }
  hooks.profile = profile;
  hooks.stop_after_step = stop_after_step;
  hooks.pause_checkpoint_step = pause_checkpoint;

  RunConfig config;
  if (int code = agree([&] { config = parse_run_config(read_and_broadcast(input), input, overrides); }))
    return code;

  // Kokkos starts once the config is known: with an OpenMP Kokkos its host threads
  // are parallel.threads, like oneDNN's pool (a user who forgets OMP_NUM_THREADS
  // does not oversubscribe the node), unless --kokkos-threads was given.
  std::string threads_arg = "--kokkos-threads=" + std::to_string(config.parallel.threads);
  if (std::none_of(kokkos_args.begin() + 1, kokkos_args.end() - 1,
                   [](const char* a) { return std::string_view(a).starts_with("--kokkos-threads"); }))
    kokkos_args.insert(kokkos_args.end() - 1, threads_arg.data());
  int kokkos_argc = static_cast<int>(kokkos_args.size()) - 1;
  Kokkos::ScopeGuard kokkos(kokkos_argc, kokkos_args.data());

  if (plan_only) {
    return agree([&] {
      // Opens the data set for the model's sizes (vocabulary, sample shape, classes).
      const MemoryPlan plan = plan_run(config, MPI_COMM_WORLD, plan_ranks > 0 ? plan_ranks : world_size());
      const FlopFloor floor = plan_flop_floor(config, plan.step_flops / plan.world, MPI_COMM_WORLD);
      if (world_rank() == 0) {
        std::fputs(format_plan(plan).c_str(), stdout);
        std::fputs(format_flop_floor(floor).c_str(), stdout);
        if (plan_ranks > 0 && plan_ranks != world_size())
          std::printf("note: the process terms were measured in this job of %d ranks, not %d, and the MPI "
                      "collective scratch was not probed; run `mpirun -n %d trainer --plan` for theirs\n",
                      world_size(), plan_ranks, plan_ranks);
      }
      std::fflush(stdout);
      check_memory_limit(plan, config);
    });
  }

  std::unique_ptr<Trainer> trainer;
  if (int code = agree([&] { trainer = std::make_unique<Trainer>(config, MPI_COMM_WORLD, hooks); }))
    return code;

  try {
    if (trainer->run().requeue) return kExitRequeue;
  } catch (const AgreedError& e) {
    // Every rank stopped here with the same message: say it once, exit cleanly.
    if (root) std::fprintf(stderr, "error: %s\n", e.what());
    std::fflush(stderr);
    return kExitFailure;
  } catch (const std::exception& e) {
    const bool input = dynamic_cast<const InputError*>(&e) != nullptr;
    std::fprintf(stderr, "error (rank %d): %s\n", world_rank(), e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, input ? kExitBadInput : kExitFailure);
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything else: a stop signal must never kill the process, and it must be
  // blocked before MPI, OpenMP or oneDNN start a thread (their threads inherit the mask).
  install_stop_signal_handlers();
  // glibc serves allocations of 128 KiB and more with mmap, but after such a
  // block is freed it raises that threshold to the block's size (dynamic mmap
  // threshold): after the checkpoint I/O probe frees MPI-IO's 16 MiB
  // aggregation buffers, every later allocation below 16 MiB would come from
  // the heap, which fragments and never shrinks, so the process's peak RSS
  // would drift above the memory plan (measured: +6 MiB on the I/O aggregator
  // rank of a tiny 3-rank run). Setting the threshold fixes it at glibc's
  // default and keeps large blocks returned to the system.
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  // checkpoint.async's writer thread makes MPI calls on its own communicator
  // beside the training thread's (session/background_checkpoint.hpp).
  int mpi_threads = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &mpi_threads);
  // Kokkos sees only the --kokkos-* arguments (it would also act on a plain
  // --help); the trainer's own command line sees everything else. run_main starts
  // Kokkos after reading the config (its thread count is parallel.threads);
  // --kokkos-help alone prints Kokkos' help.
  std::vector<char*> kokkos_args{argv[0]}, app_args{argv[0]};
  bool kokkos_help = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a(argv[i]);
    (a.starts_with("--kokkos-") ? kokkos_args : app_args).push_back(argv[i]);
    kokkos_help = kokkos_help || a == "--kokkos-help";
  }
  kokkos_args.push_back(nullptr);
  int code = kExitOk;
  if (kokkos_help) {
    int kokkos_argc = static_cast<int>(kokkos_args.size()) - 1;
    Kokkos::ScopeGuard kokkos(kokkos_argc, kokkos_args.data());
  } else {
    code = run_main(static_cast<int>(app_args.size()), app_args.data(), kokkos_args);
  }
  MPI_Finalize();
  return code;
}
