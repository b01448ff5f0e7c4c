#!/usr/bin/python3
"""Fixtures and read-back check for `trainer-data tokens` (tests/e2e/data/CMakeLists.txt).

  token_shards.py make DIR
      writes llm.c shards (magic 20240520, version 1, uint16 tokens) and raw uint16
      files with seeded random tokens, plus broken ones: bad_magic.bin,
      bad_version.bin, truncated.bin (one byte short), odd.u16 (raw, odd size),
      oov.bin (token 50257 at index 777, byte offset 1024 + 2*777 = 2578).
  token_shards.py check OUT.h5 VOCAB N_VAL TRAIN_FILES VAL_FILES
      TRAIN_FILES / VAL_FILES: comma-separated inputs ('-' for none). Reads the
      data set back with h5py: format, tokenizer 'pretokenized', vocab_size VOCAB,
      an empty /vocab, uint16 storage; /train/tokens + /val/tokens must equal the
      concatenated inputs token for token, and /val/tokens must hold N_VAL tokens
      (with VAL_FILES: exactly the val files' tokens).
"""
import os
import sys

import h5py
import numpy as np

MAGIC = 20240520


def llmc(path, tokens, magic=MAGIC, version=1, declared=None, cut=0):
    h = np.zeros(256, dtype="<i4")
    h[0], h[1], h[2] = magic, version, len(tokens) if declared is None else declared
    data = h.tobytes() + np.asarray(tokens, dtype="<u2").tobytes()
    with open(path, "wb") as f:
        f.write(data[: len(data) - cut])


def read_input(path):
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".bin"):
        h = np.frombuffer(data[:1024], dtype="<i4")
        assert h[0] == MAGIC and h[1] == 1, path
        t = np.frombuffer(data[1024:], dtype="<u2")
        assert len(t) == h[2], path
        return t
    return np.frombuffer(data, dtype="<u2")


def make(d):
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(20240520)
    # Over one default chunk (1,048,576) and not a multiple of it, nor of the small chunks used.
    llmc(f"{d}/train_a.bin", rng.integers(0, 50257, 1_234_567))
    llmc(f"{d}/train_b.bin", rng.integers(0, 50257, 4_321))
    llmc(f"{d}/val.bin", rng.integers(0, 50257, 5_003))
    rng.integers(0, 50257, 3_333).astype("<u2").tofile(f"{d}/raw.u16")
    # A learnable stream for the trainer: a vocab of 512, tokens follow a fixed
    # successor table with 10% noise (the loss can fall well below ln 512).
    nxt = rng.integers(0, 512, 512)
    t = np.empty(60_000, dtype=np.int64)
    t[0] = 0
    noise = rng.random(len(t)) < 0.1
    rand = rng.integers(0, 512, len(t))
    for i in range(1, len(t)):
        t[i] = rand[i] if noise[i] else nxt[t[i - 1]]
    llmc(f"{d}/learn_train.bin", t[:54_000])
    llmc(f"{d}/learn_val.bin", t[54_000:])
    good = rng.integers(0, 50257, 2_000)
    llmc(f"{d}/bad_magic.bin", good, magic=20240521)
    llmc(f"{d}/bad_version.bin", good, version=2)
    llmc(f"{d}/truncated.bin", good, cut=1)
    good.astype("<u2").tofile(f"{d}/odd.u16")
    with open(f"{d}/odd.u16", "ab") as f:
        f.write(b"\x01")
    oov = good.copy()
    oov[777] = 50257
    llmc(f"{d}/oov.bin", oov)


def check(out, vocab, n_val, train_files, val_files):
    train_files = [] if train_files == "-" else train_files.split(",")
    val_files = [] if val_files == "-" else val_files.split(",")
    want = np.concatenate([read_input(p) for p in train_files + val_files])
    with h5py.File(out, "r") as f:
        problems = []
        a = f.attrs
        if a["format"] != "shardtrain-tokens" or a["format_version"] != 1:
            problems.append(f"format {a['format']!r} version {a['format_version']}")
        if a["tokenizer"] != "pretokenized":
            problems.append(f"tokenizer {a['tokenizer']!r}, expected 'pretokenized'")
        if a["vocab_size"] != vocab:
            problems.append(f"vocab_size {a['vocab_size']}, expected {vocab}")
        if f["vocab"].shape != (0,):
            problems.append(f"/vocab has shape {f['vocab'].shape}, expected (0,)")
        tr, va = f["train/tokens"], f["val/tokens"]
        if tr.dtype != np.dtype("<u2") or va.dtype != np.dtype("<u2"):
            problems.append(f"token dtypes {tr.dtype}, {va.dtype}, expected uint16")
        if va.shape[0] != n_val:
            problems.append(f"/val/tokens has {va.shape[0]} tokens, expected {n_val}")
        got = np.concatenate([tr[...], va[...]])
    if len(got) != len(want):
        problems.append(f"{len(got)} tokens read back, the inputs hold {len(want)}")
    else:
        bad = np.flatnonzero(got != want)
        if len(bad):
            problems.append(f"{len(bad)} tokens differ, first at stream position {bad[0]}: "
                            f"{got[bad[0]]} read back, {want[bad[0]]} in the input")
    if problems:
        print(f"FAIL {out}:\n  " + "\n  ".join(problems))
        return 1
    print(f"{out}: {len(got)} tokens (train {len(got) - n_val}, val {n_val}) equal the inputs")
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]))
