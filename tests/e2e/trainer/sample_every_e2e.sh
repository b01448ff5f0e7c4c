#!/usr/bin/env bash
# train.sample_every end to end (tests/e2e/trainer/CMakeLists.txt).
#   sample_every_e2e.sh NP STAGE
#     The tiny GPT trained 30 steps at NP ranks and ZeRO stage STAGE (stage 3: the
#     shards are gathered to rank 0), sampling 40 tokens at temperature 1 from
#     "Call me" after the validation passes of steps 10, 20 and 30: three lines
#     "sample step N (logprob L): ..."; the run's metrics (loss, val_loss, grad_norm, weights
#     CRC) bitwise those of the same run without samples; the step-30 line is the
#     text and the log-probability (12 digits: a check of every logit, not only of
#     the draws) `trainer-ckpt sample` writes from the step-30 checkpoint with the
#     same prompt, temperature and seed (train.seed 7); a second run gives the same
#     lines.
# Environment (CTest): TRAINER, INPUT (tiny.toml), DATA (tiny.h5), WORK, MPIEXEC,
# NPFLAG, CKPT_TOOL.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=e2e_lib.sh
source "$here/e2e_lib.sh"
np=$1 stage=$2
tag=sample_np${np}_s${stage}
args=(--set parallel.zero_stage="$stage" --set checkpoint.every_steps=30)
samples=(--set train.sample_every=10 --set train.sample_tokens=40 --set train.sample_prompt="Call me"
         --set train.sample_temperature=1)
run_trainer "$np" "${tag}_a" "${args[@]}" "${samples[@]}" > /dev/null
run_trainer "$np" "${tag}_b" "${args[@]}" "${samples[@]}" > /dev/null
run_trainer "$np" "${tag}_off" "${args[@]}" > /dev/null
grep "^sample step" "$WORK/${tag}_a.log" > "$WORK/${tag}_a.samples" || die "no sample lines"
grep "^sample step" "$WORK/${tag}_b.log" > "$WORK/${tag}_b.samples" || true
cat "$WORK/${tag}_a.samples"
[[ $(cut -d' ' -f1-3 "$WORK/${tag}_a.samples" | tr '\n' ' ') == "sample step 10 sample step 20 sample step 30 " ]] ||
  die "expected samples after steps 10, 20 and 30"
cmp -s "$WORK/${tag}_a.samples" "$WORK/${tag}_b.samples" || die "two runs sampled different text"
! grep -q "^sample step" "$WORK/${tag}_off.log" || die "samples without train.sample_every"
compare "$WORK/${tag}_off/metrics.csv" "$WORK/${tag}_a/metrics.csv" 0
[[ $(cut -d, -f11 "$WORK/${tag}_off/metrics.csv") == $(cut -d, -f11 "$WORK/${tag}_a/metrics.csv") ]] ||
  die "the weights CRCs differ with samples"
echo "ok: metrics and weights CRCs bitwise equal with and without samples"
ck=$WORK/${tag}_a/checkpoints/step_00000030.h5
opts=(--prompt "Call me" --tokens 40 --temperature 1 --seed 7)
logprob=$("$CKPT_TOOL" sample "$ck" "${opts[@]}" --ids 2> /dev/null | sed -n 's/^logprob: //p')
want="sample step 30 (logprob $logprob): $("$CKPT_TOOL" sample "$ck" "${opts[@]}" 2> /dev/null |
  awk 'NR > 1 { printf "\\n" } { printf "%s", $0 }')"
got=$(grep "^sample step 30 " "$WORK/${tag}_a.samples")
[[ $got == "$want" ]] || die "the step-30 sample differs from trainer-ckpt sample's:
trainer:      $got
trainer-ckpt: $want"
echo "ok: the step-30 sample is trainer-ckpt sample's from the step-30 checkpoint"
echo PASS
