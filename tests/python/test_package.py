#!/usr/bin/env python3
"""The Python package on a machine without a GPU: `pip install ./python`
into this Python's environment (the test venv) from the checkout, then every
argument check of h3block.attention, h3block.Block and the diffusers
processor, on CPU and meta tensors (the checks come before any device work,
so each bad argument raises here exactly as on a GPU machine).

The package is built with -C cmake.define.H3_WITH_CUDA=OFF: a library that
says "built without CUDA", the same on every machine and quick to build (the
GPU build is the device's: tests/python/test_gpu_package.py).

Run alone: .venv/bin/python tests/python/test_package.py SRC_DIR WORK_DIR GEN_WEIGHTS
Exit 0 pass, 1 fail, 77 skip (torch or diffusers not importable)."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import FAILS, check  # noqa: E402
import checks  # noqa: E402


def expect_raises(exc, text, fn, *a, **kw):
    try:
        fn(*a, **kw)
    except exc as e:
        return check(text in str(e), f"{text!r} in the {exc.__name__}: {e}")
    except Exception as e:  # noqa: BLE001
        return check(False, f"{text!r}: raised {type(e).__name__} {e}, want {exc.__name__}")
    return check(False, f"{text!r}: nothing raised, want {exc.__name__}")


def run_checks(src, work, gen_weights):
    import numpy as np
    import torch

    import h3block
    checks.show_ok = True
    check(os.path.dirname(h3block.__file__) != os.path.join(src, "python", "src", "h3block"),
          f"h3block imported from the installed package ({h3block.__file__})")
    version = open(os.path.join(src, "VERSION")).read().strip()
    check(h3block.__version__ == version, f"h3block.__version__ {h3block.__version__} == VERSION {version}")
    lv = h3block.library_version()
    check(lv.startswith(version + " ") and "without CUDA" in lv, f"library_version() '{lv}'")

    z = lambda *s, dt=torch.bfloat16: torch.zeros(*s, dtype=dt)  # noqa: E731
    q = z(2, 300, 4, 128)
    A = h3block.attention
    expect_raises(TypeError, "q must be a torch.Tensor, not numpy.ndarray", A, np.zeros((2, 300, 4, 128)), q, q)
    expect_raises(TypeError, "k has dtype torch.float16", A, q, z(2, 300, 4, 128, dt=torch.float16), q)
    expect_raises(TypeError, "v has dtype torch.float32", A, q, q, z(2, 300, 4, 128, dt=torch.float32))
    expect_raises(ValueError, "q has shape (300, 512); expected [B, S, H, 128] or [S, H, 128]", A, z(300, 512), q, q)
    expect_raises(ValueError, "q has shape (1, 2, 300, 4, 128)", A, z(1, 2, 300, 4, 128), q, q)
    expect_raises(ValueError, "k has head dim 64; the kernels take 128", A, q, z(2, 300, 4, 64), q)
    expect_raises(ValueError, "q has last stride 2", A, z(2, 300, 4, 256)[..., ::2], q, q)
    expect_raises(ValueError, "v has strides (156000, 520, 130, 1)", A, q, q, z(2, 300, 4, 130)[..., :128])
    expect_raises(ValueError, "k has shape (2, 301, 4, 128), q (2, 300, 4, 128)", A, q, z(2, 301, 4, 128), q)
    expect_raises(ValueError, "k has shape (300, 4, 128), q (2, 300, 4, 128)", A, q, z(300, 4, 128), q)
    expect_raises(ValueError, "S = 0, needs at least 1", A, z(2, 0, 4, 128), z(2, 0, 4, 128), z(2, 0, 4, 128))
    expect_raises(ValueError, "H = 0, needs at least 1", A, z(5, 0, 128), z(5, 0, 128), z(5, 0, 128))
    expect_raises(ValueError, "q is a cpu tensor; h3block runs on CUDA tensors", A, q, q, q)
    m = torch.empty(2, 300, 4, 128, dtype=torch.bfloat16, device="meta")
    expect_raises(ValueError, "q is a meta tensor", A, m, m, m)
    g = z(2, 300, 4, 128).requires_grad_()
    expect_raises(RuntimeError, "k requires grad; h3block has no backward", A, q, g, q)
    with torch.no_grad():
        expect_raises(ValueError, "q is a cpu tensor", A, q, g, q)  # no grad: the device check decides
    # views of a fused QKV tensor pass the layout checks (then stop at the device)
    qkv = z(2, 300, 3, 4, 128)
    expect_raises(ValueError, "q is a cpu tensor", A, qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2])
    expect_raises(ValueError, "q is a cpu tensor", A, z(300, 4, 128), z(300, 4, 128), z(300, 4, 128))

    B = h3block.Block.from_safetensors
    expect_raises(TypeError, "path must be a str or os.PathLike, not int", B, 3)
    expect_raises(ValueError, "gemm='int8'; 'bf16' or 'fp8'", B, "x.safetensors", gemm="int8")
    expect_raises(ValueError, "block=-2", B, "x.safetensors", block=-2, device=0)
    expect_raises(ValueError, "device='cuda'; a CUDA device index", B, "x.safetensors", device="cuda")
    missing = os.path.join(work, "no_such_block.safetensors")
    expect_raises(OSError, missing, B, missing, device=0)
    tiny = os.path.join(work, "tiny.safetensors")
    if os.path.exists(tiny):
        os.remove(tiny)  # gen_weights never overwrites
    subprocess.run([gen_weights, "--config", "tiny", "--out", tiny], check=True, capture_output=True)
    expect_raises(RuntimeError, "built without CUDA", B, tiny, device=0)
    expect_raises(RuntimeError, "built without CUDA", h3block.attention_kernel, 0)
    # a Block's call checks its tensors before the library: a handle-less stand-in for a created
    # block (hidden 256, temb 64 on cuda:0: the tiny config) reaches none of it
    blk = object.__new__(h3block.Block)
    blk._h, blk.device_index, blk.hidden, blk.temb_dim = 1, 0, 256, 64
    S = 16
    x, temb = z(S, 256), z(64, dt=torch.float32)
    tags, pos = z(S, dt=torch.int32), z(S, 3, dt=torch.float32)
    expect_raises(ValueError, "x must be a [S, 256] tensor", blk, z(S, 256, 1), temb, tags, pos)
    expect_raises(TypeError, "x has dtype torch.float32", blk, z(S, 256, dt=torch.float32), temb, tags, pos)
    expect_raises(ValueError, "x has shape (16, 255)", blk, z(S, 255), temb, tags, pos)
    expect_raises(TypeError, "temb has dtype torch.bfloat16", blk, x, z(64), tags, pos)
    expect_raises(ValueError, "temb has shape (1, 64)", blk, x, z(1, 64, dt=torch.float32), tags, pos)
    expect_raises(TypeError, "tags has dtype torch.int64", blk, x, temb, z(S, dt=torch.int64), pos)
    expect_raises(ValueError, "positions has shape (16, 2)", blk, x, temb, tags, z(S, 2, dt=torch.float32))
    expect_raises(ValueError, "positions is not contiguous", blk, x, temb, tags, z(3, S, dt=torch.float32).T)
    expect_raises(ValueError, "x is on cpu; the block is on cuda:0", blk, x, temb, tags, pos)
    expect_raises(TypeError, "temb must be a torch.Tensor", blk, x, [0.0] * 64, tags, pos)
    blk._h = None
    expect_raises(RuntimeError, "h3block.Block: closed", blk, x, temb, tags, pos)

    # the diffusers processor: wired into diffusers' own block, it reaches h3block.attention
    try:
        from diffusers.models.transformers.transformer_minimax_h3 import MiniMaxH3TransformerBlock
    except ImportError as e:
        print(f"skip: diffusers not importable ({e}); the processor was not checked")
        return
    from h3block.diffusers import H3AttnProcessor
    blk = MiniMaxH3TransformerBlock(hidden_size=256, num_attention_heads=2, attention_head_dim=128, ffn_dim=512,
                                    time_embed_dim=64, norm_eps=1e-5, qk_norm_eps=1e-5).to(torch.bfloat16)
    blk.attn.set_processor(H3AttnProcessor())
    check(isinstance(blk.attn.processor, H3AttnProcessor), "MiniMaxH3Attention.set_processor(H3AttnProcessor())")
    # our file (gen_weights: "blocks.0." names) -> diffusers' block, on the CPU: every tensor placed
    from h3block.diffusers import load_diffusers_block
    from safetensors.torch import load_file
    dblk = load_diffusers_block(tiny, device="cpu")
    ours = load_file(tiny)
    check(torch.equal(dblk.norm1.weight, ours["blocks.0.norm1.weight"]) and
          torch.equal(dblk.ff.net[2].weight, ours["blocks.0.mlp.fc2.weight"]) and
          tuple(dblk.attn.to_q.weight.shape) == (256, 256),
          "load_diffusers_block(gen_weights' tiny file): diffusers' block with our tensors")
    expect_raises(ValueError, "no block 1", load_diffusers_block, tiny, device="cpu", block=1)
    S = 16
    x, temb = torch.randn(1, S, 256, dtype=torch.bfloat16), torch.randn(1, 64)
    cos, sin = torch.ones(S, 96), torch.zeros(S, 96)
    with torch.no_grad():
        expect_raises(ValueError, "q is a cpu tensor", blk, x, temb, torch.zeros(S, dtype=torch.long), (cos, sin))
        expect_raises(ValueError, "attention_mask is not supported", blk.attn, x, (cos, sin), torch.ones(S, S))


def main():
    src, work, gen_weights = (os.path.abspath(a) for a in sys.argv[1:4])
    if len(sys.argv) > 4 and sys.argv[4] == "--checks":
        run_checks(src, work, gen_weights)
        print(f"{len(FAILS)} failed" if FAILS else "ok: every argument check of the package")
        sys.exit(1 if FAILS else 0)
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print(f"skip: torch not importable ({e})")
        sys.exit(77)
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ)
    env.pop("H3BLOCK_LIBRARY", None)
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--force-reinstall",
           "--no-deps", os.path.join(src, "python"), "-C", "cmake.define.H3_WITH_CUDA=OFF",
           "-C", f"build-dir={os.path.join(work, 'pkgbuild')}"]
    print("$ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, env=env)
    if not check(r.returncode == 0, f"pip install ./python exit {r.returncode}"):
        sys.exit(1)
    # the checks in a fresh interpreter, away from the source tree
    r = subprocess.run([sys.executable, os.path.abspath(__file__), src, work, gen_weights, "--checks"], cwd=work,
                       env=env)
    sys.exit(r.returncode)


if __name__ == "__main__":
    main()
