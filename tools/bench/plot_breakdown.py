#!/usr/bin/env python3
"""plot_breakdown.py — per-op time of our block and of the PyTorch block, side by side.

    python3 tools/bench/plot_breakdown.py --ours dit_block.json [--ours-fp8 dit_block_fp8.json] \
        --torch torch_block.json --out breakdown.png

Reads dit_block --json ({"stages": [{"name", "ms"}], "total_ms"}) and torch_block.py's JSON
(same form, plus eager_ms / compile_ms). Either file may be missing or lack stages: its bars
are left out. Stages are matched by name (DESIGN.md §2 order); a fused timing row named like
"gate_res1+norm2_mod" is drawn under its first stage and labelled with the full name.
Writes a PNG (matplotlib, headless Agg) with one grouped bar per stage and the totals in the
title; prints the table too.
"""
import json
import os
import sys

from h3cli import Parser

STAGES = ["adaln", "rope_table", "norm1_mod", "qkv_gemm", "qk_norm_rope_quant", "attention", "out_quant", "out_gemm",
          "gate_res1", "norm2_mod", "fc1_gemm", "swiglu", "fc2_gemm", "gate_res2"]


def load(path):
    if not path or not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except Exception as e:  # noqa: BLE001
        print(f"plot_breakdown: {path}: {e}", file=sys.stderr)
        return None


def stage_map(doc):
    """{first stage name: (ms, label)} from a {"stages": [...]} document."""
    out = {}
    for s in (doc or {}).get("stages", []) or []:
        try:
            name, ms = str(s["name"]), float(s["ms"])
        except (KeyError, TypeError, ValueError):
            continue
        first = name.replace("+", ",").split(",")[0].strip()
        out[first] = (out.get(first, (0.0, name))[0] + ms, name)
    return out


def main():
    ap = Parser(description=__doc__.split("\n")[0])
    ap.add_argument("--ours")
    ap.add_argument("--ours-fp8", help="dit_block --gemm fp8 --json output (a third set of bars)")
    ap.add_argument("--torch")
    ap.add_argument("--out", default="breakdown.png")
    args = ap.parse_args()
    ours, tb, o8 = load(args.ours), load(args.torch), load(args.ours_fp8)
    mo, mt, m8 = stage_map(ours), stage_map(tb), stage_map(o8)
    names = [n for n in STAGES if n in mo or n in mt or n in m8] + sorted((set(mo) | set(mt) | set(m8)) - set(STAGES))
    if not names:
        print("plot_breakdown: no per-stage data in either file; nothing to plot", file=sys.stderr)
        return 1
    print(f"{'stage':<28} {'ours_ms':>9} {'fp8_ms':>9} {'torch_ms':>9}")
    for n in names:
        a, c, b = mo.get(n, (None, n)), m8.get(n, (None, n)), mt.get(n, (None, n))
        cell = lambda v: f"{v[0]:9.3f}" if v[0] is not None else f"{'-':>9}"
        print(f"{a[1] if a[0] is not None else n:<28} {cell(a)} {cell(c)} {cell(b)}")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(12, 5.5))
    xs = list(range(len(names)))
    sets = [(m, lab) for m, lab in ((mo, "h3block, BF16 GEMMs"), (m8, "h3block, FP8 GEMMs"), (mt, "PyTorch eager"))
            if m]
    wd = 0.8 / max(len(sets), 1)
    for i, (m, lab) in enumerate(sets):
        ax.bar([x + (i - (len(sets) - 1) / 2) * wd for x in xs], [m.get(n, (0.0,))[0] for n in names], wd, label=lab)
    labels = [mo[n][1] if n in mo else m8[n][1] if n in m8 else n for n in names]
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("ms (median)")
    title = []
    if ours:
        tot = ours.get("total_ms") or sum(v[0] for v in mo.values())
        title.append(f"ours {tot:.2f} ms")
    if o8:
        title.append(f"ours FP8 {o8.get('total_ms') or sum(v[0] for v in m8.values()):.2f} ms")
    if tb:
        title.append(f"PyTorch eager {tb.get('eager_ms', tb.get('total_ms', float('nan'))):.2f} ms")
        if "compile_ms" in tb:
            title.append(f"torch.compile {tb['compile_ms']:.2f} ms")
    S = (ours or {}).get("S") or (tb or {}).get("S")
    ax.set_title(f"H3 block per-op time{f' (S = {S})' if S else ''}: " + ", ".join(title), fontsize=10)
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"plot_breakdown: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
