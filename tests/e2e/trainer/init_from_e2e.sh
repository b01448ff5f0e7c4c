#!/usr/bin/env bash
# model.init_from end to end (tests/e2e/trainer/CMakeLists.txt).
#   init_from_e2e.sh source
#     The fixture, in $WORK/init_from: a tiny GPT trained 20 steps at 1 rank with a
#     checkpoint at step 20 (ck.h5), its three exports (ours.safetensors,
#     gpt2.safetensors with --names gpt2, ours.h5), and const.h5: the tiny data set
#     with its training split replaced by one token repeated, so that every window
#     the sampler draws is the same one, at any step: a run resumed at step 20 and a
#     run started from the export then train their first step on the same batch.
#   init_from_e2e.sh equal NP STAGE
#     At NP ranks and ZeRO stage STAGE, for each export: the run started from it
#     logs the weights CRC of the source run's step 20 (every weight bitwise), and
#     its step-1 loss is BITWISE the step-21 loss of the checkpoint resumed at the
#     same NP and STAGE (both are the loss of the same weights on the same batch;
#     the resumed run's optimizer state matters only from its update on), and
#     within 1e-6 of PyTorch's loss of that window with the same file
#     (share/reference/gpt_torch.py loss). At 3 ranks the parameter count must not
#     divide by 3 (the shards are uneven).
#   init_from_e2e.sh refuse NP
#     Refusals at NP ranks, every rank agreeing (exit 2, one message): a GPT-2-named
#     file with one tensor missing, one with a tensor transposed, one with an extra
#     tensor, a vocabulary that is not the data set's (a byte data set), a recorded
#     tokenizer that is not the data set's, a checkpoint instead of an export; and
#     init_from beside a checkpoint to resume from: resume wins, the log says so.
# Environment (CTest): TRAINER, INPUT (tiny.toml), DATA (tiny.h5), WORK, MPIEXEC,
# NPFLAG, CKPT_TOOL.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=e2e_lib.sh
source "$here/e2e_lib.sh"
py=/usr/bin/python3
ref=$here/../../../share/reference/gpt_torch.py
fix=$WORK/init_from
mode=$1

if [[ $mode == source ]]; then
  rm -rf "$fix" && mkdir -p "$fix"
  WORK=$fix run_trainer 1 src --set train.steps=20 --set checkpoint.every_steps=20 --set train.log_every=1
  cp "$fix/src/checkpoints/step_00000020.h5" "$fix/ck.h5"
  "$CKPT_TOOL" export "$fix/ck.h5" "$fix/ours.safetensors"
  "$CKPT_TOOL" export "$fix/ck.h5" "$fix/gpt2.safetensors" --names gpt2
  "$CKPT_TOOL" export "$fix/ck.h5" "$fix/ours.h5"
  awk -F, 'END { print $11 }' "$fix/src/metrics.csv" > "$fix/crc20"
  "$py" - "$DATA" "$fix/const.h5" <<'PY'
import shutil, sys
import h5py, numpy as np
src, dst = sys.argv[1:]
shutil.copyfile(src, dst)
with h5py.File(dst, "r+") as f:
    t = f["train/tokens"]
    t[...] = np.full(t.shape, t[0], dtype=t.dtype)  # one token, repeated: every window is the same
    print(f"const.h5: {t.shape[0]} training tokens, all id {int(t[0])}")
PY
  echo PASS
  exit 0
fi

np=$2
common=(--set data.path="$fix/const.h5" --set train.log_every=1 --set train.eval_every=0)

if [[ $mode == equal ]]; then
  stage=$3
  tag=np${np}_s${stage}
  WORK=$fix run_trainer "$np" "resumed_$tag" "${common[@]}" --set train.steps=21 \
    --set checkpoint.resume="$fix/ck.h5" --set parallel.zero_stage="$stage"
  grep -q "resumed from $fix/ck.h5: step 20" "$fix/resumed_$tag.log" || die "the reference run did not resume"
  want=$(awk -F, '$1 == 21 { print $2 }' "$fix/resumed_$tag/metrics.csv")
  [[ -n $want ]] || die "no step 21 in the resumed run"
  crc=$(cat "$fix/crc20")
  params=$(sed -n 's/.* | \([0-9]*\) parameters | .*/\1/p' "$fix/resumed_$tag.log")
  if [[ $np == 3 ]]; then
    (( params % 3 != 0 )) || die "$params parameters divide by 3: the shards are even, pick another model"
    echo "ok: $params parameters, not a multiple of 3"
  fi
  read -r L H C T < <("$py" - "$fix/ours.safetensors" <<'PY'
import json, sys
f = open(sys.argv[1], "rb"); n = int.from_bytes(f.read(8), "little"); m = json.loads(f.read(n))["__metadata__"]
print(m["n_layer"], m["n_head"], m["d_model"], m["seq_len"])
PY
  )
  for file in ours.safetensors gpt2.safetensors ours.h5; do
    name=init_${tag}_${file%%.*}_${file##*.}
    WORK=$fix run_trainer "$np" "$name" "${common[@]}" --set train.steps=2 --set model.init_from="$fix/$file" \
      --set parallel.zero_stage="$stage"
    line=$(grep "^init_from: " "$fix/$name.log") || die "no init_from line"
    [[ $line == *"weights crc32 $crc"* ]] || die "$file: the loaded weights differ from the checkpoint's (crc $crc): $line"
    got=$(awk -F, '$1 == 1 { print $2 }' "$fix/$name/metrics.csv")
    [[ $got == "$want" ]] || die "$file at $np ranks, stage $stage: step-1 loss $got, the resumed run's step 21: $want"
    echo "ok: $file: weights crc32 $crc; step-1 loss $got == the resumed checkpoint's step-21 loss (bitwise)"
    if [[ $np == 1 && $stage == 0 ]]; then
      torch=$("$py" "$ref" loss "$fix/const.h5" --n-layer "$L" --n-head "$H" --d-model "$C" --seq-len "$T" \
        --init "$fix/$file" | sed -n 's/^loss //p')
      awk -v a="$got" -v b="$torch" 'BEGIN { d = a - b; if (d < 0) d = -d; printf "PyTorch %s, ours %s, |diff| %.3g\n", b, a, d
        exit !(d <= 1e-6) }' || die "$file: PyTorch's loss differs by more than 1e-6"
    fi
  done
  echo PASS
  exit 0
fi

[[ $mode == refuse ]] || die "mode must be source, equal or refuse"
expect_refusal() {  # NAME PATTERN extra-args...: exit 2, PATTERN in stderr, one message line
  local name=$1 pattern=$2 rc=0; shift 2
  rm -rf "${fix:?}/$name"
  timeout 300 "$MPIEXEC" "$NPFLAG" "$np" "$TRAINER" "$INPUT" --set data.path="$DATA" \
    --set train.run_dir="$fix/$name" "$@" > "$fix/$name.log" 2>&1 || rc=$?
  [[ $rc == 2 ]] || { cat "$fix/$name.log"; die "$name: exit $rc, expected 2"; }
  grep -qE -e "$pattern" "$fix/$name.log" || { cat "$fix/$name.log"; die "$name: no '$pattern' in the log"; }
  [[ $(grep -c "^error" "$fix/$name.log") == 1 ]] || { cat "$fix/$name.log"; die "$name: not exactly one error line"; }
  echo "ok: $name refused: $(grep "^error" "$fix/$name.log")"
}
craft() {  # OUT EDIT: a copy of gpt2.safetensors with its JSON header edited by the python expression EDIT on h (dict)
  "$py" - "$fix/gpt2.safetensors" "$1" "$2" <<'PY'
import json, sys
src, dst, edit = sys.argv[1:]
data = open(src, "rb").read()
n = int.from_bytes(data[:8], "little")
h = json.loads(data[8:8 + n])
exec(edit)
text = json.dumps(h).encode()
text += b" " * (-len(text) % 8)
open(dst, "wb").write(len(text).to_bytes(8, "little") + text + data[8 + n:])
PY
}
sub=$fix/refuse_np$np
mkdir -p "$sub"
craft "$sub/missing.safetensors" 'del h["transformer.h.1.mlp.c_proj.bias"]'
expect_refusal missing_np$np "missing\.safetensors: model\.init_from: tensor 'transformer\.h\.1\.mlp\.c_proj\.bias' is missing \(the model's h\.1\.mlp\.c_proj\.bias, shape \(32,\)" \
  --set model.init_from="$sub/missing.safetensors"
craft "$sub/transposed.safetensors" 't = h["transformer.h.0.mlp.c_fc.weight"]; t["shape"] = t["shape"][::-1]'
expect_refusal transposed_np$np "transposed\.safetensors: model\.init_from: tensor 'transformer\.h\.0\.mlp\.c_fc\.weight' has shape \(128, 32\) in the file; the model needs \(32, 128\) \(GPT-2's Conv1D layout" \
  --set model.init_from="$sub/transposed.safetensors"
craft "$sub/extra.safetensors" 'h["lm_head.weight"] = dict(h["transformer.wte.weight"])'
expect_refusal extra_np$np "extra\.safetensors: model\.init_from: 1 tensor in the file is not part of the model \(.*\): lm_head\.weight \(" \
  --set model.init_from="$sub/extra.safetensors"
craft "$sub/tokenizer.safetensors" 'h["__metadata__"]["tokenizer"] = "byte"'
expect_refusal tokenizer_np$np "tokenizer\.safetensors: model\.init_from: tokenizer mismatch: the file's weights were trained with the byte tokenizer .*the data set .*tiny\.h5 has [0-9]+ tokens \(tokenizer char\)" \
  --set model.init_from="$sub/tokenizer.safetensors"
"$TRAINER_DATA" text "$here/../../data/tiny.txt" "$sub/byte.h5" --tokenizer byte > /dev/null
expect_refusal vocab_np$np "ours\.safetensors: model\.init_from: vocabulary mismatch: the file's is [0-9]+ tokens \(wte\.weight has [0-9]+ rows\), the data set .*byte\.h5 has 256 tokens \(tokenizer byte\)" \
  --set model.init_from="$fix/ours.safetensors" --set data.path="$sub/byte.h5"
expect_refusal checkpoint_np$np "ck\.h5: is a shardtrain checkpoint, not an export of its weights: export them first" \
  --set model.init_from="$fix/ck.h5"
# Beside a checkpoint to resume from: the checkpoint wins, and the log says so.
WORK=$fix run_trainer "$np" "both_np$np" --set train.steps=21 --set checkpoint.resume="$fix/ck.h5" \
  --set model.init_from="$fix/ours.safetensors"
grep -q "^init_from: model.init_from = $fix/ours.safetensors is not used: the run resumes from its checkpoint $fix/ck.h5" \
  "$fix/both_np$np.log" || die "init_from beside resume: the log does not say that resume wins"
echo "ok: init_from beside a checkpoint: resume wins, and the log says so"
echo PASS
