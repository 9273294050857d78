#!/usr/bin/env python3
"""torch_block.py — an eager (and torch.compile'd) PyTorch H3 DiT block, the peer of dit_block.

    python3 tools/bench/torch_block.py --weights weights/block0.safetensors --input inputs.safetensors
        [--reps 10] [--warmup 3] [--no-compile] [--output torch_out.safetensors] [--json FILE]
    python3 tools/bench/torch_block.py --device cpu --tokens 64      # tiny random block, CPU check
    python3 tools/bench/torch_block.py --weights W --input IN --dump-qkv qkv.safetensors --qkv-only
    python3 tools/bench/torch_block.py --weights W --input IN --dtype fp32 --output ref_f32.safetensors

DESIGN.md §1 exactly, BF16 activations between ops, FP32 inside every reduction:
  1. mod = bf16(adaln_W . silu(temb) + b), silu in FP32. The FP32 silu vector is split into
     hi + lo BF16 halves and both go through one BF16 GEMM (2 columns): the weight is read once
     as in a GEMV and the product keeps ~16 mantissa bits of silu instead of 8. cuBLAS rounds
     each half's product to BF16 before the FP32 sum, so an entry of mod can differ from the
     FP32-accumulated reference by one BF16 ulp (far below the FP8 attention's error).
  2. a = bf16(rmsnorm(x) * w1 * (1 + scale_msa[tag]) + shift_msa[tag])
  3. qkv = a . Wqkv^T (grouped per head: q_h, k_h, v_h rows 384h..384h+383)
  4. q, k: t = bf16(rmsnorm_D(x) * w), RoPE in FP32 on dims 0..95 (NeoX halves, f = [t,h,w] x
     16 freqs omega_j = 10000^(-j/16), repeated twice), rounded to BF16; dims 96..127 pass.
  5. o = SDPA (cuDNN BF16 backend on the GPU), non-causal, scale 1/sqrt(128)
  6. x1 = bf16(x + gate_msa[tag] * (o . Wout^T))
  7. b = bf16(rmsnorm(x1) * w2 * (1 + scale_mlp[tag]) + shift_mlp[tag])
  8. g = b . Wfc1^T; u = bf16(silu(g[:, :F]) * g[:, F:]) in FP32
  9. out = bf16(x1 + gate_mlp[tag] * (u . Wfc2^T))
Timing: CUDA events, warm-up, median of --reps: the whole block eager, the whole block
compiled (torch.compile, default mode; compile time reported apart), and eager per op (events
around each op, same stage names as dit_block; "qk_norm_rope_quant" here is norm + RoPE only,
torch has no FP8 step). Weights (1.3 GB) and activations are far larger than L2, so the block
needs no input rotation. --output writes the eager output hidden states ("out" [S][C] BF16).
--dump-qkv FILE writes the attention inputs after stages 1-4 (q and k normed, rounded, rotated
and rounded to BF16 as above, v the GEMM's BF16 output): tensors q, k, v, BF16, [S][H*128]
(layout [S][H][128]), metadata profile (the weights file's 'profile' metadata, else 'unknown';
'tiny-random' without --weights) and tokens (S); our kernels and peers_attention.py --qkv read
it. --qkv-only stops there (no timing, no block).
--dtype fp32: the reference for the error a user sees. The same block in FP32 throughout:
weights upcast (exactly), x's BF16 values upcast, no rounding to BF16 between ops, adaLN as one
FP32 product, FP32 GEMMs with TF32 off, attention in FP32 by explicit chunks (per head, query
rows in blocks; S x S scores never held whole, so S = 30272, H = 56 fits in 80 GB), with the
max subtracted before exp. --output is then F32. Not timed.
"""
import argparse
import json
import math
import os
import sys
import time

from h3cli import Parser

STAGES = ["adaln", "norm1_mod", "qkv_gemm", "qk_norm_rope_quant", "attention", "out_gemm", "gate_res1",
          "norm2_mod", "fc1_gemm", "swiglu", "fc2_gemm", "gate_res2"]
SLOT_SHIFT_MSA, SLOT_SCALE_MSA, SLOT_GATE_MSA, SLOT_SHIFT_MLP, SLOT_SCALE_MLP, SLOT_GATE_MLP = range(6)
NAMES = ["norm1.weight", "norm2.weight", "attn.qkv_proj.weight", "attn.q_norm.weight", "attn.k_norm.weight",
         "attn.out_proj.weight", "mlp.fc1.weight", "mlp.fc2.weight", "adaln_proj.linear.weight",
         "adaln_proj.linear.bias"]
EPS = 1e-5
D = 128


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def load_weights(path, device, torch):
    """Block weights by their short names, and the file's metadata; accepts one 'blocks.N.' prefix
    or none; regroups a stacked QKV."""
    from safetensors import safe_open
    w, meta = {}, {}
    with safe_open(path, framework="pt", device="cpu") as f:
        meta = f.metadata() or {}
        for key in f.keys():
            short = key
            if key.startswith("blocks."):
                parts = key.split(".", 2)
                if len(parts) == 3 and parts[1].isdigit():
                    short = parts[2]
            if short in NAMES:
                w[short] = f.get_tensor(key)
    missing = [n for n in NAMES if n not in w]
    if missing:
        raise SystemExit(f"{path}: missing tensors {missing}")
    if meta.get("qkv_layout", "grouped") == "stacked":  # [q_all; k_all; v_all] -> per head q_h, k_h, v_h
        qkv = w["attn.qkv_proj.weight"]
        H = qkv.shape[0] // (3 * D)
        w["attn.qkv_proj.weight"] = qkv.view(3, H, D, -1).transpose(0, 1).reshape(3 * H * D, -1).contiguous()
    return {k: v.to(device=device, dtype=torch.bfloat16 if v.dtype != torch.bfloat16 else v.dtype)
            for k, v in w.items()}, meta


def load_inputs(path, device, torch):
    from safetensors.torch import load_file
    t = load_file(path)
    x = t["x"].to(device=device, dtype=torch.bfloat16)
    temb = t["temb"].to(device=device, dtype=torch.float32).flatten()
    tags = t["tags"].to(device=device, dtype=torch.int64).flatten()
    pos = t["positions"].to(device=device, dtype=torch.float32).reshape(-1, 3)
    return x, temb, tags, pos


def tiny_random(S, device, torch, seed=7):
    """Hidden 256, 2 heads x 128, SwiGLU 512, temb 64 (h3_config_tiny), random weights and inputs."""
    g = torch.Generator().manual_seed(seed)
    C, H, F, T, M = 256, 2, 512, 64, 3

    def r(*shape, s=1.0, off=0.0):
        return (torch.randn(*shape, generator=g) * s + off).to(torch.bfloat16).to(device)
    w = {"norm1.weight": r(C, s=0.1, off=1.0), "norm2.weight": r(C, s=0.1, off=1.0),
         "attn.qkv_proj.weight": r(3 * H * D, C, s=C ** -0.5), "attn.q_norm.weight": r(D, s=0.1, off=1.0),
         "attn.k_norm.weight": r(D, s=0.1, off=1.0), "attn.out_proj.weight": r(C, H * D, s=(H * D) ** -0.5),
         "mlp.fc1.weight": r(2 * F, C, s=C ** -0.5), "mlp.fc2.weight": r(C, F, s=F ** -0.5),
         "adaln_proj.linear.weight": r(M * 6 * C, T, s=T ** -0.5), "adaln_proj.linear.bias": r(M * 6 * C, s=0.1)}
    x = r(S, C)
    temb = torch.randn(T, generator=g).to(device)
    tags = torch.randint(0, M, (S,), generator=g).to(device)
    pos = torch.stack([torch.arange(S) // 16, (torch.arange(S) // 4) % 4, torch.arange(S) % 4], 1).float().to(device)
    return w, (x, temb, tags, pos)


class Block:
    """dtype torch.bfloat16: DESIGN.md §1 with BF16 activations (the peer); torch.float32: the same
    math with no rounding between ops (the reference; pass FP32 weights)."""

    def __init__(self, w, torch, dtype=None):
        import torch.nn.functional as F
        self.torch, self.F, self.w = torch, F, w
        self.act = dtype or torch.bfloat16  # the activations' dtype between ops
        self.C = w["norm1.weight"].shape[0]
        self.H = w["attn.qkv_proj.weight"].shape[0] // (3 * D)
        self.Fw = w["mlp.fc2.weight"].shape[1]
        self.M = w["adaln_proj.linear.weight"].shape[0] // (6 * self.C)
        dev = w["norm1.weight"].device
        # omega_j = (float)pow(10000, -j/16), as cpu_rope_omega
        self.omega = torch.tensor([math.pow(10000.0, -j / 16.0) for j in range(16)], dtype=torch.float32,
                                  device=dev)

    def rmsnorm_mod(self, x, w, mod, tags, s_shift, s_scale):
        xf = x.float()
        r = xf * self.torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()
        # mod[:, slot] [M][C] gathered by tag -> [S][C] (not mod[tags], which would be [S][6][C])
        return (r * (1.0 + mod[:, s_scale][tags].float()) + mod[:, s_shift][tags].float()).to(self.act)

    def qk_norm_rope(self, t, w, pos):
        """t [S][H][128] -> normed (rounded to the activation dtype), RoPE'd on dims 0..95, rounded."""
        torch = self.torch
        tf = t.float()
        n = (tf * torch.rsqrt(tf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(self.act).float()
        f = (pos[:, :, None] * self.omega[None, None, :]).reshape(-1, 48)  # [S][48]: t, h, w x 16 (float product)
        c, s = torch.cos(f)[:, None, :], torch.sin(f)[:, None, :]
        x1, x2 = n[..., :48], n[..., 48:96]
        y1 = x1 * c - x2 * s  # d < 48
        y2 = x2 * c + x1 * s  # 48 <= d < 96 (f[d] = f[d-48])
        return torch.cat([y1, y2, n[..., 96:]], -1).to(self.act)

    def attention_fp32(self, q, k, v, budget_bytes=1 << 30):
        """Exact FP32 attention, q/k/v [S][H][D] FP32 -> [S][H*D] FP32: per head, query rows in
        blocks so one block of scores [rows][S] stays under budget_bytes (the S x S matrix of all
        heads, 205 GB at S = 30272, H = 56, is never held). The row max is subtracted before exp
        (every exp <= 1, the row sum >= 1); FP32 GEMMs (TF32 is switched off by the caller)."""
        torch = self.torch
        S, H = q.shape[0], q.shape[1]
        o = torch.empty(S, H, D, dtype=torch.float32, device=q.device)
        rows = max(1, min(S, budget_bytes // (4 * S)))
        scale = 1.0 / math.sqrt(D)
        for h in range(H):
            kh, vh = k[:, h], v[:, h]  # [S][D]
            for r0 in range(0, S, rows):
                r1 = min(S, r0 + rows)
                s = torch.matmul(q[r0:r1, h], kh.t()).mul_(scale)  # [rows][S]
                s.sub_(s.amax(-1, keepdim=True)).exp_()
                o[r0:r1, h] = torch.matmul(s, vh).div_(s.sum(-1, keepdim=True))
                del s
        return o.view(S, H * D)

    def forward(self, x, temb, tags, pos, ev=None, qkv_only=False):
        """ev: None, or a list that receives this call's 13 marks (events, or host times on the CPU)
        taken before the first and after every one of the 12 stages. qkv_only: return the attention
        inputs (q, k, v), each [S][H][128] contiguous, after stage 4."""
        torch, F, w = self.torch, self.F, self.w
        act = self.act
        S, C, H = x.shape[0], self.C, self.H
        marks = []

        def mark():
            if ev is None:
                return
            if x.is_cuda:
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                marks.append(e)
            else:
                marks.append(time.perf_counter())
        mark()
        sv = F.silu(temb.float())
        if act == torch.float32:  # one FP32 product, no split needed
            mod = F.linear(sv, w["adaln_proj.linear.weight"].float()) + w["adaln_proj.linear.bias"].float()
        else:
            hi = sv.to(torch.bfloat16)
            lo = (sv - hi.float()).to(torch.bfloat16)
            two = F.linear(torch.stack([hi, lo]), w["adaln_proj.linear.weight"])  # [2][M*6*C]
            mod = (two[0].float() + two[1].float() + w["adaln_proj.linear.bias"].float()).to(torch.bfloat16)
        mod = mod.view(self.M, 6, C)
        mark()
        a = self.rmsnorm_mod(x, w["norm1.weight"], mod, tags, SLOT_SHIFT_MSA, SLOT_SCALE_MSA)
        mark()
        qkv = F.linear(a, w["attn.qkv_proj.weight"]).view(S, H, 3, D)
        mark()
        q = self.qk_norm_rope(qkv[:, :, 0], w["attn.q_norm.weight"], pos)
        k = self.qk_norm_rope(qkv[:, :, 1], w["attn.k_norm.weight"], pos)
        v = qkv[:, :, 2]
        if qkv_only:
            return q.contiguous(), k.contiguous(), v.contiguous()
        mark()
        if act == torch.float32:
            o = self.attention_fp32(q, k, v)
        else:
            qh, kh, vh = (t.unsqueeze(0).transpose(1, 2) for t in (q, k, v))  # [1][H][S][D]
            o = F.scaled_dot_product_attention(qh, kh, vh, is_causal=False)  # backend chosen by the caller
            o = o.transpose(1, 2).reshape(S, H * D)
        mark()
        y = F.linear(o, w["attn.out_proj.weight"])
        mark()
        x1 = (x.float() + mod[:, SLOT_GATE_MSA][tags].float() * y.float()).to(act)
        mark()
        b = self.rmsnorm_mod(x1, w["norm2.weight"], mod, tags, SLOT_SHIFT_MLP, SLOT_SCALE_MLP)
        mark()
        g = F.linear(b, w["mlp.fc1.weight"])
        mark()
        u = (F.silu(g[:, :self.Fw].float()) * g[:, self.Fw:].float()).to(act)
        mark()
        z = F.linear(u, w["mlp.fc2.weight"])
        mark()
        out = (x1.float() + mod[:, SLOT_GATE_MLP][tags].float() * z.float()).to(act)
        mark()
        if ev is not None:
            ev.append(marks)
        return out


def timed(torch, fn, warmup, reps, cuda):
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
    t = []
    for _ in range(reps):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            t.append((a, b))
        else:
            t0 = time.perf_counter()
            fn()
            t.append(1e3 * (time.perf_counter() - t0))
    if cuda:
        torch.cuda.synchronize()
        t = [a.elapsed_time(b) for a, b in t]
    return median(t), min(t)


def rel_rms(torch, a, b):
    a, b = a.float(), b.float()
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b).clamp(min=1e-30))


def dump_qkv(path, q, k, v, meta):
    """q, k, v [S][H][128] BF16 -> safetensors q, k, v [S][H*128] BF16 with string metadata."""
    from safetensors.torch import save_file
    S = q.shape[0]
    save_file({n: t.reshape(S, -1).contiguous().cpu() for n, t in zip("qkv", (q, k, v))}, path,
              metadata={key: str(val) for key, val in meta.items()})


def main():
    ap = Parser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights")
    ap.add_argument("--input")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tokens", type=int, default=64, help="tokens of the tiny random block (no --weights)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-time", action="store_true", help="one forward pass, no timing (implied by --dtype fp32)")
    ap.add_argument("--attn", default="cudnn", choices=["cudnn", "flash", "default"])
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"],
                    help="bf16: the PyTorch peer (default); fp32: the FP32 reference block, not timed")
    ap.add_argument("--dump-qkv", metavar="FILE", help="write the attention inputs q, k, v (BF16 [S][H*128])")
    ap.add_argument("--qkv-only", action="store_true", help="with --dump-qkv: stop after writing it")
    ap.add_argument("--output")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.qkv_only and not args.dump_qkv:
        ap.error("--qkv-only needs --dump-qkv FILE")
    if args.dump_qkv and args.dtype != "bf16":
        ap.error("--dump-qkv needs --dtype bf16 (the q/k/v contract is BF16)")
    if args.tokens < 1 or args.reps < 1 or args.warmup < 0:
        ap.error("--tokens and --reps must be >= 1, --warmup >= 0")
    if args.weights and not args.input:
        ap.error("--weights needs --input (x, temb, tags, positions)")
    for what, path in (("--weights", args.weights), ("--input", args.input)):
        if path and not os.path.isfile(path):
            ap.error(f"{what} {path}: no such file")
    fp32 = args.dtype == "fp32"
    no_time = args.no_time or fp32 or args.qkv_only

    import torch
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("torch_block: no CUDA device", file=sys.stderr)
        return 77
    dev = torch.device(args.device)
    if fp32:  # true FP32 products: no TF32 in matmuls (cuBLAS) or convolutions
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    from torch.nn.attention import SDPBackend
    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION, "default": None}[args.attn]
    if not cuda or fp32:
        backend = None  # CPU: the math/flash CPU kernels; FP32: our chunked attention, no SDPA
    t0 = time.time()
    try:
        if args.weights:
            w, wmeta = load_weights(args.weights, dev, torch)
            profile = wmeta.get("profile", "unknown")
            x, temb, tags, pos = load_inputs(args.input, dev, torch)
        else:
            w, (x, temb, tags, pos) = tiny_random(args.tokens, dev, torch)
            profile = "tiny-random"
    except torch.cuda.OutOfMemoryError as e:
        print(f"torch_block: out of GPU memory loading the block: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - a missing tensor, a bad file: one line, exit 2
        print(f"torch_block: cannot load {args.weights or 'the tiny block'} / {args.input}: "
              f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
        return 2
    if fp32:
        w = {name: t.float() for name, t in w.items()}  # BF16 -> FP32 is exact
        x = x.float()
    load_s = time.time() - t0
    blk = Block(w, torch, dtype=torch.float32 if fp32 else torch.bfloat16)
    S = x.shape[0]
    if x.shape[1] != blk.C:
        raise SystemExit(f"torch_block: x is [{S}][{x.shape[1]}] but the block's hidden size is {blk.C}")
    info = {"tool": "torch_block", "device": torch.cuda.get_device_name(0) if cuda else "cpu",
            "torch": torch.__version__, "S": S, "hidden": blk.C, "heads": blk.H,
            "attn": "fp32-chunked" if fp32 else (args.attn if cuda else "cpu"),
            "dtype": args.dtype, "profile": profile, "load_s": round(load_s, 2)}
    print(f"torch_block on {info['device']}: S = {S}, hidden {blk.C}, {blk.H} heads, {args.dtype}, "
          f"attention {info['attn']}, profile {profile}", flush=True)

    def save():
        if args.json:
            with open(args.json, "w") as f:
                json.dump(info, f, indent=1)

    import contextlib
    from torch.nn.attention import sdpa_kernel
    # The SDPA backend is pinned around everything (eager and compiled): with only the cuDNN
    # backend allowed, a shape cuDNN refuses raises instead of silently using another kernel.
    with torch.inference_mode(), (sdpa_kernel(backend) if backend is not None else contextlib.nullcontext()):
        if args.dump_qkv:
            q, k, v = blk.forward(x, temb, tags, pos, qkv_only=True)
            nf = [int((~torch.isfinite(t.float())).sum()) for t in (q, k, v)]
            dump_qkv(args.dump_qkv, q, k, v, {"profile": profile, "tokens": S, "heads": blk.H, "head_dim": D,
                                              "producer": "torch_block.py --dump-qkv (stages 1-4, BF16)",
                                              "weights": os.path.basename(args.weights or "tiny-random"),
                                              "input": os.path.basename(args.input or "tiny-random")})
            info["dump_qkv"] = args.dump_qkv
            info["qkv_nonfinite"] = nf
            print(f"wrote {args.dump_qkv}: q, k, v [{S}][{blk.H * D}] BF16, profile {profile}"
                  + (f"; NON-FINITE q/k/v values {nf}" if any(nf) else ""), flush=True)
            del q, k, v
            if args.qkv_only:
                save()
                return 1 if any(nf) else 0
        t1 = time.time()
        out = blk.forward(x, temb, tags, pos)
        if cuda:
            torch.cuda.synchronize()
        info["forward_s"] = round(time.time() - t1, 2)
        nonfinite = int((~torch.isfinite(out.float())).sum())
        info["nonfinite"] = nonfinite
        if args.output:
            from safetensors.torch import save_file
            save_file({"out": out.cpu().contiguous()}, args.output,
                      metadata={"producer": f"torch_block.py eager {args.dtype}", "profile": profile})
            info["output"] = args.output
        if no_time:
            print(f"one forward pass {info['forward_s']} s (not timed: "
                  f"{'--dtype fp32' if fp32 else '--no-time'}); non-finite outputs: {nonfinite}", flush=True)
            save()
            return 0 if nonfinite == 0 else 1
        med, mn = timed(torch, lambda: blk.forward(x, temb, tags, pos), args.warmup, args.reps, cuda)
        info["eager_ms"], info["eager_min_ms"] = med, mn
        print(f"eager block: {med:.3f} ms (min {mn:.3f})", flush=True)
        save()

        # Per op, eager: events between consecutive ops, median per op over the reps.
        evs = []
        for _ in range(args.warmup):
            blk.forward(x, temb, tags, pos)
        for _ in range(args.reps):
            blk.forward(x, temb, tags, pos, ev=evs)
        if cuda:
            torch.cuda.synchronize()
        per = [[] for _ in STAGES]
        for marks in evs:
            for i in range(len(STAGES)):
                a, b = marks[i], marks[i + 1]
                per[i].append(a.elapsed_time(b) if cuda else 1e3 * (b - a))
        stages = [{"name": n, "ms": median(p)} for n, p in zip(STAGES, per)]
        info["stages"] = stages
        info["total_ms"] = sum(s["ms"] for s in stages)
        info["note"] = "qk_norm_rope_quant = q/k RMSNorm + RoPE only (no FP8 step in PyTorch)"
        for s in stages:
            print(f"  {s['name']:<20} {s['ms']:9.3f} ms {100 * s['ms'] / info['total_ms']:5.1f}%")
        save()

        if not args.no_compile:
            try:
                fwd = torch.compile(blk.forward)
                tc = time.time()
                outc = fwd(x, temb, tags, pos)
                if cuda:
                    torch.cuda.synchronize()
                info["compile_s"] = round(time.time() - tc, 1)
                info["compiled_vs_eager_rel_rms"] = rel_rms(torch, outc, out)
                med, mn = timed(torch, lambda: fwd(x, temb, tags, pos), args.warmup, args.reps, cuda)
                info["compile_ms"], info["compile_min_ms"] = med, mn
                print(f"compiled block: {med:.3f} ms (min {mn:.3f}); compile {info['compile_s']} s; "
                      f"rel RMS vs eager {info['compiled_vs_eager_rel_rms']:.2e}", flush=True)
            except Exception as e:  # noqa: BLE001 - record and keep the eager numbers
                info["compile_error"] = f"{type(e).__name__}: {e}"[:2000]
                print(f"torch.compile failed: {info['compile_error']}", flush=True)
    save()
    return 0 if nonfinite == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
