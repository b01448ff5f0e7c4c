# shellcheck shell=bash
# What torch_loads_weights.sh and torch_loads_safetensors.sh share: sourced,
# never run. The caller sets trainer, input, data, work and reference (the
# path of share/reference/gpt_torch.py) and defines die().

# shellcheck source=../support/process_memory.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/process_memory.sh"  # check_process_memory

# Trains the tiny GPT 20 steps into $work/run with a checkpoint at step 20 and
# sets `ckpt` to that checkpoint's path.
train_tiny_checkpoint() {
  "$trainer" "$input" --set data.path="$data" --set train.run_dir="$work/run" --set train.steps=20 \
    --set checkpoint.every_steps=20 --set train.eval_every=0 > "$work/train.log" 2>&1 ||
    die "trainer failed: $(tail -3 "$work/train.log")"
  check_process_memory "$work/train.log"
  ckpt=$work/run/checkpoints/$(cat "$work/run/checkpoints/latest")
  [[ -f $ckpt ]] || die "no checkpoint $ckpt"
}

# first_loss INIT-ARGS...: the reference's step-1 loss on the tiny model
# (inputs/tiny.toml's shape) on windows seeded the same for every INIT.
first_loss() {
  /usr/bin/python3 "$reference" train "$data" --n-layer 2 --n-head 4 --d-model 32 --seq-len 16 --batch 8 \
    --steps 1 --threads 1 --seed 5 "$@" | awk '$1 == "step" && $2 == 1 { print $4 }'
}
