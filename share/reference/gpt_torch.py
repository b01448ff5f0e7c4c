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
  gpt_torch.py train DATA.h5 --n-layer L --n-head H --d-model C --seq-len T
               --batch B --steps N [--threads P] [--lr LR] [--seed S] [--init WEIGHTS.h5]
               [--device cpu|cuda] [--precision fp32|bf16|fp16] [--compile] [--sdpa]
               [--ddp] [--parallel-info]
    Trains the same model on the same data set (a shardtrain tokens file,
    /train/tokens and /vocab) with AdamW (betas 0.9/0.95, weight decay 0.1 on
    the 2-D Linear weights, grad-norm clip 1.0, constant lr): B random windows
    of T+1 tokens per step (the windows depend on --seed only). The initial
    weights are N(0, 0.02) matrices, or --init: our weights by name from one of
    our checkpoints (/params/<name>) or a `trainer-ckpt export` file (one
    dataset per parameter at the root). Prints one line per step, "step S loss L ms M end E" (E: the wall
    clock at the step's end, s since 1970), and
    at the end "idle_rss_kib K" (VmRSS before the model was built: imports and
    data) and "peak_rss_kib K" (the process's maximum resident set, getrusage).
    --ddp: DistributedDataParallel over gloo, started as torchrun starts its
    workers (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment); each
    of the N processes takes B/N of the step's windows, rank 0 prints the steps,
    every process its two RSS lines. --parallel-info prints
    torch.__config__.parallel_info(), each line prefixed "parallel_info ", and
    then "parallel_info OpenBLAS core: C" (openblas_get_corename of the OpenBLAS
    this process maps: the kernels of its fp32 GEMMs).
    This is the PyTorch side of tests/bench/torch_parity_speed.sh.
  gpt_torch.py generate WEIGHTS.h5 --n-layer L --n-head H --d-model C --seq-len T --vocab V
               --tokens N --prompt-ids "I1 I2 ..."
    Greedy decoding of N tokens after the prompt in float64 without a cache, the
    context rule of `trainer-ckpt sample`; prints "ids: ..." (tests/e2e/ckpt).
  gpt_torch.py loss DATA.h5 --n-layer L --n-head H --d-model C --seq-len T --init WEIGHTS [--offset K]
    The loss of the training window at token K (float64 math on the fp32
    weights); prints "loss X". WEIGHTS may be a .safetensors export too (our
    names or GPT-2's), here and wherever --init or WEIGHTS is taken.
  gpt_torch.py eval DATA.h5 --n-layer L --n-head H --d-model C --seq-len T --init WEIGHTS.h5
    Our trainer's validation pass over the whole validation split (windows
    at k*T, the mean cross-entropy over every target token) with the weights
    of --init; prints "eval_loss X windows W". On a GPU
    (tests/bench/gpu/measure.sh): --device cuda, --precision bf16/fp16 (autocast
    over fp32 weights, as PyTorch users train; fp16 with a GradScaler),
    --compile (torch.compile) and --sdpa (fused causal attention); a line
    "config ..." first and "peak_cuda_mib M" (torch.cuda.max_memory_allocated) last;
    on cuda the fused AdamW (fused=True), as GPU users set it up.
"""
import argparse
import math
import os
import resource
import sys
import time

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    sdpa = False  # train --sdpa: PyTorch's fused scaled_dot_product_attention (flash on GPUs)

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
        if Attention.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
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
        x = self.wte(tokens) + self.wpe(torch.arange(T, device=tokens.device))[None]
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.T  # tied LM head
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long())


def data_vocab(f):
    """The vocabulary size of a shardtrain tokens file: its vocab_size attribute
    (a pre-tokenized data set has no /vocab strings), else /vocab's length."""
    return int(f.attrs["vocab_size"]) if "vocab_size" in f.attrs else int(f["vocab"].shape[0])


def rss_kib():
    """The process's resident set now (VmRSS of /proc/self/status), KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SystemExit("/proc/self/status has no VmRSS line")


def load(path):
    """The model with our weights (by name) and the batch of a dump file."""
    with h5py.File(path, "r") as f:
        a = {k: int(f.attrs[k]) for k in ("n_layer", "n_head", "d_model", "seq_len", "vocab")}
        model = GPT(a["vocab"], a["n_layer"], a["d_model"], a["n_head"], a["seq_len"])
        tokens = torch.from_numpy(np.asarray(f["tokens"]).astype(np.int64))
        targets = torch.from_numpy(np.asarray(f["targets"]).astype(np.int64))
    load_weights(model, path)  # the dump's /params, as in a checkpoint
    return model, tokens, targets


def read_safetensors_raw(path):
    """{name: float32 array} of a safetensors file as stored (names and layouts
    unchanged), and its __metadata__; numpy only, no safetensors package needed.
    Raises ValueError naming the file for anything but F32 tensors or a malformed
    header (share/gpu/hf_check.py reads exports through this too)."""
    import json
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise ValueError(f"{path}: the safetensors header is not JSON: {e}")
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, t in header.items():
        if t.get("dtype") != "F32":
            raise ValueError(f"{path}: {name} is {t.get('dtype')}, expected F32")
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype="<f4").reshape(t["shape"])
    return out, meta


def read_safetensors(path):
    """{name: float32 array} of a safetensors file under our names, and its
    __metadata__. GPT-2 names ("transformer.*", as `trainer-ckpt export --names
    gpt2` writes them) become ours, their Conv1D (in, out) weights transposed back
    to our (out, in)."""
    try:
        raw, meta = read_safetensors_raw(path)
    except ValueError as e:
        raise SystemExit(str(e))
    out = {}
    conv1d = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")
    for name, value in raw.items():
        if name.startswith("transformer."):
            name = name[len("transformer."):]
            if name.endswith(conv1d):
                value = value.T
        out[name] = np.ascontiguousarray(value)
    return out, meta


def load_weights(model, path):
    """Sets model's parameters by name from our checkpoint (/params/<name>), a
    trainer-ckpt export file (datasets named by parameter at the root) or a
    safetensors export (our names or GPT-2's)."""
    if path.endswith(".safetensors"):
        tensors, _ = read_safetensors(path)
        mine = dict(model.named_parameters())
        missing, extra = sorted(set(mine) - set(tensors)), sorted(set(tensors) - set(mine))
        if missing or extra:
            raise SystemExit(f"{path}: parameter names differ from the model's: missing {missing}, unexpected {extra}")
        for name, p in mine.items():
            if tuple(tensors[name].shape) != tuple(p.shape):
                raise SystemExit(f"{path}: {name} has shape {tensors[name].shape}, the model's is {tuple(p.shape)}")
        model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in tensors.items()}, strict=True)
        return
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise SystemExit(f"{path}: cannot open as HDF5: {e}")
    with f:
        group = f["params"] if isinstance(f.get("params"), h5py.Group) else f
        have = {k for k in group.keys() if isinstance(group[k], h5py.Dataset)}
        mine = dict(model.named_parameters())
        missing, extra = sorted(set(mine) - have), sorted(have - set(mine))
        if missing or extra:
            raise SystemExit(f"{path}: parameter names differ from the model's: missing {missing}, unexpected {extra}")
        state = {}
        for name, p in mine.items():
            value = np.asarray(group[name], dtype=np.float32)
            if tuple(value.shape) != tuple(p.shape):
                raise SystemExit(f"{path}: {name} has shape {value.shape}, the model's is {tuple(p.shape)}")
            state[name] = torch.from_numpy(value)
    model.load_state_dict(state, strict=True)


def train(argv):
    ap = argparse.ArgumentParser(prog="gpt_torch.py train")
    ap.add_argument("data")
    for k in ("n-layer", "n-head", "d-model", "seq-len", "batch", "steps"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--init", help="initial weights: our checkpoint or a trainer-ckpt export file")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"),
                    help="fp32, or autocast to bf16 / fp16 (fp16 with a GradScaler) over fp32 weights")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--sdpa", action="store_true", help="fused F.scaled_dot_product_attention (causal)")
    ap.add_argument("--ddp", action="store_true",
                    help="torch.distributed DistributedDataParallel over gloo, initialized from the "
                         "environment torchrun sets (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): each "
                         "process takes B/N of the step's windows")
    ap.add_argument("--parallel-info", action="store_true",
                    help="print torch.__config__.parallel_info() (prefixed 'parallel_info ') before training")
    a = ap.parse_args(argv)
    if a.device not in ("cpu", "cuda"):
        raise SystemExit(f"--device {a.device}: expected cpu or cuda")
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch.cuda.is_available() is False")
    dev = torch.device(a.device)
    if a.sdpa and not hasattr(F, "scaled_dot_product_attention"):
        raise SystemExit(f"--sdpa: PyTorch {torch.__version__} has no scaled_dot_product_attention (2.0 and later)")
    Attention.sdpa = a.sdpa
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rank, world = 0, 1
    if a.ddp:
        import torch.distributed as dist
        if "RANK" not in os.environ:
            raise SystemExit("--ddp: no RANK in the environment; start N processes with RANK, WORLD_SIZE, "
                             "MASTER_ADDR and MASTER_PORT set (what torchrun sets; Debian 12's torchrun "
                             "1.13 fails under Python 3.11)")
        if a.device != "cpu":
            raise SystemExit("--ddp: only --device cpu (gloo)")
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        if a.batch % world:
            raise SystemExit(f"--ddp: --batch {a.batch} is not a multiple of the {world} processes")
    if a.parallel_info and rank == 0:
        for line in torch.__config__.parallel_info().splitlines():
            print("parallel_info " + line.replace("\t", "  "), flush=True)
        print("parallel_info OpenBLAS core: " + openblas_core(), flush=True)
    with h5py.File(a.data, "r") as f:
        if "train" not in f or "tokens" not in f["train"] or "vocab" not in f:
            raise SystemExit(f"{a.data}: not a shardtrain tokens file (needs /train/tokens and /vocab)")
        tokens = torch.from_numpy(np.asarray(f["train"]["tokens"]).astype(np.int64))
        vocab = data_vocab(f)
    T, B = a.seq_len, a.batch
    if tokens.numel() <= T + 1:
        raise SystemExit(f"{a.data}: {tokens.numel()} training tokens, need more than seq_len + 1 = {T + 1}")
    idle_kib = rss_kib()  # the process before the model exists (imports, data loaded)
    model = GPT(vocab, a.n_layer, a.d_model, a.n_head, T)
    if a.init:
        load_weights(model, a.init)
    else:
        for name, p in model.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)
    model.to(dev)
    run = torch.compile(model) if a.compile else model
    if a.ddp:  # after the weights are set: DDP broadcasts rank 0's at construction
        run = nn.parallel.DistributedDataParallel(run)
    autocast = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[a.precision]
    scaler = None
    if a.precision == "fp16":  # torch.amp.GradScaler since PyTorch 2.3; torch.cuda.amp's before
        scaler = torch.amp.GradScaler(a.device) if hasattr(torch.amp, "GradScaler") else torch.cuda.amp.GradScaler()
    if rank == 0:
        print(f"config device={a.device} precision={a.precision} compile={int(a.compile)} sdpa={int(a.sdpa)} "
              f"torch={torch.__version__} threads={torch.get_num_threads()} "
              f"tf32_matmul={int(torch.backends.cuda.matmul.allow_tf32)} "
              f"params={sum(p.numel() for p in model.parameters())} processes={world}"
              + (f" gpu={torch.cuda.get_device_name()}" if a.device == "cuda" else ""), flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and not n.startswith(("wte", "wpe"))]
    other = [p for n, p in model.named_parameters() if not (p.dim() == 2 and not n.startswith(("wte", "wpe")))]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}]
    try:  # on a GPU, the fused AdamW (one kernel for every tensor), as GPU users set it up
        opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=a.device == "cuda")
    except TypeError:  # PyTorch without fused AdamW (Debian's 1.13)
        opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(a.seed)  # the windows: the same for every --init
    offsets = torch.arange(T + 1)
    for step in range(1, a.steps + 1):
        start = time.perf_counter()
        idx = torch.randint(0, tokens.numel() - T - 1, (B,), generator=gen)[:, None] + offsets
        if world > 1:  # this process's share of the step's windows: the same data as one process
            idx = idx[rank * (B // world):(rank + 1) * (B // world)]
        window = tokens[idx].to(dev, non_blocking=False)
        with torch.autocast(a.device, dtype=autocast, enabled=autocast is not None):
            loss = run(window[:, :-1], window[:, 1:])
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        value = float(loss)  # waits for the step (a device sync on cuda)
        ms = (time.perf_counter() - start) * 1e3
        end = time.time()  # wall clock at the step's end: lines it up with outside probes
        if rank == 0:  # with --ddp: rank 0's loss (its share of the windows) and time
            print(f"step {step} loss {value:.6f} ms {ms:.3f} end {end:.6f}", flush=True)
    # One line per process (--ddp: one per rank; a benchmark sums them).
    print(f"idle_rss_kib {idle_kib}", flush=True)
    print(f"peak_rss_kib {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}", flush=True)
    if a.ddp:
        import torch.distributed as dist
        dist.destroy_process_group()
    if a.device == "cuda":
        print(f"peak_cuda_mib {torch.cuda.max_memory_allocated() / 1048576:.1f}", flush=True)


def evaluate(argv):
    """Our trainer's validation pass (src/train/gpt_task.cpp evaluate): windows of
    seq_len + 1 tokens starting at k * seq_len of the validation split, k below
    (n_val - 1) // seq_len; the mean cross-entropy over every target token."""
    ap = argparse.ArgumentParser(prog="gpt_torch.py eval")
    ap.add_argument("data")
    for k in ("n-layer", "n-head", "d-model", "seq-len"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--init", required=True, help="the weights: our checkpoint or a trainer-ckpt export file")
    ap.add_argument("--batch", type=int, default=64, help="windows per forward pass (does not change the result)")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    with h5py.File(a.data, "r") as f:
        if "val" not in f or "tokens" not in f["val"] or "vocab" not in f:
            raise SystemExit(f"{a.data}: not a shardtrain tokens file (needs /val/tokens and /vocab)")
        tokens = torch.from_numpy(np.asarray(f["val"]["tokens"]).astype(np.int64))
        vocab = data_vocab(f)
    T = a.seq_len
    windows = (tokens.numel() - 1) // T
    if windows < 1:
        raise SystemExit(f"{a.data}: {tokens.numel()} validation tokens, need at least seq_len + 1 = {T + 1}")
    model = GPT(vocab, a.n_layer, a.d_model, a.n_head, T)
    load_weights(model, a.init)
    offsets = torch.arange(T + 1)
    total = 0.0
    with torch.no_grad():
        for first in range(0, windows, a.batch):
            idx = (torch.arange(first, min(first + a.batch, windows)) * T)[:, None] + offsets
            w = tokens[idx]
            total += float(model(w[:, :-1], w[:, 1:])) * w.shape[0] * T
    print(f"eval_loss {total / (windows * T):.9f} windows {windows}", flush=True)


def window_loss(argv):
    """The loss of one training window: tokens [offset, offset + T] of the
    training split (inputs and targets shifted by one), with the weights of
    --init; prints "loss X" (tests/e2e/trainer/init_from_e2e.sh: a data set whose
    training split is one token repeated, so that every window our trainer draws
    is this one)."""
    ap = argparse.ArgumentParser(prog="gpt_torch.py loss")
    ap.add_argument("data")
    for k in ("n-layer", "n-head", "d-model", "seq-len"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--init", required=True, help="the weights: our checkpoint or a trainer-ckpt export file")
    ap.add_argument("--offset", type=int, default=0)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    with h5py.File(a.data, "r") as f:
        tokens = np.asarray(f["train"]["tokens"][a.offset:a.offset + a.seq_len + 1]).astype(np.int64)
        vocab = data_vocab(f)
    model = GPT(vocab, a.n_layer, a.d_model, a.n_head, a.seq_len)
    load_weights(model, a.init)
    w = torch.from_numpy(tokens)[None]
    with torch.no_grad():
        loss = float(model.double()(w[:, :-1], w[:, 1:]))
    print(f"loss {loss:.17g}", flush=True)


def generate(argv):
    """Greedy decoding, the reference of `trainer-ckpt sample --temperature 0`
    (src/tools/gpt_sample.hpp): float64 math on the fp32 weights, no key/value
    cache (the whole context is run for every token), the same context rule: the
    model sees the tokens from `start` on, and when they outgrow seq_len the
    window restarts at the last max(1, seq_len // 2) tokens. Ties go to the lowest
    id (torch.argmax). Prints "ids: ..." (the generated ids) and "logprob: X",
    the sum of their log-softmax: a check of the logits, not only of their argmax."""
    ap = argparse.ArgumentParser(prog="gpt_torch.py generate")
    ap.add_argument("weights", help="our checkpoint or a trainer-ckpt export file")
    for k in ("n-layer", "n-head", "d-model", "seq-len", "vocab", "tokens"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--prompt-ids", required=True, help="the prompt's token ids, separated by spaces or commas")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    model = GPT(a.vocab, a.n_layer, a.d_model, a.n_head, a.seq_len)
    load_weights(model, a.weights)
    model = model.double().eval()
    ids = [int(x) for x in a.prompt_ids.replace(",", " ").split()]
    n_prompt, T, start, logprob = len(ids), a.seq_len, 0, 0.0
    with torch.no_grad():
        for _ in range(a.tokens):
            if len(ids) - start > T:
                start = len(ids) - max(1, T // 2)
            ctx = torch.tensor([ids[start:]], dtype=torch.int64)
            x = model.wte(ctx) + model.wpe(torch.arange(ctx.shape[1]))[None]
            for block in model.h:
                x = block(x)
            logits = model.ln_f(x)[0, -1] @ model.wte.weight.T
            ids.append(int(torch.argmax(logits)))
            logprob += float(F.log_softmax(logits, dim=-1)[ids[-1]])
    print("ids: " + " ".join(str(i) for i in ids[n_prompt:]), flush=True)
    print(f"logprob: {logprob:.12e}", flush=True)


def openblas_core():
    """openblas_get_corename() of the OpenBLAS this process maps (Debian's torch runs its
    fp32 GEMMs there; OPENBLAS_CORETYPE or CPUID picks the core): for --parallel-info."""
    import ctypes
    with open("/proc/self/maps") as f:
        paths = [line.split()[-1] for line in f if "libopenblas" in line.split()[-1]]
    if not paths:
        return "(no OpenBLAS in this process)"
    lib = ctypes.CDLL(paths[0])
    lib.openblas_get_corename.restype = ctypes.c_char_p
    return lib.openblas_get_corename().decode()


def main(argv):
    if len(argv) >= 2 and argv[1] == "generate":
        return generate(argv[2:])
    if len(argv) >= 2 and argv[1] == "train":
        return train(argv[2:])
    if len(argv) >= 2 and argv[1] == "eval":
        return evaluate(argv[2:])
    if len(argv) >= 2 and argv[1] == "loss":
        return window_loss(argv[2:])
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
