#!/usr/bin/python3
"""Checks a labelled-text data set written by trainer-data textdir/csv.

usage: check_labelled_samples.py FILE.h5 CLASSES TRAIN VAL SEQ_LEN [CLASS=HEXTEXT ...]

CLASSES is comma-separated (id order). Every sample must be [CLS] + bytes + [PAD]
with its length right; each CLASS=HEXTEXT names a document (its processed bytes,
hex-encoded) that must be present exactly once, with that class. Exit 1 on any
mismatch."""
import os
import sys

import h5py
import numpy as np

PAD, CLS = 256, 257


def main():
    path, classes, n_train, n_val, seq_len = sys.argv[1:6]
    want = [a.split("=", 1) for a in sys.argv[6:]]
    classes = classes.split(",")
    problems = []
    found = {bytes.fromhex(h): [] for _, h in want}
    if os.path.exists(path + ".partial"):
        problems.append(f"{path}.partial was left behind")
    with h5py.File(path, "r") as f:
        a = f.attrs
        for key, value in (("format", "shardtrain-samples"), ("kind", "tokens"), ("tokenizer", "byte")):
            if a[key] != value:
                problems.append(f"attribute {key} is {a[key]!r}, expected {value!r}")
        for key, value in (("vocab_size", 258), ("pad_id", PAD), ("cls_id", CLS), ("sep_id", -1),
                           ("num_classes", len(classes))):
            if int(a[key]) != value:
                problems.append(f"attribute {key} is {a[key]}, expected {value}")
        if list(a["sample_shape"]) != [int(seq_len)]:
            problems.append(f"sample_shape {list(a['sample_shape'])}, expected [{seq_len}]")
        if not str(a["split_rule"]).startswith("seeded: seed "):
            problems.append(f"split_rule {a['split_rule']!r}")
        names = [n.decode() if isinstance(n, bytes) else n for n in f["classes"][...]] if "classes" in f else None
        if names is not None and names != classes:
            problems.append(f"classes {names}, expected {classes}")
        for split, n in (("train", int(n_train)), ("val", int(n_val))):
            x, y, ln = f[split]["inputs"][...], f[split]["labels"][...], f[split]["lengths"][...]
            if x.shape != (n, int(seq_len)) or y.shape != (n,) or ln.shape != (n,):
                problems.append(f"{split}: shapes {x.shape} {y.shape} {ln.shape}, expected {n} samples")
                continue
            for i in range(n):
                L = int(ln[i])
                row = x[i].astype(np.int64)
                if not (1 <= L <= int(seq_len)) or row[0] != CLS or (row[1:L] >= 256).any() or (row[L:] != PAD).any():
                    problems.append(f"{split}[{i}]: not [CLS] + bytes + [PAD] with length {L}")
                    continue
                text = bytes(int(t) for t in row[1:L])
                if text in found:
                    found[text].append(classes[int(y[i])])
    for (cls, h) in want:
        got = found[bytes.fromhex(h)]
        if got != [cls]:
            problems.append(f"document {bytes.fromhex(h)!r}: found with classes {got}, expected [{cls!r}]")
    for p in problems:
        print(f"{path}: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
