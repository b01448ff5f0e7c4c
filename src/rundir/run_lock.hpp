// shardtrain/rundir/run_lock.hpp
// Owns the rule "one job per run directory": the lock file `shardtrain.lock`
// in train.run_dir (and in checkpoint.dir when checkpoints are on and it lies
// outside the run directory), which names the job holding it:
//   host=node12
//   pid=12345
//   pid_start=987654        (the process's start time, /proc/PID/stat field 22,
//                            so that a recycled PID is not mistaken for the holder)
//   ppid=12340, ppid_start=987600  (its launcher: mpirun, orted, slurmstepd)
//   slurm_job_id=678        (empty outside Slurm)
//   slurm_restart_count=0
//   started=2026-11-27T11:50:00Z
// Taking it: rank 0 writes its content to a file of its own and hard-links
// that to `shardtrain.lock` (link() fails when the name exists: atomic, on
// NFS too), so a lock file is always complete. When one exists, its holder is
//  - gone, and the lock is taken over, when it ran on this host and its
//    process no longer exists (or the PID now belongs to a process started at
//    another time), or when it is an earlier run of this Slurm job (same
//    SLURM_JOB_ID, lower SLURM_RESTART_COUNT: Slurm requeued the job, so
//    the earlier run has ended); the stale file is first renamed to a name of
//    this job's (of two successors only one rename succeeds), then the lock is
//    taken as above;
//  - being torn down: on this host, alive, but its launcher (the parent it had
//    when it took the lock: mpirun, orted, slurmstepd) is gone -- a job whose
//    mpirun was killed after a rank died; waited for (up to 60 s), then as above;
//  - alive, or not known to be gone (another host, another Slurm job): the job
//    is refused (InputError, exit 2) with a message naming the holder.
// Released (the file removed, if it is still this job's) when the RunLock is
// destroyed: every exit of `trainer` but a killed process or MPI_Abort, whose
// lock the next job on this host (or the requeued Slurm job) takes over.
// Invariants: constructed collectively; rank 0 does the file work and every
// rank gets the same outcome (on_root).
#pragma once

#include <mpi.h>

#include <optional>
#include <string>
#include <vector>

namespace shardtrain {

// Who holds (or wants) a lock.
struct LockHolder {
  std::string host;
  long long pid = 0;
  long long pid_start = 0;  // 0: unknown
  long long ppid = 0;       // its parent (mpirun, orted, slurmstepd) when it took the lock
  long long ppid_start = 0;
  std::string slurm_job_id;
  long long slurm_restart_count = 0;
  std::string started;  // UTC, informational

  std::string to_text() const;
  // Parses what to_text wrote; nullopt for anything else.
  static std::optional<LockHolder> parse(const std::string& text);
  // This process, from gethostname, getpid, /proc/self/stat and the environment
  // (SLURM_JOB_ID, SLURM_RESTART_COUNT).
  static LockHolder self();
  // "host node12, PID 12345, Slurm job 678, started 2026-..." for messages.
  std::string describe() const;
};

// Why `holder` no longer holds its lock, as a phrase ("its process (PID 12 on
// this host) is gone"), or nullopt when it may still be running. Local; reads
// /proc for a holder on this host.
std::optional<std::string> lock_holder_gone(const LockHolder& holder, const LockHolder& me);

class RunLock {
 public:
  // Takes the lock of every directory in `dirs` (each created if missing).
  // `what` names each directory's key in messages ("train.run_dir"). Prints a
  // note on rank 0 for each lock taken over from a job that is gone.
  // Collective; InputError on every rank when a live job holds one.
  RunLock(const std::vector<std::pair<std::string, std::string>>& dirs, const std::string& source_name,
          MPI_Comm comm);
  ~RunLock();  // rank 0 removes the lock files that are still its own
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  static constexpr const char* kFileName = "shardtrain.lock";

 private:
  std::vector<std::string> m_files;  // rank 0's: the lock files it holds
  LockHolder m_self;
};

}  // namespace shardtrain
