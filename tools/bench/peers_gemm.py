#!/usr/bin/env python3
"""peers_gemm.py — the block's four GEMM shapes through PyTorch's GEMM paths, on one GPU.

    python3 tools/bench/peers_gemm.py [--tokens 30272] [--reps 10] [--warmup 3] [--json FILE]

What dit_block's FP8 GEMMs (cuBLASLt, e4m3, one scale per output channel and per
token, FP32 promotion of the partial sums along k) could be measured against, on the
same shapes (y[S][N] = x[S][K] W[N][K]^T; qkv, out, fc1, fc2 of DESIGN.md §1):
  bf16              torch.mm, BF16 in and out (cuBLAS)
  fp8_tensor        torch._scaled_mm, one scale per tensor, use_fast_accum=False
  fp8_tensor_fast   the same with use_fast_accum=True (the tensor cores' own
                    accumulator over all of k: faster, less accurate)
  fp8_row           torch._scaled_mm with row-wise scales (per token x per channel,
                    dit_block's scaling), use_fast_accum=False
  fp8_row_fast      the same, use_fast_accum=True
For each: the median ms of --reps calls (CUDA events, after --warmup), TFLOPS =
2 S N K / t, the name of the kernel that ran (torch.profiler; says which library:
cuBLAS/cuBLASLt 'nvjet'/'sm90_xmma', or CUTLASS), and the relative RMS of its output
against an FP32 product of the same (dequantised) operands on a 512-token slice — how
much the accumulation mode costs. Inputs N(0,1) activations, N(0, 1/K) weights.
A path that fails prints its error and the run goes on.
"""
import json
import sys
import traceback

from h3cli import Parser

SHAPES = [  # name, N, K (dit_block's per-op names)
    ("qkv_gemm", 21504, 5376),
    ("out_gemm", 5376, 7168),
    ("fc1_gemm", 28672, 5376),
    ("fc2_gemm", 5376, 14336),
]
E4M3_MAX = 448.0


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def time_fn(torch, fn, warmup, reps):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in ev:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return median([a.elapsed_time(b) for a, b in ev])


def kernel_name(torch, fn):
    """The name of the longest GPU kernel one call of fn launches."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    best, name = -1.0, "?"
    for e in prof.events():
        dt = getattr(e, "device_time", None) or getattr(e, "cuda_time", 0) or 0
        if getattr(e, "device_type", None) is not None and str(e.device_type).endswith("CUDA") and dt > best:
            best, name = dt, e.name
    return name[:120]


def main():
    ap = Parser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=30272)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.tokens < 512 or a.reps < 1 or a.warmup < 0:
        ap.error("--tokens must be >= 512, --reps >= 1, --warmup >= 0")
    import torch

    if not torch.cuda.is_available():
        print("peers_gemm.py: no CUDA device")
        sys.exit(77)
    dev = torch.device("cuda")
    f8 = torch.float8_e4m3fn
    torch.manual_seed(1)
    S = a.tokens
    out = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "tokens": S, "reps": a.reps, "rows": []}
    print(f"GPU {out['gpu']}, torch {torch.__version__}, S = {S}, median of {a.reps}")
    print(f"{'gemm':9} {'path':16} {'ms':>8} {'TFLOPS':>7} {'rel RMS':>9}  kernel")
    for name, N, K in SHAPES:
        x = torch.randn(S, K, device=dev, dtype=torch.bfloat16)
        w = (torch.randn(N, K, device=dev) / K**0.5).to(torch.bfloat16)
        # per-tensor and per-row (token) x per-column (channel) e4m3 operands
        xs_t = (x.float().abs().amax() / E4M3_MAX).reshape(())
        ws_t = (w.float().abs().amax() / E4M3_MAX).reshape(())
        x8_t, w8_t = (x.float() / xs_t).to(f8), (w.float() / ws_t).to(f8)
        xs_r = (x.float().abs().amax(dim=1, keepdim=True) / E4M3_MAX).clamp_min(1e-12)  # [S][1]
        ws_r = (w.float().abs().amax(dim=1, keepdim=True) / E4M3_MAX).clamp_min(1e-12)  # [N][1]
        x8_r, w8_r = (x.float() / xs_r).to(f8), (w.float() / ws_r).to(f8)
        flops = 2.0 * S * N * K
        sl = slice(0, 512)
        paths = {
            "bf16": (lambda: torch.mm(x, w.t()), lambda: x[sl].float() @ w.float().t()),
            "fp8_tensor": (
                lambda: torch._scaled_mm(x8_t, w8_t.t(), xs_t, ws_t, out_dtype=torch.bfloat16, use_fast_accum=False),
                lambda: (x8_t[sl].float() * xs_t) @ (w8_t.float() * ws_t).t(),
            ),
            "fp8_tensor_fast": (
                lambda: torch._scaled_mm(x8_t, w8_t.t(), xs_t, ws_t, out_dtype=torch.bfloat16, use_fast_accum=True),
                lambda: (x8_t[sl].float() * xs_t) @ (w8_t.float() * ws_t).t(),
            ),
            "fp8_row": (
                lambda: torch._scaled_mm(x8_r, w8_r.t(), xs_r, ws_r.t(), out_dtype=torch.bfloat16, use_fast_accum=False),
                lambda: (x8_r[sl].float() * xs_r[sl]) @ (w8_r.float() * ws_r).t(),
            ),
            "fp8_row_fast": (
                lambda: torch._scaled_mm(x8_r, w8_r.t(), xs_r, ws_r.t(), out_dtype=torch.bfloat16, use_fast_accum=True),
                lambda: (x8_r[sl].float() * xs_r[sl]) @ (w8_r.float() * ws_r).t(),
            ),
        }
        for pname, (fn, ref) in paths.items():
            row = {"gemm": name, "N": N, "K": K, "path": pname}
            try:
                y = fn()
                r = ref()
                rel = ((y[sl].float() - r).pow(2).mean() / r.pow(2).mean()).sqrt().item()
                del y, r
                ms = time_fn(torch, fn, a.warmup, a.reps)
                kn = kernel_name(torch, fn)
                row.update(ms=ms, tflops=flops / ms / 1e9, rel_rms=rel, kernel=kn)
                print(f"{name:9} {pname:16} {ms:8.3f} {row['tflops']:7.0f} {rel:9.2e}  {kn}")
            except Exception as e:  # one path failing does not stop the others
                row["error"] = f"{type(e).__name__}: {e}"
                print(f"{name:9} {pname:16} FAILED {row['error']}")
                traceback.print_exc(limit=1)
            out["rows"].append(row)
            torch.cuda.empty_cache()
        del x, w, x8_t, w8_t, x8_r, w8_r
        torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
