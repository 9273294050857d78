#!/usr/bin/env python3
"""diffusers_block.py — diffusers' MiniMaxH3TransformerBlock with its default attention
processor and with h3block's H3AttnProcessor, eager and under torch.compile, timed in one
process on one GPU, on one of our block files and its inputs.

    python3 tools/bench/diffusers_block.py --weights W --input IN [--reps 10] [--warmup 3]
        [--modes eager,compile] [--json FILE]

W: a gen_weights file (canonical names, converted to diffusers' with
h3block.diffusers.load_diffusers_block); IN: gen_inputs' x, temb, tags, positions. The
block runs as the transformer calls it (hidden_states [1, S, C] BF16, temb [1, T] FP32,
adaln_indices = tags, rotary_emb from the positions) under torch.no_grad; CUDA events
around each call, median of --reps after --warmup (compile: after its compilation).
Also prints the relative RMS of H3AttnProcessor's block update against the default's.
Needs a GPU, torch, diffusers, safetensors and h3block (python/src or installed)."""
import json
import sys

from h3cli import Parser


def main():
    ap = Parser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--json")
    a = ap.parse_args()
    modes = [m for m in a.modes.split(",") if m]
    if any(m not in ("eager", "compile") for m in modes):
        ap.error(f"--modes {a.modes!r}: eager and/or compile")
    import torch
    from safetensors.torch import load_file
    import h3block
    from h3block.diffusers import H3AttnProcessor, load_diffusers_block, rotary_emb
    if not torch.cuda.is_available():
        print("diffusers_block: no CUDA device", file=sys.stderr)
        return 77
    import diffusers
    d = {n: t.cuda() for n, t in load_file(a.input).items()}
    x, temb, tags, pos = d["x"], d["temb"].float(), d["tags"].long(), d["positions"].float()
    S = x.shape[0]
    blk = load_diffusers_block(a.weights)
    args = (x.unsqueeze(0), temb.unsqueeze(0), tags, rotary_emb(pos))
    default_proc = blk.attn.processor
    info = {"tool": "diffusers_block", "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "diffusers": diffusers.__version__, "h3block": h3block.library_version(),
            "kernel": h3block.attention_kernel(0), "S": S, "reps": a.reps, "results": []}
    print(f"diffusers_block on {info['device']}: torch {torch.__version__}, diffusers {diffusers.__version__}, "
          f"h3block {info['h3block']}, S = {S}", flush=True)
    outs = {}

    def timed(fn):
        for _ in range(a.warmup):
            fn()
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(a.reps)]
        for e0, e1 in ev:
            e0.record()
            fn()
            e1.record()
        torch.cuda.synchronize()
        t = sorted(e0.elapsed_time(e1) for e0, e1 in ev)
        return t[len(t) // 2], t[0]

    with torch.no_grad():
        for mode in modes:
            for proc_name, proc in (("default", default_proc), ("h3block", H3AttnProcessor())):
                blk.attn.set_processor(proc)
                torch._dynamo.reset()
                fn = torch.compile(blk) if mode == "compile" else blk
                out = fn(*args)  # compiles here in compile mode
                med, mn = timed(lambda: fn(*args))
                outs[(mode, proc_name)] = out
                row = {"mode": mode, "processor": proc_name, "median_ms": med, "min_ms": mn}
                info["results"].append(row)
                print(f"{mode:<8} {proc_name:<8} {med:9.3f} ms (min {mn:.3f})", flush=True)
        for mode in modes:
            ref, got = outs[(mode, "default")][0].float() - x.float(), outs[(mode, "h3block")][0].float() - x.float()
            e = float(torch.linalg.vector_norm(got - ref) / torch.linalg.vector_norm(ref))
            info[f"update_rel_rms_{mode}"] = e
            r = {row["processor"]: row["median_ms"] for row in info["results"] if row["mode"] == mode}
            print(f"{mode}: H3AttnProcessor {r['default'] / r['h3block']:.3f}x the default processor; "
                  f"block update vs default: rel RMS {100 * e:.3f}%", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(info, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
