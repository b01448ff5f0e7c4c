#!/usr/bin/python3
"""shardtrain's GPT in PyTorch, parameter for parameter (issue 10's reference).

The module tree reproduces our parameter names (src/model/gpt.cpp gpt_layout,
src/model/transformer_block.cpp), so a state dict loads by name from our files:
  wte.weight (V, C), wpe.weight (T, C),
  h.<l>.ln_1.{weight,bias}, h.<l>.attn.c_attn.{weight (3C, C), bias},
  h.<l>.attn.c_proj.{weight (C, C), bias}, h.<l>.ln_2.{weight,bias},
  h.<l>.mlp.c_fc.{weight (4C, C), bias}, h.<l>.mlp.c_proj.{weight (C, 4C), bias},
  ln_f.{weight,bias}; the LM head is tied to wte (no bias).
Blocks are pre-LayerNorm (eps 1e-5), causal attention over a fused qkv
projection ([q | k | v], heads contiguous), GELU with the tanh approximation;
the loss is the mean cross-entropy over every target token.

Usage (Debian's python3-torch and python3-h5py, through /usr/bin/python3):
  gpt_torch.py DUMP.h5 OUT.h5
    DUMP.h5 as written by tests/parity/gpt_parity_dump (config attributes,
    /params/<name>, /tokens, /targets); OUT.h5 gets attribute loss and
    /grads/<name> (d mean loss / d parameter), float64 math in float32 storage
    as our trainer's.
"""
import math
import sys

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)

    def forward(self, x):
        B, T, C = x.shape
        H = self.H
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (z.view(B, T, H, C // H).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        att = F.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))


class Mlp(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = Attention(C, H)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = Mlp(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, V, L, C, H, T):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList([Block(C, H) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C, eps=1e-5)

    def forward(self, tokens, targets):
        T = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(T))[None]
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.T  # tied LM head
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long())


def load(path):
    """The model with our weights (by name) and the batch of a dump file."""
    with h5py.File(path, "r") as f:
        a = {k: int(f.attrs[k]) for k in ("n_layer", "n_head", "d_model", "seq_len", "vocab")}
        model = GPT(a["vocab"], a["n_layer"], a["d_model"], a["n_head"], a["seq_len"])
        state = {name: torch.from_numpy(np.asarray(f["params"][name])) for name in walk(f["params"])}
        tokens = torch.from_numpy(np.asarray(f["tokens"]).astype(np.int64))
        targets = torch.from_numpy(np.asarray(f["targets"]).astype(np.int64))
    mine = dict(model.named_parameters())
    missing, extra = sorted(set(mine) - set(state)), sorted(set(state) - set(mine))
    if missing or extra:
        raise SystemExit(f"{path}: parameter names differ: missing {missing}, unexpected {extra}")
    model.load_state_dict(state, strict=True)
    return model, tokens, targets


def walk(group):
    """Our tensor names: the datasets of /params (names keep their dots)."""
    return list(group.keys())


def main(argv):
    if len(argv) != 3:
        raise SystemExit(__doc__)
    torch.manual_seed(0)
    model, tokens, targets = load(argv[1])
    loss = model(tokens, targets)
    loss.backward()
    with h5py.File(argv[2], "w") as f:
        f.attrs["loss"] = float(loss)
        for name, p in model.named_parameters():
            f.create_dataset("grads/" + name, data=p.grad.numpy())
    print(f"gpt_torch: {argv[1]}: loss {float(loss):.9f}, {len(list(model.parameters()))} tensors")


if __name__ == "__main__":
    main(sys.argv)
