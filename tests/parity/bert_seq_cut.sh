#!/usr/bin/env bash
# model.seq_len below a WordPiece set's stored length (issue 48): the rows the
# model reads must be what BERT's tokenizer gives at that length, [CLS] + the
# first T - 2 pieces + [SEP], not the first T ids (which lose the [SEP]).
#   bert_seq_cut.sh
# In $WORK: the classifier tests' labelled e-mails (make_text_fixture.sh)
# imported with --tokenizer wordpiece at --seq-len 12 (long.h5) and at 8
# (short.h5), a random DistilBERT in Hugging Face's files (bert_torch.py
# write-hf), then:
#  1. bert_torch.py's cut of long.h5 to 8 (val_rows, what `eval --seq-len 8`
#     reads) equals short.h5's rows, ids and lengths: the reference's cut is the
#     importer's;
#  2. the trainer from the same weights (one step at lr 1e-30, which moves no
#     weight) on long.h5 with model.seq_len = 8 and on short.h5: the same
#     validation loss (relative 1e-6), and the reference's `eval --seq-len 8` of
#     long.h5 within 1e-5 of it.
# Environment (CTest): TRAINER, DATAGEN, VOCAB (bert-base-uncased's vocab.txt),
# FIXTURE (make_text_fixture.sh), REF (bert_torch.py), WORK.
set -euo pipefail
py=/usr/bin/python3
dir=$WORK
rm -rf "$dir" && mkdir -p "$dir"
die() { echo "FAIL: $*" >&2; exit 1; }

"$FIXTURE" "$dir/text.csv"
for t in 12 8; do
  name=$([[ $t == 12 ]] && echo long || echo short)
  "$DATAGEN" csv "$dir/text.csv" "$dir/$name.h5" --tokenizer wordpiece --vocab "$VOCAB" --seq-len $t \
    --val-fraction 0.25 > /dev/null
done
"$py" - "$REF" "$dir/long.h5" "$dir/short.h5" <<'PY'
import importlib.util, sys, h5py, numpy as np
spec = importlib.util.spec_from_file_location("bert_torch", sys.argv[1]); m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
tok, n, _ = m.val_rows(sys.argv[2], 8)
with h5py.File(sys.argv[3], "r") as f:
    want_tok, want_n = np.asarray(f["val/inputs"]).astype(np.int64), np.asarray(f["val/lengths"]).astype(np.int64)
cut = int((np.asarray(h5py.File(sys.argv[2], "r")["val/lengths"]) > 8).sum())
assert cut > 0, "no validation row of long.h5 is longer than 8: nothing is cut"
assert np.array_equal(n.numpy(), want_n), "lengths differ from the import at --seq-len 8"
assert np.array_equal(tok.numpy(), want_tok), \
    f"rows differ from the import at --seq-len 8: {tok.numpy()[~(tok.numpy() == want_tok).all(1)][:2]} vs " \
    f"{want_tok[~(tok.numpy() == want_tok).all(1)][:2]}"
print(f"reference cut: {len(want_n)} validation rows ({cut} cut) equal the import at --seq-len 8")
PY
"$py" "$REF" write-hf "$dir/hf" --layout distilbert --vocab 30522 --dim 16 --layers 1 --heads 2 \
  --positions 16 --labels 2 --seed 9 > /dev/null
train() {  # NAME DATA
  local rc=0
  cat > "$dir/$1.toml" <<TOML
[model]
type = "encoder_classifier"
layout = "distilbert"
n_layer = 1
n_head = 2
d_model = 16
seq_len = 8
max_positions = 16
layernorm_eps = 1e-12
pooling = "cls"
init_from = "$dir/hf"
[data]
path = "$2"
[train]
steps = 1
batch_size = 4
seed = 3
eval_every = 1
log_every = 1
[optim]
lr = 1e-30
min_lr = 1e-30
warmup_steps = 0
weight_decay = 0.0
TOML
  timeout 300 "$TRAINER" "$dir/$1.toml" --set train.run_dir="$dir/$1" > "$dir/$1.log" 2>&1 || rc=$?
  [[ $rc -eq 0 ]] || { cat "$dir/$1.log"; die "trainer $1 exited with $rc"; }
  awk -F, 'NR > 1 && $1 == 1 { print $3 }' "$dir/$1/metrics.csv"
}
long=$(train long "$dir/long.h5")
short=$(train short "$dir/short.h5")
ref=$("$py" "$REF" eval "$dir/hf" "$dir/long.h5" --seq-len 8 | awk '{ print $2 }')
"$py" - "$long" "$short" "$ref" <<'PY'
import sys
long, short, ref = map(float, sys.argv[1:])
a, b = abs(long - short) / abs(short), abs(long - ref) / abs(ref)
print(f"validation loss: long.h5 cut to 8 {long:.9g}, short.h5 {short:.9g} (rel {a:.2g}), reference {ref:.9g} (rel {b:.2g})")
if not a <= 1e-6:
    sys.exit("FAIL: model.seq_len = 8 on long.h5 is not the import at --seq-len 8")
if not b <= 1e-5:
    sys.exit("FAIL: the reference's loss of long.h5 cut to 8 differs by more than 1e-5")
PY
echo PASS
