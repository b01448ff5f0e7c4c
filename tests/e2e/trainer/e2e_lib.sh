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

# Prints "step loss val_loss" per row of a metrics.csv.
losses() { awk -F, 'NR > 1 { print $1, $2, ($3 == "" ? "-" : $3) }' "$1"; }

compare() {  # A B TOL ; TOL = 0 means bitwise (textual) equality
  local a=$1 b=$2 tol=$3
  [[ $(losses "$a" | wc -l) -gt 0 ]] || die "$a has no rows"
  paste -d' ' <(losses "$a") <(losses "$b") | awk -v tol="$tol" '
    function rel(x, y) { d = x - y; if (d < 0) d = -d; m = (x < 0 ? -x : x); return m > 0 ? d / m : d }
    NF != 6 { print "row count or val_loss columns differ: " $0; bad = 1; next }
    $1 != $4 { print "step mismatch: " $0; bad = 1; next }
    tol == 0 && ($2 != $5 || $3 != $6) { print "not bitwise equal: " $0; bad = 1; next }
    tol > 0 { r = rel($2, $5); if (r > tol) { print "loss differs by " r ": " $0; bad = 1 }
              if ($3 != "-" && rel($3, $6) > tol) { print "val_loss differs: " $0; bad = 1 }
              if (r > worst) worst = r }
    END { if (tol > 0) printf "max relative loss difference %.3g (tolerance %g)\n", worst, tol; exit bad }
  ' || die "loss curves differ ($a vs $b)"
}
