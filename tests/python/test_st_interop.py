#!/usr/bin/env python3
"""Our safetensors reader and writer against the official package.
 (a) a file written by safetensors.numpy.save_file (every dtype we support,
     random values) is read by our loader with identical names, dtypes,
     shapes, bytes and metadata (st_tool dump vs hashes computed here);
 (b) the file our writer makes (st_tool write) opens in the official reader
     with exactly the values st_tool.c defines, rebuilt here from the same
     integer formulas;
 (c) st_tool dump of every good fixture equals the official reader's view.

Run alone: $H3_PYTHON tests/python/test_st_interop.py build/tests/st_tool tests/data build/tests
Exit 0 pass, 1 fail, 77 skip (safetensors, numpy or ml_dtypes not importable).
Seed: H3_TEST_SEED."""
import glob
import os
import subprocess
import sys
import time

from checks import FAILS, check
from fnv import fnv1a64

try:
    import ml_dtypes
    import numpy as np
    from safetensors import deserialize, safe_open
    from safetensors.numpy import save_file
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)


def hexs(s):
    return s.encode().hex() if s else "-"


DTYPE = {np.dtype(bool): "BOOL", np.dtype(np.uint8): "U8", np.dtype(np.int8): "I8", np.dtype(np.int32): "I32",
         np.dtype(np.int64): "I64", np.dtype(np.float16): "F16", np.dtype(ml_dtypes.bfloat16): "BF16",
         np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(ml_dtypes.float8_e4m3fn): "F8_E4M3",
         np.dtype(ml_dtypes.float8_e5m2): "F8_E5M2"}
NP = {v: k for k, v in DTYPE.items()}


def dump(tool, path):
    r = subprocess.run([tool, "dump", path], capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    tensors, meta = {}, {}
    for line in r.stdout.splitlines():
        f = line.split(" ")
        if f[0] == "T":
            tensors[f[1]] = (f[2], f[3], f[4])
        elif f[0] == "M":
            meta[f[1]] = f[2]
    return (tensors, meta), ""


def expect_of(arrs, meta):
    """What st_tool dump must print for these arrays (name -> numpy array)."""
    t = {hexs(k): (DTYPE[a.dtype], "x".join(map(str, a.shape)) if a.ndim else "-", fnv1a64(a.tobytes()))
         for k, a in arrs.items()}
    return t, {hexs(k): hexs(v) for k, v in (meta or {}).items()}


COMPARED = [0]


def compare(what, got, want):
    COMPARED[0] += 1
    if got is None:
        check(False, f"{what}: our loader rejected it")
        return
    check(len(want[0]) > 0 or "no_tensors" in what, f"{what}: nothing to compare")
    for k in sorted(set(got[0]) | set(want[0])):
        check(got[0].get(k) == want[0].get(k),
              f"{what}: tensor {bytes.fromhex(k).decode() if k != '-' else ''!r}: ours {got[0].get(k)} official {want[0].get(k)}")
    check(got[1] == want[1], f"{what}: metadata ours {got[1]} official {want[1]}")


def random_arrays(rng):
    def bits(dt, shape, nbytes):  # any bit pattern, NaNs included
        return np.frombuffer(rng.integers(0, 256, size=int(np.prod(shape)) * nbytes, dtype=np.uint8).tobytes(),
                             dtype=dt).reshape(shape)
    return {
        "bool": rng.integers(0, 2, size=(3, 5)).astype(bool),
        "u8": bits(np.uint8, (7,), 1),
        "i8": bits(np.int8, (2, 3), 1),
        "i32": bits(np.int32, (4, 1, 3), 4),
        "i64": bits(np.int64, (5,), 8),
        "f16": bits(np.float16, (3, 3), 2),
        "blocks.0.attn.qkv.weight": bits(ml_dtypes.bfloat16, (6, 4), 2),
        "f32": rng.standard_normal((2, 2, 2, 2), dtype=np.float32),
        "f64": rng.standard_normal((3,)),
        "fp8.e4m3": bits(ml_dtypes.float8_e4m3fn, (16, 16), 1),
        "fp8.e5m2": bits(ml_dtypes.float8_e5m2, (256,), 1),
        "empty": np.zeros((0, 5), np.float32),
        "scalar": np.array(2.5, np.float32),
        "unicode.caf\u00e9": np.arange(3, dtype=np.int32),
    }


def part_a(tool, scratch, seed):
    rng = np.random.default_rng(seed)
    arrs = random_arrays(rng)
    meta = {"format": "np", "note": 'q"uote \\ caf\u00e9', "empty": ""}
    p = os.path.join(scratch, "interop_official.safetensors")
    save_file(arrs, p, metadata=meta)
    got, err = dump(tool, p)
    check(got is not None, f"(a) our loader rejected the official writer's file: {err}")
    compare("(a) official writer -> our loader", got, expect_of(arrs, meta))
    os.remove(p)


def st_tool_expected():
    """The arrays st_tool.c's write_fixed declares, from the same formulas."""
    return {
        "model.weight.bf16": (np.arange(12, dtype=np.float32) - 6).__mul__(0.5).astype(ml_dtypes.bfloat16).reshape(3, 4),
        "model.weight.f32": ((np.arange(12, dtype=np.float32) - 5) * np.float32(0.375)).reshape(2, 3, 2),
        "f16": (np.arange(5, dtype=np.uint32) * 0x1357).astype(np.uint16).view(np.float16),
        "codes.e4m3": np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn),
        "codes.e5m2": np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2).reshape(16, 16),
        "ids": np.array([-1, 0, 1 << 40], np.int64),
        "i32": np.array([-7, 123456], np.int32),
        "i8": np.array([-128, -1, 0, 127], np.int8),
        "empty.u8": np.zeros((0, 7), np.uint8),
        "mask": np.array([1, 0, 0, 1], bool),
        "scalar.f64": np.array(0.1, np.float64),
    }


def part_b(tool, scratch):
    p = os.path.join(scratch, "interop_ours.safetensors")
    r = subprocess.run([tool, "write", p], capture_output=True, text=True)
    check(r.returncode == 0, f"(b) st_tool write failed: {r.stderr.strip()}")
    if r.returncode:
        return
    want = st_tool_expected()
    with open(p, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    check(n % 8 == 0, f"(b) header length {n} is not a multiple of 8")
    try:
        flat = dict(deserialize(raw))
    except Exception as e:
        check(False, f"(b) official deserialize rejects our file: {e}")
        return
    check(set(flat) == set(want), f"(b) names {sorted(flat)} vs {sorted(want)}")
    for k, a in want.items():
        if k not in flat:
            continue
        v = flat[k]
        check(v["dtype"] == DTYPE[a.dtype] and list(v["shape"]) == list(a.shape),
              f"(b) {k}: official sees {v['dtype']} {v['shape']}, want {DTYPE[a.dtype]} {list(a.shape)}")
        check(bytes(v["data"]) == a.tobytes(), f"(b) {k}: bytes differ")
    with safe_open(p, framework="np") as f:
        check(f.metadata() == {"format": "pt", "producer": "h3block st_tool"}, f"(b) metadata {f.metadata()}")
        for k, a in want.items():
            if a.dtype in (np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)):
                continue  # safetensors.numpy cannot build FP8 arrays (no numpy.float8_*); bytes checked above
            t = f.get_tensor(k)
            check(t.dtype == a.dtype and t.shape == a.shape, f"(b) {k}: safetensors.numpy gives {t.dtype} {t.shape}")
            check(np.array_equal(t, a), f"(b) {k}: values differ: {t} vs {a}")
    os.remove(p)


def part_c(tool, data):
    for p in sorted(glob.glob(os.path.join(data, "good_*.safetensors"))):
        with open(p, "rb") as f:
            raw = f.read()
        n = int.from_bytes(raw[:8], "little")
        import json
        hdr = json.loads(raw[8:8 + n])
        meta = hdr.pop("__metadata__", {})
        flat = dict(deserialize(raw))
        want = ({hexs(k): (v["dtype"], "x".join(map(str, v["shape"])) if v["shape"] else "-", fnv1a64(bytes(v["data"])))
                 for k, v in flat.items()}, {hexs(k): hexs(v) for k, v in meta.items()})
        got, err = dump(tool, p)
        check(got is not None, f"(c) {os.path.basename(p)}: our loader rejects it: {err}")
        compare(f"(c) {os.path.basename(p)}", got, want)


def main():
    tool, data, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
    seed_env = os.environ.get("H3_TEST_SEED", "1")  # fixed by default; "random" draws a fresh one
    seed = time.time_ns() % 1000000 if seed_env == "random" else int(seed_env)
    print(f"test_st_interop: seed {seed} (set H3_TEST_SEED to repeat)")
    part_a(tool, scratch, seed)
    part_b(tool, scratch)
    part_c(tool, data)
    print(f"{COMPARED[0]} files compared, {len(FAILS)} failures")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
