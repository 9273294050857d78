#!/usr/bin/env python3
"""profiles_table.py — one table from profiles.sh's JSON files.

    python3 tools/bench/profiles_table.py OUT_DIR [--json FILE]

Reads OUT_DIR/prof_ours.json (bench_attn --qkv: our default kernels),
OUT_DIR/prof_vN.json (bench_attn --qkv --variant N, a lab build: row "vN") and
OUT_DIR/prof_peers.json (peers_attention.py --qkv), and prints for every kernel,
profile and S: median ms, TFLOPS and the relative RMS error against exact
(FP64) attention on the same 1024 sampled query rows; then, per profile and S,
each kernel's time relative to h3_fp8_sm90_vs (dit_block's default). A missing
or failed entry prints its status; nothing is left out silently.
"""
import glob
import json
import os
import re
import sys

from h3cli import Parser


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"profiles_table: {path}: {e}", file=sys.stderr)
        return None


def main():
    ap = Parser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--json", help="write the rows as JSON here")
    a = ap.parse_args()
    rows = []  # dicts: kernel, profile, S, ms, tflops, err, status
    ours = load(os.path.join(a.out_dir, "prof_ours.json"))
    for r in (ours or {}).get("qkv", []):
        rows.append(dict(kernel=r["kernel"], profile=r["profile"], S=r["S"], ms=r.get("median_ms"),
                         tflops=r.get("tflops"), err=r.get("err_vs_exact"), status=r["status"]))
    for path in sorted(glob.glob(os.path.join(a.out_dir, "prof_v*.json"))):
        v = re.search(r"prof_v(\d+)\.json$", path)
        j = load(path)
        for r in (j or {}).get("qkv", []) if v else []:
            rows.append(dict(kernel="v" + v.group(1), profile=r["profile"], S=r["S"], ms=r.get("median_ms"),
                             tflops=r.get("tflops"), err=r.get("err_vs_exact"), status=r["status"]))
    peers = load(os.path.join(a.out_dir, "prof_peers.json"))
    for r in (peers or {}).get("results", []):
        err = r.get("err_vs_exact")
        if isinstance(err, dict):  # peers_attention.py: {"rel_rms": ..., "max_abs": ...}
            err = err.get("rel_rms")
        rows.append(dict(kernel=r.get("impl"), profile=r.get("profile", "?"), S=r.get("S"),
                         ms=r.get("median_ms"), tflops=r.get("tflops"), err=err, status=r.get("status", "?")))
    if not rows:
        print("profiles_table: no rows (did bench_attn and peers_attention.py run?)")
        return 1
    keys = sorted({(r["profile"], r["S"]) for r in rows if r["S"]}, key=lambda k: (k[0], k[1]))
    kernels = list(dict.fromkeys(r["kernel"] for r in rows))
    print(f"\n{'kernel':<18}" + "".join(f"{p + ' ' + str(S):>26}" for p, S in keys))
    print(f"{'':<18}" + "".join(f"{'ms  TFLOPS  err':>26}" for _ in keys))
    by = {(r["kernel"], r["profile"], r["S"]): r for r in rows}
    for k in kernels:
        cells = []
        for p, S in keys:
            r = by.get((k, p, S))
            if not r:
                cells.append(f"{'-':>26}")
            elif r["status"] == "ok" and r["ms"] is not None:
                err = f"{100 * r['err']:.2f}%" if r["err"] is not None else "n/a"
                cells.append(f"{r['ms']:9.3f} {r['tflops'] or 0:6.0f} {err:>8}")
            else:
                cells.append(f"{str(r['status'])[:24]:>26}")
        print(f"{k:<18}" + "".join(f"{c:>26}" for c in cells))
    print("\ntime / h3_fp8_sm90_vs's time (> 1: slower than dit_block's default attention)")
    for p, S in keys:
        base = by.get(("h3_fp8_sm90_vs", p, S))
        if not base or base["status"] != "ok":
            continue
        parts = [f"{k} {by[(k, p, S)]['ms'] / base['ms']:.3f}" for k in kernels
                 if (k, p, S) in by and by[(k, p, S)]["status"] == "ok" and by[(k, p, S)]["ms"]]
        print(f"  {p} {S}: " + ", ".join(parts))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
