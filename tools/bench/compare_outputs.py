#!/usr/bin/env python3
"""compare_outputs.py — relative RMS and max abs difference between two block outputs.

    python3 tools/bench/compare_outputs.py ours.safetensors torch_out.safetensors [--name out] [--json FILE]
        [--input inputs.safetensors]

Each file holds the block's output hidden states [S][C] (BF16, F16 or F32). The tensor is the
one named --name, else the only tensor in the file, else the first of out / output / x /
hidden_states found. rel RMS = ||a - b|| / ||b|| (b = the second file, the reference), in
float64; NaN/Inf are counted first and make the exit status 1. Exit 2 on unreadable input.
--input FILE (the block's inputs, tensor x [S][C]) also reports the error as a share of the
block's update: share_of_update = ||a - b|| / ||b - x|| (b the reference, over the entries
finite in a, b and x): the part of what the block changes that the output gets wrong, which
rel RMS hides behind the residual stream's size.
"""
import json
import sys

from h3cli import Parser

np = None  # numpy: imported by main() once the flags are read, so that --help and --version need none

PREFERRED = ("out", "output", "x", "hidden_states")


def load_file(path):
    """Minimal safetensors reader (8-byte header length, JSON header, raw data): no dependency
    on safetensors' numpy dtype support for BF16. Returns {name: float64 array}."""
    with open(path, "rb") as f:
        buf = f.read()
    n = int.from_bytes(buf[:8], "little")
    hdr = json.loads(buf[8:8 + n])
    data = memoryview(buf)[8 + n:]
    out = {}
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        b0, b1 = t["data_offsets"]
        raw = np.frombuffer(data[b0:b1], dtype=np.uint8)
        dt = t["dtype"]
        if dt == "BF16":
            a = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        elif dt == "F16":
            a = raw.view("<f2")
        elif dt == "F32":
            a = raw.view("<f4")
        elif dt == "F64":
            a = raw.view("<f8")
        else:
            continue  # not a hidden-state tensor
        out[name] = a.astype(np.float64).reshape(t["shape"])
    return out


def pick(path, name):
    try:
        t = load_file(path)
    except Exception as e:  # noqa: BLE001
        print(f"compare_outputs: {path}: {e}", file=sys.stderr)
        sys.exit(2)
    if name:
        if name not in t:
            print(f"compare_outputs: {path}: no tensor '{name}' (has {sorted(t)})", file=sys.stderr)
            sys.exit(2)
        return name, t[name]
    if len(t) == 1:
        return next(iter(t.items()))
    for n in PREFERRED:
        if n in t:
            return n, t[n]
    print(f"compare_outputs: {path}: several tensors {sorted(t)}; say which with --name", file=sys.stderr)
    sys.exit(2)


def main():
    ap = Parser(description=__doc__.split("\n")[0])
    ap.add_argument("a", help="output to judge (e.g. dit_block --output)")
    ap.add_argument("b", help="reference output (e.g. torch_block.py --output)")
    ap.add_argument("--name")
    ap.add_argument("--input", help="the block's inputs (tensor x): report ||a - b|| / ||b - x|| too")
    ap.add_argument("--json")
    args = ap.parse_args()
    global np
    import numpy as np
    na, a = pick(args.a, args.name)
    nb, b = pick(args.b, args.name)
    if a.size != b.size:
        print(f"compare_outputs: shapes differ: {args.a}:{na} {a.shape} vs {args.b}:{nb} {b.shape}", file=sys.stderr)
        sys.exit(2)
    a, b = a.reshape(-1), b.reshape(-1)
    bad_a, bad_b = int((~np.isfinite(a)).sum()), int((~np.isfinite(b)).sum())
    ok = np.isfinite(a) & np.isfinite(b)
    d = a[ok] - b[ok]
    res = {"a": args.a, "b": args.b, "tensor_a": na, "tensor_b": nb, "shape": list(a.shape), "numel": int(a.size),
           "nonfinite_a": bad_a, "nonfinite_b": bad_b,
           "rel_rms": float(np.sqrt((d * d).sum() / max((b[ok] ** 2).sum(), 1e-300))),
           "rmse": float(np.sqrt((d * d).mean())) if d.size else float("nan"),
           "max_abs": float(np.abs(d).max()) if d.size else float("nan"),
           "ref_rms": float(np.sqrt((b[ok] ** 2).mean())) if d.size else float("nan")}
    if d.size:
        i = int(np.abs(d).argmax())
        res["max_abs_at"] = int(np.flatnonzero(ok)[i])
    share = ""
    bad_x = 0
    if args.input:
        nx, x = pick(args.input, "x")
        if x.size != b.size:
            print(f"compare_outputs: shapes differ: {args.input}:{nx} {x.shape} vs {args.b}:{nb} {b.shape}",
                  file=sys.stderr)
            sys.exit(2)
        x = x.reshape(-1)
        bad_x = int((~np.isfinite(x)).sum())
        okx = ok & np.isfinite(x)
        u = b[okx] - x[okx]
        dx = a[okx] - b[okx]
        un = float(np.sqrt((u * u).sum()))
        res.update(input=args.input, nonfinite_x=bad_x, update_rms=float(np.sqrt((u * u).mean())) if u.size else
                   float("nan"), share_of_update=float(np.sqrt((dx * dx).sum())) / un if un > 0 else float("nan"))
        share = f", {100 * res['share_of_update']:.4f}% of the block's update (RMS {res['update_rms']:.3e})"
    print(f"compare {args.a} vs {args.b}: rel RMS {100 * res['rel_rms']:.4f}%, RMSE {res['rmse']:.3e}, "
          f"max abs {res['max_abs']:.3e}, non-finite {bad_a}/{bad_b}" + share
          + (f" (x: {bad_x} non-finite)" if bad_x else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 1 if bad_a or bad_b or bad_x else 0


if __name__ == "__main__":
    sys.exit(main())
