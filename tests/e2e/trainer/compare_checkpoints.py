#!/usr/bin/python3
"""Compares two checkpoint files dataset by dataset (checkpoint.async's tests).

Usage: compare_checkpoints.py A.h5 B.h5 [--replace FROM TO]

Bitwise equal, else exit 1 naming the first difference:
  - every dataset under /state (the state vectors), /layout and /params (the
    virtual views, read through), with their dtype and shape;
  - the crc32 attribute of every /state dataset, /layout and /config;
  - every root attribute but created_utc (informational) and meta_crc32 (the
    CRC of the root attributes, created_utc included; trainer-ckpt verify
    checks it);
  - /config's text, except a line `async = ...` (the one setting the two runs
    were given differently), after FROM is replaced by TO in A's (the two
    runs' directories).
Prints one line per file pair: the number of datasets and bytes compared.
"""
import sys

import h5py
import numpy as np


def fail(msg):
    print(f"compare_checkpoints: {msg}", file=sys.stderr)
    sys.exit(1)


def datasets(f):
    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset) and name.split("/")[0] in ("state", "layout", "params"):
            out[name] = obj
    f.visititems(visit)
    return out


def main():
    args = sys.argv[1:]
    replace = None
    if len(args) == 5 and args[2] == "--replace":
        replace = (args[3], args[4])
        args = args[:2]
    if len(args) != 2:
        fail("usage: compare_checkpoints.py A.h5 B.h5 [--replace FROM TO]")
    a_path, b_path = args
    with h5py.File(a_path, "r") as a, h5py.File(b_path, "r") as b:
        da, db = datasets(a), datasets(b)
        if sorted(da) != sorted(db):
            fail(f"{a_path} and {b_path} hold different datasets: {sorted(set(da) ^ set(db))}")
        if not any(n.startswith("state/") for n in da):
            fail(f"{a_path}: no /state datasets")
        nbytes = 0
        for name in sorted(da):
            x, y = da[name], db[name]
            if x.dtype != y.dtype or x.shape != y.shape:
                fail(f"/{name}: {x.dtype}{x.shape} in {a_path}, {y.dtype}{y.shape} in {b_path}")
            vx, vy = x[()], y[()]
            bx = np.ascontiguousarray(vx).view(np.uint8) if x.shape else np.frombuffer(np.asarray(vx).tobytes(), np.uint8)
            by = np.ascontiguousarray(vy).view(np.uint8) if y.shape else np.frombuffer(np.asarray(vy).tobytes(), np.uint8)
            if bx.tobytes() != by.tobytes():
                fail(f"/{name}: the bytes differ between {a_path} and {b_path}")
            nbytes += bx.size
            if "crc32" in x.attrs or "crc32" in y.attrs:
                if x.attrs.get("crc32") != y.attrs.get("crc32"):
                    fail(f"/{name}: crc32 {x.attrs.get('crc32')} against {y.attrs.get('crc32')}")
        for key in sorted(set(a.attrs) | set(b.attrs)):
            if key in ("created_utc", "meta_crc32"):
                continue
            if key not in a.attrs or key not in b.attrs or a.attrs[key] != b.attrs[key]:
                fail(f"root attribute {key}: {a.attrs.get(key)!r} against {b.attrs.get(key)!r}")
        if a["config"].attrs.get("crc32") is None:
            fail(f"{a_path}: /config has no crc32")

        def config_lines(f, subst=None):
            text = f["config"][()]
            text = text.decode() if isinstance(text, bytes) else str(text)
            if subst:
                text = text.replace(*subst)
            return [line for line in text.splitlines() if not line.strip().startswith("async")]
        la, lb = config_lines(a, replace), config_lines(b)
        if la != lb:
            diff = [f"{x!r} / {y!r}" for x, y in zip(la, lb) if x != y] or [f"{len(la)} against {len(lb)} lines"]
            fail(f"/config differs beyond its async line: {diff[0]}")
    print(f"compare_checkpoints: {a_path} and {b_path}: {len(da)} datasets, {nbytes} bytes, bitwise equal")


if __name__ == "__main__":
    main()
