#!/usr/bin/env bash
# share/reference/gpt_torch.py loads our weights by name from one of our
# checkpoints and from a `trainer-ckpt export` file (label parity): the trainer
# trains the tiny GPT 20 steps with a checkpoint at step 20; the reference's
# first-step loss on the same seeded windows is then bitwise the same from the
# checkpoint and from its export, and clearly below the loss from random
# weights (a load that silently kept random weights, or mixed tensors up, fails).
# Usage: torch_loads_weights.sh TRAINER TRAINER_CKPT INPUT DATA WORK
set -euo pipefail
trainer=$1 ckpt_tool=$2 input=$3 data=$4 work=$5
reference=$(cd "$(dirname "$0")/../.." && pwd)/share/reference/gpt_torch.py
die() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=tiny_gpt_lib.sh
source "$(dirname "$0")/tiny_gpt_lib.sh"  # train_tiny_checkpoint, first_loss
rm -rf "$work"; mkdir -p "$work"
train_tiny_checkpoint
"$ckpt_tool" export "$ckpt" "$work/weights.h5" > /dev/null || die "trainer-ckpt export failed"
from_ckpt=$(first_loss --init "$ckpt")
from_export=$(first_loss --init "$work/weights.h5")
from_random=$(first_loss)
echo "step-1 loss: from the checkpoint $from_ckpt, from its export $from_export, from random weights $from_random"
[[ -n $from_ckpt && $from_ckpt == "$from_export" ]] || die "the checkpoint and its export give different losses"
awk -v a="$from_ckpt" -v r="$from_random" 'BEGIN { exit !(a < r - 0.3) }' ||
  die "the loaded weights predict no better than random ones"
# A file with a tensor missing is refused, naming it.
/usr/bin/python3 - "$work/weights.h5" "$work/broken.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as src, h5py.File(sys.argv[2], "w") as dst:
    for k in src:
        if k != "wpe.weight":
            src.copy(k, dst)
PY
msg=$(/usr/bin/python3 "$reference" train "$data" --n-layer 2 --n-head 4 --d-model 32 --seq-len 16 --batch 8 \
  --steps 1 --init "$work/broken.h5" 2>&1) && die "a file without wpe.weight was accepted"
grep -qF "missing ['wpe.weight']" <<< "$msg" || die "the refusal does not name wpe.weight: $msg"
echo "PASS: gpt_torch.py loads our checkpoint and its export by name"
