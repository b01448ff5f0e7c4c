#!/usr/bin/env bash
# trainer-ckpt sample, end to end (tests/e2e/ckpt/CMakeLists.txt).
#   sample_e2e.sh char TRAINER TRAINER_DATA TRAINER_CKPT TINY_TOML TINY_TXT WORK
#     A character GPT (tiny.toml, seq_len 16) trained 1500 steps (1 s) on tests/data/tiny.txt:
#     greedy decoding of 200 tokens from two prompts (together at least 8 distinct
#     characters; the window restarts many times) and their log-probability (relative 1e-9) equal PyTorch's
#     greedy decoding from the exported weights (share/reference/gpt_torch.py
#     generate); the same seed gives the same text, another seed another; with and
#     without the key/value cache the same text; the refusals (a prompt character
#     outside the vocabulary, a missing data set, bad options). Sampling from the
#     checkpoint's three exports (safetensors under our and GPT-2's names, HDF5)
#     gives its ids and log-probability, the model's sizes read from their metadata.
#   sample_e2e.sh gpt2 TRAINER TRAINER_DATA TRAINER_CKPT TINY_TOML MOBYDICK_TXT WORK BPE_DIR
#     The three commands of the README: Moby Dick tokenized with GPT-2's BPE, a
#     small GPT trained on it at 2 ranks (the loss falls), a sample from its
#     checkpoint with a prompt (encoded with --bpe) that starts with the prompt;
#     greedy decoding equals PyTorch's here too (vocabulary 50257; after 60 steps
#     the greedy text is mostly commas, so only the char case demands variety).
# Environment: MPIEXEC, NPFLAG, the MPI variables (CTest).
set -euo pipefail
mode=$1 trainer=$2 td=$3 tc=$4 toml=$5 text=$6 work=$7 bpe=${8:-}
py=/usr/bin/python3
ref=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)/share/reference/gpt_torch.py
die() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work"

expect_fail() {  # PATTERN COMMAND...: exit 2 and PATTERN in the one error line
  local pattern=$1 rc=0
  shift
  "$@" > "$work/fail.out" 2> "$work/fail.err" || rc=$?
  [[ $rc == 2 ]] || die "$* exited $rc, expected 2: $(cat "$work/fail.err")"
  grep -qE -e "$pattern" "$work/fail.err" || die "$*: stderr lacks '$pattern': $(cat "$work/fail.err")"
  echo "ok: refused: $(cat "$work/fail.err")"
}

greedy_vs_torch() {  # CKPT L H C T V PROMPT MIN_DISTINCT [sample args]: 200 greedy tokens, ours == PyTorch's
  local ck=$1 L=$2 H=$3 C=$4 T=$5 V=$6 prompt=$7 min_distinct=$8; shift 8
  "$tc" sample "$ck" --prompt "$prompt" --tokens 200 --temperature 0 --ids "$@" > "$work/ours.ids"
  "$tc" export "$ck" "$work/weights.h5" > /dev/null
  "$py" "$ref" generate "$work/weights.h5" --n-layer "$L" --n-head "$H" --d-model "$C" --seq-len "$T" \
    --vocab "$V" --tokens 200 --prompt-ids "$(sed -n 's/^prompt_ids: //p' "$work/ours.ids")" > "$work/torch.ids"
  local ours theirs
  ours=$(grep '^ids:' "$work/ours.ids") theirs=$(grep '^ids:' "$work/torch.ids")
  [[ $(wc -w <<< "$ours") == 201 ]] || die "expected 200 ids: $ours"
  [[ "$ours" == "$theirs" ]] || die "greedy decoding differs from PyTorch's:
ours:  $ours
torch: $theirs"
  [[ $(tr ' ' '\n' <<< "${ours#ids: }" | sort -u | wc -l) -ge $min_distinct ]] ||
    die "the greedy text is degenerate (fewer than $min_distinct distinct ids): $ours"
  local lo lt
  lo=$(sed -n 's/^logprob: //p' "$work/ours.ids") lt=$(sed -n 's/^logprob: //p' "$work/torch.ids")
  awk -v a="$lo" -v b="$lt" 'BEGIN { d = a - b; if (d < 0) d = -d; m = (b < 0 ? -b : b); if (m < 1) m = 1
    if (!(d <= 1e-9 * m)) { printf "log-probabilities differ: ours %s, PyTorch %s\n", a, b; exit 1 } }' ||
    die "the logits differ from PyTorch's"
  echo "ok: log-probability of the 200 tokens $lo, PyTorch $lt (relative tolerance 1e-9)"
  echo "ok: 200 greedy tokens equal PyTorch's ($(tr ' ' '\n' <<< "${ours#ids: }" | sort -u | wc -l) distinct ids)"
}

if [[ $mode == char ]]; then
  "$td" text "$text" "$work/tiny.h5" > /dev/null
  "$MPIEXEC" "$NPFLAG" 1 "$trainer" "$toml" --set data.path="$work/tiny.h5" --set train.run_dir="$work/run" \
    --set train.steps=1500 --set checkpoint.every_steps=1500 --set optim.lr=1e-2 --set optim.min_lr=1e-3 \
    > "$work/train.log" 2>&1 || { cat "$work/train.log"; die "training failed"; }
  ck=$work/run/checkpoints/step_00001500.h5
  [[ -f $ck ]] || die "no checkpoint $ck"
  vocab=$("$py" -c "import h5py,sys; print(int(h5py.File(sys.argv[1])['/'].attrs['vocab_size']))" "$work/tiny.h5")
  # Two prompts, each equal to PyTorch's; together at least 8 distinct characters.
  # One prompt alone may settle into a short loop (" the the": 6 characters after
  # this training on an AVX2-only Zen 3, where oneDNN's kernels round differently
  # from AVX-512 ones), which would compare little of the model.
  greedy_vs_torch "$ck" 2 4 32 16 "$vocab" "Call me" 2
  cp "$work/ours.ids" "$work/call_me.ids"
  greedy_vs_torch "$ck" 2 4 32 16 "$vocab" "Ishmael" 2
  distinct=$(cat "$work/call_me.ids" "$work/ours.ids" | sed -n 's/^ids: //p' | tr ' ' '\n' | sort -u | wc -l)
  [[ $distinct -ge 8 ]] || die "the greedy texts of both prompts are degenerate (together $distinct < 8 distinct ids)"
  echo "ok: the two greedy texts hold $distinct distinct ids together"

  # From its exports (the dims from their metadata, the data set from data_path): the same ids and log-probability.
  "$tc" sample "$ck" --prompt "Call me" --tokens 60 --temperature 0.8 --seed 3 --ids > "$work/ck.ids"
  "$tc" export "$ck" "$work/ours.safetensors" > /dev/null
  "$tc" export "$ck" "$work/gpt2.safetensors" --names gpt2 > /dev/null
  "$tc" export "$ck" "$work/ours.h5" > /dev/null
  for f in ours.safetensors gpt2.safetensors ours.h5; do
    "$tc" sample "$work/$f" --prompt "Call me" --tokens 60 --temperature 0.8 --seed 3 --ids > "$work/$f.ids" 2> "$work/$f.err"
    cmp -s "$work/ck.ids" "$work/$f.ids" || die "sample from $f differs from the checkpoint's: $(diff "$work/ck.ids" "$work/$f.ids")"
    grep -q "export of step 1500" "$work/$f.err" || die "the speed line does not name the export: $(cat "$work/$f.err")"
  done
  echo "ok: sample from ours.safetensors, gpt2.safetensors and ours.h5 == from the checkpoint (ids and log-probability)"
  "$py" - "$work/ours.safetensors" "$work/nohead.safetensors" <<'PY'
import json, sys
data = open(sys.argv[1], "rb").read(); n = int.from_bytes(data[:8], "little"); h = json.loads(data[8:8 + n])
del h["__metadata__"]["n_head"]
t = json.dumps(h).encode(); t += b" " * (-len(t) % 8)
open(sys.argv[2], "wb").write(len(t).to_bytes(8, "little") + t + data[8 + n:])
PY
  expect_fail "nohead\.safetensors: the file records no n_head" "$tc" sample "$work/nohead.safetensors" --prompt "a" --tokens 3

  "$tc" sample "$ck" --prompt "Call me" --tokens 120 --temperature 0.9 --top-k 10 --seed 5 > "$work/a.txt" 2> "$work/a.err"
  "$tc" sample "$ck" --prompt "Call me" --tokens 120 --temperature 0.9 --top-k 10 --seed 5 > "$work/b.txt" 2> /dev/null
  "$tc" sample "$ck" --prompt "Call me" --tokens 120 --temperature 0.9 --top-k 10 --seed 5 --no-cache > "$work/c.txt" 2> "$work/c.err"
  "$tc" sample "$ck" --prompt "Call me" --tokens 120 --temperature 0.9 --top-k 10 --seed 6 > "$work/d.txt" 2> /dev/null
  cat "$work/a.txt" "$work/a.err" "$work/c.err"
  cmp -s "$work/a.txt" "$work/b.txt" || die "the same seed gave two texts"
  cmp -s "$work/a.txt" "$work/c.txt" || die "with and without the key/value cache the texts differ"
  ! cmp -s "$work/a.txt" "$work/d.txt" || die "seeds 5 and 6 gave the same text"
  [[ $(head -c 7 "$work/a.txt") == "Call me" ]] || die "the text does not start with the prompt"
  [[ $(wc -m < "$work/a.txt") == $((7 + 120 + 1)) ]] || die "expected 7 + 120 characters and a newline: $(wc -m < "$work/a.txt")"
  grep -q "key/value cache" "$work/a.err" && grep -q "no cache" "$work/c.err" || die "the speed line does not say which loop ran"
  echo "ok: same seed same text, cache == no cache, another seed another text"

  expect_fail "character 'Z' at byte offset 4 is not in the vocabulary" \
    "$tc" sample "$ck" --prompt "The Zebra" --tokens 5
  expect_fail "--prompt is needed: a char data set has no start token" "$tc" sample "$ck" --tokens 5
  expect_fail "nowhere\.h5: no such file \(the data set of --data" "$tc" sample "$ck" --prompt "a" --data "$work/nowhere.h5"
  expect_fail "--tokens must be at least 1" "$tc" sample "$ck" --prompt "a" --tokens 0
  expect_fail "--temperature must be >= 0" "$tc" sample "$ck" --prompt "a" --temperature -1
  "$td" text "$text" "$work/tiny_byte.h5" --tokenizer byte > /dev/null
  expect_fail "tiny_byte\.h5: vocab_size 256 \(byte\) differs from the model's" \
    "$tc" sample "$ck" --prompt "a" --data "$work/tiny_byte.h5"
  echo PASS
  exit 0
fi

[[ $mode == gpt2 ]] || die "mode must be char or gpt2"
[[ -f $bpe/encoder.json ]] || die "$bpe: no GPT-2 BPE files (share/data/fetch-gpt2-bpe.sh $bpe)"
# The README's three commands, small: tokenize, train (2 ranks), sample.
"$td" text "$text" "$work/moby-gpt2.h5" --tokenizer gpt2 --bpe "$bpe" | tee "$work/tokenize.out"
"$MPIEXEC" "$NPFLAG" 2 "$trainer" "$toml" --set data.path="$work/moby-gpt2.h5" --set train.run_dir="$work/run" \
  --set model.seq_len=32 --set train.steps=60 --set train.eval_every=30 --set checkpoint.every_steps=60 \
  > "$work/train.log" 2>&1 || { cat "$work/train.log"; die "training failed"; }
grep -q "V=50257" "$work/train.log" || die "the model's vocabulary is not GPT-2's: $(grep -m1 'GPT L=' "$work/train.log")"
awk -F, 'NR == 2 { first = $2 } END { if (!(NR > 2 && $2 < first - 1.0)) { print "loss did not fall by 1 nat: " first " -> " $2; exit 1 }
  print "ok: loss " first " -> " $2 }' "$work/run/metrics.csv" || die "training did not learn"
ck=$work/run/checkpoints/step_00000060.h5
"$tc" sample "$ck" --prompt "Call me Ishmael." --tokens 30 --seed 1 --bpe "$bpe" > "$work/sample.txt" 2> "$work/sample.err"
cat "$work/sample.txt" "$work/sample.err"
[[ $(head -c 16 "$work/sample.txt") == "Call me Ishmael." ]] || die "the sample does not start with the prompt"
grep -q "gpt2 data set" "$work/sample.err" || die "the speed line does not name the gpt2 data set"
"$tc" sample "$ck" --tokens 10 --seed 1 > /dev/null 2>&1 || die "sampling from <|endoftext|> (no prompt) failed"
greedy_vs_torch "$ck" 2 4 32 32 50257 "It was the best of times, it was the worst of times" 1 --bpe "$bpe"
expect_fail "--bpe DIR is needed to encode a prompt for a gpt2 data set" "$tc" sample "$ck" --prompt "Hi" --tokens 3
mkdir -p "$work/otherbpe"
"$py" - "$bpe/encoder.json" "$work/otherbpe/encoder.json" <<'PY'
import json, sys
e = json.load(open(sys.argv[1], encoding="utf-8"))
a, b = "Ġthe", "Ġand"
e[a], e[b] = e[b], e[a]
json.dump(e, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
PY
cp "$bpe/vocab.bpe" "$work/otherbpe/"
expect_fail "otherbpe/encoder\.json does not match the vocabulary of .*moby-gpt2\.h5 \(50257 vs 50257 tokens; first difference at id 262\)" \
  "$tc" sample "$ck" --prompt "Hi" --tokens 3 --bpe "$work/otherbpe"
echo PASS
