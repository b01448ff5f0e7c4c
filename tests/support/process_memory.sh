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
#   MPI collective scratch), or within PROCESS_ABS_MIB (default 5) MiB of it,
#   whichever is wider. The absolute allowance is for the tests' tiny models
#   (processes of 35-40 MiB): oneDNN builds code for each GEMM shape on its first
#   use, and the plan warms only the CNN's convolutions before it measures the
#   process, not the Linear products' shapes. On AVX-512 that code is larger: the
#   tokens GPT (V 512) measured VmHWM 1.09-1.11x its prediction, against
#   1.06-1.08x under ONEDNN_MAX_CPU_ISA=AVX2 (AMD EPYC family 25 model 17,
#   2026-11-30). That is 3-4 MiB. For processes above 50 MiB nothing changes.
#   Both from the end-of-run memory report of the
#   trainer's log LOG (RUN_DIR/report.txt, named by the log; log_and_reports).
#   A log without a report passes (the run ended before it: a refusal, an
#   error, a killed job). Prints the ratios; on a failure prints
#   "FAIL: ..." and exits the calling script with 1.
check_process_memory() {  # LOG
  local log=$1
  log_and_reports "$log" | grep -q '^process peak RSS per rank' || return 0
  log_and_reports "$log" | awk -v tol="${PROCESS_TOL:-0.10}" -v abs="${PROCESS_ABS_MIB:-5}" '
    /^predicted process peak per rank \(MiB/ { sub(/.*\):/, ""); np = split($0, pred, " ") }
    /^process peak RSS per rank/ {  # one report (a log may hold several: a requeued job)
      sub(/.*:/, ""); nh = split($0, hwm, " "); n++
      if (np == 0 || np != nh) { print "process memory: no predicted peak per rank beside VmHWM"; bad = 1; next }
      for (r = 1; r <= np; r++) {
        q = pred[r] > 0 ? hwm[r] / pred[r] : 0
        printf "process memory rank %d: VmHWM %.1f MiB, predicted %.1f MiB, ratio %.3f\n", r - 1, hwm[r], pred[r], q
        d = hwm[r] - pred[r]
        if ((q < 1 - tol || q > 1 + tol) && (d > abs || d < -abs)) bad = 1
      }
      np = 0
    }
    END {
      exit bad
    }' || { echo "FAIL: VmHWM differs from the predicted process peak by more than ${PROCESS_TOL:-0.10} and ${PROCESS_ABS_MIB:-5} MiB ($log)" >&2; exit 1; }
}
