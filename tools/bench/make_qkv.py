#!/usr/bin/env python3
"""make_qkv.py — an attention input file (q, k, v) for bench_attn --qkv and peers_attention.py --qkv.

    python3 tools/bench/make_qkv.py --dist randn|stress --tokens S --heads H [--seed N] --out FILE
    python3 tools/bench/make_qkv.py --from QKV_FILE --heads H --out FILE

--dist randn: q, k, v drawn from N(0,1); --dist stress: FlashAttention-3's outlier mix,
N(0,1) plus N(0,10^2) on one element in a thousand (the FA3 paper's accuracy test; our
bench_attn's --dist stress draws the same law). Each value is rounded to BF16. --from: the first H
heads of another such file (e.g. the model-like block's, from torch_block.py --dump-qkv), so
that a file of H = 56 gives the H = 8 case of the accuracy tables. The output has what the readers
expect: tensors q, k, v, BF16, [S][H*128], and metadata profile (randn, stress, or the source's
profile with "_hH" added), tokens, heads, head_dim and seed. Needs PyTorch and safetensors; runs on
the CPU. The file is written to FILE.tmp and renamed, so a failed run leaves no partial output.
"""
import os
import sys

from h3cli import Parser

D = 128


def main():
    ap = Parser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--dist", choices=["randn", "stress"], help="draw q, k, v from this law")
    ap.add_argument("--from", dest="src", help="take the first --heads heads of this q/k/v file instead")
    ap.add_argument("--tokens", type=int, help="S (with --dist)")
    ap.add_argument("--heads", type=int, required=True, help="H")
    ap.add_argument("--seed", type=int, default=1, help="the draw's seed (with --dist; default 1)")
    ap.add_argument("--out", required=True, help="the file to write")
    a = ap.parse_args()
    if (a.dist is None) == (a.src is None):
        ap.error("give one of --dist and --from")
    if a.heads < 1:
        ap.error(f"--heads {a.heads}: want at least 1")
    if a.dist and (a.tokens is None or a.tokens < 1):
        ap.error("--dist needs --tokens S, S >= 1")
    if a.src and os.path.abspath(a.src) == os.path.abspath(a.out):
        ap.error(f"--out {a.out} is the --from file")
    import safetensors
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file
    bad_file = getattr(safetensors, "SafetensorError", RuntimeError)  # what safe_open raises on a malformed file

    if a.dist:
        g = torch.Generator().manual_seed(a.seed)
        t = {}
        for name in "qkv":
            x = torch.randn(a.tokens, a.heads * D, generator=g, dtype=torch.float64)
            if a.dist == "stress":
                spike = torch.rand(a.tokens, a.heads * D, generator=g, dtype=torch.float64) < 0.001
                x += spike * 10.0 * torch.randn(a.tokens, a.heads * D, generator=g, dtype=torch.float64)
            t[name] = x.to(torch.bfloat16)
        meta = dict(profile=a.dist, tokens=a.tokens, heads=a.heads, head_dim=D, seed=a.seed)
    else:
        try:
            t = {}
            with safe_open(a.src, framework="pt") as f:
                meta = f.metadata() or {}
                for name in "qkv":
                    if name not in f.keys():
                        raise ValueError(f"no tensor '{name}'")
                    x = f.get_tensor(name)
                    if x.dtype != torch.bfloat16 or x.dim() != 2 or x.shape[1] % D:
                        raise ValueError(f"tensor '{name}' is {x.dtype} {list(x.shape)}, want BF16 [S, H*{D}]")
                    if x.shape[1] < a.heads * D:
                        raise ValueError(f"tensor '{name}' has {x.shape[1] // D} heads, fewer than --heads {a.heads}")
                    t[name] = x[:, :a.heads * D].contiguous()
        except (OSError, ValueError, RuntimeError, bad_file) as e:
            print(f"make_qkv: {a.src}: {e}", file=sys.stderr)
            return 1
        meta = dict(meta, profile=f"{meta.get('profile', 'unknown')}_h{a.heads}", tokens=t["q"].shape[0],
                    heads=a.heads, head_dim=D, source=os.path.basename(a.src))
    tmp = a.out + ".tmp"
    try:
        save_file(t, tmp, metadata={k: str(v) for k, v in meta.items()})
        os.replace(tmp, a.out)
    except OSError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        print(f"make_qkv: {a.out}: {e}", file=sys.stderr)
        return 1
    print(f"wrote {a.out}: q, k, v [{t['q'].shape[0]}][{a.heads * D}] BF16, profile {meta['profile']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
