#!/usr/bin/env python3
"""sharpen_block.py — issue 31's reproducer: a block and its inputs made sharper than any
generator profile, to see whether the default attention kernel still holds its contract.

    python3 tools/bench/sharpen_block.py --weights W --input IN --out-weights W2 --out-input IN2
        [--gain-lo 0.5] [--gain-hi 3] [--channels 8] [--factor 40] [--seed 0]

W2 = W with the q-norm and k-norm gains replaced by values spread evenly over [gain-lo,
gain-hi] (a random permutation per tensor: trained models' gains are far from 1, and q k^T
scales with their product, so rows get up to gain-hi^2 sharper); IN2 = IN with --channels of
x's channels (a random choice) multiplied by --factor (a DiT's massive-activation channels).
Every other tensor is copied unchanged; the outputs are new files (an existing one is refused).
Needs torch and safetensors."""
import os
import sys

from h3cli import Parser


def main():
    ap = Parser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--out-weights", required=True)
    ap.add_argument("--out-input", required=True)
    ap.add_argument("--gain-lo", type=float, default=0.5)
    ap.add_argument("--gain-hi", type=float, default=3.0)
    ap.add_argument("--channels", type=int, default=8)
    ap.add_argument("--factor", type=float, default=40.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    for p in (a.out_weights, a.out_input):
        if os.path.exists(p):
            ap.error(f"{p} exists (never overwritten)")
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
    g = torch.Generator().manual_seed(a.seed)
    w = load_file(a.weights)
    with safe_open(a.weights, "pt") as f:
        meta = dict(f.metadata() or {})  # qkv_layout and the rest carry over
    names = [n for n in w if n.endswith(("q_norm.weight", "k_norm.weight"))]
    if len(names) != 2:
        ap.error(f"{a.weights}: want one q_norm and one k_norm weight, found {names}")
    for n in names:
        d = w[n].numel()
        gains = torch.linspace(a.gain_lo, a.gain_hi, d)[torch.randperm(d, generator=g)]
        w[n] = gains.to(w[n].dtype)
    meta.update(profile="sharpened", sharpened_from=os.path.basename(a.weights))
    save_file(w, a.out_weights, metadata=meta)
    x = load_file(a.input)
    if "x" not in x:
        ap.error(f"{a.input}: no tensor x")
    C = x["x"].shape[1]
    ch = torch.randperm(C, generator=g)[:a.channels]
    xx = x["x"].float()
    xx[:, ch] *= a.factor
    x["x"] = xx.to(x["x"].dtype)
    with safe_open(a.input, "pt") as f:
        save_file(x, a.out_input, metadata=f.metadata())
    print(f"{a.out_weights}: q/k-norm gains over [{a.gain_lo}, {a.gain_hi}]; {a.out_input}: x channels "
          f"{sorted(ch.tolist())} x{a.factor}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
