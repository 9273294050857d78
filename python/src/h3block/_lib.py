"""ctypes bindings of libh3block.so (include/h3block.h).

The library is found, in this order: $H3BLOCK_LIBRARY (a path to
libh3block.so, e.g. a CMake build's), then the copy installed beside this
file by `pip install ./python`. It is loaded on first use, so importing
h3block never fails for want of it.
"""
import ctypes
import glob
import os

OK, ERR_ARGUMENT, ERR_UNSUPPORTED, ERR_CUDA, ERR_MEMORY, ERR_FILE = range(6)
ATTN_NO_SMOOTH_V, ATTN_PORTABLE = 1, 2
GEMM_BF16, GEMM_FP8 = 0, 1


class Tensor(ctypes.Structure):
    """h3b_tensor: a BF16 [B][S][H][128] device tensor by its strides (elements)."""

    _fields_ = [("data", ctypes.c_void_p), ("stride_b", ctypes.c_int64), ("stride_s", ctypes.c_int64),
                ("stride_h", ctypes.c_int64)]


class BlockInfo(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in ("hidden", "heads", "head_dim", "ffn", "temb", "modalities")]


_lib = None


def _candidates():
    env = os.environ.get("H3BLOCK_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    return sorted(glob.glob(os.path.join(here, "libh3block.so*")), key=len)


def lib():
    """The loaded library with its function signatures (RuntimeError if not found)."""
    global _lib
    if _lib is not None:
        return _lib
    paths = _candidates()
    if not paths:
        raise RuntimeError("h3block: libh3block.so not found: install the package with `pip install ./python`, "
                           "or set H3BLOCK_LIBRARY to a built libh3block.so")
    try:
        L = ctypes.CDLL(paths[0])
    except OSError as e:
        raise RuntimeError(f"h3block: cannot load {paths[0]}: {e}") from None
    P, I, U, S, V = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_size_t, None
    sigs = {
        "h3b_version": (ctypes.c_char_p, []),
        "h3b_status_name": (ctypes.c_char_p, [I]),
        "h3b_attn_create": (I, [ctypes.POINTER(P), I, U]),
        "h3b_attn_destroy": (V, [P]),
        "h3b_attn_error": (ctypes.c_char_p, [P]),
        "h3b_attn_kernel": (ctypes.c_char_p, [P]),
        "h3b_attention_workspace_size": (S, [I, I]),
        "h3b_attention_ws": (I, [P, I, I, I, Tensor, Tensor, Tensor, P, P, P, S, P]),
        "h3b_block_open": (I, [ctypes.POINTER(P), ctypes.c_char_p, I, I, I]),
        "h3b_block_destroy": (V, [P]),
        "h3b_block_error": (ctypes.c_char_p, [P]),
        "h3b_block_get_info": (I, [P, ctypes.POINTER(BlockInfo)]),
        "h3b_block_forward": (I, [P, I, P, P, P, P, P, P]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(L, name)
        f.restype, f.argtypes = res, args
    _lib = L
    return L


def status_error(status, message):
    """The Python exception for an h3b_status and its message."""
    text = f"h3block: {message}"
    if status == ERR_ARGUMENT:
        return ValueError(text)
    if status == ERR_MEMORY:
        return MemoryError(text)
    if status == ERR_FILE:
        return OSError(text)
    return RuntimeError(text)
