#!/usr/bin/env bash
# `trainer-ckpt export --format safetensors`, read back by an independent reader
# (safetensors_read.py: header length, JSON header, offsets contiguous and
# covering the file exactly). The trainer trains the tiny GPT 20 steps with a
# checkpoint at step 20, as in torch_loads_weights.sh; then:
#  - --names gpt2: the reader maps Hugging Face GPT-2's names back to ours
#    (Conv1D weights transposed back) for share/reference/gpt_torch.py, whose
#    first-step loss on the same seeded windows is bitwise the loss from the
#    checkpoint itself (torch_loads_weights.sh's check), and clearly below the
#    loss from random weights; and its pass over the validation split
#    (gpt_torch.py eval) gives our trainer's final validation loss (relative 1e-5);
#  - the config.json written beside it, read with the file by share/gpu/hf_check.py
#    (transformers' GPT2LMHeadModel on the GPU machine; its plain-PyTorch stand-in
#    here) gives the same loss (relative 1e-4), and fails on a transposed weight;
#  - a GPT-2 file with a tensor missing, or with a wrong shape, is refused
#    naming the tensor, and so is one whose offsets leave a gap;
#  - default names: bitwise the `trainer-ckpt export` .h5 of the same checkpoint;
#    GPT-2 names, mapped back: bitwise too, here and for a one-step GPT wide
#    enough (d_model 576) that the transposed weights are copied in several
#    row blocks of 2^20 elements (c_fc's 2304 rows of 576 in blocks of 1820);
#  - exit 2 and a message naming the file or option: a missing checkpoint, an
#    unknown --format, --names gpt2 on a non-GPT checkpoint (the GPT's with its
#    stored config's model.type changed to "mlp").
# Usage: torch_loads_safetensors.sh TRAINER TRAINER_CKPT INPUT DATA WORK
set -euo pipefail
trainer=$1 ckpt_tool=$2 input=$3 data=$4 work=$5
here=$(cd "$(dirname "$0")" && pwd)
reference=$here/../../share/reference/gpt_torch.py
reader=$here/safetensors_read.py
die() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=tiny_gpt_lib.sh
source "$here/tiny_gpt_lib.sh"  # train_tiny_checkpoint, first_loss
rm -rf "$work"; mkdir -p "$work"
train_tiny_checkpoint
vocab=$(/usr/bin/python3 -c 'import h5py, sys; print(h5py.File(sys.argv[1], "r")["vocab"].shape[0])' "$data")
shape=(--vocab "$vocab" --n-layer 2 --n-embd 32 --n-positions 16 --n-head 4)  # inputs/tiny.toml

# --names gpt2 -> our names -> the reference's loss.
"$ckpt_tool" export "$ckpt" "$work/gpt2.safetensors" --format safetensors --names gpt2 > /dev/null ||
  die "trainer-ckpt export --names gpt2 failed"
[[ ! -e $work/gpt2.safetensors.partial ]] || die "export left gpt2.safetensors.partial behind"
/usr/bin/python3 "$reader" gpt2-to-h5 "$work/gpt2.safetensors" "$work/from_gpt2.h5" "${shape[@]}" ||
  die "the reader refused the GPT-2 export"
from_ckpt=$(first_loss --init "$ckpt")
from_gpt2=$(first_loss --init "$work/from_gpt2.h5")
from_random=$(first_loss)
echo "step-1 loss: from the checkpoint $from_ckpt, from its GPT-2 safetensors export $from_gpt2, from random weights $from_random"
[[ -n $from_ckpt && $from_ckpt == "$from_gpt2" ]] || die "the checkpoint and its GPT-2 export give different losses"
awk -v a="$from_ckpt" -v r="$from_random" 'BEGIN { exit !(a < r - 0.3) }' ||
  die "the loaded weights predict no better than random ones"
# ... and PyTorch on the GPT-2 file's tensors reaches our trainer's loss: the
# trainer's final validation loss (metrics.csv, step 20: the weights of the
# checkpoint) against the reference's pass over the same windows of the
# validation split. fp32 both; sums in another order: relative 1e-5 (measured
# below 1e-6 on this model).
ours=$(awk -F, 'NR > 1 && $1 == 20 { print $3 }' "$work/run/metrics.csv")
theirs=$(/usr/bin/python3 "$reference" eval "$data" --n-layer 2 --n-head 4 --d-model 32 --seq-len 16 \
         --init "$work/from_gpt2.h5" | awk '$1 == "eval_loss" { print $2 }')
echo "validation loss: our trainer $ours, PyTorch on the GPT-2 safetensors export $theirs"
[[ -n $ours && -n $theirs ]] || die "no validation loss from the trainer ($ours) or the reference ($theirs)"
awk -v a="$ours" -v b="$theirs" 'BEGIN { d = (a - b) / a; if (d < 0) d = -d; exit !(d <= 1e-5) }' ||
  die "PyTorch on the export does not reach our trainer's validation loss"

# The export as Hugging Face's GPT2LMHeadModel.from_pretrained(folder) reads it:
# model.safetensors with config.json beside it (written by the export), checked
# by share/gpu/hf_check.py. transformers is not installed here, so its stand-in
# runs: a GPT-2 from config.json and the tensors under their Hugging Face names
# and layouts; it must reach our trainer's validation loss (relative 1e-4; the
# GPU machine runs the same script with transformers). Planted error: attention
# c_proj of layer 0 transposed in the file (square, so no shape check sees it):
# the loss check must fail.
hf_check=$here/../../share/gpu/hf_check.py
mkdir -p "$work/hf"
"$ckpt_tool" export "$ckpt" "$work/hf/model.safetensors" --format safetensors --names gpt2 > "$work/hf.log" ||
  die "trainer-ckpt export into $work/hf failed"
[[ -f $work/hf/config.json ]] || die "export --names gpt2 wrote no config.json beside model.safetensors"
[[ ! -e $work/config.json ]] || die "export --names gpt2 to gpt2.safetensors (not model.safetensors) wrote $work/config.json"
/usr/bin/python3 - "$work/hf/config.json" <<'PY' || die "config.json does not describe the tiny GPT as GPT2Config"
import json, sys
c = json.load(open(sys.argv[1]))
want = {"model_type": "gpt2", "n_layer": 2, "n_head": 4, "n_embd": 32, "n_positions": 16, "activation_function": "gelu_new",
        "tie_word_embeddings": True, "resid_pdrop": 0.0, "layer_norm_epsilon": 1e-5}
bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v}
sys.exit(f"config.json: {bad}" if bad else 0)
PY
/usr/bin/python3 "$hf_check" "$work/hf" "$data" --expect "$ours" --client stand-in --threads 1 | tee "$work/hf_check.log" ||
  die "share/gpu/hf_check.py (stand-in) does not reach our trainer's validation loss on the export"
mkdir -p "$work/hf_planted"
cp "$work/hf/config.json" "$work/hf_planted/"
/usr/bin/python3 - "$work/hf/model.safetensors" "$work/hf_planted/model.safetensors" <<'PY'
import json, sys
import numpy as np
d = bytearray(open(sys.argv[1], "rb").read())
n = int.from_bytes(d[:8], "little")
t = json.loads(d[8:8 + n])["transformer.h.0.attn.c_proj.weight"]
b, e = (8 + n + x for x in t["data_offsets"])
d[b:e] = np.ascontiguousarray(np.frombuffer(bytes(d[b:e]), "<f4").reshape(t["shape"]).T).tobytes()
open(sys.argv[2], "wb").write(d)
PY
rc=0
/usr/bin/python3 "$hf_check" "$work/hf_planted" "$data" --expect "$ours" --client stand-in --threads 1 > "$work/hf_planted.log" || rc=$?
cat "$work/hf_planted.log"
[[ $rc -eq 1 ]] || die "hf_check.py passed (rc $rc) an export with layer 0's attention c_proj transposed"

# Broken GPT-2 files, made by editing a good one's header: each is refused by name.
/usr/bin/python3 - "$work/gpt2.safetensors" "$work" <<'PY'
import json, struct, sys
src, work = sys.argv[1], sys.argv[2]
data = open(src, "rb").read()
(n,) = struct.unpack("<Q", data[:8])
header, body = json.loads(data[8:8 + n]), data[8 + n:]

def write(path, header, body):
    text = json.dumps(header).encode()
    text += b" " * (-(8 + len(text)) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + body)

# A tensor missing: its entry and its bytes gone, the later offsets moved down.
gone = "transformer.h.1.mlp.c_fc.bias"
b, e = header[gone]["data_offsets"]
h = {k: v for k, v in header.items() if k != gone}
for k, v in h.items():
    if k != "__metadata__" and v["data_offsets"][0] >= e:
        v["data_offsets"] = [v["data_offsets"][0] - (e - b), v["data_offsets"][1] - (e - b)]
write(f"{work}/missing.safetensors", h, body[:b] + body[e:])
# A wrong shape, same bytes: c_attn as our (3C, C) instead of Conv1D's (C, 3C).
h = json.loads(data[8:8 + n])
h["transformer.h.0.attn.c_attn.weight"]["shape"] = h["transformer.h.0.attn.c_attn.weight"]["shape"][::-1]
write(f"{work}/shape.safetensors", h, body)
# A gap: one tensor's bytes one float later (the file one float longer).
h = json.loads(data[8:8 + n])
last = max((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][0])
h[last]["data_offsets"] = [x + 4 for x in h[last]["data_offsets"]]
write(f"{work}/gap.safetensors", h, body + b"\0\0\0\0")
print(last, file=open(f"{work}/gap.name", "w"))
PY
refused() {  # FILE TEXT: the reader refuses FILE with a message holding TEXT
  local msg
  msg=$(/usr/bin/python3 "$reader" gpt2-to-h5 "$work/$1" "$work/x.h5" "${shape[@]}" 2>&1) &&
    die "$1 was accepted"
  grep -qF -- "$2" <<< "$msg" || die "the refusal of $1 does not say \"$2\": $msg"
  echo "refused as it should: $msg"
}
refused missing.safetensors "missing ['transformer.h.1.mlp.c_fc.bias']"
refused shape.safetensors "transformer.h.0.attn.c_attn.weight has shape (96, 32), GPT-2's is (32, 96)"
refused gap.safetensors "$(cat "$work/gap.name"): data_offsets begin at"

# Default names: bitwise the HDF5 export of the same checkpoint.
"$ckpt_tool" export "$ckpt" "$work/ours.safetensors" > /dev/null || die "trainer-ckpt export .safetensors failed"
"$ckpt_tool" export "$ckpt" "$work/ours.h5" > /dev/null || die "trainer-ckpt export .h5 failed"
/usr/bin/python3 "$reader" compare "$work/ours.safetensors" "$work/ours.h5" ||
  die "the default-names export differs from the HDF5 export"

# GPT-2 names mapped back: bitwise the .h5 export too, for the tiny GPT and a wide one.
same_h5() {  # A.h5 B.h5: the same datasets, bitwise
  /usr/bin/python3 - "$1" "$2" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "r") as b:
    if set(a) != set(b):
        raise SystemExit(f"names differ: {sorted(set(a) ^ set(b))}")
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            raise SystemExit(f"{k}: differs ({x.shape} {x.dtype} vs {y.shape} {y.dtype})")
    print(f"{sys.argv[1]}: {len(a)} tensors bitwise as in {sys.argv[2]}")
PY
}
same_h5 "$work/from_gpt2.h5" "$work/ours.h5" || die "the GPT-2 export, mapped back, differs from the HDF5 export"
"$trainer" "$input" --set data.path="$data" --set train.run_dir="$work/wide" --set model.d_model=576 \
  --set model.n_layer=1 --set train.steps=1 --set checkpoint.every_steps=1 --set train.eval_every=0 \
  > "$work/wide.log" 2>&1 || die "trainer (d_model 576) failed: $(tail -3 "$work/wide.log")"
wide=$work/wide/checkpoints/$(cat "$work/wide/checkpoints/latest")
"$ckpt_tool" export "$wide" "$work/wide.safetensors" --names gpt2 > /dev/null || die "export (d_model 576) failed"
"$ckpt_tool" export "$wide" "$work/wide.h5" > /dev/null || die "export .h5 (d_model 576) failed"
/usr/bin/python3 "$reader" gpt2-to-h5 "$work/wide.safetensors" "$work/wide_back.h5" --vocab "$vocab" --n-layer 1 \
  --n-embd 576 --n-positions 16 --n-head 4 || die "the reader refused the d_model 576 GPT-2 export"
same_h5 "$work/wide_back.h5" "$work/wide.h5" || die "the d_model 576 GPT-2 export, mapped back, differs"

# Bad input: exit 2 and a message naming the file or option.
bad() {  # TEXT ARGS...: trainer-ckpt ARGS exits 2 with one error line holding TEXT
  local msg rc=0
  msg=$("$ckpt_tool" "${@:2}" 2>&1) || rc=$?
  [[ $rc == 2 ]] || die "trainer-ckpt ${*:2}: exit $rc, not 2: $msg"
  grep -qF -- "$1" <<< "$msg" || die "trainer-ckpt ${*:2}: the error does not say \"$1\": $msg"
  echo "exit 2 as it should: $msg"
}
bad "$work/none.h5: cannot open" export "$work/none.h5" "$work/x.safetensors" --format safetensors
bad "--format: json not in" export "$ckpt" "$work/x.safetensors" --format json
/usr/bin/python3 - "$ckpt" "$work/mlp.h5" <<'PY'
import shutil, sys, zlib
import h5py, numpy as np
shutil.copyfile(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    text = f["config"][()]
    changed = text.replace(b'type = "gpt"', b'type = "mlp"', 1)
    assert changed != text and len(changed) == len(text)
    f["config"][()] = np.bytes_(changed)
    f["config"].attrs["crc32"] = np.uint32(zlib.crc32(changed.rstrip(b"\0")))
PY
bad "$work/mlp.h5: --names gpt2 needs a GPT checkpoint; this one's model.type is \"mlp\"" \
  export "$work/mlp.h5" "$work/x.safetensors" --format safetensors --names gpt2
[[ ! -e $work/x.safetensors && ! -e $work/x.safetensors.partial ]] || die "a refused export left a file behind"
echo "PASS: safetensors exports read back by an independent reader; the GPT-2 one gives the checkpoint's loss"
