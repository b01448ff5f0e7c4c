#!/usr/bin/python3
"""Value checks for the trainer-ckpt end-to-end tests (tests/e2e/ckpt).

Knows the layout and formulas of make_test_checkpoint.cpp (keep them in step):
a one-block GPT (V=65, T=16, C=12), offsets aligned up to 16 elements; for a
global element index g inside a tensor
    master = float32(sin(g)), exp_avg = float32(0.01 cos(g)),
    exp_avg_sq = float32(1e-4 (1 + g)), params_bf16 = bf16(master).

    check_ckpt.py npy FILE NAME VECTOR      a .npy export of one parameter
    check_ckpt.py h5 FILE VECTOR [NAME...]  an .h5 export (default: every parameter)
    check_ckpt.py params CKPT WORLD         the checkpoint itself (written by WORLD ranks), read by
                                            h5py by name: its format (superblock and object headers
                                            of the pinned bounds), every root attribute's name, type
                                            and value, meta_crc32 and every dataset's crc32
                                            recomputed; the h5py example of the doc
    check_ckpt.py flip SRC DST OFFSET       copy SRC to DST with the byte at OFFSET inverted

Exits 1 with "FAIL: ..." on the first mismatch. Needs numpy and h5py
(python3-h5py); without them it fails, it does not skip.
"""
import ast
import shutil
import sys
import zlib

try:
    import h5py
    import numpy as np
except ImportError as e:  # a missing dependency is a failure, not a skip
    print(f"FAIL: {e}: install python3-h5py (share/install-deps.sh)", file=sys.stderr)
    sys.exit(1)

ALIGN, V, T, C = 16, 65, 16, 12
TENSORS = [
    ("wte.weight", (V, C)),
    ("wpe.weight", (T, C)),
    ("h.0.ln_1.weight", (C,)),
    ("h.0.ln_1.bias", (C,)),
    ("h.0.attn.c_attn.weight", (3 * C, C)),
    ("h.0.attn.c_attn.bias", (3 * C,)),
    ("h.0.attn.c_proj.weight", (C, C)),
    ("ln_f.weight", (C,)),
]


def layout():
    """name -> (offset, shape), offsets aligned as ParamLayout aligns them."""
    out, end = {}, 0
    for name, shape in TENSORS:
        offset = (end + ALIGN - 1) // ALIGN * ALIGN
        out[name] = (offset, shape)
        end = offset + int(np.prod(shape))
    return out


def expected(vector, name):
    offset, shape = layout()[name]
    g = np.arange(offset, offset + int(np.prod(shape)), dtype=np.float64)
    values = {"master": np.sin(g), "exp_avg": 0.01 * np.cos(g), "exp_avg_sq": 1e-4 * (1.0 + g)}[vector]
    return values.astype(np.float32).reshape(shape)


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def check_values(what, got, want):
    if got.shape != want.shape:
        fail(f"{what}: shape {got.shape}, expected {want.shape}")
    if got.dtype != np.float32:
        fail(f"{what}: dtype {got.dtype}, expected float32")
    # glibc's and numpy's sin/cos may differ by an ulp in float64; allow a float32 ulp.
    if not np.allclose(got, want, rtol=1e-6, atol=1.2e-7):
        i = np.unravel_index(np.argmax(np.abs(got - want)), got.shape)
        fail(f"{what}: value at {tuple(int(x) for x in i)} is {got[i]!r}, expected {want[i]!r}")


def bf16_round(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


def cmd_npy(path, name, vector):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:8] != b"\x93NUMPY\x01\x00":
        fail(f"{path}: not a .npy v1.0 file (starts {raw[:8]!r})")
    hlen = int.from_bytes(raw[8:10], "little")
    if (10 + hlen) % 64 != 0 or raw[10 + hlen - 1:10 + hlen] != b"\n":
        fail(f"{path}: header of {10 + hlen} bytes is not padded to 64 with a final newline")
    header = ast.literal_eval(raw[10:10 + hlen].decode("latin1"))
    want_shape = layout()[name][1]
    if header != {"descr": "<f4", "fortran_order": False, "shape": want_shape}:
        fail(f"{path}: header {header}")
    if len(raw) != 10 + hlen + 4 * int(np.prod(want_shape)):
        fail(f"{path}: {len(raw)} bytes, expected header + {int(np.prod(want_shape))} float32")
    check_values(f"{path} ({name})", np.load(path), expected(vector, name))
    print(f"{path}: {name} {want_shape} {vector} ok")


def cmd_h5(path, vector, names):
    names = names or [n for n, _ in TENSORS]
    with h5py.File(path, "r") as f:
        if sorted(f.keys()) != sorted(names):
            fail(f"{path}: datasets {sorted(f.keys())}, expected {sorted(names)}")
        for name in names:
            check_values(f"{path}:/{name}", f[name][()], expected(vector, name))
        if f.attrs["vector"] != vector.encode() or int(f.attrs["step"]) != 42:
            fail(f"{path}: attributes {dict(f.attrs)}")
    print(f"{path}: {len(names)} parameters of {vector} ok")


def padded_size(world):
    """The layout's end padded to a multiple of world x ALIGN, as make_test_checkpoint pads it."""
    offset, shape = layout()[TENSORS[-1][0]]
    end, unit = offset + int(np.prod(shape)), ALIGN * world
    return (end + unit - 1) // unit * unit


# The root attributes make_test_checkpoint writes, in the order of io/checkpoint_format.hpp
# visit_meta (that order is the meta_crc32 text's): (name, kind, value). Kinds: s a
# fixed-length NUL-terminated string, i a 64-bit little-endian integer, f a double.
def root_attributes(world, bf16):
    return [
        ("format", "s", "shardtrain-checkpoint"), ("schema_version", "i", 1),
        ("step", "i", 42), ("samples_seen", "i", 1344), ("tokens_seen", "i", 1344 * T),
        ("optimizer_updates", "i", 40), ("sampler_seed", "i", 1234), ("world_size", "i", world),
        ("zero_stage", "i", 1), ("precision", "s", "bf16" if bf16 else "fp32"), ("alignment", "i", ALIGN),
        ("padded_size", "i", padded_size(world)), ("loss_scale", "f", 1.0), ("scaler_good_steps", "i", 0),
        ("scaler_hysteresis_left", "i", 2), ("scaler_consecutive_skips", "i", 0),
        ("data_path", "s", "data/synthetic.h5"), ("data_train_tokens", "i", 100000),
        ("data_vocab_size", "i", V), ("seq_len", "i", T), ("created_utc", "s", "2026-11-23T12:00:00Z"),
        ("shardtrain_version", "s", "test"), ("parent", "s", ""),
    ]


def check_format(path):
    """The bounds io/h5_write.hpp set_format_bounds pins (low 1.8, high 1.10): superblock
    version 2 or 3 and every object header of version 2 (signature OHDR, with a checksum);
    a version-1 header (no checksum) anywhere fails."""
    with open(path, "rb") as fh:
        sb = fh.read(9)
    if sb[:8] != b"\x89HDF\r\n\x1a\n" or sb[8] not in (2, 3):
        fail(f"{path}: superblock version {sb[8] if len(sb) > 8 else None}, expected 2 or 3 (format bounds 1.8..1.10)")
    seen = []

    def visit(name, obj):
        seen.append(name)
    with h5py.File(path, "r") as f:
        f.visititems(visit)
        for name in ["/"] + seen:
            # HDF5's word (the header's version) and the bytes at the header's address: a
            # version-2 header starts with the signature OHDR and its version byte 2.
            info = h5py.h5o.get_info(f[name].id)
            with open(path, "rb") as fh:
                fh.seek(info.addr)
                head = fh.read(5)
            if info.hdr.version != 2 or head[:4] != b"OHDR" or head[4] != 2:
                fail(f"{path}: object {name} at {info.addr}: header version {info.hdr.version}, starts {head!r}; "
                     "expected a version-2 header (OHDR 2)")
    return len(seen) + 1


def check_root_attributes(f, path, world):
    bf16 = "params_bf16" in f["state"]
    want = root_attributes(world, bf16)
    names = sorted(list(f.attrs.keys()))
    if names != sorted([n for n, _, _ in want] + ["meta_crc32"]):
        fail(f"{path}: root attributes {names}, expected {sorted([n for n, _, _ in want] + ['meta_crc32'])}")
    text = ""
    for name, kind, value in want:
        tid = f.attrs.get_id(name).get_type()
        got = f.attrs[name]
        if kind == "s":
            if tid.get_class() != h5py.h5t.STRING or tid.is_variable_str() or tid.get_size() != len(value) + 1:
                fail(f"{path}: attribute {name}: not a fixed-length string of {len(value) + 1} bytes")
            got = got.decode()
            line = value
        elif kind == "i":
            if tid.get_class() != h5py.h5t.INTEGER or tid.get_size() != 8 or tid.get_order() != h5py.h5t.ORDER_LE:
                fail(f"{path}: attribute {name}: not a 64-bit little-endian integer")
            got = int(got)
            line = str(value)
        else:
            if tid.get_class() != h5py.h5t.FLOAT or tid.get_size() != 8:
                fail(f"{path}: attribute {name}: not a double")
            got = float(got)
            line = str(int(np.array(value, dtype="<f8").view("<i8")))  # the bit pattern
        if got != value:
            fail(f"{path}: attribute {name} is {got!r}, expected {value!r}")
        text += f"{name}={line}\n"
    # meta_crc32: CRC-32 of "name=value\n" per attribute in that order (share/doc/checkpoint-format.md).
    tid = f.attrs.get_id("meta_crc32").get_type()
    if tid.get_class() != h5py.h5t.INTEGER or tid.get_size() != 4 or tid.get_sign() != h5py.h5t.SGN_NONE:
        fail(f"{path}: attribute meta_crc32: not an unsigned 32-bit integer")
    if int(f.attrs["meta_crc32"]) != zlib.crc32(text.encode()):
        fail(f"{path}: meta_crc32 {int(f.attrs['meta_crc32'])} != CRC-32 of the root attributes' text "
             f"{zlib.crc32(text.encode())}")
    # Every dataset carries exactly one attribute, its crc32 (checked against the bytes below).
    def visit(name, obj):
        if isinstance(obj, h5py.Dataset) and not name.startswith("params/"):
            if sorted(obj.attrs.keys()) != ["crc32"]:
                fail(f"{path}: /{name} has attributes {sorted(obj.attrs.keys())}, expected ['crc32']")
            t = obj.attrs.get_id("crc32").get_type()
            if t.get_class() != h5py.h5t.INTEGER or t.get_size() != 4 or t.get_sign() != h5py.h5t.SGN_NONE:
                fail(f"{path}: /{name}'s crc32 is not an unsigned 32-bit integer")
        elif isinstance(obj, h5py.Dataset) and len(obj.attrs) != 0:
            fail(f"{path}: view /{name} has attributes {sorted(obj.attrs.keys())}")
        elif isinstance(obj, h5py.Group) and len(obj.attrs) != 0:
            fail(f"{path}: group /{name} has attributes {sorted(obj.attrs.keys())}")
    f.visititems(visit)
    return len(want) + 1


def cmd_params(path, world):
    lay = layout()
    objects = check_format(path)
    with h5py.File(path, "r") as f:
        attrs = check_root_attributes(f, path, world)
        # Fixed-length string attributes come back from h5py as bytes.
        if f.attrs["format"] != b"shardtrain-checkpoint" or int(f.attrs["schema_version"]) != 1:
            fail(f"{path}: format/schema_version attributes {f.attrs['format']!r} {f.attrs['schema_version']!r}")
        # The named view the documentation shows, then every other one.
        w = f["params/h.0.attn.c_attn.weight"]
        if w.shape != (36, 12) or w.dtype != np.float32:
            fail(f"/params/h.0.attn.c_attn.weight: shape {w.shape} dtype {w.dtype}")
        check_values("/params/h.0.attn.c_attn.weight", w[...], expected("master", "h.0.attn.c_attn.weight"))
        if sorted(f["params"].keys()) != sorted(lay):
            fail(f"/params has {sorted(f['params'].keys())}")
        for name in lay:
            check_values(f"/params/{name}", f["params"][name][()], expected("master", name))
        # The layout table and the flat vectors agree with it; padding is zero.
        rows = f["layout"][...]
        got = [(r["name"].decode(), int(r["offset"]), tuple(int(x) for x in r["shape"][:r["ndim"]])) for r in rows]
        want = [(n, lay[n][0], lay[n][1]) for n, _ in TENSORS]
        if got != want:
            fail(f"/layout rows {got}, expected {want}")
        padded = int(f.attrs["padded_size"])
        for vector in ("master", "exp_avg", "exp_avg_sq"):
            flat = f["state"][vector][...]
            if flat.shape != (padded,):
                fail(f"/state/{vector}: shape {flat.shape}, padded_size {padded}")
            used = np.zeros(padded, dtype=bool)
            for name, (off, shape) in lay.items():
                n = int(np.prod(shape))
                used[off:off + n] = True
                check_values(f"/state/{vector}[{name}]", flat[off:off + n].reshape(shape), expected(vector, name))
            if np.any(flat[~used] != 0):
                fail(f"/state/{vector}: padding is not zero")
        if "params_bf16" in f["state"]:
            ds = f["state/params_bf16"]
            as_f32 = np.empty(ds.shape, dtype=np.float32)
            ds.read_direct(as_f32)  # HDF5 converts bfloat16 -> float32
            if not np.array_equal(as_f32, bf16_round(f["state/master"][...])):
                fail("/state/params_bf16 is not master rounded to bfloat16")
        config = f["config"][()].decode()
        if "d_model = 12" not in config:
            fail(f"/config: {config!r}")
        # The CRC rules of share/doc/checkpoint-format.md, recomputed independently: zlib CRC-32
        # of each state vector's bytes as stored (the file was written by 2 ranks, so the stored
        # value was combined from pieces), of the config text, and of the packed /layout rows.
        for name, ds in f["state"].items():
            ftype = ds.id.get_type()
            raw = np.empty(ds.shape, dtype=f"<u{ftype.get_size()}")
            ds.id.read(h5py.h5s.ALL, h5py.h5s.ALL, raw, mtype=ftype)  # the stored bytes, unconverted
            if zlib.crc32(raw.tobytes()) != int(ds.attrs["crc32"]):
                fail(f"/state/{name}: crc32 attribute {int(ds.attrs['crc32'])} != CRC-32 of its bytes")
        if zlib.crc32(f["config"][()]) != int(f["config"].attrs["crc32"]):
            fail("/config: crc32 attribute is not the CRC-32 of the text")
        if zlib.crc32(rows.tobytes()) != int(f["layout"].attrs["crc32"]):
            fail("/layout: crc32 attribute is not the CRC-32 of the packed rows")
    doc_example(path)
    print(f"{path}: format (superblock, {objects} version-2 object headers), {attrs} root attributes "
          f"(meta_crc32 recomputed), /params views, /layout, /state vectors, /config and every crc32 ok")


def doc_example(path):
    """The h5py example of share/doc/checkpoint-format.md, line for line, then its results checked."""
    with h5py.File(path, "r") as f:
        assert f.attrs["format"] == b"shardtrain-checkpoint" and f.attrs["schema_version"] == 1
        print(f.attrs["step"], f.attrs["precision"].decode())          # fixed-length strings are bytes
        w = f["params/h.0.attn.c_attn.weight"][...]                      # float32, shape (3C, C)
        layout = f["layout"][...]                                        # name, ndim, offset, numel, shape
        row = layout[layout["name"] == b"h.0.attn.c_attn.weight"][0]
        shape = tuple(row["shape"][:row["ndim"]])
        m = f["state/exp_avg"][row["offset"]:row["offset"] + row["numel"]].reshape(shape)
        bf16 = f["state/params_bf16"][...] if "params_bf16" in f["state"] else None
        config = f["config"][()].decode()                                # the resolved TOML
    check_values("doc example: w", w, expected("master", "h.0.attn.c_attn.weight"))
    check_values("doc example: m", m, expected("exp_avg", "h.0.attn.c_attn.weight"))
    if bf16 is not None:
        with h5py.File(path, "r") as f:
            if not np.array_equal(bf16, bf16_round(f["state/master"][...])):
                fail("doc example: /state/params_bf16 read as float32 is not bf16(master)")
    if "d_model = 12" not in config:
        fail("doc example: config")



def cmd_flip(src, dst, offset):
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))
    print(f"{dst}: byte {offset} flipped (0x{b[0]:02x} -> 0x{b[0] ^ 0xFF:02x})")


def main(argv):
    if len(argv) >= 4 and argv[0] == "npy":
        cmd_npy(argv[1], argv[2], argv[3])
    elif len(argv) >= 3 and argv[0] == "h5":
        cmd_h5(argv[1], argv[2], argv[3:])
    elif len(argv) == 3 and argv[0] == "params":
        cmd_params(argv[1], int(argv[2]))
    elif len(argv) == 4 and argv[0] == "flip":
        cmd_flip(argv[1], argv[2], int(argv[3]))
    else:
        fail(f"usage: {__doc__}")


if __name__ == "__main__":
    main(sys.argv[1:])
