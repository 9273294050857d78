#!/usr/bin/env python3
"""peers_attention.py — the attention peers of h3block, timed in one process on one GPU.

    python3 tools/bench/peers_attention.py [--seqs 4096,8192,16384,30272,75600] [--heads 56[,H...]]
        [--reps 10] [--warmup 2] [--impls LIST] [--fa3-path DIR] [--flashinfer-path DIR] [--lead-us N]
        [--json FILE]
    python3 tools/bench/peers_attention.py --qkv q1.safetensors[,q2.safetensors...] [same options]

Inputs: without --qkv, random N(0,1) q/k/v per S and H (profile 'randn'). With --qkv, each file holds
the block's own attention inputs (torch_block.py --dump-qkv writes them, and our kernels read
the same files): tensors q, k, v, BF16, [S][H*128] (q and k already RMS-normed and rotated, v
raw; layout [S][H][128]), metadata 'profile' and 'tokens'; H = columns / 128.
Peers (DESIGN.md §6), non-causal, B = 1, D = 128, q/k/v stored [B][S][H][D] (our
[S][H*128] layout) and viewed [B][H][S][D] where the API wants it:
  cudnn_bf16  torch SDPA with SDPBackend.CUDNN_ATTENTION, BF16
  flash_bf16  torch SDPA with SDPBackend.FLASH_ATTENTION, BF16
  cudnn_fp8   cuDNN's FP8 SDPA through the cudnn frontend Python API (nvidia-cudnn-frontend
              wheel): e4m3 q/k/v with per-tensor scales (amax/448; its API has one scale per
              tensor), descale/scale tensors, amax outputs; O in e4m3 (Hopper's FP8 SDPA
              forward writes FP8 O; a BF16 O is tried first).
  fa3_fp8     FlashAttention-3's FP8 forward (flash_attn_interface.flash_attn_func, built by
              build_fa3.sh): e4m3 q/k/v with one scale per (batch, head) = amax/448 (1 if amax
              is 0), q8 = e4m3_rne(clamp(x/s, +-448)), descales [B][H] FP32; O in BF16.
  fa3_bf16    FlashAttention-3's BF16 forward.
  flashinfer_fp8  FlashInfer's FP8 prefill on its FA3-based Hopper backend
              (flashinfer.prefill.single_prefill_with_kv_cache(..., backend="fa3"), prebuilt by
              build_flashinfer.sh): q/k/v [S][H][D] (NHD), e4m3 with one scale per head =
              amax/448 (1 if amax is 0), quantised as fa3_fp8; scale_q/scale_k/scale_v [H] FP32
              (dequantisation factors); O in BF16 (o_dtype); sm_scale 1/sqrt(128), non-causal.
  flashinfer_bf16  the same call in BF16.
  sdpa_math   torch SDPA math backend in BF16 (not a peer: it materialises S x S, small S
              only; for a logic check with --device cpu).
  h3block     ours through the Python package (h3block.attention, python/): BF16 q/k/v in,
              BF16 O out, its quantisation included (V's mean, e4m3 per (head, 128 tokens))
              and its workspace taken from torch's allocator in the call: what a PyTorch user
              gets. Library: H3BLOCK_LIBRARY or the installed package.
  cudnn_fp8_e2e  cudnn_fp8 timed from BF16 q/k/v: its per-tensor quantisation (torch ops, as
              cudnn_fp8 below) and, for an e4m3 O, the conversion back to BF16, included.
The FP8 quantisation is not timed for cudnn_fp8, fa3_fp8 and flashinfer_fp8 (the kernel alone;
FlashInfer's call takes its O and a 32 MiB workspace from torch's allocator, as FA3 its O); it is for
h3block and cudnn_fp8_e2e. FA3 is
imported from --fa3-path DIR (put first on sys.path) or from the environment; FlashInfer from
--flashinfer-path DIR (build_flashinfer.sh's OUT_DIR: flashinfer/ with its prebuilt sm_90a modules
in flashinfer/data/aot/, and tvm_ffi/; put first on sys.path) or from the environment, with
FLASHINFER_DISABLE_JIT=1 (a module not prebuilt is an error, never an nvcc run; set it empty to
allow JIT) and FLASHINFER_WORKSPACE_BASE=<temp folder>/flashinfer_ws unless the environment sets
them; when one of these, or the cudnn frontend, cannot be imported, its rows say 'unavailable:
<reason>'.
Timing: several copies of the input set rotated so L2 holds no copy (>= 2, more while the set
is < 3x L2), CUDA events around each call, warm-up, median of --reps (>= 10). TFLOPS =
4 S^2 D H / t. --lead-us N queues each timed call behind a read of 3x the L2 and an N µs spin,
for calls of a few µs (shorter than their host-side work, their sets inside the L2).
Accuracy: every impl against EXACT attention, FP64 softmax(q k^T / sqrt(128)) v computed from
the same BF16 q, k, v, on R = min(S, 1024) query rows r_j = floor((2j+1) S / (2R)),
j = 0..R-1, all heads (the C side samples the same rows): err_vs_exact = {rel_rms =
||O[rows] - ref|| / ||ref|| over all those rows and heads, max_abs, rmse}, non-finite outputs
counted first (then the figures are null). Per input set the JSON also has the error of exact
attention on FP8-quantised-then-dequantised inputs alone (per head, as fa3_fp8; per tensor,
as cudnn_fp8): the floor an FP8 kernel with that input scaling cannot go under. The relative
RMS against cudnn_bf16's output is kept as a sanity figure. Each impl failing prints its exact
error and the run goes on; the JSON says which failed and why.
Exit: 0 (also when impls failed: see their status), 2 on a bad argument or an unreadable
--qkv file (the other files still run), 77 without a CUDA device (unless --device cpu).
"""
import argparse
import json
import math
import os
import sys
import time
import traceback

from h3cli import Parser

D = 128
EXACT_ROWS = 1024  # R = min(S, EXACT_ROWS): shared with the C side, keep identical
DEFAULT_IMPLS = "cudnn_bf16,flash_bf16,cudnn_fp8,fa3_fp8,fa3_bf16"
KNOWN_IMPLS = ("cudnn_bf16", "flash_bf16", "cudnn_fp8", "cudnn_fp8_e2e", "fa3_fp8", "fa3_bf16", "flashinfer_fp8",
               "flashinfer_bf16", "sdpa_math", "h3block")
E4M3_MAX = 448.0


class Unavailable(Exception):
    """An impl that cannot run here at all (its library is missing): status 'unavailable: ...'."""


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def exact_rows(S):
    """The sampled query rows: R = min(S, 1024), r_j = floor((2j+1) S / (2R)) (integer math)."""
    R = min(S, EXACT_ROWS)
    return [((2 * j + 1) * S) // (2 * R) for j in range(R)]


LEAD = {"cycles": 0, "flush": None}  # --lead-us: torch.cuda._sleep cycles (calibrated in main), 3x L2 of floats


def lead_cycles(torch, us):
    """torch.cuda._sleep's cycle count for a spin of about us µs, from one timed spin."""
    n = 1 << 20
    torch.cuda._sleep(n)  # warm-up
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    torch.cuda._sleep(n)
    b.record()
    torch.cuda.synchronize()
    return max(1, int(us * n / (1e3 * a.elapsed_time(b))))


def time_calls(torch, fn, nsets, warmup, reps, cuda=True):
    """fn(set_index) launches one call. Returns (median ms, min ms). With
    --lead-us each timed call is queued behind a read of 3x the L2 and a spin of
    that length, so that a call of a few µs is timed from a cold L2 and without
    the host's share of it."""
    for w in range(warmup):
        fn(w % nsets)
    if not cuda:
        t = []
        for r in range(reps):
            t0 = time.perf_counter()
            fn((r + warmup) % nsets)
            t.append(1e3 * (time.perf_counter() - t0))
        return median(t), min(t)
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for r in range(reps):
        if LEAD["cycles"]:
            LEAD["flush"].sum()
            torch.cuda._sleep(LEAD["cycles"])
        ev[r][0].record()
        fn((r + warmup) % nsets)
        ev[r][1].record()
    torch.cuda.synchronize()
    t = [a.elapsed_time(b) for a, b in ev]
    return median(t), min(t)


def exact_reference(torch, q, k, v, rows, budget_bytes=2 << 30):
    """FP64 softmax(q k^T / sqrt(D)) v for the given query rows, all heads.
    q, k, v: [1][S][H][D] (any float dtype, upcast exactly). Returns [R][H][D] float64.
    Heads are taken a few at a time so the FP64 scores stay under budget_bytes."""
    S, H = k.shape[1], k.shape[2]
    R = len(rows)
    idx = torch.tensor(rows, device=q.device, dtype=torch.long)
    qr = q[0].index_select(0, idx).double()  # [R][H][D]
    out = torch.empty(R, H, D, dtype=torch.float64, device=q.device)
    per_head = R * S * 8 + 2 * S * D * 8
    hc = max(1, min(H, budget_bytes // per_head))
    scale = 1.0 / math.sqrt(D)
    for h0 in range(0, H, hc):
        h1 = min(H, h0 + hc)
        qq = qr[:, h0:h1].transpose(0, 1)  # [h][R][D]
        kk = k[0, :, h0:h1].double().transpose(0, 1)  # [h][S][D]
        vv = v[0, :, h0:h1].double().transpose(0, 1)
        s = torch.matmul(qq, kk.transpose(1, 2)).mul_(scale)  # [h][R][S]
        s.sub_(s.amax(-1, keepdim=True)).exp_()  # max subtracted: exp <= 1, the sum >= 1
        o = torch.matmul(s, vv).div_(s.sum(-1, keepdim=True))
        out[:, h0:h1] = o.transpose(0, 1)
        del s, kk, vv, o
    return out


def error_vs(torch, o, rows, ref):
    """o: [1][S][H][D] (any dtype/strides); ref [R][H][D] float64. Non-finite counted first."""
    idx = torch.tensor(rows, device=o.device, dtype=torch.long)
    a = o[0].index_select(0, idx).double()
    bad = int((~torch.isfinite(a)).sum())
    bad_ref = int((~torch.isfinite(ref)).sum())  # non-finite inputs: no reference to judge against
    res = {"rows": len(rows), "heads": int(ref.shape[1]), "nonfinite": bad, "rel_rms": None, "max_abs": None,
           "rmse": None}
    if bad_ref:
        res["ref_nonfinite"] = bad_ref
    if bad == 0 and bad_ref == 0:
        d = a - ref
        res["rel_rms"] = float(torch.linalg.vector_norm(d) / torch.linalg.vector_norm(ref).clamp(min=1e-300))
        res["max_abs"] = float(d.abs().max())
        res["rmse"] = float(torch.sqrt((d * d).mean()))
    return res


def quantise_per_head(torch, x):
    """x [B][S][H][D] -> (e4m3 [B][S][H][D], descale [B][H] FP32): one scale per (batch, head),
    s = amax/448 (1 if amax is 0), x8 = e4m3_rne(clamp(x/s, +-448)) (torch's cast rounds to
    nearest even; the clamp keeps it off e4m3's NaN)."""
    amax = x.abs().amax(dim=(1, 3)).float()  # [B][H]
    s = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    x8 = (x.float() / s[:, None, :, None]).clamp_(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return x8, s.contiguous()


def quantise_per_tensor(torch, x):
    """x -> (e4m3, descale scalar tensor): one scale for the whole tensor, as cudnn_fp8."""
    amax = x.abs().amax().float()
    s = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    return (x.float() / s).clamp_(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), s


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
            x8, s = quantise_per_tensor(torch, x)
            out.append(x8)
            scal.append(float(s))
        # P in [0, 1]: scale_s = 256 puts it in e4m3's fine range (values below 2^-9 / 256 flush);
        # O is a convex combination of V rows, so |O| <= amax_v: scale_o = 448 / amax_v cannot overflow.
        scale_s = 256.0
        scale_o = 1.0 if not self.o_fp8 else float(E4M3_MAX / (v.abs().amax().float().clamp(min=1e-12)))
        vals = [scal[0], scal[1], scal[2], 1.0 / scale_s, scale_s, scale_o]
        dev = q.device
        scalars = [torch.full((1, 1, 1, 1), x, device=dev, dtype=torch.float32) for x in vals]
        return out[0], out[1], out[2], scalars

    def quantise_device(self, q, k, v):
        """quantise() with every scale kept on the device (no host synchronisation): the form
        a pipeline would use, for cudnn_fp8_e2e's timing. Same values as quantise()."""
        torch = self.torch
        out, scal = [], []
        for x in (q, k, v):
            x8, s = quantise_per_tensor(torch, x)
            out.append(x8)
            scal.append(s.reshape(1, 1, 1, 1))
        dev = q.device
        if not hasattr(self, "_const"):
            self._const = [torch.full((1, 1, 1, 1), x, device=dev, dtype=torch.float32) for x in (1.0 / 256, 256.0)]
        scale_o = (E4M3_MAX / v.abs().amax().float().clamp(min=1e-12)).reshape(1, 1, 1, 1) if self.o_fp8 else \
            torch.ones((1, 1, 1, 1), device=dev, dtype=torch.float32)
        return out[0], out[1], out[2], [*scal, *self._const, scale_o]

    def run(self, q8, k8, v8, scalars):
        tq, tk, tv, d_q, d_k, d_v, d_s, s_s, s_o, o, amax_s, amax_o = self.t
        pack = {tq: q8, tk: k8, tv: v8, d_q: scalars[0], d_k: scalars[1], d_v: scalars[2], d_s: scalars[3],
                s_s: scalars[4], s_o: scalars[5], o: self.out, amax_s: self.amax[0], amax_o: self.amax[1]}
        self.graph.execute(pack, self.ws, handle=self.handle)

    def output_bf16(self, scalars):
        if self.o_fp8:
            return (self.out.float() / scalars[5]).to(self.torch.bfloat16)
        return self.out


def share(v):
    """A share as the table prints it; '-' where it was not measured (vsCudnn
    before cudnn_bf16 has run, in --impls order)."""
    return f"{100 * v:>8.3f}%" if v is not None else f"{'-':>9}"


def import_fa3(path):
    """Returns (flash_attn_interface module or None, reason or None, info dict)."""
    info = {}
    if path:
        if not os.path.isdir(path):
            return None, f"--fa3-path {path}: no such directory", info
        sys.path.insert(0, os.path.abspath(path))
    errs = []
    for name in ("flash_attn_interface", "flash_attn_3.flash_attn_interface"):
        try:
            import importlib
            mod = importlib.import_module(name)
            if not hasattr(mod, "flash_attn_func"):
                raise ImportError(f"{name} has no flash_attn_func")
            info["fa3_module"] = getattr(mod, "__file__", name)
            build = os.path.join(os.path.dirname(info["fa3_module"]), "fa3_build.json")
            if os.path.isfile(build):
                try:
                    with open(build) as f:
                        info["fa3_build"] = json.load(f)
                except Exception as e:  # noqa: BLE001 - an unreadable record is not fatal
                    info["fa3_build"] = f"unreadable: {e}"
            return mod, None, info
        except Exception as e:  # noqa: BLE001 - ImportError, OSError from the .so, ...
            errs.append(f"import {name}: {type(e).__name__}: {e}".splitlines()[0])
    return None, "; ".join(errs)[:600], info


def import_flashinfer(path):
    """Returns (single_prefill_with_kv_cache or None, reason or None, info dict). Sets
    FLASHINFER_DISABLE_JIT=1 and FLASHINFER_WORKSPACE_BASE (where FlashInfer writes the sources it
    renders, never compiled here) unless the environment has them."""
    info = {}
    if path:
        if not os.path.isdir(path):
            return None, f"--flashinfer-path {path}: no such directory", info
        sys.path.insert(0, os.path.abspath(path))
    os.environ.setdefault("FLASHINFER_DISABLE_JIT", "1")
    import tempfile
    os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", os.path.join(tempfile.gettempdir(), "flashinfer_ws"))
    try:
        import flashinfer
        from flashinfer.prefill import single_prefill_with_kv_cache
    except Exception as e:  # noqa: BLE001 - ImportError, OSError from tvm_ffi's library, ...
        return None, f"import flashinfer: {type(e).__name__}: {e}".splitlines()[0][:600], info
    info["flashinfer_module"] = getattr(flashinfer, "__file__", "flashinfer")
    info["flashinfer_version"] = getattr(flashinfer, "__version__", "?")
    build = os.path.join(os.path.dirname(os.path.dirname(info["flashinfer_module"])), "flashinfer_build.json")
    if os.path.isfile(build):
        try:
            with open(build) as f:
                rec = json.load(f)
            info["flashinfer_build"] = {k: rec.get(k) for k in ("flashinfer_python", "flashinfer_commit",
                                                                "apache_tvm_ffi", "arch", "nvcc", "torch")}
            info["flashinfer_build"]["modules"] = [m.get("name") for m in rec.get("modules", [])]
        except Exception as e:  # noqa: BLE001 - an unreadable record is not fatal
            info["flashinfer_build"] = f"unreadable: {e}"
    return single_prefill_with_kv_cache, None, info


def first_line(e):
    msg = f"{type(e).__name__}: {e}".strip().splitlines()
    return (msg[0] if msg else "?")[:400], "\n".join(msg)[:4000]


def read_qkv(torch, path):
    """q, k, v [S][H*128] BF16 and the metadata of one --qkv file (plain safetensors parsing, no
    dependency). Raises ValueError with the file's and tensor's name on any defect."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise ValueError("shorter than a safetensors header")
            n = int.from_bytes(head, "little")
            if n <= 0 or n > min(size - 8, 100 << 20):
                raise ValueError(f"header length {n} does not fit the file ({size} bytes)")
            hdr = json.loads(f.read(n))
            base = 8 + n
            meta = hdr.get("__metadata__") or {}
            out = {}
            for name in ("q", "k", "v"):
                t = hdr.get(name)
                if t is None:
                    raise ValueError(f"no tensor '{name}' (has {sorted(k for k in hdr if k != '__metadata__')})")
                if t.get("dtype") != "BF16":
                    raise ValueError(f"tensor '{name}' is {t.get('dtype')}, want BF16")
                shape = t.get("shape")
                if not (isinstance(shape, list) and len(shape) == 2 and shape[0] >= 1 and shape[1] >= D
                        and shape[1] % D == 0):
                    raise ValueError(f"tensor '{name}' has shape {shape}, want [S, H*{D}]")
                b0, b1 = t["data_offsets"]
                if b1 - b0 != shape[0] * shape[1] * 2 or base + b1 > size:
                    raise ValueError(f"tensor '{name}': data_offsets [{b0}, {b1}) do not hold {shape} BF16 "
                                     f"within the file ({size} bytes)")
                f.seek(base + b0)
                buf = bytearray(f.read(b1 - b0))
                out[name] = torch.frombuffer(buf, dtype=torch.bfloat16).reshape(shape)
    except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: {e}") from None
    if not (out["q"].shape == out["k"].shape == out["v"].shape):
        raise ValueError(f"{path}: q {list(out['q'].shape)}, k {list(out['k'].shape)}, v {list(out['v'].shape)} "
                         "differ")
    return out["q"], out["k"], out["v"], meta


def main():
    ap = Parser(description=__doc__.split("\n")[0],
                                 epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqs", default="4096,8192,16384,30272,75600", help="S list of the N(0,1) mode")
    ap.add_argument("--heads", default="56", help="H list of the N(0,1) mode, every S at every H "
                    "(--qkv files give their own)")
    ap.add_argument("--qkv", help="comma-separated q/k/v safetensors files (torch_block.py --dump-qkv)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--impls", default=DEFAULT_IMPLS, help=f"comma list of {', '.join(KNOWN_IMPLS)}")
    ap.add_argument("--fa3-path", help="folder with FA3's flash_attn_interface (build_fa3.sh's BUILD_DIR)")
    ap.add_argument("--flashinfer-path", help="folder with a prebuilt FlashInfer (build_flashinfer.sh's OUT_DIR, "
                    "e.g. .peers/flashinfer_min)")
    ap.add_argument("--no-exact", action="store_true", help="skip the FP64 exact reference (no err_vs_exact)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--lead-us", type=int, default=0, help="queue each timed call behind an L2 flush and a spin of "
                    "this many µs (short calls: cold L2, no host time in the figure)")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for a logic check at tiny sizes "
                    "(host timings; the GPU-only impls fail)")
    ap.add_argument("--json")
    ap.add_argument("--merge-into", help="append this run's rows to an existing JSON of this tool (its 'results')")
    ap.add_argument("--tag", default="", help="suffix for impl names in the JSON, e.g. '@fe1.16' for a 2nd frontend")
    args = ap.parse_args()
    if args.merge_into and not args.tag:
        ap.error("--merge-into needs --tag (the merged rows are told apart by it)")
    impls = [s for s in args.impls.split(",") if s]
    bad = [s for s in impls if s not in KNOWN_IMPLS]
    if bad:
        ap.error(f"unknown impl(s) {bad}; known: {', '.join(KNOWN_IMPLS)}")
    if args.reps < 1 or args.warmup < 0:
        ap.error("--reps must be >= 1 and --warmup >= 0")
    files = [s for s in (args.qkv or "").split(",") if s]
    if args.qkv is not None and not files:
        ap.error("--qkv needs at least one file")
    try:
        seqs = [int(s) for s in args.seqs.split(",") if s]
    except ValueError:
        ap.error(f"--seqs {args.seqs!r}: want comma-separated integers")
    try:
        heads = [int(s) for s in args.heads.split(",") if s]
    except ValueError:
        ap.error(f"--heads {args.heads!r}: want comma-separated integers")
    if not files and (not seqs or min(seqs) < 1 or not heads or min(heads) < 1):
        ap.error("--seqs and --heads must be positive")
    if args.lead_us < 0:
        ap.error("--lead-us must be >= 0")

    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001
        print(f"peers_attention: import torch failed: {first_line(e)[0]}", file=sys.stderr)
        return 2

    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("peers_attention: no CUDA device", file=sys.stderr)
        return 77
    dev = torch.device(args.device)
    if cuda:
        prop = torch.cuda.get_device_properties(dev)
        l2 = getattr(prop, "L2_cache_size", 60 << 20)
        dev_name = prop.name
    else:
        l2, dev_name = 60 << 20, "cpu"
    if cuda and args.lead_us:
        LEAD["cycles"] = lead_cycles(torch, args.lead_us)
        LEAD["flush"] = torch.ones(3 * l2 // 4, device=dev)
    info = {"tool": "peers_attention", "device": dev_name, "torch": torch.__version__,
            "cudnn_backend": torch.backends.cudnn.version() if cuda else None,
            "heads": (heads[0] if len(heads) == 1 else heads) if not files else None,
            "mode": "qkv" if files else "randn", "lead_us": args.lead_us,
            "exact_ref": None if args.no_exact else
            f"FP64 softmax(q k^T / sqrt({D})) v on R = min(S, {EXACT_ROWS}) rows floor((2j+1) S / (2R)), all heads",
            "cases": [], "results": []}
    cudnn = None
    if "cudnn_fp8" in impls or "cudnn_fp8_e2e" in impls:
        try:
            import cudnn as _cudnn
            cudnn = _cudnn
            info["cudnn_frontend"] = getattr(cudnn, "__version__", "?")
            info["cudnn_frontend_backend"] = cudnn.backend_version()
        except Exception as e:  # noqa: BLE001
            info["cudnn_frontend_error"] = first_line(e)[0]
            print(f"peers_attention: import cudnn failed: {info['cudnn_frontend_error']}", flush=True)
    def load_peer(prefix, label, importer, path, key):
        """An optional peer (FA3, FlashInfer): (module or call, error), its facts into info."""
        if not any(s.startswith(prefix) for s in impls):
            return None, None
        mod, err, peer_info = importer(path)
        info.update(peer_info)
        if err:
            info[f"{key}_error"] = err
            print(f"peers_attention: {label} unavailable: {err}", flush=True)
        else:
            version = info.get(f"{key}_version")
            print(f"peers_attention: {label}{' ' + version if version else ''} from {info.get(key + '_module')}",
                  flush=True)
        return mod, err

    fa3, fa3_err = load_peer("fa3_", "FA3", import_fa3, args.fa3_path, "fa3")
    fi_call, fi_err = load_peer("flashinfer_", "FlashInfer", import_flashinfer, args.flashinfer_path, "flashinfer")
    print(f"peers_attention on {dev_name}: torch {torch.__version__}, cuDNN {info['cudnn_backend']}, "
          f"frontend {info.get('cudnn_frontend', 'n/a')}, {args.warmup} warm-up + {args.reps} timed, median; "
          f"inputs: {'files ' + ','.join(files) if files else 'N(0,1)'}", flush=True)

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
            doc.setdefault("cases", [])
            doc["cases"] = [c for c in doc["cases"] if c.get("tag") != args.tag] + \
                [dict(c, tag=args.tag) for c in info["cases"]]
            for key in ("cudnn_frontend", "fa3_module", "fa3_build", "flashinfer_module", "flashinfer_build"):
                if key in info:
                    doc[key + args.tag] = info[key]
            with open(args.merge_into, "w") as f:
                json.dump(doc, f, indent=1)

    # The input cases: (label, S, H, profile, tokens, file, loader) with loader() -> [q, k, v] [1][S][H][D].
    cases = []
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    if files:
        for path in files:
            cases.append({"file": path})
    else:
        for H in heads:
            for S in seqs:
                cases.append({"S": S, "H": H, "profile": "randn", "tokens": S})

    rc = 0
    print(f"{'impl':<12} {'profile':<10} {'S':>7} {'H':>4} {'sets':>4} {'median_ms':>10} {'min_ms':>10} "
          f"{'TFLOPS':>9} {'vsExact':>9} {'vsCudnn':>9}  status", flush=True)
    for case in cases:
        t0 = time.time()
        try:
            if "file" in case:
                q, k, v, meta = read_qkv(torch, case["file"])
                S, H = q.shape[0], q.shape[1] // D
                case.update(S=S, H=H, profile=str(meta.get("profile", "unknown")), metadata=meta)
                try:
                    case["tokens"] = int(meta.get("tokens", S))
                except ValueError:
                    case["tokens"] = meta.get("tokens")
                if case["tokens"] != S:
                    print(f"peers_attention: {case['file']}: metadata tokens {case['tokens']} but S = {S}", flush=True)
                first = [t.to(dev).view(1, S, H, D) for t in (q, k, v)]
                del q, k, v
                for name, t in zip("qkv", first):
                    nf = int((~torch.isfinite(t.float())).sum())
                    if nf:
                        print(f"peers_attention: {case['file']}: {nf} non-finite values in {name}", flush=True)
                        case.setdefault("input_nonfinite", {})[name] = nf
            else:
                S, H = case["S"], case["H"]
                first = None
        except Exception as e:  # noqa: BLE001 - a bad file: one line, its rows say why, the next file runs
            msg = str(e) if isinstance(e, ValueError) else f"{case['file']}: {first_line(e)[0]}"
            print(f"peers_attention: {msg}", file=sys.stderr, flush=True)
            case["status"] = f"error: {msg}"
            first = None
            info["cases"].append(case)
            for name in impls:
                info["results"].append({"impl": name + args.tag, "file": case["file"],
                                        "status": f"error: input: {msg}"})
            rc = 2
            save()
            continue
        flops = 4.0 * S * S * D * H
        setb = 3 * S * H * D * 2
        nsets = max(2, min(4, -(-3 * l2 // setb)))
        sets, base, ref = [], None, None
        try:
            if first is not None:
                sets.append(first)
                for _ in range(nsets - 1):
                    sets.append([t.clone() for t in first])
            else:
                for _ in range(nsets):
                    sets.append([torch.randn(1, S, H, D, device=dev, dtype=torch.bfloat16, generator=gen)
                                 for _ in range(3)])
            first = None
            if cuda:
                torch.cuda.synchronize()
        except torch.cuda.OutOfMemoryError as e:
            case["status"] = f"oom: {e}".splitlines()[0]
            info["cases"].append(case)
            for name in impls:
                info["results"].append({"impl": name + args.tag, "S": S, "H": H, "profile": case["profile"],
                                        "status": case["status"]})
            sets = first = None
            torch.cuda.empty_cache()
            save()
            continue
        rows = exact_rows(S)
        with torch.no_grad():
            if not args.no_exact:
                try:
                    te = time.time()
                    ref = exact_reference(torch, *sets[0], rows)
                    case["exact_ref_s"] = round(time.time() - te, 2)
                    # The floor of FP8 inputs alone: exact attention on quantised-then-dequantised q, k, v.
                    if any(s in impls for s in ("fa3_fp8", "cudnn_fp8", "flashinfer_fp8")):
                        floors = {}
                        for scheme, qf in (("per_head", quantise_per_head), ("per_tensor", quantise_per_tensor)):
                            dq = []
                            for x in sets[0]:
                                x8, s = qf(torch, x)
                                dq.append(x8.float() * (s[:, None, :, None] if s.dim() == 2 else s))
                                del x8
                            r2 = exact_reference(torch, *dq, rows)
                            floors[scheme] = error_vs(torch, r2.unsqueeze(0), list(range(len(rows))), ref)["rel_rms"]
                            del dq, r2
                        case["fp8_input_floor_rel_rms"] = floors
                except Exception as e:  # noqa: BLE001 - no reference: the rows still get their timings
                    case["exact_error"] = first_line(e)[0]
                    print(f"peers_attention: exact reference at S = {S} failed: {case['exact_error']}", flush=True)
                    traceback.print_exc()
                    ref = None
                    if cuda:
                        torch.cuda.empty_cache()
            case["status"] = "ok"
            case["sets"] = nsets
            case["load_s"] = round(time.time() - t0, 2)
            info["cases"].append(case)
            views = [[x.transpose(1, 2) for x in st] for st in sets]  # [1][H][S][D], strided
            for name in impls:
                row = {"impl": name + args.tag, "S": S, "H": H, "sets": nsets, "profile": case["profile"],
                       "tokens": case["tokens"]}
                if "file" in case:
                    row["file"] = case["file"]
                t1 = time.time()
                o = None
                try:
                    if name in ("cudnn_bf16", "flash_bf16", "sdpa_math"):
                        backend = {"cudnn_bf16": SDPBackend.CUDNN_ATTENTION, "flash_bf16": SDPBackend.FLASH_ATTENTION,
                                   "sdpa_math": SDPBackend.MATH}[name]
                        out = [None]

                        def call(i, backend=backend, out=out):
                            with sdpa_kernel(backend):
                                out[0] = F.scaled_dot_product_attention(*views[i], is_causal=False)
                        med, mn = time_calls(torch, call, nsets, args.warmup, args.reps, cuda)
                        call(0)
                        o = out[0].transpose(1, 2)
                    elif name == "h3block":
                        try:
                            import h3block
                            row["kernel"] = h3block.attention_kernel(dev.index or 0)
                            row["library"] = h3block.library_version()
                        except Exception as e:  # noqa: BLE001
                            raise Unavailable(f"h3block: {first_line(e)[0]}") from None
                        out = [None]

                        def call(i, out=out):
                            out[0] = h3block.attention(*sets[i])
                        med, mn = time_calls(torch, call, nsets, args.warmup, args.reps, cuda)
                        call(0)
                        o = out[0]
                    elif name == "cudnn_fp8_e2e":
                        if cudnn is None:
                            raise Unavailable("import cudnn failed: " + info.get("cudnn_frontend_error", "?"))
                        g = CudnnFp8(torch, cudnn, S, H)
                        out = [None]

                        def call(i, out=out):
                            qs = g.quantise_device(*sets[i])
                            g.run(*qs)
                            out[0] = g.output_bf16(qs[3])
                        med, mn = time_calls(torch, call, nsets, args.warmup, args.reps, cuda)
                        call(0)
                        o = out[0]
                        row["o_dtype"] = "e4m3" if g.o_fp8 else "bf16"
                        row["scales"] = "per tensor, amax/448, quantisation timed"
                    elif name == "cudnn_fp8":
                        if cudnn is None:
                            raise Unavailable("import cudnn failed: " + info.get("cudnn_frontend_error", "?"))
                        if not cuda:
                            raise Unavailable("cuDNN FP8 SDPA needs a CUDA device")
                        g = CudnnFp8(torch, cudnn, S, H)
                        qsets = [g.quantise(*st) for st in sets]
                        med, mn = time_calls(torch, lambda i: g.run(*qsets[i]), nsets, args.warmup, args.reps)
                        g.run(*qsets[0])
                        torch.cuda.synchronize()
                        o = g.output_bf16(qsets[0][3])
                        row["o_dtype"] = "e4m3" if g.o_fp8 else "bf16"
                        row["amax_s"], row["amax_o"] = [float(x) for x in g.amax.flatten()]
                        row["scales"] = "per tensor, amax/448"
                        del qsets
                    elif name in ("fa3_fp8", "fa3_bf16"):
                        if fa3 is None:
                            raise Unavailable(fa3_err)
                        fn, sm = fa3.flash_attn_func, 1.0 / math.sqrt(D)
                        if name == "fa3_fp8":
                            qsets = []
                            for st in sets:
                                (q8, dq), (k8, dk), (v8, dv) = [quantise_per_head(torch, x) for x in st]
                                qsets.append((q8, k8, v8, dq, dk, dv))

                            def call(i):
                                q8, k8, v8, dq, dk, dv = qsets[i]
                                return fn(q8, k8, v8, softmax_scale=sm, causal=False, q_descale=dq, k_descale=dk,
                                          v_descale=dv)
                            row["scales"] = "per (batch, head), amax/448"
                        else:
                            def call(i):
                                return fn(*sets[i], softmax_scale=sm, causal=False)
                        med, mn = time_calls(torch, call, nsets, args.warmup, args.reps, cuda)
                        o = call(0)
                        if isinstance(o, (tuple, list)):  # some FA3 versions return (out, lse)
                            o = o[0]
                        if cuda:
                            torch.cuda.synchronize()
                        if tuple(o.shape) != (1, S, H, D):
                            raise RuntimeError(f"FA3 returned O of shape {tuple(o.shape)}, want {(1, S, H, D)}")
                        row["o_dtype"] = str(o.dtype).replace("torch.", "")
                        if name == "fa3_fp8":
                            del qsets
                    elif name in ("flashinfer_fp8", "flashinfer_bf16"):
                        if fi_call is None:
                            raise Unavailable(fi_err)
                        if not cuda:
                            raise Unavailable("FlashInfer's fa3 backend needs a CUDA device")
                        sm = 1.0 / math.sqrt(D)
                        if name == "flashinfer_fp8":
                            qsets = []
                            for st in sets:  # [1][S][H][D] -> [S][H][D] (NHD), scales [1][H] -> [H]
                                (q8, dq), (k8, dk), (v8, dv) = [quantise_per_head(torch, x) for x in st]
                                qsets.append((q8[0], k8[0], v8[0], dq[0], dk[0], dv[0]))

                            def call(i):
                                q8, k8, v8, dq, dk, dv = qsets[i]
                                return fi_call(q8, k8, v8, scale_q=dq, scale_k=dk, scale_v=dv, o_dtype=torch.bfloat16,
                                               causal=False, sm_scale=sm, backend="fa3")
                            row["scales"] = "per head, amax/448"
                        else:
                            def call(i):
                                return fi_call(*[x[0] for x in sets[i]], causal=False, sm_scale=sm, backend="fa3")
                        try:
                            call(0)  # the module's load: a missing prebuilt module fails here, untimed
                        except Exception as e:  # noqa: BLE001
                            if type(e).__name__ == "MissingJITCacheError":
                                raise Unavailable(f"no prebuilt module for this call ({first_line(e)[0][:200]}); "
                                                  "build_flashinfer.sh makes it") from None
                            raise
                        med, mn = time_calls(torch, call, nsets, args.warmup, args.reps, cuda)
                        o = call(0)
                        torch.cuda.synchronize()
                        if tuple(o.shape) != (S, H, D):
                            raise RuntimeError(f"FlashInfer returned O of shape {tuple(o.shape)}, want {(S, H, D)}")
                        o = o.unsqueeze(0)
                        row["o_dtype"] = str(o.dtype).replace("torch.", "")
                        if name == "flashinfer_fp8":
                            del qsets
                    else:
                        raise ValueError(f"unknown impl {name}")
                    if cuda:
                        torch.cuda.synchronize()
                    nonfinite = int((~torch.isfinite(o.float())).sum())
                    if name == "cudnn_bf16":
                        base = o.clone()
                    row.update(median_ms=med, min_ms=mn, tflops=flops / (med * 1e-3) / 1e12, nonfinite=nonfinite)
                    if base is not None:
                        row["rel_rms_vs_cudnn_bf16"] = float(torch.linalg.vector_norm(o.float() - base.float()) /
                                                             torch.linalg.vector_norm(base.float()).clamp(min=1e-30))
                    if ref is not None:
                        row["err_vs_exact"] = error_vs(torch, o, rows, ref)
                    row["status"] = "ok" if nonfinite == 0 else "non-finite output"
                except Unavailable as e:
                    row["status"] = f"unavailable: {e}"[:400]
                except Exception as e:  # noqa: BLE001 - keep going, record the exact error
                    row["status"], row["error_full"] = first_line(e)
                    row["status"] = "error: " + row["status"]
                    traceback.print_exc()
                    if cuda:
                        torch.cuda.synchronize()
                        torch.cuda.empty_cache()
                del o
                row["wall_s"] = round(time.time() - t1, 2)
                info["results"].append(row)
                rr = row.get("rel_rms_vs_cudnn_bf16")
                ex = (row.get("err_vs_exact") or {}).get("rel_rms")
                print(f"{name + args.tag:<12} {case['profile'][:10]:<10} {S:>7} {H:>4} {nsets:>4} "
                      f"{row.get('median_ms', float('nan')):>10.3f} {row.get('min_ms', float('nan')):>10.3f} "
                      f"{row.get('tflops', float('nan')):>9.1f} {share(ex)} {share(rr)}  {row['status']}", flush=True)
                save()
        fl = case.get("fp8_input_floor_rel_rms")
        if fl:
            pct = {k: "n/a" if x is None else f"{100 * x:.3f}%" for k, x in fl.items()}
            print(f"  {case['profile']} S = {S}: exact attention on FP8-rounded inputs alone: "
                  f"per head {pct['per_head']}, per tensor {pct['per_tensor']} (rel RMS)", flush=True)
        sets = views = base = ref = None  # free the inputs before the next case
        if cuda:
            torch.cuda.empty_cache()
    save()
    return rc


if __name__ == "__main__":
    sys.exit(main())
