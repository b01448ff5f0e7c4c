#!/usr/bin/python3
"""An independent safetensors reader for the tests of `trainer-ckpt export
--format safetensors` (the safetensors package is not a dependency; this reads
the format from its description, not from our writer's code).

A file is: the header length N as a little-endian uint64, N bytes of JSON
header ({name: {"dtype", "shape", "data_offsets": [begin, end]}, ...,
"__metadata__": {str: str}}), then the tensors' bytes; offsets count from the
byte after the header. read() refuses a file whose offsets leave a gap, overlap,
disagree with the dtype and shape, or do not cover the file to its last byte,
naming the tensor.

Usage:
  safetensors_read.py gpt2-to-h5 IN.safetensors OUT.h5 --vocab V --n-layer L --n-embd C
                      --n-positions T --n-head H
      IN must hold exactly Hugging Face GPT2LMHeadModel's tensors for that shape
      (lm_head.weight may be absent: tied to transformer.wte.weight), with those
      numbers in its __metadata__; a missing or unexpected tensor, or a wrong
      shape, is refused by name (exit 1). OUT gets one float32 dataset per
      tensor under share/reference/gpt_torch.py's names (ours), the Conv1D
      weights transposed back to Linear's (out, in): `gpt_torch.py train --init OUT`.
  safetensors_read.py compare IN.safetensors REF.h5
      IN's tensors are bitwise the datasets of REF (a `trainer-ckpt export` .h5),
      same names, shapes and set.
"""
import argparse
import json
import struct
import sys

import h5py
import numpy as np

DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2)}


def fail(msg):
    raise SystemExit(f"safetensors_read: {msg}")


def read(path):
    """(tensors {name: float32 ndarray}, metadata {str: str})."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        fail(f"{path}: {len(data)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        fail(f"{path}: header length {n} runs past the end of the file ({len(data)} bytes)")
    if (8 + n) % 8:
        fail(f"{path}: the data starts at byte {8 + n}, not a multiple of 8")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        fail(f"{path}: the header is not JSON: {e}")
    if not isinstance(header, dict):
        fail(f"{path}: the header is not a JSON object")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        fail(f"{path}: __metadata__ is not an object of strings")
    spans = []
    for name, e in header.items():
        if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
            fail(f"{path}: {name}: an entry needs exactly dtype, shape and data_offsets, has {e}")
        if e["dtype"] not in DTYPES:
            fail(f"{path}: {name}: dtype {e['dtype']!r} is not one of {sorted(DTYPES)}")
        shape = e["shape"]
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            fail(f"{path}: {name}: shape {shape!r} is not a list of sizes")
        off = e["data_offsets"]
        if not (isinstance(off, list) and len(off) == 2 and all(isinstance(x, int) for x in off)):
            fail(f"{path}: {name}: data_offsets {off!r} is not [begin, end]")
        size = int(np.prod(shape, dtype=np.int64)) * DTYPES[e["dtype"]][1]
        if off[1] - off[0] != size:
            fail(f"{path}: {name}: data_offsets {off} hold {off[1] - off[0]} bytes, dtype and shape {shape} need {size}")
        spans.append((off[0], off[1], name))
    spans.sort()
    end = 0
    for begin, stop, name in spans:
        if begin != end:
            fail(f"{path}: {name}: data_offsets begin at {begin}, the previous tensor ends at {end} "
                 f"({'a gap' if begin > end else 'an overlap'})")
        end = stop
    if 8 + n + end != len(data):
        fail(f"{path}: the tensors end at byte {8 + n + end}, the file has {len(data)}")
    tensors = {}
    for name, e in header.items():
        code, width = DTYPES[e["dtype"]]
        count = int(np.prod(e["shape"], dtype=np.int64))
        raw = np.frombuffer(data, dtype=code, count=count, offset=8 + n + e["data_offsets"][0])
        if e["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = raw.astype(np.float32).reshape(e["shape"])
    return tensors, meta


def gpt2_names(L, C, V, T):
    """{GPT-2 name: (our name, GPT-2 shape, transposed)}."""
    want = {"transformer.wte.weight": ("wte.weight", (V, C), False),
            "transformer.wpe.weight": ("wpe.weight", (T, C), False),
            "transformer.ln_f.weight": ("ln_f.weight", (C,), False),
            "transformer.ln_f.bias": ("ln_f.bias", (C,), False)}
    for l in range(L):
        for n, shape, conv in (("ln_1.weight", (C,), False), ("ln_1.bias", (C,), False),
                               ("attn.c_attn.weight", (C, 3 * C), True), ("attn.c_attn.bias", (3 * C,), False),
                               ("attn.c_proj.weight", (C, C), True), ("attn.c_proj.bias", (C,), False),
                               ("ln_2.weight", (C,), False), ("ln_2.bias", (C,), False),
                               ("mlp.c_fc.weight", (C, 4 * C), True), ("mlp.c_fc.bias", (4 * C,), False),
                               ("mlp.c_proj.weight", (4 * C, C), True), ("mlp.c_proj.bias", (C,), False)):
            want[f"transformer.h.{l}.{n}"] = (f"h.{l}.{n}", shape, conv)
    return want


def gpt2_to_h5(argv):
    ap = argparse.ArgumentParser(prog="safetensors_read.py gpt2-to-h5")
    ap.add_argument("src")
    ap.add_argument("out")
    for k in ("--vocab", "--n-layer", "--n-embd", "--n-positions", "--n-head"):
        ap.add_argument(k, type=int, required=True)
    a = ap.parse_args(argv)
    tensors, meta = read(a.src)
    expect = {"vocab_size": a.vocab, "n_layer": a.n_layer, "n_embd": a.n_embd, "n_positions": a.n_positions,
              "n_head": a.n_head}
    for k, v in expect.items():
        if meta.get(k) != str(v):
            fail(f"{a.src}: __metadata__ {k} is {meta.get(k)!r}, the model's is {v}")
    if meta.get("format") != "pt":
        fail(f"{a.src}: __metadata__ format is {meta.get('format')!r}, not 'pt'")
    want = gpt2_names(a.n_layer, a.n_embd, a.vocab, a.n_positions)
    have = set(tensors)
    if "lm_head.weight" in have:  # allowed: a copy of the tied embedding
        have.discard("lm_head.weight")
        if not np.array_equal(tensors["lm_head.weight"], tensors.get("transformer.wte.weight")):
            fail(f"{a.src}: lm_head.weight differs from transformer.wte.weight (they are tied)")
    elif meta.get("tied_weights") != "lm_head.weight=transformer.wte.weight":
        fail(f"{a.src}: no lm_head.weight, and __metadata__ does not say it is tied to transformer.wte.weight")
    missing, extra = sorted(set(want) - have), sorted(have - set(want))
    if missing or extra:
        fail(f"{a.src}: tensor names differ from GPT-2's: missing {missing}, unexpected {extra}")
    with h5py.File(a.out, "w") as out:
        for hf, (ours, shape, conv) in want.items():
            value = tensors[hf]
            if tuple(value.shape) != shape:
                fail(f"{a.src}: {hf} has shape {tuple(value.shape)}, GPT-2's is {shape}")
            out[ours] = np.ascontiguousarray(value.T if conv else value)
    print(f"{a.src}: {len(want)} GPT-2 tensors -> {a.out}")


def compare(argv):
    src, ref = argv
    tensors, meta = read(src)
    with h5py.File(ref, "r") as f:
        names = {k for k in f.keys() if isinstance(f[k], h5py.Dataset)}
        if set(tensors) != names:
            fail(f"{src}: names differ from {ref}: only in the safetensors file {sorted(set(tensors) - names)}, "
                 f"only in {ref} {sorted(names - set(tensors))}")
        for name in sorted(names):
            r = np.asarray(f[name])
            if r.dtype != np.float32 or r.shape != tensors[name].shape:
                fail(f"{src}: {name}: shape {tensors[name].shape}, {ref} has {r.shape} {r.dtype}")
            if r.tobytes() != tensors[name].tobytes():
                fail(f"{src}: {name}: values differ from {ref}")
    print(f"{src}: {len(names)} tensors bitwise as in {ref} (metadata {meta})")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("gpt2-to-h5", "compare"):
        raise SystemExit(__doc__)
    (gpt2_to_h5 if sys.argv[1] == "gpt2-to-h5" else compare)(sys.argv[2:])
