#!/usr/bin/env bash
# End-to-end checks of the `trainer` executable, driven by CTest (tests/e2e/trainer/CMakeLists.txt).
# Environment (set by CTest): TRAINER, INPUT (tiny.toml), DATA (tiny.h5), WORK (scratch dir),
# MPIEXEC, NPFLAG.
#   run NP NAME [--set ...]     train into $WORK/NAME, fail on non-zero exit
#   equiv NAME NP REF TOL [--set ...]  train at NP ranks; losses must match run REF within relative TOL
#   determinism NP              two runs at NP ranks; losses must be bitwise identical
#   bad-input NP CASE REGEX     a broken input must give exit 2, ONE message matching REGEX, no hang
#   zero-accounting NP STAGE    measured peak bytes per rank == the plan, model state == the ZeRO
#                               formula (fp32) within 2%, bytes sent per step == theory within 5%
set -uo pipefail

die() { echo "FAIL: $*" >&2; exit 1; }

run_trainer() {  # NP NAME extra-args...
  local np=$1 name=$2; shift 2
  rm -rf "$WORK/$name"; mkdir -p "$WORK"
  timeout 300 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$INPUT" \
    --set data.path="$DATA" --set train.run_dir="$WORK/$name" "$@" > "$WORK/$name.log" 2>&1
  local rc=$?
  cat "$WORK/$name.log"
  [[ $rc -eq 0 ]] || die "trainer at $np ranks exited with $rc"
  [[ -s "$WORK/$name/metrics.csv" ]] || die "no metrics.csv in $WORK/$name"
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

case "${1:-}" in
  run)
    np=$2; name=$3; shift 3
    run_trainer "$np" "$name" "$@"
    ;;
  equiv)
    name=$2; np=$3; ref=$4; tol=$5; shift 5
    run_trainer "$np" "$name" "$@"
    compare "$WORK/$ref/metrics.csv" "$WORK/$name/metrics.csv" "$tol"
    # The loss must actually fall, or equal curves prove nothing.
    awk -F, 'NR == 2 { first = $2 } END { if (!($2 < first - 0.3)) { print "loss did not fall: " first " -> " $2; exit 1 } }' \
      "$WORK/$name/metrics.csv" || die "training did not learn"
    ;;
  determinism)
    np=$2
    run_trainer "$np" "det_a_np$np"
    run_trainer "$np" "det_b_np$np"
    compare "$WORK/det_a_np$np/metrics.csv" "$WORK/det_b_np$np/metrics.csv" 0
    echo "bitwise identical losses over $(losses "$WORK/det_a_np$np/metrics.csv" | wc -l) rows"
    ;;
  bad-input)
    np=$2; case_name=$3; regex=$4
    dir="$WORK/bad_$case_name"; rm -rf "$dir"; mkdir -p "$dir"
    input="$dir/input.toml"
    sed -e "s|^path = .*|path = \"$DATA\"|" "$INPUT" > "$input"
    case "$case_name" in
      syntax)      sed -i 's/^n_layer = 2/n_layer = 2 2/' "$input" ;;
      unknown_key) sed -i 's/^n_layer = 2/n_layers = 2/' "$input" ;;
      negative_lr) sed -i 's/^lr = .*/lr = -1e-3/' "$input" ;;
      missing_data) sed -i "s|^path = .*|path = \"$dir/no_such.h5\"|" "$input" ;;
      not_hdf5)    cp "$INPUT" "$dir/fake.h5"; sed -i "s|^path = .*|path = \"$dir/fake.h5\"|" "$input" ;;
      data_too_short) sed -i 's/^seq_len = .*/seq_len = 512/' "$input" ;;
      memory_limit) sed -i 's/^log_every = .*/log_every = 5\nmemory_limit_mb = 0.1/' "$input" ;;
      *) die "unknown case $case_name" ;;
    esac
    start=$(date +%s)
    timeout 120 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$input" --set train.run_dir="$dir/run" \
      > "$dir/out.log" 2> "$dir/err.log"
    rc=$?
    echo "exit code $rc after $(( $(date +%s) - start )) s"; echo "--- stderr:"; cat "$dir/err.log"
    [[ $rc -ne 124 ]] || die "trainer hung"
    [[ $rc -eq 2 ]] || die "expected exit code 2, got $rc"
    n=$(grep -c '^error: ' "$dir/err.log")
    [[ $n -eq 1 ]] || die "expected exactly one error line, got $n"
    grep -Eq "$regex" "$dir/err.log" || die "error message does not match /$regex/"
    ;;
  zero-accounting)
    np=$2; stage=$3; name="accounting_s${stage}_np$np"
    # One micro-batch per step: stages 2 and 3 reduce gradients once per micro-batch.
    # One bucket per group: stage 3 gathers each block for forward and again for
    # backward (a bucket holding the whole model would be gathered once).
    # Stage 3 keeps the last block, the final LayerNorm and the embeddings cached
    # from forward to backward; 8 blocks make that the 5% the theory allows.
    layers=2; [[ $stage -eq 3 ]] && layers=8
    run_trainer "$np" "$name" --set parallel.zero_stage="$stage" --set train.micro_batch=8 \
      --set train.eval_every=0 --set parallel.bucket_mb=0 --set model.n_layer=$layers
    log="$WORK/$name.log"
    psi=$(sed -n 's/^memory plan per rank: .*(\([0-9]*\) padded).*/\1/p' "$log")
    comm=$(grep '^communication per step per rank' "$log")
    [[ -n "$psi" && -n "$comm" ]] || die "no plan or communication line in the log"
    awk -F, -v n="$np" -v stage="$stage" -v psi="$psi" -v comm="$comm" '
      function rel(a, b) { d = a - b; if (d < 0) d = -d; return b > 0 ? d / b : d }
      NR == 1 { next }
      $1 == "plan" { for (i = 2; i <= NF; ++i) plan[i] = $i; next }
      { rows++; for (i = 2; i <= NF; ++i) v[rows, i] = $i; cols = NF }
      END {
        if (rows != n) { print "expected " n " rank rows, got " rows; exit 1 }
        for (r = 1; r <= rows; ++r) for (i = 2; i <= cols; ++i)
          if (rel(v[r, i], plan[i]) > 0.02) { print "rank " r - 1 " column " i ": " v[r, i] " bytes vs plan " plan[i]; bad = 1 }
        # fp32 ZeRO model state in bytes per (padded) parameter
        f = (stage == 0) ? 16 : (stage == 1) ? 8 + 8 / n : (stage == 2) ? 4 + 12 / n : 16 / n
        for (r = 1; r <= rows; ++r) {
          state = v[r, 2] + v[r, 3] + v[r, 4]
          if (rel(state, f * psi) > 0.02) { print "rank " r - 1 ": model state " state " bytes vs ZeRO " f * psi; bad = 1 }
        }
        printf "model state %d bytes per rank; ZeRO formula %.4g x Psi = %d bytes (Psi = %d)\n", v[1, 2] + v[1, 3] + v[1, 4], f, f * psi, psi
        split(comm, w, " "); sent = w[8]; theory = w[length(w) - 1]
        printf "sent %s MB per step per rank (rank 0); theory %s MB\n", sent, theory
        if (n > 1 && rel(sent, theory) > 0.05) { print "communication off by more than 5%"; bad = 1 }
        exit bad
      }' "$WORK/$name/memory.csv" || die "accounting does not match"
    ;;
  *)
    die "usage: trainer_e2e.sh run|equiv|determinism|bad-input|zero-accounting ..." ;;
esac
