# Shared helpers of the trainer end-to-end scripts (trainer_e2e.sh, checkpoint_e2e.sh).
# Environment (set by CTest): TRAINER, INPUT, DATA, WORK, MPIEXEC, NPFLAG.
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
}

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
