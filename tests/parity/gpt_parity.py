#!/usr/bin/python3
"""Parity of our GPT with PyTorch from identical weights and batch (label parity).

Usage: gpt_parity.py DUMP.h5   (written by gpt_parity_dump)
Runs share/reference/gpt_torch.py's model on the dump's weights and batch and
compares: the mean loss within a relative 1e-5, and every parameter's gradient
within a relative 1e-4 (max |ours - torch| / max |torch| per tensor); then 10
steps of torch.optim.AdamW (same hyperparameters, weight decay on the tensors
our layout decays, constant lr, no clipping) on the dump's training batches
from the same initial weights: each step's loss within a relative 1e-4 of
ours. Prints the worst cases; exit 1 on any violation.
"""
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "share", "reference"))
import gpt_torch  # noqa: E402
from parity_check import GRAD_TOL, compare_grads, compare_loss, run, verdict  # noqa: E402

import torch  # noqa: E402

STEP_TOL = 1e-4


def train_steps(path):
    """10 AdamW steps in torch against ours; returns the failing step names."""
    model, _, _ = gpt_torch.load(path)
    with h5py.File(path, "r") as f:
        h = {k: float(f.attrs[k]) for k in ("lr", "weight_decay", "beta1", "beta2", "eps")}
        decayed = {name for name in f["params"] if int(f["params"][name].attrs["weight_decay"])}
        tokens = torch.from_numpy(np.asarray(f["train_tokens"]).astype(np.int64))
        targets = torch.from_numpy(np.asarray(f["train_targets"]).astype(np.int64))
        ours = np.asarray(f["train_losses"])
    named = list(model.named_parameters())
    groups = [{"params": [p for n, p in named if n in decayed], "weight_decay": h["weight_decay"]},
              {"params": [p for n, p in named if n not in decayed], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"])
    bad, worst = [], 0.0
    for s in range(len(ours)):
        opt.zero_grad()
        loss = model(tokens[s], targets[s])
        loss.backward()
        opt.step()
        rel = abs(ours[s] - float(loss)) / abs(float(loss))
        worst = max(worst, rel)
        print(f"step {s + 1:2d}: loss ours {ours[s]:.7f}, torch {float(loss):.7f}, relative difference {rel:.2e}")
        if not rel <= STEP_TOL:
            bad.append(f"step {s + 1}")
    print(f"{len(ours)} AdamW steps: worst relative loss difference {worst:.2e} (tol {STEP_TOL})")
    return bad


def main(path):
    model, tokens, targets = gpt_torch.load(path)
    loss = model(tokens, targets)
    loss.backward()
    bad = []
    with h5py.File(path, "r") as f:
        compare_loss("", float(f.attrs["loss"]), float(loss), bad)
        rows = compare_grads(((name, f["grads"][name], p.grad.numpy()) for name, p in model.named_parameters()), bad)
    bad += train_steps(path)
    print(f"gradients of {len(rows)} tensors; worst relative differences (tol {GRAD_TOL}):")
    for rel, name, scale in rows[:5]:
        print(f"  {name:28s} {rel:.2e}  (max |grad| {scale:.3e})")
    return verdict(bad)


if __name__ == "__main__":
    run(main, __doc__)
