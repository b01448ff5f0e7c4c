#!/usr/bin/env bash
# A GPT trains on a data set imported by `trainer-data tokens` (tests/e2e/data/CMakeLists.txt).
#   tokens_train_e2e.sh NP NAME VOCAB
# Environment (set by CTest): TRAINER, INPUT (tiny.toml), DATA (the imported .h5),
# WORK, MPIEXEC, NPFLAG. Checks: exit 0; the model's vocabulary is the data set's
# (the header line says V=VOCAB; tiny.toml names none); every logged loss and
# val_loss is finite; the loss falls by at least 0.3 nats from the first logged row.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../trainer/e2e_lib.sh
source "$here/../trainer/e2e_lib.sh"

np=$1 name=$2 vocab=$3
rm -rf "${WORK:?}/$name"
train_in "$np" "$name" --set train.steps=40 --set train.log_every=5 --set train.eval_every=20
log=$WORK/$name.log
grep -q "GPT L=2 C=32 H=4 T=16 V=$vocab |" "$log" || die "the model's vocabulary is not the data set's $vocab: $(grep -m1 'GPT L=' "$log")"
awk -F, 'NR > 1 { for (i = 2; i <= 3; ++i) if (tolower($i) ~ /nan|inf/) { print "row " NR ": non-finite " $i; bad = 1 } }
  END { exit bad }' "$WORK/$name/metrics.csv" || die "non-finite loss"
awk -F, 'NR == 2 { first = $2 } END { if (!(NR > 2 && $2 < first - 0.3)) { print "loss did not fall by 0.3: " first " -> " $2; exit 1 }
  print "loss " first " -> " $2 }' "$WORK/$name/metrics.csv" || die "training did not learn"
echo "ok: $np ranks, V=$vocab from the data set"
