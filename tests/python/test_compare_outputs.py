#!/usr/bin/env python3
"""tools/bench/compare_outputs.py's figures against numpy on small files written here:
 (a) rel RMS, RMSE, max abs and its index for a BF16 output against an F32 reference;
 (b) --input: share_of_update = ||a - b|| / ||b - x|| and update_rms, x read as BF16;
 (c) a non-finite value in a: counted, excluded from the figures, exit 1;
 (d) an x of another size, or an inputs file without x: exit 2 with one line on stderr.

Run alone: $H3_PYTHON tests/python/test_compare_outputs.py tools/bench/compare_outputs.py build/tests/compare_outputs
Exit 0 pass, 1 fail, 77 skip (numpy or ml_dtypes not importable). Seed: H3_TEST_SEED."""
import json
import os
import subprocess
import sys

try:
    import ml_dtypes
    import numpy as np
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

import checks
from checks import FAILS, check

checks.show_ok = True


def write_st(path, tensors):
    """Plain safetensors writer: {name: numpy array (float32 or bfloat16)}."""
    hdr, blobs, off = {}, [], 0
    for name, a in tensors.items():
        dt = {np.dtype(np.float32): "F32", np.dtype(ml_dtypes.bfloat16): "BF16"}[a.dtype]
        raw = np.ascontiguousarray(a).tobytes()
        hdr[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def run(script, *args):
    p = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def main():
    script, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(int(os.environ.get("H3_TEST_SEED", "31")))
    S, C = 37, 24
    x = rng.standard_normal((S, C)).astype(ml_dtypes.bfloat16)  # the block's input, BF16 as gen_inputs
    b = (x.astype(np.float32) + 0.3 * rng.standard_normal((S, C))).astype(np.float32)  # reference out
    a = (b + 0.01 * rng.standard_normal((S, C))).astype(ml_dtypes.bfloat16)  # judged out, BF16
    fa, fb, fx = (os.path.join(work, f"cmp_{n}.safetensors") for n in ("a", "b", "x"))
    write_st(fa, {"out": a})
    write_st(fb, {"out": b})
    write_st(fx, {"x": x, "temb": rng.standard_normal(8).astype(np.float32)})
    jf = os.path.join(work, "cmp.json")

    A, B, X = (t.astype(np.float64).ravel() for t in (a, b, x))
    d = A - B
    rc, out, err = run(script, fa, fb, "--input", fx, "--json", jf)
    check(rc == 0, f"--input: exit 0 (got {rc}; {err.strip()})")
    r = json.load(open(jf)) if rc == 0 else {}
    close = lambda u, v: u is not None and abs(u - v) <= 1e-12 * max(1.0, abs(v))  # noqa: E731
    check(close(r.get("rel_rms"), np.sqrt((d * d).sum() / (B * B).sum())), "rel_rms = ||a - b|| / ||b||")
    check(close(r.get("rmse"), np.sqrt((d * d).mean())), "rmse")
    check(close(r.get("max_abs"), np.abs(d).max()) and r.get("max_abs_at") == int(np.abs(d).argmax()),
          "max_abs and max_abs_at")
    want = np.sqrt((d * d).sum()) / np.sqrt(((B - X) ** 2).sum())
    check(close(r.get("share_of_update"), want), f"share_of_update = ||a - b|| / ||b - x|| ({want:.6f})")
    check(close(r.get("update_rms"), np.sqrt(((B - X) ** 2).mean())), "update_rms = rms(b - x)")
    check("of the block's update" in out, "the share is printed")

    rc, out, err = run(script, fa, fb, "--json", jf)
    r = json.load(open(jf)) if rc == 0 else {}
    check(rc == 0 and "share_of_update" not in r and "rel_rms" in r, "without --input: today's fields only")

    a2 = a.copy()
    a2[3, 5] = np.nan
    write_st(fa, {"out": a2})
    rc, out, err = run(script, fa, fb, "--input", fx, "--json", jf)
    r = json.load(open(jf))
    ok = np.isfinite(a2.astype(np.float64).ravel())
    d2 = A[ok] - B[ok]
    check(rc == 1 and r.get("nonfinite_a") == 1, f"a NaN: counted, exit 1 (got {rc})")
    check(close(r.get("share_of_update"), np.sqrt((d2 * d2).sum()) / np.sqrt(((B[ok] - X[ok]) ** 2).sum())),
          "a NaN: the share over the finite entries")

    write_st(fa, {"out": a})
    write_st(fx, {"x": x[:-1]})
    rc, out, err = run(script, fa, fb, "--input", fx)
    check(rc == 2 and len(err.strip().splitlines()) == 1 and "shapes differ" in err,
          f"x of another size: exit 2 ({err.strip()})")
    write_st(fx, {"temb": x})
    rc, out, err = run(script, fa, fb, "--input", fx)
    check(rc == 2 and "no tensor 'x'" in err, f"inputs without x: exit 2 ({err.strip()})")

    print(f"{len(FAILS)} failed" if FAILS else "all passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
