#!/usr/bin/env python3
"""A real client of `trainer-ckpt export --format safetensors --names gpt2`:
Hugging Face transformers' GPT2LMHeadModel loads the export and the config.json
that the export writes beside it, and its loss on our validation windows must be
our trainer's (relative 1e-4).

  hf_check.py DIR DATA --expect LOSS [--tol 1e-4] [--windows N]
              [--client auto|transformers|stand-in] [--batch B] [--threads N]

  DIR       a folder with config.json and model.safetensors (the export)
  DATA      the shardtrain tokens file the model was trained on (/val/tokens)
  --expect  our trainer's validation loss for the same weights (metrics.csv's
            val_loss at the checkpoint's step)
  --windows the first N windows only (a periodic pass with train.eval_windows N);
            default every window, as the trainer's final pass
  --client  transformers: GPT2LMHeadModel.from_pretrained(DIR); refuse to run
            without it. stand-in: a GPT-2 written here with plain PyTorch from
            config.json and the file's tensors under their Hugging Face names and
            layouts (Conv1D (in, out) weights, the tied LM head, gelu_new); it
            checks this script and the export where transformers is not
            installed (Debian's python3-torch). auto (default): transformers when
            it imports, else the stand-in, and the output says which ran.

The windows are the trainer's (src/train/gpt_task.cpp evaluate): seq_len + 1
tokens starting at k * seq_len of the validation split, k < (n_val - 1) // seq_len,
seq_len being config.json's n_positions; the loss is the mean cross-entropy over
every target token, in float32 on the CPU, summed in float64.

With transformers, the load itself is checked too: no missing, unexpected or
mismatched key, every tensor of the file equal to the loaded model's, and the LM
head tied to transformer.wte.weight.

Prints "hf_check: PASS ..." or "hf_check: FAIL ..." as its last line. Exit 0 pass,
1 fail (the losses differ, or the load was not exact), 2 bad input.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np


def die(msg, code=2):
    print(f"hf_check: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def read_safetensors(path):
    """{name: float32 array} as stored: the reference's numpy reader
    (share/reference/gpt_torch.py read_safetensors_raw)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
    from gpt_torch import read_safetensors_raw
    try:
        return read_safetensors_raw(path)[0]
    except (OSError, ValueError) as e:
        die(f"{path}: cannot read as safetensors: {e}")


def windows_of(data_path, T, limit):
    import h5py
    try:
        f = h5py.File(data_path, "r")
    except OSError as e:
        die(f"{data_path}: cannot open as HDF5: {e}")
    with f:
        if "val" not in f or "tokens" not in f["val"]:
            die(f"{data_path}: not a shardtrain tokens file (needs /val/tokens)")
        tokens = np.asarray(f["val"]["tokens"]).astype(np.int64)
    n = (tokens.size - 1) // T
    if n < 1:
        die(f"{data_path}: {tokens.size} validation tokens, need at least n_positions + 1 = {T + 1}")
    if limit:
        n = min(n, limit)
    return tokens, n


class StandIn:
    """GPT-2 as Hugging Face defines it, from config.json and the tensors by their
    Hugging Face names: Conv1D y = x @ W + b with W (in, out); c_attn's output is
    [q | k | v], heads contiguous; attention scaled by 1/sqrt(head dim), causal;
    gelu_new (tanh); LayerNorm with layer_norm_epsilon; logits = ln_f(x) @ wte^T."""

    def __init__(self, cfg, tensors):
        import torch
        self.torch = torch
        need = ["n_layer", "n_head", "n_embd", "n_positions", "vocab_size", "layer_norm_epsilon"]
        for k in need:
            if k not in cfg:
                die(f"config.json has no '{k}'")
        if cfg.get("activation_function", "gelu_new") != "gelu_new":
            die(f"the stand-in knows only activation_function gelu_new, config.json has {cfg['activation_function']}")
        if not cfg.get("tie_word_embeddings", True):
            die("the stand-in knows only a tied LM head (tie_word_embeddings true)")
        self.L, self.H, self.C = cfg["n_layer"], cfg["n_head"], cfg["n_embd"]
        self.eps = float(cfg["layer_norm_epsilon"])
        self.scale = cfg.get("scale_attn_weights", True)
        self.w = {}
        expect = {"transformer.wte.weight": (cfg["vocab_size"], self.C),
                  "transformer.wpe.weight": (cfg["n_positions"], self.C),
                  "transformer.ln_f.weight": (self.C,), "transformer.ln_f.bias": (self.C,)}
        C = self.C
        for l in range(self.L):
            h = f"transformer.h.{l}."
            expect.update({h + "ln_1.weight": (C,), h + "ln_1.bias": (C,), h + "ln_2.weight": (C,), h + "ln_2.bias": (C,),
                           h + "attn.c_attn.weight": (C, 3 * C), h + "attn.c_attn.bias": (3 * C,),
                           h + "attn.c_proj.weight": (C, C), h + "attn.c_proj.bias": (C,),
                           h + "mlp.c_fc.weight": (C, 4 * C), h + "mlp.c_fc.bias": (4 * C,),
                           h + "mlp.c_proj.weight": (4 * C, C), h + "mlp.c_proj.bias": (C,)})
        missing = sorted(set(expect) - set(tensors))
        extra = sorted(set(tensors) - set(expect))
        if missing or extra:
            print(f"hf_check: FAIL: the file's tensors are not GPT-2's for this config: missing {missing[:6]}, "
                  f"unexpected {extra[:6]}", flush=True)
            sys.exit(1)
        for k, shape in expect.items():
            if tuple(tensors[k].shape) != shape:
                print(f"hf_check: FAIL: {k} has shape {tuple(tensors[k].shape)}, GPT-2 with this config needs {shape}",
                      flush=True)
                sys.exit(1)
            self.w[k] = torch.from_numpy(np.array(tensors[k], dtype=np.float32))

    def logits(self, x):
        torch, F = self.torch, self.torch.nn.functional
        w, C, H = self.w, self.C, self.H
        B, T = x.shape
        ln = lambda z, p: F.layer_norm(z, (C,), w[p + ".weight"], w[p + ".bias"], self.eps)
        conv1d = lambda z, p: z @ w[p + ".weight"] + w[p + ".bias"]
        h = w["transformer.wte.weight"][x] + w["transformer.wpe.weight"][:T][None]
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        for l in range(self.L):
            p = f"transformer.h.{l}."
            q, k, v = conv1d(ln(h, p + "ln_1"), p + "attn.c_attn").split(C, dim=2)
            q, k, v = (z.view(B, T, H, C // H).transpose(1, 2) for z in (q, k, v))
            att = q @ k.transpose(-2, -1)
            if self.scale:
                att = att / math.sqrt(C // H)
            att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
            h = h + conv1d(y, p + "attn.c_proj")
            m = conv1d(ln(h, p + "ln_2"), p + "mlp.c_fc")
            m = 0.5 * m * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (m + 0.044715 * m.pow(3))))
            h = h + conv1d(m, p + "mlp.c_proj")
        return ln(h, "transformer.ln_f") @ w["transformer.wte.weight"].T


def load_transformers(folder, tensors):
    """GPT2LMHeadModel.from_pretrained(folder), checked: exit 1 when the load is not exact."""
    import torch
    import transformers
    from transformers import GPT2LMHeadModel
    kw = dict(output_loading_info=True)
    try:
        model, info = GPT2LMHeadModel.from_pretrained(folder, dtype=torch.float32, **kw)
    except TypeError:  # transformers 4.x: torch_dtype
        model, info = GPT2LMHeadModel.from_pretrained(folder, torch_dtype=torch.float32, **kw)
    model.eval()
    problems = []
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        v = [x for x in (info.get(key) or []) if not (key == "missing_keys" and str(x) == "lm_head.weight")]
        if v:
            problems.append(f"{key}: {list(v)[:6]}")
    state = model.state_dict()
    for name, value in tensors.items():
        if name not in state:
            problems.append(f"{name} is not in the loaded model's state dict")
        elif tuple(state[name].shape) != tuple(value.shape):
            problems.append(f"{name}: loaded shape {tuple(state[name].shape)}, file {tuple(value.shape)}")
        elif not np.array_equal(state[name].detach().cpu().numpy(), value):
            problems.append(f"{name}: the loaded values differ from the file's")
    params = {n for n, _ in model.named_parameters()}
    not_from_file = sorted(params - set(tensors) - {"lm_head.weight"})
    if not_from_file:
        problems.append(f"parameters the file did not set (left at their random init): {not_from_file[:6]}")
    if model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        problems.append("lm_head.weight is not tied to transformer.wte.weight")
    if problems:
        print("hf_check: FAIL: GPT2LMHeadModel did not load the export exactly: " + "; ".join(problems), flush=True)
        sys.exit(1)
    print(f"hf_check: loaded with transformers {transformers.__version__} (torch {torch.__version__}): "
          f"{len(tensors)} tensors equal to the file's, no missing/unexpected/mismatched key, LM head tied",
          flush=True)
    return lambda x: model(input_ids=x).logits


def main(argv):
    ap = argparse.ArgumentParser(prog="hf_check.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("data")
    ap.add_argument("--expect", type=float, required=True)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--windows", type=int, default=0)
    ap.add_argument("--client", choices=("auto", "transformers", "stand-in"), default="auto")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own)")
    a = ap.parse_args(argv)
    t0 = time.time()
    cfg_path = os.path.join(a.folder, "config.json")
    st_path = os.path.join(a.folder, "model.safetensors")
    for p in (cfg_path, st_path):
        if not os.path.isfile(p):
            die(f"{p}: missing (trainer-ckpt export CKPT {a.folder}/model.safetensors --format safetensors "
                f"--names gpt2 writes both)")
    try:
        cfg = json.load(open(cfg_path))
    except ValueError as e:
        die(f"{cfg_path}: not JSON: {e}")
    import torch
    if a.threads:
        torch.set_num_threads(a.threads)
    tensors = read_safetensors(st_path)
    client = a.client
    if client == "auto":
        try:
            import transformers  # noqa: F401
            client = "transformers"
        except ImportError:
            client = "stand-in"
            print("hf_check: transformers is not installed here: using the stand-in (plain PyTorch GPT-2 "
                  "from config.json)", flush=True)
    if client == "transformers":
        try:
            forward = load_transformers(a.folder, tensors)
        except ImportError as e:
            die(f"--client transformers: {e}")
        except Exception:  # an API this script did not expect: say so, and give the stand-in's loss beside it
            import traceback
            traceback.print_exc()
            print("hf_check: FAIL: GPT2LMHeadModel.from_pretrained raised (above); the stand-in follows for "
                  "information only", flush=True)
            main([a.folder, a.data, "--expect", repr(a.expect), "--tol", repr(a.tol), "--windows", str(a.windows),
                  "--client", "stand-in", "--batch", str(a.batch)])
            return 1
    else:
        model = StandIn(cfg, tensors)
        forward = model.logits
        print(f"hf_check: stand-in GPT-2 (torch {torch.__version__}) from {cfg_path}", flush=True)
    T = int(cfg["n_positions"])
    tokens, n = windows_of(a.data, T, a.windows)
    if int(tokens.max()) >= int(cfg["vocab_size"]):
        die(f"{a.data}: token id {int(tokens.max())} is outside config.json's vocab_size {cfg['vocab_size']}")
    offsets = np.arange(T + 1)
    total = 0.0
    with torch.no_grad():
        for first in range(0, n, a.batch):
            idx = (np.arange(first, min(first + a.batch, n)) * T)[:, None] + offsets
            w = torch.from_numpy(tokens[idx])
            logits = forward(w[:, :-1]).float()
            total += float(torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1), reduction="sum").double())
    loss = total / (n * T)
    rel = abs(loss - a.expect) / abs(a.expect)
    ok = rel <= a.tol
    print(f"hf_check: {'PASS' if ok else 'FAIL'}: client {client}; {n} validation windows of {T + 1} tokens; "
          f"loss {loss:.9f}, ours {a.expect:.9f}, relative difference {rel:.3g} (bound {a.tol:g}); "
          f"{time.time() - t0:.1f} s", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
