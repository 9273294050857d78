#!/usr/bin/env python3
"""plot_breakdown.py — per-op time of our block and of the PyTorch block, side by side.

    python3 tools/bench/plot_breakdown.py --ours dit_block.json [--ours-fp8 dit_block_fp8.json] \
        --torch torch_block.json --out breakdown.png

Reads dit_block --json (docs/report-format.md: "stages" [{"name", "ms"}], "total_ms", "gpu",
"created_utc") and torch_block.py's JSON (same stage form, plus eager_ms, compile_ms, device).
Any file may be missing or lack stages: its bars are left out. Stages are matched by name
(DESIGN.md §1 order); a fused timing row named like "gate_res1+norm2_mod" is drawn under its
first stage and labelled with the full name. Writes a PNG (matplotlib, headless Agg): one
grouped bar per stage on the left; on the right the block totals, one bar each for ours (BF16,
FP8 GEMMs), PyTorch eager and torch.compile (which has no per-op times: it fuses them); the
title names the GPU, the date of the run (the report's, else today's) and S. Prints the
table too. tools/bench/run_all.sh draws it (docs/breakdown.png with --docs).
"""
import datetime
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

    fig, (ax, axt) = plt.subplots(1, 2, figsize=(14, 5.5), gridspec_kw={"width_ratios": [5, 1]})
    xs = list(range(len(names)))
    # one colour per implementation in both panels: C0 ours BF16, C1 ours FP8, C2 eager, C3 torch.compile
    sets = [(m, lab, col) for m, lab, col in ((mo, "h3block, BF16 GEMMs", "C0"), (m8, "h3block, FP8 GEMMs", "C1"),
                                              (mt, "PyTorch eager", "C2")) if m]
    wd = 0.8 / max(len(sets), 1)
    for i, (m, lab, col) in enumerate(sets):
        ax.bar([x + (i - (len(sets) - 1) / 2) * wd for x in xs], [m.get(n, (0.0,))[0] for n in names], wd, label=lab,
               color=col)
    labels = [mo[n][1] if n in mo else m8[n][1] if n in m8 else n for n in names]
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("ms (median)")
    # the totals, each its own bar (torch.compile included: it has no per-op times)
    tot_bars = [(lab, v, col) for lab, v, col in (
        ("h3block\nBF16", (ours or {}).get("total_ms") or (sum(v[0] for v in mo.values()) if mo else None), "C0"),
        ("h3block\nFP8", (o8 or {}).get("total_ms") or (sum(v[0] for v in m8.values()) if m8 else None), "C1"),
        ("PyTorch\neager", (tb or {}).get("eager_ms", (tb or {}).get("total_ms")), "C2"),
        ("torch.\ncompile", (tb or {}).get("compile_ms"), "C3")) if isinstance(v, (int, float))]
    if tot_bars:
        bars = axt.bar(range(len(tot_bars)), [v for _, v, _ in tot_bars], 0.7, color=[c for _, _, c in tot_bars])
        axt.bar_label(bars, labels=[f"{v:.1f}" for _, v, _ in tot_bars], fontsize=8)
        axt.set_xticks(range(len(tot_bars)))
        axt.set_xticklabels([lab for lab, _, _ in tot_bars], fontsize=8)
    axt.set_title("block total (ms)", fontsize=10)
    axt.grid(axis="y", alpha=0.3)
    for lab, v, _ in tot_bars:
        print(f"total {lab.replace('.' + chr(10), '.').replace(chr(10), ' '):<22} {v:9.3f} ms")
    S = (ours or {}).get("tokens") or (ours or {}).get("S") or (tb or {}).get("S")
    gpu = ((ours or {}).get("gpu") or {}).get("name") or (tb or {}).get("device") or (ours or {}).get("device")
    date = ((ours or {}).get("created_utc") or "")[:10] or datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%d")
    ax.set_title("H3 block per-op time" + (f", S = {S}" if S else "") + (f", {gpu}" if gpu else "") + f", {date}",
                 fontsize=10)
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"plot_breakdown: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
