#!/usr/bin/env bash
# trainer-ckpt sample: tokens/s with the key/value cache against a cache-less loop
# (--no-cache: the whole context re-run for every token), same tokens checked.
#   sample_speed.sh [--check] TRAINER TRAINER_DATA TRAINER_CKPT TINY_TXT
# The model: the quickstart's shape with a longer context (4 layers, d_model 128,
# 4 heads, seq_len 256) on characters of tests/data/tiny.txt, trained 2 steps
# (speed does not depend on the weights). 320 tokens after a 1-character prompt,
# so window restarts (every 128 tokens past 256) are included; best of 3 with the
# cache, one run without (about 30 s).
# --check fails when the cache is under 5x the cache-less loop.
set -euo pipefail
check=0
[[ ${1:-} == --check ]] && { check=1; shift; }
trainer=$1 td=$2 tc=$3 text=$4
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
die() { echo "FAIL: $*" >&2; exit 1; }
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export HDF5_USE_FILE_LOCKING=FALSE
work=$(mktemp -d /tmp/sample_speed.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$td" text "$text" "$work/tiny.h5" --val-fraction 0.5 > /dev/null
"$trainer" "$root/inputs/tiny.toml" --set data.path="$work/tiny.h5" --set train.run_dir="$work/run" \
  --set model.n_layer=4 --set model.d_model=128 --set model.seq_len=256 --set train.batch_size=2 \
  --set train.micro_batch=1 --set train.steps=2 --set train.eval_every=2 --set checkpoint.every_steps=2 \
  > "$work/train.log" 2>&1 || { cat "$work/train.log"; die "training failed"; }
ck=$work/run/checkpoints/step_00000002.h5
best() {  # RUNS ARGS...: the best tokens/s of RUNS runs; the ids in $work/idsARGS
  local b=0 r runs=$1
  shift
  for _ in $(seq "$runs"); do
    "$tc" sample "$ck" --prompt "C" --tokens 320 --temperature 0.8 --seed 1 --ids "$@" > "$work/ids$*" 2> "$work/err"
    r=$(sed -n 's/.* (\([0-9.]*\) tokens\/s.*/\1/p' "$work/err")
    b=$(awk -v a="$r" -v b="$b" 'BEGIN { print (a > b) ? a : b }')
  done
  echo "$b"
}
cached=$(best 3)
uncached=$(best 1 --no-cache)
cmp -s "$work/ids" "$work/ids--no-cache" || die "the cached and cache-less loops gave different tokens"
ratio=$(awk -v a="$cached" -v b="$uncached" 'BEGIN { printf "%.1f", a / b }')
echo "trainer-ckpt sample, GPT L=4 C=128 H=4 T=256 (char, V=$(grep -o 'V=[0-9]*' "$work/train.log" | head -1 | cut -d= -f2)), 320 tokens, one process:"
echo "  key/value cache: $cached tokens/s (best of 3)"
echo "  no cache:        $uncached tokens/s"
echo "  ratio: ${ratio}x (goal >= 5x)"
if (( check )) && awk -v r="$ratio" 'BEGIN { exit !(r < 5) }'; then die "the cache is only ${ratio}x the cache-less loop"; fi
echo ok
