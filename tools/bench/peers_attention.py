#!/usr/bin/env python3
"""peers_attention.py — the attention peers of h3block, timed in one process on one GPU.

    python3 tools/bench/peers_attention.py [--seqs 4096,8192,16384,30272,75600] [--heads 56]
        [--reps 10] [--warmup 2] [--impls cudnn_bf16,flash_bf16,cudnn_fp8] [--json FILE]

Peers (DESIGN.md §6), non-causal, B = 1, D = 128, q/k/v stored [B][S][H][D] (our
[S][H*128] layout) and viewed [B][H][S][D]:
  cudnn_bf16  torch SDPA with SDPBackend.CUDNN_ATTENTION, BF16
  flash_bf16  torch SDPA with SDPBackend.FLASH_ATTENTION, BF16
  cudnn_fp8   cuDNN's FP8 SDPA through the cudnn frontend Python API (nvidia-cudnn-frontend
              wheel): e4m3 q/k/v with per-tensor scales (amax/448), descale/scale tensors,
              amax outputs; O in e4m3 (Hopper's FP8 SDPA forward writes FP8 O; a BF16 O
              is tried first). The per-tensor quantisation is not timed (cuDNN's figure is
              the kernel alone).
Timing: random N(0,1) inputs, several input sets rotated so L2 holds no copy, CUDA events
around each call, warm-up, median of --reps (>= 10). TFLOPS = 4 S^2 D H / t. For every
impl the relative RMS of its output against cudnn_bf16's on the same inputs is also
reported (a sanity figure, not an accuracy claim). Each impl failing prints its exact error
and the run goes on; the JSON says which failed and why.
"""
import argparse
import json
import math
import sys
import time
import traceback

D = 128


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def time_calls(torch, fn, nsets, warmup, reps):
    """fn(set_index) launches one call. Returns (median ms, min ms)."""
    for w in range(warmup):
        fn(w % nsets)
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for r in range(reps):
        ev[r][0].record()
        fn((r + warmup) % nsets)
        ev[r][1].record()
    torch.cuda.synchronize()
    t = [a.elapsed_time(b) for a, b in ev]
    return median(t), min(t)


class CudnnFp8:
    """One cuDNN FP8 SDPA graph for a fixed (S, H)."""

    def __init__(self, torch, cudnn, S, H):
        self.torch, self.cudnn = torch, cudnn
        dev = torch.device("cuda")
        self.handle = cudnn.create_handle()
        cudnn.set_stream(handle=self.handle, stream=torch.cuda.current_stream().cuda_stream)
        e4m3, f32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
        shape = [1, H, S, D]
        stride = [S * H * D, D, H * D, 1]  # [B][S][H][D] memory viewed as [B][H][S][D]
        last_err = None
        for o_type in (cudnn.data_type.BFLOAT16, e4m3):
            try:
                g = cudnn.pygraph(io_data_type=e4m3, intermediate_data_type=f32, compute_data_type=f32,
                                  handle=self.handle)
                tq, tk, tv = [g.tensor(name=n, dim=shape, stride=stride, data_type=e4m3) for n in ("q", "k", "v")]
                sc = [g.tensor(name=n, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=f32)
                      for n in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")]
                o, _, amax_s, amax_o = g.sdpa_fp8(q=tq, k=tk, v=tv, descale_q=sc[0], descale_k=sc[1],
                                                  descale_v=sc[2], descale_s=sc[3], scale_s=sc[4], scale_o=sc[5],
                                                  attn_scale=1.0 / math.sqrt(D), use_causal_mask=False,
                                                  generate_stats=False, name="sdpa_fp8")
                o.set_output(True).set_dim(shape).set_stride(stride).set_data_type(o_type)
                for a in (amax_s, amax_o):
                    a.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(f32)
                g.validate()
                g.build_operation_graph()
                g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
                g.check_support()
                g.build_plans()
            except Exception as e:  # noqa: BLE001 - report cuDNN's exact refusal, try the next O type
                last_err = f"{type(e).__name__}: {e}"
                print(f"  cudnn_fp8: O as {o_type} refused: {last_err}", flush=True)
                continue
            self.graph, self.t = g, (tq, tk, tv, *sc, o, amax_s, amax_o)
            self.o_fp8 = o_type == e4m3
            self.ws = torch.empty(max(1, g.get_workspace_size()), device=dev, dtype=torch.uint8)
            self.out = torch.empty(1, S, H, D, device=dev,
                                   dtype=torch.float8_e4m3fn if self.o_fp8 else torch.bfloat16)
            self.amax = torch.empty(2, 1, 1, 1, 1, device=dev, dtype=torch.float32)
            return
        raise RuntimeError(f"cuDNN FP8 SDPA graph not supported: {last_err}")

    def quantise(self, q, k, v):
        """BF16 [1][S][H][D] -> e4m3 with per-tensor scale 448/amax; returns (q8, k8, v8, scalars)."""
        torch = self.torch
        out, scal = [], []
        for x in (q, k, v):
            amax = x.abs().amax().float().clamp(min=1e-12)
            s = 448.0 / amax
            out.append((x.float() * s).clamp(-448, 448).to(torch.float8_e4m3fn))
            scal.append(1.0 / s)
        # P in [0, 1]: scale_s = 256 puts it in e4m3's fine range (values below 2^-9 / 256 flush);
        # O is a convex combination of V rows, so |O| <= amax_v: scale_o = 448 / amax_v cannot overflow.
        scale_s = 256.0
        scale_o = 1.0 if not self.o_fp8 else float(448.0 / (v.abs().amax().float().clamp(min=1e-12)))
        vals = [float(scal[0]), float(scal[1]), float(scal[2]), 1.0 / scale_s, scale_s, scale_o]
        dev = q.device
        scalars = [torch.full((1, 1, 1, 1), x, device=dev, dtype=torch.float32) for x in vals]
        return out[0], out[1], out[2], scalars

    def run(self, q8, k8, v8, scalars):
        tq, tk, tv, d_q, d_k, d_v, d_s, s_s, s_o, o, amax_s, amax_o = self.t
        pack = {tq: q8, tk: k8, tv: v8, d_q: scalars[0], d_k: scalars[1], d_v: scalars[2], d_s: scalars[3],
                s_s: scalars[4], s_o: scalars[5], o: self.out, amax_s: self.amax[0], amax_o: self.amax[1]}
        self.graph.execute(pack, self.ws, handle=self.handle)

    def output_bf16(self, scalars):
        if self.o_fp8:
            return (self.out.float() / scalars[5]).to(self.torch.bfloat16)
        return self.out


def rel_rms(torch, a, b):
    a, b = a.float(), b.float()
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b).clamp(min=1e-30))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seqs", default="4096,8192,16384,30272,75600")
    ap.add_argument("--heads", type=int, default=56)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--impls", default="cudnn_bf16,flash_bf16,cudnn_fp8")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--json")
    ap.add_argument("--merge-into", help="append this run's rows to an existing JSON of this tool (its 'results')")
    ap.add_argument("--tag", default="", help="suffix for impl names in the JSON, e.g. '@fe1.16' for a 2nd frontend")
    args = ap.parse_args()
    if args.merge_into and not args.tag:
        ap.error("--merge-into needs --tag (the merged rows are told apart by it)")
    seqs = [int(s) for s in args.seqs.split(",") if s]
    impls = [s for s in args.impls.split(",") if s]
    H = args.heads

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("peers_attention: no CUDA device", file=sys.stderr)
        return 77
    prop = torch.cuda.get_device_properties(0)
    l2 = getattr(prop, "L2_cache_size", 60 << 20)
    info = {"tool": "peers_attention", "device": prop.name, "torch": torch.__version__,
            "cudnn_backend": torch.backends.cudnn.version(), "heads": H, "results": []}
    cudnn = None
    if "cudnn_fp8" in impls:
        try:
            import cudnn as _cudnn
            cudnn = _cudnn
            info["cudnn_frontend"] = getattr(cudnn, "__version__", "?")
            info["cudnn_frontend_backend"] = cudnn.backend_version()
        except Exception as e:  # noqa: BLE001
            info["cudnn_frontend_error"] = f"{type(e).__name__}: {e}"
            print(f"peers_attention: import cudnn failed: {info['cudnn_frontend_error']}", flush=True)
    print(f"peers_attention on {prop.name}: torch {torch.__version__}, cuDNN {info['cudnn_backend']}, "
          f"frontend {info.get('cudnn_frontend', 'n/a')}, H = {H}, {args.warmup} warm-up + {args.reps} timed, median",
          flush=True)

    def save():
        if args.json:
            with open(args.json, "w") as f:
                json.dump(info, f, indent=1)
        if args.merge_into:
            try:
                with open(args.merge_into) as f:
                    doc = json.load(f)
            except Exception:  # noqa: BLE001 - no earlier file: start one
                doc = {"tool": "peers_attention", "results": []}
            # rows of this tag are replaced (save() runs after every row), the others kept
            doc["results"] = [r for r in doc.get("results", []) if not r["impl"].endswith(args.tag)]
            doc["results"] += info["results"]
            if "cudnn_frontend" in info:
                doc["cudnn_frontend" + args.tag] = info["cudnn_frontend"]
            with open(args.merge_into, "w") as f:
                json.dump(doc, f, indent=1)

    gen = torch.Generator(device="cuda")
    gen.manual_seed(args.seed)
    print(f"{'impl':<12} {'S':>7} {'H':>4} {'sets':>4} {'median_ms':>10} {'min_ms':>10} {'TFLOPS':>9} "
          f"{'relRMS':>9}  status", flush=True)
    for S in seqs:
        flops = 4.0 * S * S * D * H
        setb = 3 * S * H * D * 2
        nsets = max(2, min(4, -(-3 * l2 // setb)))
        sets, base = [], None
        try:
            for _ in range(nsets):
                sets.append([torch.randn(1, S, H, D, device="cuda", dtype=torch.bfloat16, generator=gen)
                             for _ in range(3)])
            torch.cuda.synchronize()
        except torch.cuda.OutOfMemoryError as e:
            for name in impls:
                info["results"].append({"impl": name + args.tag, "S": S, "H": H, "status": f"oom: {e}".splitlines()[0]})
            sets = []
            torch.cuda.empty_cache()
            save()
            continue
        views = [[x.transpose(1, 2) for x in st] for st in sets]  # [1][H][S][D], strided
        for name in impls:
            row = {"impl": name + args.tag, "S": S, "H": H, "sets": nsets}
            t0 = time.time()
            try:
                if name in ("cudnn_bf16", "flash_bf16"):
                    backend = SDPBackend.CUDNN_ATTENTION if name == "cudnn_bf16" else SDPBackend.FLASH_ATTENTION
                    out = [None]

                    def call(i, backend=backend, out=out):
                        with sdpa_kernel(backend):
                            out[0] = F.scaled_dot_product_attention(*views[i], is_causal=False)
                    med, mn = time_calls(torch, call, nsets, args.warmup, args.reps)
                    call(0)
                    o = out[0].transpose(1, 2)
                elif name == "cudnn_fp8":
                    if cudnn is None:
                        raise RuntimeError("cudnn frontend not importable: " + info.get("cudnn_frontend_error", "?"))
                    g = CudnnFp8(torch, cudnn, S, H)
                    qsets = [g.quantise(*st) for st in sets]
                    med, mn = time_calls(torch, lambda i: g.run(*qsets[i]), nsets, args.warmup, args.reps)
                    g.run(*qsets[0])
                    torch.cuda.synchronize()
                    o = g.output_bf16(qsets[0][3])
                    row["o_dtype"] = "e4m3" if g.o_fp8 else "bf16"
                    row["amax_s"], row["amax_o"] = [float(x) for x in g.amax.flatten()]
                    del qsets
                else:
                    raise ValueError(f"unknown impl {name}")
                torch.cuda.synchronize()
                nonfinite = int((~torch.isfinite(o.float())).sum())
                if name == "cudnn_bf16":
                    base = o.clone()
                row.update(median_ms=med, min_ms=mn, tflops=flops / (med * 1e-3) / 1e12, nonfinite=nonfinite)
                if base is not None:
                    row["rel_rms_vs_cudnn_bf16"] = rel_rms(torch, o, base)
                row["status"] = "ok" if nonfinite == 0 else "non-finite output"
                del o
            except Exception as e:  # noqa: BLE001 - keep going, record the exact error
                msg = f"{type(e).__name__}: {e}".strip().splitlines()
                row["status"] = "error: " + (msg[0] if msg else "?")[:400]
                row["error_full"] = "\n".join(msg)[:4000]
                traceback.print_exc()
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            row["wall_s"] = round(time.time() - t0, 2)
            info["results"].append(row)
            rr = row.get("rel_rms_vs_cudnn_bf16")
            print(f"{name + args.tag:<12} {S:>7} {H:>4} {nsets:>4} {row.get('median_ms', float('nan')):>10.3f} "
                  f"{row.get('min_ms', float('nan')):>10.3f} {row.get('tflops', float('nan')):>9.1f} "
                  f"{(100 * rr if rr is not None else float('nan')):>8.3f}%  {row['status']}", flush=True)
            save()
        del sets, views, base
        torch.cuda.empty_cache()
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
