# Shared by every test script that runs the trainer (source it): the check of
# issue 21 that the process's VmHWM is predicted by the plan, and reading the
# end-of-run report, which the trainer writes to RUN_DIR/report.txt (its stdout
# has the short summary, whose line "  full report: PATH" names the file).

# log_and_reports LOG: LOG, then each report file LOG names (each once; a requeued
# job's launches share one, which holds the last launch's report).
log_and_reports() {  # LOG
  cat "$1"
  local f
  sed -n 's/^  full report: \(.*\/report\.txt\) (.*/\1/p' "$1" | awk '!seen[$0]++' | while read -r f; do
    [[ -f $f ]] && cat "$f"
  done
}

#   check_process_memory LOG: every rank's VmHWM within PROCESS_TOL (default
#   0.10) of its predicted process peak (RSS before the model + tracked plan +
#   MPI collective scratch), both from the end-of-run memory report of the
#   trainer's log LOG (RUN_DIR/report.txt, named by the log; log_and_reports).
#   A log without a report passes (the run ended before it: a refusal, an
#   error, a killed job). Prints the ratios; on a failure prints
#   "FAIL: ..." and exits the calling script with 1.
check_process_memory() {  # LOG
  local log=$1
  log_and_reports "$log" | grep -q '^process peak RSS per rank' || return 0
  log_and_reports "$log" | awk -v tol="${PROCESS_TOL:-0.10}" '
    /^predicted process peak per rank \(MiB/ { sub(/.*\):/, ""); np = split($0, pred, " ") }
    /^process peak RSS per rank/ {  # one report (a log may hold several: a requeued job)
      sub(/.*:/, ""); nh = split($0, hwm, " "); n++
      if (np == 0 || np != nh) { print "process memory: no predicted peak per rank beside VmHWM"; bad = 1; next }
      for (r = 1; r <= np; r++) {
        q = pred[r] > 0 ? hwm[r] / pred[r] : 0
        printf "process memory rank %d: VmHWM %.1f MiB, predicted %.1f MiB, ratio %.3f\n", r - 1, hwm[r], pred[r], q
        if (q < 1 - tol || q > 1 + tol) bad = 1
      }
      np = 0
    }
    END {
      exit bad
    }' || { echo "FAIL: VmHWM differs from the predicted process peak by more than ${PROCESS_TOL:-0.10} ($log)" >&2; exit 1; }
}
