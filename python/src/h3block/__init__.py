"""h3block: FP8 flash attention (head dim 128) and the MiniMax-H3 DiT block
on NVIDIA GPUs, from PyTorch tensors.

    import h3block
    out = h3block.attention(q, k, v)            # BF16 [B, S, H, 128] or [S, H, 128]
    out, lse = h3block.attention(q, k, v, return_lse=True)

    block = h3block.Block.from_safetensors("block0.safetensors", gemm="fp8")
    y = block(x, temb, tags, positions)

Importing h3block imports neither torch nor the library: torch is used only
through the tensors passed in (and to allocate the results), the library is
loaded on first use (h3block._lib). Every argument is checked before any
device work; a bad one raises TypeError or ValueError naming it, an
unsupported GPU RuntimeError. The numerics are the FP8 contract of the
repository's docs/DESIGN.md (per-(head, 128-token) e4m3 scales, V smoothed,
FP32 softmax, scale 1/sqrt(128), no mask).
"""
import ctypes
import sys

from . import _lib

__version__ = "0.1.0"
__all__ = ["attention", "Block", "library_version", "attention_kernel"]

HEAD_DIM = 128


def library_version():
    """libh3block's version and build ("0.1.0 (commit ..., CUDA 13.0, sm_89 sm_90a sm_120)")."""
    return _lib.lib().h3b_version().decode()


def _torch():
    t = sys.modules.get("torch")
    if t is None:
        import torch as t  # only reached with torch tensors in hand: already imported
    return t


def _is_tensor(x):
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "data_ptr") and hasattr(x, "stride")


def _check_qkv(q, k, v):
    """Shapes, dtypes, strides and devices of q, k, v (no device work; works on
    torch.compile's fake tensors too). Returns (B, S, H, batched)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not _is_tensor(t):
            raise TypeError(f"h3block.attention: {name} must be a torch.Tensor, not "
                            f"{type(t).__module__}.{type(t).__qualname__}")
        if str(t.dtype) != "torch.bfloat16":
            raise TypeError(f"h3block.attention: {name} has dtype {t.dtype}; it takes torch.bfloat16")
        if t.dim() not in (3, 4):
            raise ValueError(f"h3block.attention: {name} has shape {tuple(t.shape)}; expected [B, S, H, {HEAD_DIM}] "
                             f"or [S, H, {HEAD_DIM}]")
        if t.shape[-1] != HEAD_DIM:
            raise ValueError(f"h3block.attention: {name} has head dim {t.shape[-1]}; the kernels take {HEAD_DIM}")
        if t.stride(-1) != 1:
            raise ValueError(f"h3block.attention: {name} has last stride {t.stride(-1)}; the head dim must be "
                             "contiguous (stride 1)")
        if any(s % 8 for s in t.stride()[:-1]):
            raise ValueError(f"h3block.attention: {name} has strides {t.stride()}; the kernels load 16 bytes at a "
                             "time and need every stride a multiple of 8 elements (use .contiguous())")
        if t.requires_grad and _torch().is_grad_enabled():
            raise RuntimeError(f"h3block.attention: {name} requires grad; h3block has no backward (call it under "
                               "torch.no_grad() or pass detached tensors)")
    for name, t in (("k", k), ("v", v)):
        if tuple(t.shape) != tuple(q.shape):
            raise ValueError(f"h3block.attention: {name} has shape {tuple(t.shape)}, q {tuple(q.shape)}; "
                             "they must be the same")
    B, S, H = (1, *q.shape[:2]) if q.dim() == 3 else tuple(q.shape[:3])
    for what, n in (("B", B), ("S", S), ("H", H)):
        if n < 1:
            raise ValueError(f"h3block.attention: q has shape {tuple(q.shape)}: {what} = {n}, needs at least 1")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.device.type != "cuda":
            raise ValueError(f"h3block.attention: {name} is a {t.device.type} tensor; h3block runs on CUDA tensors")
        if t.device != q.device:
            raise ValueError(f"h3block.attention: {name} is on {t.device}, q on {q.device}")
    return B, S, H, q.dim() == 4


_attn_handles = {}  # device index -> h3b_attn*


def _attn_handle(device_index):
    h = _attn_handles.get(device_index)
    if h is None:
        L = _lib.lib()
        p = ctypes.c_void_p()
        st = L.h3b_attn_create(ctypes.byref(p), device_index, 0)
        if st != _lib.OK:
            msg = L.h3b_attn_error(p).decode() if p else "out of host memory"
            L.h3b_attn_destroy(p)
            raise _lib.status_error(st if st != _lib.ERR_ARGUMENT else _lib.ERR_UNSUPPORTED, msg)
        h = _attn_handles[device_index] = p
    return h


def attention_kernel(device=0):
    """The kernel h3block.attention runs on CUDA device `device` ("attn_fp8_sm90 (wgmma+TMA), V smoothed")."""
    return _lib.lib().h3b_attn_kernel(_attn_handle(int(device))).decode()


def _desc(t, name):
    if t.data_ptr() % 16:
        raise ValueError(f"h3block.attention: {name}'s data is not 16-byte aligned (a view at an odd offset; "
                         "use .contiguous())")
    st = t.stride()
    if t.dim() == 3:
        return _lib.Tensor(t.data_ptr(), 0, st[0], st[1])
    return _lib.Tensor(t.data_ptr(), st[0], st[1], st[2])


def _attention_impl(q, k, v):
    """The op on real tensors: (out [B, S, H, 128] or [S, H, 128], lse [B, H, S] or [H, S])."""
    torch = _torch()
    B, S, H, batched = _check_qkv(q, k, v)
    dq, dk, dv = _desc(q, "q"), _desc(k, "k"), _desc(v, "v")
    dev = q.device
    L = _lib.lib()
    with torch.cuda.device(dev):
        handle = _attn_handle(dev.index if dev.index is not None else torch.cuda.current_device())
        out = torch.empty(q.shape, dtype=torch.bfloat16, device=dev)
        lse = torch.empty((B, H, S) if batched else (H, S), dtype=torch.float32, device=dev)
        nbytes = L.h3b_attention_workspace_size(S, H)
        ws = torch.empty(nbytes, dtype=torch.uint8, device=dev)  # the caching allocator: stream-ordered reuse
        stream = torch.cuda.current_stream(dev).cuda_stream
        st = L.h3b_attention_ws(handle, B, S, H, dq, dk, dv, out.data_ptr(), lse.data_ptr(), ws.data_ptr(), nbytes,
                                stream)
        if st != _lib.OK:
            raise _lib.status_error(st, L.h3b_attn_error(handle).decode())
    return out, lse


_op = None


def _custom_op():
    """h3block::attention as a torch custom op (once), so that torch.compile
    keeps it in the graph instead of breaking there."""
    global _op
    if _op is None:
        torch = _torch()
        if not hasattr(torch.library, "custom_op"):
            raise RuntimeError(f"h3block.attention needs torch >= 2.4 (torch.library.custom_op); this is {torch.__version__}")

        @torch.library.custom_op("h3block::attention", mutates_args=())
        def op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return _attention_impl(q, k, v)

        @op.register_fake
        def _(q, k, v):
            B, S, H, batched = _check_qkv(q, k, v)
            lse_shape = (B, H, S) if batched else (H, S)
            return q.new_empty(q.shape), q.new_empty(lse_shape, dtype=torch.float32)

        _op = op
    return _op


# With torch already imported (the usual order), register the op now: defining it inside
# torch.compile's tracing of a first call is not possible. Otherwise the first call does.
if "torch" in sys.modules:
    try:
        _custom_op()
    except Exception:  # noqa: BLE001 - a torch without torch.library.custom_op (< 2.4): the first call says so
        pass


def attention(q, k, v, *, return_lse=False):
    """softmax(q k^T / sqrt(128)) v per batch item and head, in FP8 (docs/DESIGN.md).

    q, k, v: torch.bfloat16 CUDA tensors [B, S, H, 128] or [S, H, 128] of the
    same shape, head dim contiguous, other strides multiples of 8 (views of a
    fused QKV tensor are fine). Runs on torch's current stream of q's device.
    Returns a new tensor of q's shape; with return_lse=True also the FP32
    log-sum-exp of each row's scaled logits, [B, H, S] (or [H, S])."""
    torch = sys.modules.get("torch")
    # the argument errors before anything else; under torch.compile's tracing the op's fake
    # implementation checks the same (its Python checks would break the graph here)
    if torch is None or not torch.compiler.is_compiling():
        _check_qkv(q, k, v)
    out, lse = _custom_op()(q, k, v)
    return (out, lse) if return_lse else out


class Block:
    """One MiniMax-H3 DiT block on a CUDA device, its weights uploaded once.

    block = Block.from_safetensors(path, gemm="bf16" | "fp8")
    out = block(x, temb, tags, positions)
      x [S, hidden] bf16, temb [temb] float32, tags [S] int32 (modality 0 video,
      1 text, 2 audio), positions [S, 3] float32 (t, h, w): CUDA tensors,
      contiguous; out: a new [S, hidden] bf16 tensor."""

    def __init__(self, handle, device_index, path):
        self._h = handle
        self.device_index = device_index
        self.path = path
        info = _lib.BlockInfo()
        _lib.lib().h3b_block_get_info(handle, ctypes.byref(info))
        self.hidden, self.heads, self.head_dim = info.hidden, info.heads, info.head_dim
        self.ffn, self.temb_dim, self.modalities = info.ffn, info.temb, info.modalities

    @classmethod
    def from_safetensors(cls, path, gemm="bf16", *, block=-1, device=None):
        """The block in `path` (a file, an index or a directory, any layout
        dit_block reads; `block`: which one where there are several) on CUDA
        `device` (default: torch's current one), GEMMs in "bf16" or "fp8"."""
        import os
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"h3block.Block: path must be a str or os.PathLike, not {type(path).__name__}")
        if gemm not in ("bf16", "fp8"):
            raise ValueError(f"h3block.Block: gemm={gemm!r}; 'bf16' or 'fp8'")
        if not isinstance(block, int) or block < -1:
            raise ValueError(f"h3block.Block: block={block!r}; a block number, or -1 for the file's only block")
        if device is None:
            import torch
            device = torch.cuda.current_device() if torch.cuda.is_available() else 0
        elif type(device).__module__.split(".")[0] == "torch" and getattr(device, "type", None) == "cuda":
            device = device.index if device.index is not None else _torch().cuda.current_device()
        if isinstance(device, bool) or not isinstance(device, int):
            raise ValueError(f"h3block.Block: device={device!r}; a CUDA device index or torch.device('cuda', N)")
        L = _lib.lib()
        p = ctypes.c_void_p()
        st = L.h3b_block_open(ctypes.byref(p), os.fsencode(path), block,
                              _lib.GEMM_FP8 if gemm == "fp8" else _lib.GEMM_BF16, device)
        if st != _lib.OK:
            msg = L.h3b_block_error(p).decode(errors="replace") if p else "out of host memory"
            L.h3b_block_destroy(p)
            raise _lib.status_error(st, msg)
        return cls(p, device, os.fspath(path))

    def _check(self, name, t, dtype, shape):
        if not _is_tensor(t):
            raise TypeError(f"h3block.Block: {name} must be a torch.Tensor, not {type(t).__qualname__}")
        if str(t.dtype) != dtype:
            raise TypeError(f"h3block.Block: {name} has dtype {t.dtype}; it takes {dtype}")
        if tuple(t.shape) != shape:
            raise ValueError(f"h3block.Block: {name} has shape {tuple(t.shape)}; expected {shape}")
        if not t.is_contiguous():
            raise ValueError(f"h3block.Block: {name} is not contiguous")

    def __call__(self, x, temb, tags, positions):
        if self._h is None:
            raise RuntimeError("h3block.Block: closed")
        if not _is_tensor(x) or x.dim() != 2:
            raise ValueError(f"h3block.Block: x must be a [S, {self.hidden}] tensor")
        S = x.shape[0]
        self._check("x", x, "torch.bfloat16", (S, self.hidden))
        self._check("temb", temb, "torch.float32", (self.temb_dim,))
        self._check("tags", tags, "torch.int32", (S,))
        self._check("positions", positions, "torch.float32", (S, 3))
        for name, t in (("x", x), ("temb", temb), ("tags", tags), ("positions", positions)):
            if t.device.type != "cuda" or t.device.index != self.device_index:
                raise ValueError(f"h3block.Block: {name} is on {t.device}; the block is on cuda:{self.device_index}")
        torch = _torch()
        L = _lib.lib()
        with torch.cuda.device(x.device):
            out = torch.empty_like(x)
            st = L.h3b_block_forward(self._h, S, x.data_ptr(), temb.data_ptr(), tags.data_ptr(),
                                     positions.data_ptr(), out.data_ptr(), torch.cuda.current_stream().cuda_stream)
            if st != _lib.OK:
                raise _lib.status_error(st, L.h3b_block_error(self._h).decode())
        return out

    def close(self):
        """Frees the block's device memory now (else when the object is collected)."""
        if self._h is not None:
            _lib.lib().h3b_block_destroy(self._h)
            self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
