#!/usr/bin/env python3
"""Writes a copy of a token data set whose /train/tokens is stored the way the
reader must refuse (run with /usr/bin/python3, which has h5py).

Usage: craft_tokens.py SRC DST KIND
  big_chunk   the same tokens in ONE gzip-compressed chunk of 2^25 elements
              (128 MiB as int32, 64 MiB as uint16 -- the chunk is sized from
              the element type so it is 128 MiB either way): a small file whose
              every read makes HDF5 inflate the whole chunk
  external    the tokens kept in an external raw file beside DST (DST.raw)
  deflate     small chunks (1024 elements) compressed with gzip
Prints the dataset's storage as h5py reports it.
"""
import os
import shutil
import sys

import h5py
import numpy as np


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src, dst, kind = sys.argv[1:]
    shutil.copyfile(src, dst)
    with h5py.File(dst, "r+") as f:
        tokens = f["train/tokens"][...]
        del f["train/tokens"]
        n = tokens.shape[0]
        if kind == "big_chunk":
            chunk = (128 << 20) // tokens.dtype.itemsize
            ds = f["train"].create_dataset("tokens", shape=(n,), maxshape=(None,), dtype=tokens.dtype,
                                           chunks=(chunk,), compression="gzip")
            ds[...] = tokens
        elif kind == "external":
            raw = dst + ".raw"
            with open(raw, "wb") as out:
                out.write(tokens.tobytes())
            ds = f["train"].create_dataset("tokens", shape=(n,), dtype=tokens.dtype,
                                           external=[(os.path.abspath(raw), 0, tokens.nbytes)])
            ds[...] = tokens
        elif kind == "deflate":
            ds = f["train"].create_dataset("tokens", data=tokens, chunks=(min(n, 1024),), compression="gzip")
        else:
            sys.exit(f"unknown kind {kind}")
        print(f"{dst}: /train/tokens {n} x {tokens.dtype}, chunks {ds.chunks}, compression {ds.compression}, "
              f"external {ds.external}; file {os.path.getsize(dst)} bytes")


if __name__ == "__main__":
    main()
