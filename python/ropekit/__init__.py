"""ropekit: rotary position embedding (RoPE), exact and safe, from Python.

A thin ctypes binding over the C library (no compiled extension). Arrays are numpy arrays (or
anything with ``__dlpack__`` on the CPU); bfloat16 arrays use ``ml_dtypes.bfloat16``.

Positional arguments are the operator's inputs in the operator's order; keyword arguments are
the ONNX attribute names with the ONNX defaults. ``out=`` takes a preallocated output (the input
itself for in place), as numpy ufuncs do. Errors raise :class:`ropekit.Error` with the library's
message, e.g. ``position_ids[0][3] = 70000 is outside cos_cache rows [0, 4096)``.

The shared library is the one named by the ``ROPEKIT_LIB`` environment variable when it is set,
else ``libropekit.so`` in this package (``ropekit/lib`` in an installed wheel), else the one in
the source tree's ``build/`` (see ``ropekit/_libpath.py``).

Also: ``fuse`` / ``inspect`` (ONNX models, through libropekit_onnx) and ``ropekit.torch``
(the operators on torch tensors, CPU and CUDA; imported only when used).

Operators (see include/ropekit.h for the full contracts):
    rotary_embedding         ai.onnx.RotaryEmbedding (opset 23)
    ms_rotary_embedding      com.microsoft.RotaryEmbedding
    mrotary_embedding        com.microsoft.MRotaryEmbedding
    qknorm_rotary_embedding  com.microsoft.QKNormRotaryEmbedding (returns query_out, kv_out)
    inverse_rotary_regroup   com.microsoft.InverseRotaryRegroup
Tables:
    rope_inv_freq            rope parameters -> (inv_freq float32 array, attention_factor)
    rope_cos_sin_table       inv_freq -> (cos, sin) tables of shape (positions, len(inv_freq))
"""

from __future__ import annotations

import ctypes
import os
import pathlib

import numpy as np

try:
    import ml_dtypes

    bfloat16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # bfloat16 arrays are then unavailable, everything else works
    bfloat16 = None

__all__ = [
    "Error",
    "rotary_embedding",
    "ms_rotary_embedding",
    "mrotary_embedding",
    "qknorm_rotary_embedding",
    "inverse_rotary_regroup",
    "rotary_embedding_on_the_fly",
    "rope_inv_freq",
    "rope_cos_sin_table",
    "version",
    "library_path",
]

MAX_RANK = 4
_FLOAT32, _FLOAT16, _BFLOAT16, _INT64 = 1, 2, 3, 4
STATUS_NAMES = {
    0: "ROPEKIT_OK",
    1: "ROPEKIT_ERROR_NULL_POINTER",
    2: "ROPEKIT_ERROR_INVALID_ATTRIBUTE",
    3: "ROPEKIT_ERROR_SHAPE",
    4: "ROPEKIT_ERROR_DTYPE",
    5: "ROPEKIT_ERROR_POSITION_OUT_OF_RANGE",
    6: "ROPEKIT_ERROR_OVERFLOW",
    7: "ROPEKIT_ERROR_ALIASING",
    8: "ROPEKIT_ERROR_UNSUPPORTED",
    9: "ROPEKIT_ERROR_OUT_OF_MEMORY",
    10: "ROPEKIT_ERROR_IO",
    11: "ROPEKIT_ERROR_PARSE",
    12: "ROPEKIT_ERROR_DEVICE",
}


class Error(ValueError):
    """A ropekit call failed. ``status`` is the status name (e.g. 'ROPEKIT_ERROR_SHAPE'),
    ``code`` its number, and the message is the library's."""

    def __init__(self, code: int, message: str):
        self.code = code
        self.status = STATUS_NAMES.get(code, f"status {code}")
        super().__init__(f"{self.status}: {message}")


# ---- the C structures (mirror include/ropekit.h) ----------------------------------------------


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("rank", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_RANK),
        ("strides", ctypes.c_int64 * MAX_RANK),
    ]


class _RotaryAttrs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in ("interleaved", "rotary_embedding_dim", "num_heads", "inverse")]


class _MsRotaryAttrs(ctypes.Structure):
    _fields_ = [
        ("interleaved", ctypes.c_int64),
        ("rotary_embedding_dim", ctypes.c_int64),
        ("num_heads", ctypes.c_int64),
        ("scale", ctypes.c_float),
        ("is_packed_batching", ctypes.c_int64),
        ("inverse", ctypes.c_int64),
    ]


class _MRotaryAttrs(ctypes.Structure):
    _fields_ = [
        ("mrope_section", ctypes.c_int64 * 3),
        ("mrope_layout", ctypes.c_int64),
        ("interleaved", ctypes.c_int64),
        ("rotary_embedding_dim", ctypes.c_int64),
        ("num_heads", ctypes.c_int64),
        ("scale", ctypes.c_float),
        ("is_packed_batching", ctypes.c_int64),
        ("inverse", ctypes.c_int64),
    ]


class _QKNormAttrs(ctypes.Structure):
    _fields_ = [
        ("num_heads", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("rope_head_dim", ctypes.c_int64),
        ("epsilon", ctypes.c_float),
        ("simulate_fp8", ctypes.c_int64),
    ]


class _RegroupAttrs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in ("num_heads", "head_dim", "rope_head_dim", "num_groups")]


class _RopeConfig(ctypes.Structure):
    _fields_ = [
        ("rope_type", ctypes.c_int),
        ("rotary_dim", ctypes.c_int64),
        ("rope_theta", ctypes.c_double),
        ("max_position_embeddings", ctypes.c_int64),
        ("factor", ctypes.c_double),
        ("original_max_position_embeddings", ctypes.c_int64),
        ("attention_factor", ctypes.c_double),
        ("beta_fast", ctypes.c_double),
        ("beta_slow", ctypes.c_double),
        ("mscale", ctypes.c_double),
        ("mscale_all_dim", ctypes.c_double),
        ("truncate", ctypes.c_int32),
        ("low_freq_factor", ctypes.c_double),
        ("high_freq_factor", ctypes.c_double),
        ("long_factor", ctypes.POINTER(ctypes.c_double)),
        ("short_factor", ctypes.POINTER(ctypes.c_double)),
    ]


# ---- loading ---------------------------------------------------------------------------------


from . import _libpath  # noqa: E402

_lib, library_path = _libpath.load("ropekit", "the ropekit C library: pip install ropekit, or build it: cmake -B build && cmake --build build")
_P = ctypes.POINTER
_T = _P(_Tensor)
_lib.ropekit_last_error.restype = ctypes.c_char_p
_lib.ropekit_version.restype = ctypes.c_char_p
for _name, _args in {
    "ropekit_rotary_embedding": [_T, _T, _T, _T, _P(_RotaryAttrs), _T],
    "ropekit_ms_rotary_embedding": [_T, _T, _T, _T, _P(_MsRotaryAttrs), _T],
    "ropekit_mrotary_embedding": [_T, _T, _T, _T, _P(_MRotaryAttrs), _T],
    "ropekit_qknorm_rotary_embedding": [_T, _T, _T, _T, _T, _P(_QKNormAttrs), _T, _T],
    "ropekit_inverse_rotary_regroup": [_T, _T, _T, _P(_RegroupAttrs), _T],
    "ropekit_rope_inv_freq": [_P(_RopeConfig), ctypes.c_int64, _P(ctypes.c_float), ctypes.c_int64, _P(ctypes.c_float)],
    "ropekit_rotary_embedding_on_the_fly": [_T, _P(ctypes.c_float), ctypes.c_int64, ctypes.c_float, _T,
                                            _P(_RotaryAttrs), _T],
    "ropekit_rope_cos_sin_table": [_P(ctypes.c_float), ctypes.c_int64, ctypes.c_float, ctypes.c_int, _T, _T],
}.items():
    getattr(_lib, _name).argtypes = _args
    getattr(_lib, _name).restype = ctypes.c_int


def version() -> str:
    """Version of the loaded C library."""
    return _lib.ropekit_version().decode()


# The package's version is the library's (both come from CMakeLists.txt's project(VERSION)).
__version__ = version()


def _check(code: int):
    if code != 0:
        raise Error(code, _lib.ropekit_last_error().decode(errors="replace"))


# ---- arrays ----------------------------------------------------------------------------------


def _as_array(a, name):
    if a is None:
        return None
    if isinstance(a, np.ndarray):
        return a
    if hasattr(a, "__dlpack__"):
        return np.from_dlpack(a)
    return np.asarray(a)


def _dtype_code(dt: np.dtype):
    if dt == np.float32:
        return _FLOAT32
    if dt == np.float16:
        return _FLOAT16
    if bfloat16 is not None and dt == bfloat16:
        return _BFLOAT16
    if dt == np.int64:
        return _INT64
    return None


def _view(a: np.ndarray, name: str) -> _Tensor:
    """A ropekit_tensor over the array's memory (no copy). The array must stay alive."""
    code = _dtype_code(a.dtype)
    if code is None:
        raise TypeError(f"{name}: dtype {a.dtype} is not float32, float16, bfloat16 or int64")
    if a.ndim < 1 or a.ndim > MAX_RANK:
        raise Error(3, f"{name}: rank {a.ndim} is outside [1, {MAX_RANK}]")
    t = _Tensor()
    t.data = a.ctypes.data if a.size else None
    t.dtype = code
    t.rank = a.ndim
    for i, (n, st) in enumerate(zip(a.shape, a.strides)):
        if st % a.itemsize:
            raise Error(3, f"{name}: stride {st} bytes along dim {i} is not a multiple of the element size")
        t.shape[i] = n
        t.strides[i] = st // a.itemsize
    return t


def _ids(a, name):
    a = _as_array(a, name)
    if a is None:
        return None
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name}: dtype {a.dtype} is not an integer type")
    return a if a.dtype == np.int64 else a.astype(np.int64)


def _input(a, name):
    a = _as_array(a, name)
    if a is None:
        raise TypeError(f"{name} is required")
    return a


def _output(out, like: np.ndarray, shape, name="out"):
    if out is None:
        return np.empty(shape, dtype=like.dtype)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{name} must be a numpy array")
    if not out.flags.writeable:
        raise ValueError(f"{name} is read-only")
    return out


def _ref(t):
    return ctypes.byref(t) if t is not None else None


# ---- operators -------------------------------------------------------------------------------


def rotary_embedding(X, cos_cache, sin_cache, position_ids=None, *, interleaved=0, rotary_embedding_dim=0,
                     num_heads=0, inverse=0, out=None):
    """ai.onnx.RotaryEmbedding (opset 23). X is (B, S, N*H) with num_heads, or (B, N, S, H);
    with position_ids (B, S) the caches are (P, R/2), without them (B, S, R/2)."""
    X, c, s = _input(X, "X"), _input(cos_cache, "cos_cache"), _input(sin_cache, "sin_cache")
    p = _ids(position_ids, "position_ids")
    y = _output(out, X, X.shape)
    attrs = _RotaryAttrs(int(interleaved), int(rotary_embedding_dim), int(num_heads), int(inverse))
    tp = _view(p, "position_ids") if p is not None else None
    _check(_lib.ropekit_rotary_embedding(
        ctypes.byref(_view(X, "X")), ctypes.byref(_view(c, "cos_cache")), ctypes.byref(_view(s, "sin_cache")),
        _ref(tp), ctypes.byref(attrs), ctypes.byref(_view(y, "out"))))
    return y


def ms_rotary_embedding(input, position_ids, cos_cache, sin_cache, *, interleaved=0, rotary_embedding_dim=0,
                        num_heads=0, scale=1.0, is_packed_batching=0, inverse=0, out=None):
    """com.microsoft.RotaryEmbedding. position_ids is (B, S), or (1,) for an offset.
    scale is applied (ORT ignores it)."""
    x, c, s = _input(input, "input"), _input(cos_cache, "cos_cache"), _input(sin_cache, "sin_cache")
    p = _ids(_input(position_ids, "position_ids"), "position_ids")
    y = _output(out, x, x.shape)
    attrs = _MsRotaryAttrs(int(interleaved), int(rotary_embedding_dim), int(num_heads), float(scale),
                           int(is_packed_batching), int(inverse))
    _check(_lib.ropekit_ms_rotary_embedding(
        ctypes.byref(_view(x, "input")), ctypes.byref(_view(p, "position_ids")),
        ctypes.byref(_view(c, "cos_cache")), ctypes.byref(_view(s, "sin_cache")), ctypes.byref(attrs),
        ctypes.byref(_view(y, "out"))))
    return y


def mrotary_embedding(input, position_ids, cos_cache, sin_cache, *, mrope_section, mrope_layout=0, interleaved=0,
                      rotary_embedding_dim=0, num_heads=0, scale=1.0, is_packed_batching=0, inverse=0, out=None):
    """com.microsoft.MRotaryEmbedding. position_ids is (3, B, S); mrope_section has three
    entries summing to R/2 (not doubled); mrope_layout 0 sectioned, 1 interleaved."""
    x, c, s = _input(input, "input"), _input(cos_cache, "cos_cache"), _input(sin_cache, "sin_cache")
    p = _ids(_input(position_ids, "position_ids"), "position_ids")
    sec = [int(v) for v in mrope_section]
    if len(sec) != 3:
        raise Error(2, f"mrope_section has {len(sec)} entries, must have 3")
    y = _output(out, x, x.shape)
    attrs = _MRotaryAttrs((ctypes.c_int64 * 3)(*sec), int(mrope_layout), int(interleaved), int(rotary_embedding_dim),
                          int(num_heads), float(scale), int(is_packed_batching), int(inverse))
    _check(_lib.ropekit_mrotary_embedding(
        ctypes.byref(_view(x, "input")), ctypes.byref(_view(p, "position_ids")),
        ctypes.byref(_view(c, "cos_cache")), ctypes.byref(_view(s, "sin_cache")), ctypes.byref(attrs),
        ctypes.byref(_view(y, "out"))))
    return y


def qknorm_rotary_embedding(query, kv, kv_norm_weight, cos=None, sin=None, *, num_heads, head_dim, rope_head_dim=0,
                            epsilon=1e-6, simulate_fp8=1, out=None):
    """com.microsoft.QKNormRotaryEmbedding. Returns (query_out (B, S, num_heads, head_dim),
    kv_out (B, S, head_dim)). out, if given, is a (query_out, kv_out) pair."""
    q, k = _input(query, "query"), _input(kv, "kv")
    w = _input(kv_norm_weight, "kv_norm_weight")
    c, s = _as_array(cos, "cos"), _as_array(sin, "sin")
    if q.ndim >= 2:
        qo_shape = (*q.shape[:2], int(num_heads), int(head_dim))
    else:
        qo_shape = q.shape
    if out is None:
        qo, ko = _output(None, q, qo_shape), _output(None, k, k.shape)
    else:
        qo, ko = _output(out[0], q, qo_shape, "out[0]"), _output(out[1], k, k.shape, "out[1]")
    attrs = _QKNormAttrs(int(num_heads), int(head_dim), int(rope_head_dim), float(epsilon), int(simulate_fp8))
    tc = _view(c, "cos") if c is not None else None
    ts = _view(s, "sin") if s is not None else None
    _check(_lib.ropekit_qknorm_rotary_embedding(
        ctypes.byref(_view(q, "query")), ctypes.byref(_view(k, "kv")), ctypes.byref(_view(w, "kv_norm_weight")),
        _ref(tc), _ref(ts), ctypes.byref(attrs), ctypes.byref(_view(qo, "query_out")),
        ctypes.byref(_view(ko, "kv_out"))))
    return qo, ko


def inverse_rotary_regroup(input, cos=None, sin=None, *, num_heads, head_dim, rope_head_dim=0, num_groups=1,
                           out=None):
    """com.microsoft.InverseRotaryRegroup: input (N, num_heads*head_dim) -> (num_groups, N, group_dim)."""
    x = _input(input, "input")
    c, s = _as_array(cos, "cos"), _as_array(sin, "sin")
    G = int(num_groups)
    F = int(num_heads) * int(head_dim)
    shape = (G, x.shape[0], F // G) if G > 0 and x.ndim >= 1 else x.shape
    y = _output(out, x, shape)
    attrs = _RegroupAttrs(int(num_heads), int(head_dim), int(rope_head_dim), G)
    tc = _view(c, "cos") if c is not None else None
    ts = _view(s, "sin") if s is not None else None
    _check(_lib.ropekit_inverse_rotary_regroup(
        ctypes.byref(_view(x, "input")), _ref(tc), _ref(ts), ctypes.byref(attrs), ctypes.byref(_view(y, "out"))))
    return y


# ---- tables ----------------------------------------------------------------------------------

_ROPE_TYPES = {"default": 0, "linear": 1, "dynamic": 2, "yarn": 3, "longrope": 4, "llama3": 5}
_ANGLE_MODES = {"graph": 0, "accurate": 1}


def rope_inv_freq(rope_type="default", *, rotary_dim, rope_theta, factor=0.0, original_max_position_embeddings=0,
                  max_position_embeddings=0, attention_factor=0.0, beta_fast=0.0, beta_slow=0.0, mscale=0.0,
                  mscale_all_dim=0.0, truncate=True, low_freq_factor=0.0, high_freq_factor=0.0, long_factor=None,
                  short_factor=None, seq_len=0):
    """Rope parameters (named as in Hugging Face configs) -> (inv_freq float32 (rotary_dim/2,),
    attention_factor). rotary_dim = int(head_dim * partial_rotary_factor)."""
    if rope_type not in _ROPE_TYPES:
        raise Error(2, f"rope_type {rope_type!r} is not one of {sorted(_ROPE_TYPES)}")
    half = int(rotary_dim) // 2 if int(rotary_dim) > 0 else 0
    keep = []

    def factors(v, name):
        if v is None:
            return None
        arr = np.ascontiguousarray(v, dtype=np.float64)
        if arr.shape != (half,):
            raise Error(3, f"{name} has shape {arr.shape}, expected ({half},)")
        keep.append(arr)
        return arr.ctypes.data_as(ctypes.POINTER(ctypes.c_double))

    cfg = _RopeConfig(
        _ROPE_TYPES[rope_type], int(rotary_dim), float(rope_theta), int(max_position_embeddings), float(factor or 0.0),
        int(original_max_position_embeddings or 0), float(attention_factor or 0.0), float(beta_fast or 0.0),
        float(beta_slow or 0.0), float(mscale or 0.0), float(mscale_all_dim or 0.0), 1 if truncate else 0,
        float(low_freq_factor or 0.0), float(high_freq_factor or 0.0),
        factors(long_factor, "long_factor"), factors(short_factor, "short_factor"))
    inv = np.empty(max(half, 1), dtype=np.float32)
    af = ctypes.c_float()
    _check(_lib.ropekit_rope_inv_freq(ctypes.byref(cfg), int(seq_len),
                                      inv.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), half, ctypes.byref(af)))
    return inv[:half], af.value


def rotary_embedding_on_the_fly(X, inv_freq, position_ids, *, attention_factor=1.0, interleaved=0,
                                rotary_embedding_dim=0, num_heads=0, inverse=0, out=None):
    """ai.onnx.RotaryEmbedding without tables: cos/sin of position_ids (B, S) * inv_freq computed
    per token (accurate angle, float32), bit for bit as with a float32 'accurate' table."""
    X = _input(X, "X")
    p = _ids(_input(position_ids, "position_ids"), "position_ids")
    inv = np.ascontiguousarray(inv_freq, dtype=np.float32)
    if inv.ndim != 1:
        raise Error(3, f"inv_freq must be 1D, got shape {inv.shape}")
    y = _output(out, X, X.shape)
    attrs = _RotaryAttrs(int(interleaved), int(rotary_embedding_dim), int(num_heads), int(inverse))
    _check(_lib.ropekit_rotary_embedding_on_the_fly(
        ctypes.byref(_view(X, "X")), inv.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), inv.shape[0],
        float(attention_factor), ctypes.byref(_view(p, "position_ids")), ctypes.byref(attrs),
        ctypes.byref(_view(y, "out"))))
    return y


def rope_cos_sin_table(inv_freq, num_positions, *, attention_factor=1.0, mode="graph", dtype=np.float32):
    """inv_freq (h,) float32 -> (cos, sin), each (num_positions, h) of dtype (float32, float16 or
    bfloat16). mode 'graph' reproduces exported graphs' float32 angle; 'accurate' uses a double
    angle and rounds once."""
    if mode not in _ANGLE_MODES:
        raise Error(2, f"mode {mode!r} is not 'graph' or 'accurate'")
    inv = np.ascontiguousarray(inv_freq, dtype=np.float32)
    if inv.ndim != 1:
        raise Error(3, f"inv_freq must be 1D, got shape {inv.shape}")
    dt = np.dtype(dtype)
    if int(num_positions) < 0:
        raise Error(3, f"num_positions = {num_positions} is negative")
    cos = np.empty((int(num_positions), inv.shape[0]), dtype=dt)
    sin = np.empty_like(cos)
    _check(_lib.ropekit_rope_cos_sin_table(
        inv.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), inv.shape[0], float(attention_factor),
        _ANGLE_MODES[mode], ctypes.byref(_view(cos, "cos")), ctypes.byref(_view(sin, "sin"))))
    return cos, sin


# ---- CPU variants and threads (include/ropekit.h, section 5) ---------------------------------
_lib.ropekit_cpu_variant.restype = ctypes.c_char_p
_lib.ropekit_cpu_variant.argtypes = []
_lib.ropekit_set_cpu_variant.restype = ctypes.c_int
_lib.ropekit_set_cpu_variant.argtypes = [ctypes.c_char_p]
_lib.ropekit_set_num_threads.restype = ctypes.c_int
_lib.ropekit_set_num_threads.argtypes = [ctypes.c_int]
_lib.ropekit_get_num_threads.restype = ctypes.c_int
_lib.ropekit_get_num_threads.argtypes = []
__all__ += ["cpu_variant", "set_cpu_variant", "set_num_threads", "get_num_threads"]


def cpu_variant() -> str:
    """The CPU kernel variant in use: 'ref', 'avx2' or 'avx512' (all give the same bits)."""
    return _lib.ropekit_cpu_variant().decode()


def set_cpu_variant(name: str) -> None:
    """Use variant `name` ('ref', 'avx2', 'avx512' or 'auto'), process-wide. Raises Error when
    the name is unknown or the CPU cannot run it."""
    _check(_lib.ropekit_set_cpu_variant(str(name).encode()))


def set_num_threads(n: int) -> None:
    """Threads used by large calls (the caller's included), process-wide; default 1."""
    _check(_lib.ropekit_set_num_threads(int(n)))


def get_num_threads() -> int:
    """The thread count set by set_num_threads (default 1)."""
    return int(_lib.ropekit_get_num_threads())


# ---- ONNX fusion and inspection (libropekit_onnx; ropekit/_fuse.py) -------------------------
from ._fuse import FuseReport, fuse, inspect  # noqa: E402

__all__ += ["fuse", "inspect", "FuseReport", "__version__"]

from ._ort import ort_custom_ops_library  # noqa: E402,F401  (libropekit_ort path, for onnxruntime)

__all__ += ["ort_custom_ops_library"]
