#!/usr/bin/env python3
"""core/numerics.h's FP8 conversions (through fp8_tool) against ml_dtypes.
 - decode: all 256 codes of e4m3fn and e5m2, bit-exact (signed zeros too),
   NaN at exactly the same codes;
 - encode: one million float32 values (random over the whole exponent range,
   both formats' subnormal ranges, every exact tie between neighbouring codes
   and its float32 neighbours, the overflow region, +-0, +-inf, NaN, float32
   subnormals and extremes):
     _nonsat    == ml_dtypes astype, code for code;
     satfinite  == ml_dtypes astype of clip(x, -max, max) (NaN stays NaN).
   A NaN result matches any NaN code (the payload is not part of the contract);
   a mismatch is a real bug in numerics.h and is listed input by input.

Run alone: $H3_PYTHON tests/python/test_fp8_ml_dtypes.py build/tests/fp8_tool build/tests
Exit 0 pass, 1 fail, 77 skip (numpy or ml_dtypes not importable). Seed: H3_TEST_SEED."""
import os
import subprocess
import sys
import time

try:
    import ml_dtypes
    import numpy as np
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

FORMATS = [  # name, ml_dtypes type, largest finite, column in fp8_tool's output (sat, nonsat)
    ("e4m3", ml_dtypes.float8_e4m3fn, 448.0, 0, 1),
    ("e5m2", ml_dtypes.float8_e5m2, 57344.0, 2, 3),
]


def run(*args):
    r = subprocess.run(list(args), capture_output=True, text=True)
    if r.returncode != 0:
        print(f"FAIL {' '.join(args)}: {r.stderr.strip()}")
        sys.exit(1)


def test_decode(tool, scratch):
    p = os.path.join(scratch, "fp8_decode.bin")
    run(tool, "decode", p)
    ours = np.fromfile(p, dtype="<f4").reshape(2, 256)
    os.remove(p)
    fails = 0
    codes = np.arange(256, dtype=np.uint8)
    for i, (name, dt, _, _, _) in enumerate(FORMATS):
        ref = codes.view(dt).astype(np.float32)
        o = ours[i]
        nan_o, nan_r = np.isnan(o), np.isnan(ref)
        bad = np.flatnonzero((nan_o != nan_r) | (~nan_r & (o.view(np.uint32) != ref.view(np.uint32))))
        for c in bad:
            print(f"FAIL decode {name} code 0x{c:02x}: ours {o[c]!r} ml_dtypes {ref[c]!r}")
        fails += len(bad)
        print(f"decode {name}: 256 codes, {int(nan_r.sum())} NaN codes, {len(bad)} mismatches")
    return fails


def inputs(rng, n=1_000_000):
    parts = []
    # ties and their float32 neighbours, for both formats
    for _, dt, _, _, _ in FORMATS:
        v = np.arange(256, dtype=np.uint8).view(dt).astype(np.float64)
        v = np.unique(v[np.isfinite(v)])
        mid = ((v[:-1] + v[1:]) / 2).astype(np.float32)  # exact in float32 (one extra bit)
        top = np.float32(v[-1] + (v[-1] - v[-2]) / 2)  # the tie between max and the first overflow step
        t = np.concatenate([mid, [top], v.astype(np.float32)])
        parts += [t, np.nextafter(t, np.float32(np.inf)), np.nextafter(t, np.float32(-np.inf))]
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1.17549435e-38,
                        3.4028235e38, -3.4028235e38, 448, 464, 465, 479.99, 480, 512, 57344, 61440, 61439.99,
                        61441, 65536, 2.0 ** -9, 2.0 ** -10, 2.0 ** -16, 2.0 ** -17, 2.0 ** -18], np.float32)
    parts.append(special)
    parts.append(np.frombuffer(np.array([0x7fc00001, 0xffc00000, 0x7f800001, 0x7fbfffff], np.uint32).tobytes(),
                               np.float32))  # NaN payloads, signalling too
    used = sum(len(p) for p in parts) * 2  # with negations
    m = n - used
    k = m // 4
    sign = lambda s: np.where(rng.random(s) < 0.5, -1.0, 1.0)
    # log-uniform over most of float32's range
    parts.append((sign(k) * np.exp2(rng.uniform(-140, 128, k))).astype(np.float32))
    # dense in the FP8 ranges: subnormals to beyond the overflow threshold
    parts.append((sign(k) * np.exp2(rng.uniform(-20, 17, k))).astype(np.float32))
    # the overflow region of each format
    parts.append((sign(k // 2) * rng.uniform(400, 520, k // 2)).astype(np.float32))
    parts.append((sign(k // 2) * rng.uniform(50000, 70000, k // 2)).astype(np.float32))
    # random float32 bit patterns (NaNs, infs, subnormals included)
    rest = m - 3 * k
    parts.append(rng.integers(0, 1 << 32, rest, dtype=np.uint64).astype(np.uint32).view(np.float32))
    x = np.concatenate(parts[:-5] + [np.negative(np.concatenate(parts[:-5]))] + parts[-5:]).astype(np.float32)
    return x


def test_encode(tool, scratch, seed):
    rng = np.random.default_rng(seed)
    x = inputs(rng)
    n = len(x)
    pin, pout = os.path.join(scratch, "fp8_in.bin"), os.path.join(scratch, "fp8_out.bin")
    x.astype("<f4").tofile(pin)
    run(tool, "encode", pin, pout)
    codes = np.fromfile(pout, dtype=np.uint8).reshape(4, n)
    os.remove(pin)
    os.remove(pout)
    fails = 0
    with np.errstate(invalid="ignore", over="ignore"):
        for name, dt, mx, c_sat, c_non in FORMATS:
            for mode, col, xin in (("_nonsat", c_non, x),
                                   ("satfinite", c_sat, np.where(np.isnan(x), x, np.clip(x, -mx, mx)).astype(np.float32))):
                ref = xin.astype(dt).view(np.uint8)
                ours = codes[col]
                both_nan = np.isnan(ours.view(dt).astype(np.float32)) & np.isnan(ref.view(dt).astype(np.float32))
                bad = np.flatnonzero((ours != ref) & ~both_nan)
                for i in bad[:20]:
                    print(f"FAIL encode {name} {mode}: x = {x[i]!r} (0x{x.view(np.uint32)[i]:08x}): ours 0x{ours[i]:02x} "
                          f"({ours[i:i+1].view(dt).astype(np.float32)[0]!r}), ml_dtypes 0x{ref[i]:02x} "
                          f"({ref[i:i+1].view(dt).astype(np.float32)[0]!r})")
                if len(bad) > 20:
                    print(f"  ... and {len(bad) - 20} more")
                nan_in = int(np.isnan(x).sum())
                print(f"encode {name} {mode}: {n} inputs ({nan_in} NaN, {int(np.isinf(x).sum())} inf), "
                      f"{len(bad)} mismatches")
                fails += len(bad)
    # the input really covers what it claims (else the test could pass vacuously)
    for name, dt, mx, _, _ in FORMATS:
        a = np.abs(x[np.isfinite(x)])
        tiny = np.float32(ml_dtypes.finfo(dt).smallest_normal)
        assert (a < tiny).sum() > 10000 and ((a > mx) & (a < 2 * mx)).sum() > 10000, name
    return fails


def main():
    tool, scratch = sys.argv[1], sys.argv[2]
    seed_env = os.environ.get("H3_TEST_SEED", "1")  # fixed by default; "random" draws a fresh one
    seed = time.time_ns() % 1000000 if seed_env == "random" else int(seed_env)
    print(f"test_fp8_ml_dtypes: seed {seed} (set H3_TEST_SEED to repeat); ml_dtypes {ml_dtypes.__version__}")
    fails = test_decode(tool, scratch) + test_encode(tool, scratch, seed)
    print(f"{fails} mismatches")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
