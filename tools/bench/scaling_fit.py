#!/usr/bin/env python3
"""scaling_fit.py — attention time over S and H, split into its parts.

    scaling_fit.py FILE.json [FILE.json ...] [--ours h3_fp8_sm90_vs] [--min-rows N] [--json OUT]

Reads bench_attn's and peers_attention.py's JSON (tools/bench/scaling.sh
writes them: N(0,1) inputs, every S at every H) and prints, for each
implementation, its median time at every (S, H), the peers' time divided by
ours (> 1: ours faster), and a weighted least-squares fit

    t = a + b·H·S + c·H·S²

with each point weighted by 1/t (relative residuals). a is what a launch
costs whatever its size (the launch itself, the first wave's start, the last
one's end), b what each query row costs once (a CTA's start and end, its Q
load and O store, spread over its rows), c what each (query, key) pair
costs, printed as the TFLOPS of the pairs alone (4·128 flops a pair); b is
also printed per 192-row CTA on 132 SMs (b·192·132: what each CTA of ours
costs beyond its pairs, if that is where it comes from). Only
launches with at least --min-rows query rows (H·S; default four waves of
192-row CTAs on 132 SMs) enter the fit, where partial waves weigh little;
the smaller ones are printed for what they show directly (one CTA per SM, a
launch of a few µs). Each parameter comes with its standard error from the
residuals. Rows of bench_attn other than --ours and the lab's (lab_vN) are
left out.

Exit: 0 done; 1 no usable rows; 2 a usage or file error."""
import json
import math
import sys

from h3cli import Parser

D = 128
WAVE_ROWS = 192 * 132  # query rows of one wave of our 192-row CTAs on 132 SMs


def fail(msg):
    print(f"scaling_fit: {msg}", file=sys.stderr)
    sys.exit(2)


def load_rows(paths, ours):
    """{impl: {(S, H): ms}} from the files' ok rows; ours renamed 'ours'."""
    out = {}
    for path in paths:
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            fail(f"{path}: {e}")
        tool = doc.get("tool") if isinstance(doc, dict) else None
        if tool not in ("bench_attn", "peers_attention"):
            fail(f"{path}: not a bench_attn or peers_attention JSON (tool {tool!r})")
        rows = doc.get("results", [])
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            fail(f"{path}: 'results' is not a list of rows")
        for r in rows:
            if r.get("status") != "ok" or "median_ms" not in r:
                continue
            name = r.get("kernel") if tool == "bench_attn" else r.get("impl")
            if tool == "bench_attn":
                if name == ours:
                    name = "ours"
                elif name and name.startswith("lab_v"):
                    name = name[4:]
                else:
                    continue
            try:
                key, ms = (int(r["S"]), int(r["H"])), float(r["median_ms"])
            except (KeyError, TypeError, ValueError):
                fail(f"{path}: a row without S, H or median_ms: {r}")
            if ms > 0:
                out.setdefault(name, {})[key] = ms
    return out


def solve3(m, v):
    """x with m x = v for a 3x3 m (Gaussian elimination, partial pivoting); None if singular."""
    a = [row[:] + [v[i]] for i, row in enumerate(m)]
    for col in range(3):
        p = max(range(col, 3), key=lambda r: abs(a[r][col]))
        if abs(a[p][col]) < 1e-300:
            return None
        a[col], a[p] = a[p], a[col]
        for r in range(3):
            if r != col:
                f = a[r][col] / a[col][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col])]
    return [a[i][3] / a[i][i] for i in range(3)]


def fit(points):
    """Weighted least squares of t = a + b·HS + c·HS² over [(S, H, t)], weights 1/t.
    Returns (dict(a, b, c, se=[...], max_rel=...), None) or (None, why not)."""
    if len(points) < 4:
        return None, f"{len(points)} launches, 4 needed"
    if len({S for S, _, _ in points}) < 2:
        return None, "one S only: the rows and the pairs cannot be told apart"
    # scale the columns to O(1) so that the normal equations stay well conditioned
    xs = [(1.0, H * S, H * S * S) for S, H, _ in points]
    sc = [max(abs(x[j]) for x in xs) for j in range(3)]
    rows = [([x[j] / sc[j] for j in range(3)], t, 1.0 / t) for x, (_, _, t) in zip(xs, points)]
    ata = [[sum(w * w * x[i] * x[j] for x, _, w in rows) for j in range(3)] for i in range(3)]
    aty = [sum(w * w * x[i] * t for x, t, w in rows) for i in range(3)]
    beta = solve3(ata, aty)
    if beta is None:
        return None, "singular"
    res = [(t - sum(b * xi for b, xi in zip(beta, x))) * w for x, t, w in rows]
    dof = len(rows) - 3
    s2 = sum(r * r for r in res) / dof
    se = []
    for j in range(3):
        e = [1.0 if i == j else 0.0 for i in range(3)]
        col = solve3(ata, e)
        se.append(math.sqrt(max(0.0, s2 * col[j])) / sc[j])
    a, b, c = (beta[j] / sc[j] for j in range(3))
    return {"a": a, "b": b, "c": c, "se": se, "max_rel": max(abs(r) for r in res), "points": len(rows)}, None


def main():
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--ours", default="h3_fp8_sm90_vs", help="bench_attn's row that is ours (default the "
                    "smoothed-V kernel dit_block runs)")
    ap.add_argument("--min-rows", type=int, default=4 * WAVE_ROWS, help="H·S a launch needs to enter the fit")
    ap.add_argument("--json", help="write the table and the fits here")
    args = ap.parse_args()
    if args.min_rows < 1:
        ap.error("--min-rows must be >= 1")
    data = load_rows(args.files, args.ours)
    if not data:
        print("scaling_fit: no ok rows in the files", file=sys.stderr)
        return 1
    impls = (["ours"] if "ours" in data else []) + sorted(k for k in data if k != "ours")
    keys = sorted({k for d in data.values() for k in d})
    print("median ms (peer/ours in brackets: > 1 means ours is faster)")
    print(f"{'S':>6} {'H':>4} " + " ".join(f"{i:>18}" for i in impls))
    for S, H in keys:
        base = data.get("ours", {}).get((S, H))
        cells = []
        for i in impls:
            t = data[i].get((S, H))
            if t is None:
                cells.append(f"{'-':>18}")
            elif i != "ours" and base:
                cells.append(f"{t:>10.4f} ({t / base:5.3f})")
            else:
                cells.append(f"{t:>18.4f}")
        print(f"{S:>6} {H:>4} " + " ".join(cells))
    print(f"\nfit t = a + b·H·S + c·H·S² over launches with H·S >= {args.min_rows} (weights 1/t; ± one standard error)")
    print(f"{'impl':<16} {'points':>6} {'a µs':>14} {'b ns/row':>17} {'µs/CTA':>7} {'c as TFLOPS':>12} "
          f"{'max resid':>10}")
    fits = {}
    for i in impls:
        pts = [(S, H, t) for (S, H), t in data[i].items() if H * S >= args.min_rows]
        f, why = fit(pts)
        fits[i] = f
        if f is None:
            print(f"{i:<16} {len(pts):>6}  n/a ({why})")
            continue
        tflops = 4 * D / (f["c"] * 1e9) if f["c"] > 0 else float("nan")
        print(f"{i:<16} {f['points']:>6} {1e3 * f['a']:>7.1f} ± {1e3 * f['se'][0]:<5.1f}"
              f"{1e6 * f['b']:>9.4f} ± {1e6 * f['se'][1]:<6.4f} {1e3 * f['b'] * WAVE_ROWS:>7.2f} {tflops:>12.1f} "
              f"{100 * f['max_rel']:>9.2f}%")
    if args.json:
        doc = {"tool": "scaling_fit", "min_rows": args.min_rows, "files": args.files,
               "times_ms": {i: [{"S": S, "H": H, "median_ms": t} for (S, H), t in sorted(data[i].items())]
                            for i in impls},
               "fits": {i: (None if f is None else {"a_ms": f["a"], "b_ms_per_row": f["b"], "c_ms_per_pair": f["c"],
                                                    "se": f["se"], "max_rel_resid": f["max_rel"],
                                                    "points": f["points"]}) for i, f in fits.items()}}
        try:
            with open(args.json, "w") as f:
                json.dump(doc, f, indent=1)
        except OSError as e:
            fail(f"--json {args.json}: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
