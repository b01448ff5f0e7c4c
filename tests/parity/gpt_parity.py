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

import torch  # noqa: E402

LOSS_TOL, GRAD_TOL, STEP_TOL = 1e-5, 1e-4, 1e-4


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
        ours_loss = float(f.attrs["loss"])
        rel_loss = abs(ours_loss - float(loss)) / abs(float(loss))
        print(f"loss: ours {ours_loss:.9f}, torch {float(loss):.9f}, relative difference {rel_loss:.2e} (tol {LOSS_TOL})")
        if not rel_loss <= LOSS_TOL:
            bad.append("loss")
        rows = []
        for name, p in model.named_parameters():
            ours = np.asarray(f["grads"][name], dtype=np.float64)
            ref = p.grad.numpy().astype(np.float64)
            scale = np.abs(ref).max()
            rel = np.abs(ours - ref).max() / scale if scale > 0 else np.abs(ours).max()
            rows.append((rel, name, scale))
            if not rel <= GRAD_TOL:
                bad.append(name)
    rows.sort(reverse=True)
    bad += train_steps(path)
    print(f"gradients of {len(rows)} tensors; worst relative differences (tol {GRAD_TOL}):")
    for rel, name, scale in rows[:5]:
        print(f"  {name:28s} {rel:.2e}  (max |grad| {scale:.3e})")
    if bad:
        print("FAIL: outside tolerance: " + ", ".join(bad))
        return 1
    print("parity: loss and every gradient agree with PyTorch")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1]))
