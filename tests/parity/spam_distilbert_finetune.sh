#!/usr/bin/env bash
# Issue 48's acceptance run: fine-tune a DistilBERT-shaped model from Hugging
# Face's files on SpamAssassin and check the export against PyTorch.
#   spam_distilbert_finetune.sh STEPS [DIR]
#  1. The data: $DATA, SpamAssassin (6,046 e-mails, headers stripped but the
#     Subject) imported by share/data/fetch-spamassassin.sh with BERT's WordPiece
#     and bert-base-uncased's real vocab.txt (30,522 tokens): each sample
#     [CLS] + pieces + [SEP] + [PAD], the file's cls_id / sep_id / pad_id 101 /
#     102 / 0, checked on every row here (the attributes and the layout of the
#     ids against `length`).
#  2. hf/: a random DistilBertForSequenceClassification written by PyTorch
#     (bert_torch.py write-hf: the state dict of Hugging Face's module tree, so
#     exactly transformers' names, in model.safetensors, and the config.json
#     keys transformers writes): vocab 30522, dim $DIM, $LAYERS layers, $HEADS
#     heads, hidden 4 x dim, 128 positions, 2 labels.
#  3. tune: the trainer at 2 ranks, model.init_from = hf/, STEPS steps of AdamW
#     (lr 1e-3, linear decay to 0, weight decay 0.01, dropout 0.1, 8 e-mails per
#     rank), the validation loss over the whole validation split at the last
#     step, a checkpoint there.
#  4. `trainer-ckpt export --names distilbert` into out/ (model.safetensors +
#     config.json): its tensor names and shapes are exactly hf/'s, and the
#     reference (bert_torch.py eval: float64, Hugging Face's module tree loaded
#     strictly by name) gives the run's last validation loss within 1e-5
#     (relative), and a lower one than hf/'s (the fine-tuning learned).
# Environment (CTest): TRAINER, CKPT_TOOL, MPIEXEC, NPFLAG, REF (bert_torch.py),
# DATA (the WordPiece SpamAssassin set, seq_len 64), WORK; optional DIM (64),
# LAYERS (2), HEADS (2).
set -euo pipefail
steps=${1:?usage: spam_distilbert_finetune.sh STEPS [DIR]}
dir=${2:-$WORK/spam_distilbert_s$steps}
dim=${DIM:-64} layers=${LAYERS:-2} heads=${HEADS:-2} np=2
py=/usr/bin/python3
die() { echo "FAIL: $*" >&2; exit 1; }
[[ -f $DATA ]] || die "$DATA: no SpamAssassin WordPiece set (share/data/fetch-spamassassin.sh ... --tokenizer wordpiece)"
rm -rf "$dir" && mkdir -p "$dir"

# 1. The data set's special ids and the layout of every sample.
seq_len=$("$py" - "$DATA" <<'PY'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
s = lambda v: v.decode() if isinstance(v, bytes) else v
a = f.attrs
assert s(a["tokenizer"]) == "wordpiece" and int(a["vocab_size"]) == 30522, dict(a)
assert (int(a["cls_id"]), int(a["sep_id"]), int(a["pad_id"])) == (101, 102, 0), \
    f"cls/sep/pad ids {int(a['cls_id'])}/{a.get('sep_id')}/{int(a['pad_id'])}, expected 101/102/0"
assert s(a["vocab_sha256"]) == "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3", a["vocab_sha256"]
T = int(a["sample_shape"][0])
for split in ("train", "val"):
    x, n = np.asarray(f[split + "/inputs"]).astype(np.int64), np.asarray(f[split + "/lengths"]).astype(np.int64)
    pos = np.arange(T)[None, :]
    assert (x[:, 0] == 101).all(), f"{split}: a sample does not start with [CLS]"
    assert (x[np.arange(len(x)), n - 1] == 102).all(), f"{split}: a sample has no [SEP] at length - 1"
    body = (pos > 0) & (pos < n[:, None] - 1)
    assert not np.isin(x[body], [0, 101, 102]).any(), f"{split}: [PAD]/[CLS]/[SEP] inside a text"
    assert (x[pos >= n[:, None]] == 0).all(), f"{split}: not [PAD] after length"
print(T)
PY
)
echo "data: $DATA, seq_len $seq_len, [CLS] ... [SEP] [PAD] on every row"

# 2. The pretrained model in Hugging Face's files.
"$py" "$REF" write-hf "$dir/hf" --layout distilbert --vocab 30522 --dim "$dim" --layers "$layers" \
  --heads "$heads" --positions 128 --labels 2 --seed 48

# 3. Fine-tune at 2 ranks.
cat > "$dir/run.toml" <<TOML
[model]
type = "encoder_classifier"
layout = "distilbert"
n_layer = $layers
n_head = $heads
d_model = $dim
seq_len = $seq_len
max_positions = 128
layernorm_eps = 1e-12
pooling = "cls"
dropout = 0.1
init_from = "$dir/hf"
[data]
path = "$DATA"
[train]
steps = $steps
batch_size = 16
micro_batch = 8
seed = 42
eval_every = $steps
log_every = 10
run_dir = "$dir/tune"
[optim]
lr = 1e-3
min_lr = 0.0
warmup_steps = 0
schedule = "linear"
weight_decay = 0.01
grad_clip = 1.0
[checkpoint]
every_steps = $steps
TOML
rc=0
start=$(date +%s.%N)
timeout 900 "$MPIEXEC" "$NPFLAG" $np "$TRAINER" "$dir/run.toml" > "$dir/tune.log" 2>&1 || rc=$?
secs=$("$py" -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$start")
[[ $rc -eq 0 ]] || { cat "$dir/tune.log"; die "trainer exited with $rc"; }
grep -q "Hugging Face distilbert names" "$dir/tune.log" || { cat "$dir/tune.log"; die "the log does not name Hugging Face's names"; }
ours=$(awk -F, -v s="$steps" 'NR > 1 && $1 == s && $3 != "" { print $3 }' "$dir/tune/metrics.csv")
[[ -n $ours ]] || { cat "$dir/tune/metrics.csv"; die "no validation loss at step $steps in metrics.csv"; }
echo "trained: $steps steps at $np ranks in $secs s, validation loss $ours"

# 4. Export under DistilBERT's names, then the reference on the export.
ckpt=$(printf "%s/tune/checkpoints/step_%08d.h5" "$dir" "$steps")
mkdir -p "$dir/out"
"$CKPT_TOOL" export "$ckpt" "$dir/out/model.safetensors" --names distilbert > "$dir/export.log"
[[ -s $dir/out/config.json ]] || die "no config.json beside the export"
# One Python (torch's import is most of its time): names, shapes, config, then
# the validation loss of out/ and of hf/ (bert_torch.py eval's computation).
"$py" - "$REF" "$dir/hf" "$dir/out" "$DATA" "$ours" <<'PY'
import contextlib, importlib.util, io, json, os, sys
spec = importlib.util.spec_from_file_location("bert_torch", sys.argv[1]); m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
hf, out, data, ours = sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
a, b = (m.read_safetensors(os.path.join(d, "model.safetensors")) for d in (hf, out))
shapes = lambda t: {n: tuple(v.shape) for n, v in t.items()}
if shapes(a) != shapes(b):
    sys.exit(f"FAIL: the export's names/shapes differ from hf/'s: {sorted(set(shapes(a).items()) ^ set(shapes(b).items()))}")
ca, cb = (json.load(open(os.path.join(d, "config.json"))) for d in (hf, out))
for k in ("model_type", "vocab_size", "dim", "n_layers", "n_heads", "hidden_dim", "max_position_embeddings"):
    if ca[k] != cb[k]:
        sys.exit(f"FAIL: config.json {k}: export {cb[k]}, hf/ {ca[k]}")
print(f"export: {len(b)} tensors, DistilBertForSequenceClassification's names and shapes; config.json agrees")
m.torch.set_num_threads(1)
def val_loss(d):
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        m.eval_cmd(m.argparse.Namespace(dir=d, data=data, seq_len=0))
    return float(text.getvalue().split()[1])
ref, start = val_loss(out), val_loss(hf)
r = abs(ours - ref) / abs(ref)
print(f"validation loss from the export: ours {ours:.9g} reference {ref:.9g} rel {r:.2g} "
      f"(hf/ before fine-tuning: {start:.6g})")
if not r <= 1e-5:
    sys.exit("FAIL: the reference's validation loss from the export differs by more than 1e-5")
if not ref < start:
    sys.exit(f"FAIL: fine-tuning did not lower the validation loss ({start:.6g} -> {ref:.6g})")
PY
echo PASS
