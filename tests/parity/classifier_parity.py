#!/usr/bin/python3
"""Parity of our classifiers with PyTorch (label parity).

Usage: classifier_parity.py DUMP.h5   (written by classifier_parity_dump)
Builds the same network in PyTorch from the dump's parameter shapes (mlp:
Linear + ReLU layers; cnn: [Conv2d stride 1 + ReLU + MaxPool2d] per conv,
flatten, [Linear + ReLU] per hidden layer, Linear; encoder: token + position
embeddings, pre-LayerNorm blocks with bidirectional attention whose keys are
masked beyond each row's length, final LayerNorm, [CLS] or mean pooling over
the valid positions, linear head), loads our weights by name,
runs the dump's batch and compares the mean cross-entropy within a relative
1e-5 and every gradient within a relative 1e-4 (max |ours - torch| / max
|torch| per tensor). Exit 1 on any violation.
"""
import h5py
import numpy as np
import torch
import torch.nn.functional as F

from parity_check import compare_grads, compare_loss, run, verdict


def encoder_logits(params, tokens, lengths, n_head, mean_pool, n_layer):
    B, T = tokens.shape
    P = params
    x = P["wte.weight"][tokens] + P["wpe.weight"][:T][None]
    C = x.shape[-1]
    keep = torch.arange(T)[None, :] < lengths[:, None]  # (B, T) valid keys
    for l in range(n_layer):
        h = f"h.{l}."
        y = F.layer_norm(x, (C,), P[h + "ln_1.weight"], P[h + "ln_1.bias"], 1e-5)
        q, k, v = F.linear(y, P[h + "attn.c_attn.weight"], P[h + "attn.c_attn.bias"]).split(C, dim=2)
        q, k, v = (z.view(B, T, n_head, C // n_head).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (C // n_head) ** 0.5
        att = F.softmax(att.masked_fill(~keep[:, None, None, :], float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, P[h + "attn.c_proj.weight"], P[h + "attn.c_proj.bias"])
        y = F.layer_norm(x, (C,), P[h + "ln_2.weight"], P[h + "ln_2.bias"], 1e-5)
        y = F.gelu(F.linear(y, P[h + "mlp.c_fc.weight"], P[h + "mlp.c_fc.bias"]), approximate="tanh")
        x = x + F.linear(y, P[h + "mlp.c_proj.weight"], P[h + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (C,), P["ln_f.weight"], P["ln_f.bias"], 1e-5)
    if mean_pool:
        pooled = (x * keep[:, :, None]).sum(1) / lengths[:, None].to(x.dtype)
    else:
        pooled = x[:, 0]
    return F.linear(pooled, P["head.weight"], P["head.bias"])


def main(path):
    with h5py.File(path, "r") as f:
        cnn = bool(int(f.attrs["cnn"]))
        params = {n: torch.tensor(np.asarray(f["params"][n]), requires_grad=True) for n in f["params"]}
        grads = {n: np.asarray(f["grads"][n], dtype=np.float64) for n in f["grads"]}
        x = torch.from_numpy(np.asarray(f["inputs"]))
        labels = torch.from_numpy(np.asarray(f["labels"]).astype(np.int64))
        ours_loss = float(f.attrs["loss"])
        pad = [int(p) for p in f["conv_padding"]] if cnn else []
        pool = int(f.attrs["pool"]) if cnn else 1
        encoder = bool(int(f.attrs["encoder"]))
        if encoder:
            tokens = torch.from_numpy(np.asarray(f["tokens"]).astype(np.int64))
            lengths = torch.from_numpy(np.asarray(f["lengths"]).astype(np.int64))
            n_head, mean_pool = int(f.attrs["n_head"]), bool(int(f.attrs["mean_pool"]))
    convs = sum(1 for n in params if n.startswith("conv.") and n.endswith(".weight"))
    fcs = sum(1 for n in params if n.startswith("fc.") and n.endswith(".weight"))
    blocks = sum(1 for n in params if n.endswith(".ln_1.weight"))
    if encoder:
        x = encoder_logits(params, tokens, lengths, n_head, mean_pool, blocks)
    for i in range(convs):
        x = F.conv2d(x, params[f"conv.{i}.weight"], params[f"conv.{i}.bias"], padding=pad[i])
        x = F.relu(x)
        if pool > 1:
            x = F.max_pool2d(x, pool, pool)
    if not encoder:
        x = x.reshape(x.shape[0], -1)
    for j in range(fcs):
        x = F.linear(x, params[f"fc.{j}.weight"], params[f"fc.{j}.bias"])
        if j + 1 < fcs:
            x = F.relu(x)
    loss = F.cross_entropy(x, labels)
    loss.backward()
    bad = []
    kind = ("encoder (" + ("mean" if mean_pool else "cls") + f" pooling, {blocks} blocks)") if encoder else \
        ("cnn" if cnn else "mlp")
    layers = "" if encoder else f" {convs} conv, {fcs} linear layers;"
    compare_loss(f"{kind}:{layers} ", ours_loss, float(loss), bad)
    rows = compare_grads(((n, grads[n], p.grad.numpy()) for n, p in params.items()), bad)
    print(f"gradients of {len(rows)} tensors; worst: " + ", ".join(f"{n} {r:.2e}" for r, n, _ in rows[:3]))
    return verdict(bad)


if __name__ == "__main__":
    run(main, __doc__)
