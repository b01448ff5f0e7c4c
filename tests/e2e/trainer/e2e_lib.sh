# Shared helpers of the trainer end-to-end scripts (trainer_e2e.sh, checkpoint_e2e.sh).
# Environment (set by CTest): TRAINER, INPUT, DATA, WORK, MPIEXEC, NPFLAG.
[[ -n ${WORK:-} ]] && mkdir -p "$WORK"  # each test's own (tests/e2e/trainer/CMakeLists.txt)
die() { echo "FAIL: $*" >&2; exit 1; }

# Trains into $WORK/NAME (kept if it exists: a resumed run), log in $WORK/NAME.log
# (LOG overrides); fails on a non-zero exit.
train_in() {  # NP NAME extra-args...
  local np=$1 name=$2; shift 2
  local log=${LOG:-$WORK/$name.log}
  mkdir -p "$WORK"
  timeout 300 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$INPUT" \
    --set data.path="$DATA" --set train.run_dir="$WORK/$name" "$@" > "$log" 2>&1
  local rc=$?
  cat "$log"
  [[ $rc -eq 0 ]] || die "trainer at $np ranks exited with $rc"
  [[ -s "$WORK/$name/metrics.csv" ]] || die "no metrics.csv in $WORK/$name"
  check_process_memory "$log"
}

# check_process_memory LOG: VmHWM within 10% (or 5 MiB, tiny models) of the predicted process peak.
# shellcheck source=../../support/process_memory.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../support/process_memory.sh"

run_trainer() {  # NP NAME extra-args...: a fresh run into $WORK/NAME
  rm -rf "${WORK:?}/$2"
  train_in "$@"
}

# Prints "step loss val_loss grad_norm" per row of a metrics.csv.
losses() { awk -F, 'NR > 1 { print $1, $2, ($3 == "" ? "-" : $3), $5 }' "$1"; }

# train.log_every of the run whose metrics.csv is $1 (from its config.toml).
log_every_of() { sed -n 's/^log_every = \([0-9]*\).*/\1/p' "$(dirname "$1")/config.toml"; }

# Compares the curves of two runs row by row, matched by step: loss, val_loss
# (relative TOL) and grad_norm (relative GTOL, default TOL; "-": not compared).
# TOL = 0: loss, val_loss and grad_norm textually equal (bitwise). B has a row for
# every step A has, or, when B logs every L > 1 steps and A more often, for A's
# steps that are multiples of L, the last, and those with a validation loss.
# Prints the worst differences and where they are.
compare() {  # A B TOL [GTOL]
  local a=$1 b=$2 tol=$3 gtol=${4:-$3}
  [[ $(losses "$a" | wc -l) -gt 0 ]] || die "$a has no rows"
  [[ $(losses "$b" | wc -l) -gt 0 ]] || die "$b has no rows"
  local la lb; la=$(log_every_of "$a"); lb=$(log_every_of "$b")
  [[ -n "$la" && -n "$lb" ]] || die "no train.log_every in the config.toml beside $a or $b"
  (( lb == la || (lb > la && lb % la == 0) )) || die "$b logs every $lb steps, $a every $la: cannot match rows"
  awk -v tol="$tol" -v gtol="$gtol" -v every="$lb" -v same=$(( la == lb )) '
    function rel(x, y) { d = x - y; if (d < 0) d = -d; m = (x < 0 ? -x : x); return m > 0 ? d / m : d }
    FNR == NR { na++; step[na] = $1; loss[$1] = $2; val[$1] = $3; gn[$1] = $4; last = $1; next }
    { if (!($1 in loss)) { print "step " $1 ": a row in B, none in A"; bad = 1; next }
      if (seen[$1]++) { print "step " $1 ": two rows in B"; bad = 1; next }
      nb++; s = $1
      if ($3 == "-" || val[s] == "-") { if ($3 != val[s]) { print "step " s ": val_loss " val[s] " vs " $3; bad = 1 } }
      if (tol == 0) {
        if ($2 != loss[s] || $3 != val[s] || $4 != gn[s]) { print "step " s ": not bitwise equal: " loss[s] " " val[s] " " gn[s] " vs " $2 " " $3 " " $4; bad = 1 }
        next }
      r = rel(loss[s], $2); if (r > wl) { wl = r; sl = s }
      if (r > tol) { print "step " s ": loss differs by " r ": " loss[s] " vs " $2; bad = 1 }
      if ($3 != "-" && val[s] != "-") { r = rel(val[s], $3); if (r > wv) { wv = r; sv = s }
        if (r > tol) { print "step " s ": val_loss differs by " r ": " val[s] " vs " $3; bad = 1 } }
      if (gtol != "-") { r = rel(gn[s], $4); if (r > wg) { wg = r; sg = s }
        if (r > gtol) { print "step " s ": grad_norm differs by " r ": " gn[s] " vs " $4; bad = 1 } } }
    END {
      want = 0
      for (i = 1; i <= na; ++i) { s = step[i]
        if (same || s % every == 0 || s == last || val[s] != "-") { want++
          if (!(s in seen)) { print "step " s ": a row in A, none in B"; bad = 1 } } }
      if (nb != want) { print "B has " nb " rows, expected " want; bad = 1 }
      if (tol == 0) printf "bitwise equal: %d rows of loss, val_loss and grad_norm\n", nb
      else printf "%d rows; max relative difference: loss %.3g (step %s), val_loss %.3g (step %s), grad_norm %s (step %s); tolerances %g, %s\n",
        nb, wl, sl, wv, sv, (gtol == "-" ? "not compared" : sprintf("%.3g", wg)), sg, tol, gtol
      exit bad
    }' <(losses "$a") <(losses "$b") || die "loss curves differ ($a vs $b)"
}

# The job whose output is LOG resumed from DIR/checkpoints/step_N.h5 (step N)
# and computed exactly the remaining steps N+1..TOTAL (issue 21):
#  - one "resumed from DIR/checkpoints/step_0000000N.h5: step N," line;
#  - the trainer's own count of the steps it ran, in "done: TOTAL steps
#    (K in this job, from step N+1)", is K = TOTAL - N (N = TOTAL: "nothing to
#    train", K = 0);
#  - the progress lines after the resume line (a job's own steps) are steps
#    after N, in order, each once, the last one TOTAL; with train.log_every = 1
#    exactly N+1..TOTAL;
#  - DIR/metrics.csv (the previous rows up to N, then this job's) names each
#    step once, in order, the last TOTAL; with train.log_every = 1 every step
#    1..TOTAL.
check_resumed() {  # LOG DIR N TOTAL
  local log=$1 dir=$2 n=$3 total=$4 file every
  file=$(printf '%s/checkpoints/step_%08d.h5' "$dir" "$n")
  [[ $(grep -c '^resumed from ' "$log") -eq 1 ]] || die "$log: expected one 'resumed from' line"
  grep -q "^resumed from $file: step $n, " "$log" || die "$log: did not resume from $file (step $n)"
  grep -q "^done: $total steps ($((total - n)) in this job, from step $((n + 1))) in " "$log" ||
    die "$log: the job did not count $((total - n)) steps from step $((n + 1)) to $total: $(grep '^done:' "$log")"
  every=$(log_every_of "$dir/metrics.csv")
  sed -n '/^resumed from /,$p' "$log" | sed -n "s|^step *\([0-9]*\)/$total .*|\1|p" |
    awk -v n="$n" -v total="$total" -v every="$every" '
      { k++; if ($1 <= (k > 1 ? prev : n)) { print "progress line of step " $1 " after step " (k > 1 ? prev : n); bad = 1 }
        prev = $1 }
      END { if (k > 0 && prev != total) { print "the last progress line is step " prev ", not " total; bad = 1 }
            if (k == 0 && total > n) { print "no progress line"; bad = 1 }
            if (every == 1 && k != total - n) { print k " progress lines, expected " total - n; bad = 1 }
            exit bad }' || die "$log: the job did not train exactly steps $((n + 1))..$total"
  awk -F, -v total="$total" -v every="$every" 'NR == 1 { next }
      { k++; if ($1 <= prev) { print "metrics.csv: step " $1 " after step " prev; bad = 1 }; prev = $1 }
      END { if (prev != total) { print "metrics.csv: the last row is step " prev ", not " total; bad = 1 }
            if (every == 1 && k != total) { print "metrics.csv: " k " rows, expected " total; bad = 1 }
            exit bad }' "$dir/metrics.csv" || die "$dir/metrics.csv: steps not each once, in order, to $total"
  if (( n == total )); then echo "resumed at step $n = $total: this job trained no step (counted by the trainer)"
  else echo "resumed at step $n: this job trained steps $((n + 1))..$total ($((total - n)), counted by the trainer), metrics.csv steps in order to $total"; fi
}
