#!/usr/bin/env bash
# model.init_from a Hugging Face model and `trainer-ckpt export --names
# distilbert|bert` back (issue 48), against share/reference/bert_torch.py.
#   bert_init_from.sh LAYOUT NP STAGE
# In $WORK/LAYOUT_npNP_sSTAGE:
#  1. data.h5: the classifier tests' labelled e-mails (make_text_fixture.sh) through
#     `trainer-data csv --seq-len 32` (the byte tokenizer; vocab_size from the file).
#  2. hf/: a random LAYOUT model in Hugging Face's files (bert_torch.py write-hf:
#     model.safetensors written by hand in the safetensors format, config.json;
#     the ...ForSequenceClassification names), max_position_embeddings 40.
#  3. init: the trainer at NP ranks and ZeRO stage STAGE starts from hf/ and takes
#     one step at lr 1e-30 (no weight decay; lr must be > 0, and 1e-30 moves no
#     float32 weight): its validation loss is the loss of hf/'s weights; the reference's over the same validation split must agree within
#     1e-5 (relative). The log names the Hugging Face names read.
#  4. tune: 20 steps at lr 1e-3 from hf/ with a checkpoint at step 20, exported
#     with --names LAYOUT into out/model.safetensors (config.json beside it): the
#     reference loads the folder by Hugging Face's names and reproduces the run's
#     step-20 validation loss within 1e-5.
#  5. base: hf_base/, the base model only (BertModel / DistilBertModel names, no
#     head): init_from starts and the log says which head tensors start fresh.
#     mlm: hf_mlm/, a pretraining checkpoint as published (DistilBertForMaskedLM /
#     BertForPreTraining: the masked-LM head's tensors beside the base model):
#     init_from skips that head, naming it, and starts the classifier fresh.
#  6. refusals (exit 2, the message naming the tensor or key): a tensor missing,
#     one misshapen, one extra, config.json with another n_heads.
# Environment (CTest): TRAINER, DATAGEN (trainer-data), CKPT_TOOL, WORK, MPIEXEC,
# NPFLAG, FIXTURE (make_text_fixture.sh), REF (bert_torch.py).
set -euo pipefail
layout=$1 np=$2 stage=$3
py=/usr/bin/python3
dir=$WORK/${layout}_np${np}_s${stage}
rm -rf "$dir" && mkdir -p "$dir"
die() { echo "FAIL: $*" >&2; exit 1; }

"$FIXTURE" "$dir/text.csv"
"$DATAGEN" csv "$dir/text.csv" "$dir/data.h5" --seq-len 32 --val-fraction 0.25 > /dev/null
vocab=$("$py" -c "import h5py,sys; f=h5py.File(sys.argv[1]); print(int(f.attrs['vocab_size']))" "$dir/data.h5")
"$py" "$REF" write-hf "$dir/hf" --layout "$layout" --vocab "$vocab" --dim 16 --layers 2 --heads 2 \
  --positions 40 --labels 2 --seed 5
cat > "$dir/run.toml" <<TOML
[model]
type = "encoder_classifier"
layout = "$layout"
n_layer = 2
n_head = 2
d_model = 16
seq_len = 32
max_positions = 40
layernorm_eps = 1e-12
pooling = "cls"
init_from = "$dir/hf"
[data]
path = "$dir/data.h5"
[train]
steps = 1
batch_size = 8
micro_batch = 2
seed = 3
eval_every = 1
log_every = 1
[optim]
lr = 1e-30
min_lr = 1e-30
warmup_steps = 0
weight_decay = 0.0
[parallel]
zero_stage = $stage
TOML
train() {  # NAME args...
  local name=$1; shift
  local rc=0
  timeout 300 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$dir/run.toml" --set train.run_dir="$dir/$name" "$@" \
    > "$dir/$name.log" 2>&1 || rc=$?
  [[ $rc -eq 0 ]] || { cat "$dir/$name.log"; die "trainer $name exited with $rc"; }
}
val_loss() { awk -F, -v s="$2" 'NR > 1 && $1 == s { print $3 }' "$1/metrics.csv"; }
close() {  # A B WHAT
  "$py" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); r = abs(a - b) / abs(b); \
print(f'{sys.argv[3]}: ours {a:.9g} reference {b:.9g} rel {r:.2g}'); sys.exit(0 if r <= 1e-5 else 1)" "$1" "$2" "$3" \
    || die "$3 differs by more than 1e-5"
}

# 3. init_from, one step at lr 1e-30.
train init
grep -q "Hugging Face $layout names" "$dir/init.log" || { cat "$dir/init.log"; die "the log does not name Hugging Face's names"; }
ref=$("$py" "$REF" eval "$dir/hf" "$dir/data.h5" --seq-len 32 | awk '{ print $2 }')
close "$(val_loss "$dir/init" 1)" "$ref" "validation loss from hf/"

# 4. fine-tune, export, reload.
train tune --set train.steps=20 --set train.eval_every=20 --set optim.lr=1e-3 --set optim.min_lr=1e-4 \
  --set checkpoint.every_steps=20
mkdir -p "$dir/out"
"$CKPT_TOOL" export "$dir/tune/checkpoints/step_00000020.h5" "$dir/out/model.safetensors" --names "$layout" \
  > "$dir/export.log"
[[ -s "$dir/out/config.json" ]] || die "no config.json beside the export"
ref=$("$py" "$REF" eval "$dir/out" "$dir/data.h5" --seq-len 32 | awk '{ print $2 }')
close "$(val_loss "$dir/tune" 20)" "$ref" "validation loss at step 20 from the export"
# The export reads back by init_from too (a round trip): the same validation loss at lr 1e-30.
train again --set model.init_from="$dir/out"
close "$(val_loss "$dir/again" 1)" "$ref" "validation loss from the export through init_from"

# 5. The base model: the head starts fresh, and the log says so.
"$py" "$REF" write-hf "$dir/hf_base" --layout "$layout" --vocab "$vocab" --dim 16 --layers 2 --heads 2 \
  --positions 40 --labels 2 --seed 5 --no-head > /dev/null
train base --set model.init_from="$dir/hf_base"
grep -q "initialised fresh: .*head.weight" "$dir/base.log" || { cat "$dir/base.log"; die "no fresh-head line"; }
# A pretraining checkpoint as published (DistilBertForMaskedLM / BertForPreTraining):
# its masked-LM head is skipped and named, the classifier starts fresh.
"$py" "$REF" write-hf "$dir/hf_mlm" --layout "$layout" --vocab "$vocab" --dim 16 --layers 2 --heads 2 \
  --positions 40 --labels 2 --seed 5 --mlm-head > /dev/null
train mlm --set model.init_from="$dir/hf_mlm"
mlm=$([[ $layout == bert ]] && echo "cls.predictions.decoder.weight" || echo "vocab_projector.weight")
grep -q "initialised fresh: .*head.weight.*pretraining head, not used: .*$mlm" "$dir/mlm.log" ||
  { cat "$dir/mlm.log"; die "no line naming the skipped pretraining head ($mlm) and the fresh classifier"; }

# 6. Refusals, each naming what is wrong.
refuse() {  # NAME EXPECTED-TEXT  (the folder $dir/NAME)
  local rc=0
  timeout 300 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$dir/run.toml" --set train.run_dir="$dir/r_$1" \
    --set model.init_from="$dir/$1" > "$dir/r_$1.log" 2>&1 || rc=$?
  [[ $rc -eq 2 ]] || { cat "$dir/r_$1.log"; die "$1: exit $rc, not 2"; }
  grep -q -- "$2" "$dir/r_$1.log" || { cat "$dir/r_$1.log"; die "$1: the message does not say '$2'"; }
  echo "refused $1: $(grep -m1 -- "$2" "$dir/r_$1.log")"
}
edit() {  # NAME PYTHON: a copy of hf/ with its tensors (dict t) or config (dict c) edited
  mkdir -p "$dir/$1"
  "$py" - "$REF" "$dir/hf" "$dir/$1" "$2" <<'PY'
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("bert_torch", sys.argv[1]); m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
src, dst, code = sys.argv[2:]
t = m.read_safetensors(os.path.join(src, "model.safetensors")); c = json.load(open(os.path.join(src, "config.json")))
exec(code)
m.write_safetensors(os.path.join(dst, "model.safetensors"), t); json.dump(c, open(os.path.join(dst, "config.json"), "w"))
PY
}
p=$([[ $layout == bert ]] && echo "bert.encoder.layer.1.attention.self.key" || echo "distilbert.transformer.layer.1.attention.k_lin")
edit missing "del t['$p.weight']"
refuse missing "tensor '$p.weight' is missing"
edit misshapen "import torch; t['$p.bias'] = torch.zeros(17)"
refuse misshapen "tensor '$p.bias' has shape (17,)"
edit extra "import torch; t['$layout.extra.weight'] = torch.zeros(3)"
refuse extra "$layout.extra.weight"
key=$([[ $layout == bert ]] && echo num_attention_heads || echo n_heads)
edit heads "c['$key'] = 4"
refuse heads "config.json has $key = 4"
echo PASS
