"""ropekit: rotary position embedding (RoPE), exact and safe, from Python.

A thin ctypes binding over the C library (no compiled extension). Arrays are numpy arrays (or
anything with ``__dlpack__`` on the CPU); bfloat16 arrays use ``ml_dtypes.bfloat16``.

Positional arguments are the operator's inputs in the operator's order; keyword arguments are
the ONNX attribute names with the ONNX defaults. ``out=`` takes a preallocated output (the input
itself for in place), as numpy ufuncs do. Errors raise :class:`ropekit.Error` (a ``ValueError``)
with the library's message, e.g. ``position_ids[0][3] = 70000 is outside cos_cache rows [0, 4096)``;
every argument error is one, including those the binding finds itself. When the Python type of an
argument is wrong (a float or str for an integer attribute, a list or float64 array for X, None
where a str is needed) it is a :class:`ropekit.ArgumentTypeError`, a subclass of both ``Error`` and
``TypeError``, so ``except ropekit.Error``, ``except ValueError`` and ``except TypeError`` all catch
it. Integer attributes are never wrapped or truncated: they must be Python or numpy integers in
int64 range (bool only for the 0/1 flags interleaved, inverse, is_packed_batching, simulate_fp8).
Tensor data must be aligned to its element size (include/ropekit.h): an unaligned input array is
copied, an unaligned ``out=`` is refused.

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
import numbers
import operator
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
    "ArgumentTypeError",
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


class ArgumentTypeError(Error, TypeError):
    """An argument of the wrong Python type (a float where an integer is needed, a list or a
    float64 array for a float16/float32/bfloat16 tensor, None for a name): an Error (so a
    ValueError) and a TypeError."""


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


# The attributes both com.microsoft rotary ops have, in their C order.
_MS_ROTARY_FIELDS = [
    ("interleaved", ctypes.c_int64),
    ("rotary_embedding_dim", ctypes.c_int64),
    ("num_heads", ctypes.c_int64),
    ("scale", ctypes.c_float),
    ("is_packed_batching", ctypes.c_int64),
    ("inverse", ctypes.c_int64),
]


class _MsRotaryAttrs(ctypes.Structure):
    _fields_ = _MS_ROTARY_FIELDS


class _MRotaryAttrs(ctypes.Structure):
    _fields_ = [("mrope_section", ctypes.c_int64 * 3), ("mrope_layout", ctypes.c_int64)] + _MS_ROTARY_FIELDS


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


# ---- arguments -------------------------------------------------------------------------------
# Every argument error raises Error (a ValueError) with the status the C library would give;
# where the Python type is wrong it is an ArgumentTypeError (also a TypeError). Nothing is
# converted silently: integers are never wrapped or truncated, floats and strings are not ints.

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_INVALID_ATTRIBUTE, _SHAPE, _DTYPE, _POSITION, _UNSUPPORTED = 2, 3, 4, 5, 8
_FLOAT_DTYPES = "float32, float16 or bfloat16"


def _int(v, name, *, flag=False, lo=_INT64_MIN, hi=_INT64_MAX, range_text="the int64 range [-2^63, 2^63)"):
    """An integer attribute as a Python int in [lo, hi] (int64 by default). bool only for 0/1
    flags (interleaved=True); floats (2.7, even 2.0), strings ("2") and None are refused."""
    if isinstance(v, (bool, np.bool_)):
        if flag:
            return int(bool(v))
        raise ArgumentTypeError(_INVALID_ATTRIBUTE, f"{name} = {v!r}: an integer is needed, not a bool")
    try:
        n = operator.index(v)  # int, numpy integers, 0-d integer arrays; never float or str
    except TypeError:
        raise ArgumentTypeError(_INVALID_ATTRIBUTE,
                                f"{name} = {v!r}: an integer is needed, not {type(v).__name__}") from None
    if not lo <= n <= hi:
        raise Error(_INVALID_ATTRIBUTE, f"{name} = {n} is outside {range_text}")
    return n


def _opt_int(v, name):
    """An optional integer (None: not given, 0)."""
    return 0 if v is None else _int(v, name)


def _float(v, name):
    """A real-valued attribute (int or float, numpy scalars too); not str, bool or None."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Real, np.floating, np.integer)):
        raise ArgumentTypeError(_INVALID_ATTRIBUTE,
                                f"{name} = {v!r}: a real number is needed, not {type(v).__name__}")
    return float(v)


def _opt_float(v, name):
    return 0.0 if v is None else _float(v, name)


def _str(v, name, choices):
    if not isinstance(v, str):
        raise ArgumentTypeError(_INVALID_ATTRIBUTE,
                                f"{name} = {v!r}: a str is needed (one of {choices}), not {type(v).__name__}")
    if "\0" in v:
        raise Error(_INVALID_ATTRIBUTE, f"{name} = {v!r} contains a NUL character")
    return v


def _ints(v, name, n):
    """A sequence of n integers (list, tuple or 1-D integer array)."""
    if isinstance(v, (str, bytes)) or not hasattr(v, "__len__"):
        raise ArgumentTypeError(_INVALID_ATTRIBUTE,
                                f"{name} = {v!r}: a sequence of {n} integers is needed, not {type(v).__name__}")
    vals = [_int(x, f"{name}[{i}]") for i, x in enumerate(v)]
    if len(vals) != n:
        raise Error(_INVALID_ATTRIBUTE, f"{name} has {len(vals)} entries, must have {n}")
    return vals


# ---- arrays ----------------------------------------------------------------------------------


def _as_array(a, name, what):
    """a as a numpy array (no copy for arrays and CPU DLPack tensors), aligned (an unaligned
    numpy view is copied: the library needs data aligned to the element size). Lists are
    refused (they would become float64) unless `what` is "ids"."""
    if a is None:
        return None
    if not isinstance(a, np.ndarray):
        if hasattr(a, "__dlpack__"):
            try:
                a = np.from_dlpack(a)
            except (BufferError, RuntimeError, TypeError, ValueError) as e:
                raise ArgumentTypeError(_UNSUPPORTED, f"{name}: the DLPack tensor cannot be read on the CPU "
                                        f"({e})") from None
        elif what == "ids" and isinstance(a, (list, tuple)):
            a = _ids_from_sequence(a, name)
        else:
            raise ArgumentTypeError(_DTYPE, f"{name}: got {type(a).__name__}; pass a numpy array (or a CPU "
                                    f"DLPack tensor) of {_FLOAT_DTYPES if what == 'float' else 'int64'}")
    if not a.flags.aligned:
        a = a.copy()
    return a


def _ids_from_sequence(a, name):
    """Position ids given as nested lists of Python ints: no wrapping, no floats."""
    arr = np.asarray(a)
    if arr.dtype.kind in "iu":
        return arr
    if arr.dtype == object:  # ints beyond int64/uint64 (or mixed types)
        for idx, v in np.ndenumerate(arr):
            try:
                n = operator.index(v)
            except TypeError:
                break
            if not _INT64_MIN <= n <= _INT64_MAX:
                raise Error(_POSITION, f"{name}{''.join(f'[{i}]' for i in idx)} = {n} does not fit in int64 "
                            "(position ids are int64)")
        raise ArgumentTypeError(_DTYPE, f"{name}: the list holds values that are not integers")
    raise ArgumentTypeError(_DTYPE, f"{name}: the list holds {arr.dtype} values, not integers")


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


def _view(a: np.ndarray, name: str, what="float") -> _Tensor:
    """A ropekit_tensor over the array's memory (no copy). The array must stay alive.
    what: "float" (activations, tables), "ids" (int64 position ids) or "any" (an output: the
    library checks its dtype against the input's)."""
    code = _dtype_code(a.dtype)
    if what == "float" and code not in (_FLOAT32, _FLOAT16, _BFLOAT16):
        code = None
    if code is None:
        raise ArgumentTypeError(_DTYPE, f"{name}: dtype {a.dtype} is not " +
                                ("int64" if what == "ids" else _FLOAT_DTYPES))
    if a.ndim < 1 or a.ndim > MAX_RANK:
        raise Error(_SHAPE, f"{name}: rank {a.ndim} is outside [1, {MAX_RANK}]")
    t = _Tensor()
    t.data = a.ctypes.data if a.size else None
    t.dtype = code
    t.rank = a.ndim
    for i, (n, st) in enumerate(zip(a.shape, a.strides)):
        if st % a.itemsize:
            raise Error(_SHAPE, f"{name}: stride {st} bytes along dim {i} is not a multiple of the element size")
        t.shape[i] = n
        t.strides[i] = st // a.itemsize
    return t


def _ids(a, name):
    """Position ids as int64: other integer dtypes are converted, never wrapped (a uint64 id
    beyond int64 is reported with its index and value)."""
    a = _as_array(a, name, "ids")
    if a is None:
        return None
    if a.dtype.kind not in "iu":
        raise ArgumentTypeError(_DTYPE, f"{name}: dtype {a.dtype} is not an integer type (position ids are int64)")
    if a.dtype == np.int64:
        return a
    if a.dtype.kind == "u" and a.dtype.itemsize == 8 and a.size and a.max() > _INT64_MAX:
        idx = np.unravel_index(int(np.argmax(a > _INT64_MAX)), a.shape)
        raise Error(_POSITION, f"{name}{''.join(f'[{i}]' for i in idx)} = {int(a[idx])} does not fit in int64 "
                    "(position ids are int64)")
    return a.astype(np.int64)


def _input(a, name, what="float"):
    a = _as_array(a, name, what)
    if a is None:
        raise ArgumentTypeError(1, f"{name} is required")
    return a


def _f32_vector(v, name):
    """A 1-D float32 vector (inv_freq): lists and other float dtypes converted, aligned."""
    try:
        arr = np.require(np.asarray(v, dtype=np.float32), requirements=["C", "A"])
    except (TypeError, ValueError) as e:
        raise ArgumentTypeError(_DTYPE, f"{name}: not a vector of numbers ({e})") from None
    if arr.ndim != 1:
        raise Error(_SHAPE, f"{name} must be 1D, got shape {arr.shape}")
    return arr


def _empty(shape, dtype, name):
    try:
        return np.empty(shape, dtype=dtype)
    except (MemoryError, ValueError) as e:
        raise Error(9, f"{name}: cannot allocate an array of shape {tuple(shape)} ({e})") from None


def _output(out, like: np.ndarray, shape, name="out"):
    if out is None:
        return _empty(shape, like.dtype, name)
    if not isinstance(out, np.ndarray):
        raise ArgumentTypeError(_DTYPE, f"{name} must be a numpy array, not {type(out).__name__}")
    if not out.flags.writeable:
        raise Error(_UNSUPPORTED, f"{name} is read-only (a destination must be writeable)")
    if not out.flags.aligned:
        raise Error(_UNSUPPORTED, f"{name}: data is not aligned to its {out.itemsize}-byte elements (numpy "
                    "flags.aligned is False); pass an aligned array")
    return out


def _ref(t):
    return ctypes.byref(t) if t is not None else None


# ---- operators -------------------------------------------------------------------------------


def _rotary_attrs(interleaved, rotary_embedding_dim, num_heads, inverse):
    return _RotaryAttrs(_int(interleaved, "interleaved", flag=True), _int(rotary_embedding_dim, "rotary_embedding_dim"),
                        _int(num_heads, "num_heads"), _int(inverse, "inverse", flag=True))


def rotary_embedding(X, cos_cache, sin_cache, position_ids=None, *, interleaved=0, rotary_embedding_dim=0,
                     num_heads=0, inverse=0, out=None):
    """ai.onnx.RotaryEmbedding (opset 23). X is (B, S, N*H) with num_heads, or (B, N, S, H);
    with position_ids (B, S) the caches are (P, R/2), without them (B, S, R/2)."""
    attrs = _rotary_attrs(interleaved, rotary_embedding_dim, num_heads, inverse)
    X, c, s = _input(X, "X"), _input(cos_cache, "cos_cache"), _input(sin_cache, "sin_cache")
    p = _ids(position_ids, "position_ids")
    y = _output(out, X, X.shape)
    tp = _view(p, "position_ids", "ids") if p is not None else None
    _check(_lib.ropekit_rotary_embedding(
        ctypes.byref(_view(X, "X")), ctypes.byref(_view(c, "cos_cache")), ctypes.byref(_view(s, "sin_cache")),
        _ref(tp), ctypes.byref(attrs), ctypes.byref(_view(y, "out", "any"))))
    return y


def _ms_rotary_values(interleaved, rotary_embedding_dim, num_heads, scale, is_packed_batching, inverse):
    """The checked values of _MS_ROTARY_FIELDS, in order."""
    return (_int(interleaved, "interleaved", flag=True), _int(rotary_embedding_dim, "rotary_embedding_dim"),
            _int(num_heads, "num_heads"), _float(scale, "scale"),
            _int(is_packed_batching, "is_packed_batching", flag=True), _int(inverse, "inverse", flag=True))


def _call_ms_rotary(fn, input, position_ids, cos_cache, sin_cache, attrs, out):
    """Runs a com.microsoft rotary op (same arguments, checked attrs) and returns its y."""
    x, c, s = _input(input, "input"), _input(cos_cache, "cos_cache"), _input(sin_cache, "sin_cache")
    p = _ids(_input(position_ids, "position_ids", "ids"), "position_ids")
    y = _output(out, x, x.shape)
    _check(fn(ctypes.byref(_view(x, "input")), ctypes.byref(_view(p, "position_ids", "ids")),
              ctypes.byref(_view(c, "cos_cache")), ctypes.byref(_view(s, "sin_cache")), ctypes.byref(attrs),
              ctypes.byref(_view(y, "out", "any"))))
    return y


def ms_rotary_embedding(input, position_ids, cos_cache, sin_cache, *, interleaved=0, rotary_embedding_dim=0,
                        num_heads=0, scale=1.0, is_packed_batching=0, inverse=0, out=None):
    """com.microsoft.RotaryEmbedding. position_ids is (B, S), or (1,) for an offset.
    scale is applied (ORT ignores it)."""
    attrs = _MsRotaryAttrs(*_ms_rotary_values(interleaved, rotary_embedding_dim, num_heads, scale,
                                              is_packed_batching, inverse))
    return _call_ms_rotary(_lib.ropekit_ms_rotary_embedding, input, position_ids, cos_cache, sin_cache, attrs, out)


def mrotary_embedding(input, position_ids, cos_cache, sin_cache, *, mrope_section, mrope_layout=0, interleaved=0,
                      rotary_embedding_dim=0, num_heads=0, scale=1.0, is_packed_batching=0, inverse=0, out=None):
    """com.microsoft.MRotaryEmbedding. position_ids is (3, B, S); mrope_section has three
    entries summing to R/2 (not doubled); mrope_layout 0 sectioned, 1 interleaved."""
    sec = _ints(mrope_section, "mrope_section", 3)
    attrs = _MRotaryAttrs((ctypes.c_int64 * 3)(*sec), _int(mrope_layout, "mrope_layout"),
                          *_ms_rotary_values(interleaved, rotary_embedding_dim, num_heads, scale, is_packed_batching,
                                             inverse))
    return _call_ms_rotary(_lib.ropekit_mrotary_embedding, input, position_ids, cos_cache, sin_cache, attrs, out)


def qknorm_rotary_embedding(query, kv, kv_norm_weight, cos=None, sin=None, *, num_heads, head_dim, rope_head_dim=0,
                            epsilon=1e-6, simulate_fp8=1, out=None):
    """com.microsoft.QKNormRotaryEmbedding. Returns (query_out (B, S, num_heads, head_dim),
    kv_out (B, S, head_dim)). out, if given, is a (query_out, kv_out) pair."""
    nh, hd = _int(num_heads, "num_heads"), _int(head_dim, "head_dim")
    attrs = _QKNormAttrs(nh, hd, _int(rope_head_dim, "rope_head_dim"), _float(epsilon, "epsilon"),
                         _int(simulate_fp8, "simulate_fp8", flag=True))
    q, k = _input(query, "query"), _input(kv, "kv")
    w = _input(kv_norm_weight, "kv_norm_weight")
    c, s = _as_array(cos, "cos", "float"), _as_array(sin, "sin", "float")
    # query_out has query's size when the attributes match query; otherwise the library reports
    # query's shape, and a placeholder avoids allocating what the attributes alone would ask for
    qo_shape = (*q.shape[:2], nh, hd) if q.ndim == 3 and nh > 0 and hd > 0 and nh * hd == q.shape[2] else \
        (0, 0, 0, 0)
    if out is None:
        qo, ko = _output(None, q, qo_shape), _output(None, k, k.shape)
    else:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise ArgumentTypeError(_DTYPE, "out must be a (query_out, kv_out) pair of numpy arrays")
        qo, ko = _output(out[0], q, qo_shape, "out[0]"), _output(out[1], k, k.shape, "out[1]")
    tc = _view(c, "cos") if c is not None else None
    ts = _view(s, "sin") if s is not None else None
    _check(_lib.ropekit_qknorm_rotary_embedding(
        ctypes.byref(_view(q, "query")), ctypes.byref(_view(k, "kv")), ctypes.byref(_view(w, "kv_norm_weight")),
        _ref(tc), _ref(ts), ctypes.byref(attrs), ctypes.byref(_view(qo, "query_out", "any")),
        ctypes.byref(_view(ko, "kv_out", "any"))))
    return qo, ko


def inverse_rotary_regroup(input, cos=None, sin=None, *, num_heads, head_dim, rope_head_dim=0, num_groups=1,
                           out=None):
    """com.microsoft.InverseRotaryRegroup: input (N, num_heads*head_dim) -> (num_groups, N, group_dim)."""
    nh, hd, G = _int(num_heads, "num_heads"), _int(head_dim, "head_dim"), _int(num_groups, "num_groups")
    attrs = _RegroupAttrs(nh, hd, _int(rope_head_dim, "rope_head_dim"), G)
    x = _input(input, "input")
    c, s = _as_array(cos, "cos", "float"), _as_array(sin, "sin", "float")
    F = nh * hd
    # out has input's size when the attributes match input (see qknorm_rotary_embedding)
    ok = x.ndim == 2 and nh > 0 and hd > 0 and G > 0 and F % G == 0 and F == x.shape[1]
    y = _output(out, x, (G, x.shape[0], F // G) if ok else (0, 0, 0))
    tc = _view(c, "cos") if c is not None else None
    ts = _view(s, "sin") if s is not None else None
    _check(_lib.ropekit_inverse_rotary_regroup(
        ctypes.byref(_view(x, "input")), _ref(tc), _ref(ts), ctypes.byref(attrs),
        ctypes.byref(_view(y, "out", "any"))))
    return y


# ---- tables ----------------------------------------------------------------------------------

_ROPE_TYPES = {"default": 0, "linear": 1, "dynamic": 2, "yarn": 3, "longrope": 4, "llama3": 5}
_ANGLE_MODES = {"graph": 0, "accurate": 1}


def rope_inv_freq(rope_type="default", *, rotary_dim, rope_theta, factor=0.0, original_max_position_embeddings=0,
                  max_position_embeddings=0, attention_factor=0.0, beta_fast=0.0, beta_slow=0.0, mscale=0.0,
                  mscale_all_dim=0.0, truncate=True, low_freq_factor=0.0, high_freq_factor=0.0, long_factor=None,
                  short_factor=None, seq_len=0):
    """Rope parameters (named as in Hugging Face configs) -> (inv_freq float32 (rotary_dim/2,),
    attention_factor). rotary_dim = int(head_dim * partial_rotary_factor). Optional parameters
    may be None (not given)."""
    if _str(rope_type, "rope_type", sorted(_ROPE_TYPES)) not in _ROPE_TYPES:
        raise Error(_INVALID_ATTRIBUTE, f"rope_type {rope_type!r} is not one of {sorted(_ROPE_TYPES)}")
    rd = _int(rotary_dim, "rotary_dim")
    half = rd // 2 if rd > 0 else 0
    if not isinstance(truncate, (bool, np.bool_, int, np.integer)) or truncate not in (0, 1):
        raise ArgumentTypeError(_INVALID_ATTRIBUTE, f"truncate = {truncate!r}: must be True or False")
    keep = []

    def factors(v, name):
        if v is None:
            return None
        try:
            arr = np.require(np.asarray(v, dtype=np.float64), requirements=["C", "A"])
        except (TypeError, ValueError) as e:
            raise ArgumentTypeError(_DTYPE, f"{name}: not a list of numbers ({e})") from None
        if arr.shape != (half,):
            raise Error(_SHAPE, f"{name} has shape {arr.shape}, expected ({half},)")
        keep.append(arr)
        return arr.ctypes.data_as(ctypes.POINTER(ctypes.c_double))

    cfg = _RopeConfig(
        _ROPE_TYPES[rope_type], rd, _float(rope_theta, "rope_theta"),
        _opt_int(max_position_embeddings, "max_position_embeddings"), _opt_float(factor, "factor"),
        _opt_int(original_max_position_embeddings, "original_max_position_embeddings"),
        _opt_float(attention_factor, "attention_factor"), _opt_float(beta_fast, "beta_fast"),
        _opt_float(beta_slow, "beta_slow"), _opt_float(mscale, "mscale"), _opt_float(mscale_all_dim, "mscale_all_dim"),
        1 if truncate else 0, _opt_float(low_freq_factor, "low_freq_factor"),
        _opt_float(high_freq_factor, "high_freq_factor"),
        factors(long_factor, "long_factor"), factors(short_factor, "short_factor"))
    n = _opt_int(seq_len, "seq_len")
    # the library refuses rotary_dim outside (0, 2^30] before writing: no buffer sized from it then
    inv = _empty(half if 0 < half <= 2**29 else 1, np.float32, "inv_freq")
    af = ctypes.c_float()
    _check(_lib.ropekit_rope_inv_freq(ctypes.byref(cfg), n,
                                      inv.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), half, ctypes.byref(af)))
    return inv[:half], af.value


def rotary_embedding_on_the_fly(X, inv_freq, position_ids, *, attention_factor=1.0, interleaved=0,
                                rotary_embedding_dim=0, num_heads=0, inverse=0, out=None):
    """ai.onnx.RotaryEmbedding without tables: cos/sin of position_ids (B, S) * inv_freq computed
    per token (accurate angle, float32), bit for bit as with a float32 'accurate' table."""
    attrs = _rotary_attrs(interleaved, rotary_embedding_dim, num_heads, inverse)
    af = _float(attention_factor, "attention_factor")
    X = _input(X, "X")
    p = _ids(_input(position_ids, "position_ids", "ids"), "position_ids")
    inv = _f32_vector(inv_freq, "inv_freq")
    y = _output(out, X, X.shape)
    _check(_lib.ropekit_rotary_embedding_on_the_fly(
        ctypes.byref(_view(X, "X")), inv.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), inv.shape[0],
        af, ctypes.byref(_view(p, "position_ids", "ids")), ctypes.byref(attrs),
        ctypes.byref(_view(y, "out", "any"))))
    return y


def rope_cos_sin_table(inv_freq, num_positions, *, attention_factor=1.0, mode="graph", dtype=np.float32):
    """inv_freq (h,) float32 -> (cos, sin), each (num_positions, h) of dtype (float32, float16 or
    bfloat16). mode 'graph' reproduces exported graphs' float32 angle; 'accurate' uses a double
    angle and rounds once."""
    if _str(mode, "mode", sorted(_ANGLE_MODES)) not in _ANGLE_MODES:
        raise Error(_INVALID_ATTRIBUTE, f"mode {mode!r} is not 'graph' or 'accurate'")
    inv = _f32_vector(inv_freq, "inv_freq")
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise ArgumentTypeError(_DTYPE, f"dtype {dtype!r} is not a numpy dtype ({e})") from None
    if _dtype_code(dt) not in (_FLOAT32, _FLOAT16, _BFLOAT16):
        raise ArgumentTypeError(_DTYPE, f"dtype {dt} is not {_FLOAT_DTYPES}")
    P = _int(num_positions, "num_positions")
    if P < 0:
        raise Error(_SHAPE, f"num_positions = {P} is negative")
    af = _float(attention_factor, "attention_factor")
    cos = _empty((P, inv.shape[0]), dt, "cos")
    sin = _empty((P, inv.shape[0]), dt, "sin")
    _check(_lib.ropekit_rope_cos_sin_table(
        inv.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), inv.shape[0], af,
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
_CPU_VARIANTS = "'ref', 'avx2', 'avx512', 'neon' or 'auto'"


def cpu_variant() -> str:
    """The CPU kernel variant in use: 'ref', 'avx2' or 'avx512' (all give the same bits)."""
    return _lib.ropekit_cpu_variant().decode()


def set_cpu_variant(name: str) -> None:
    """Use variant `name` ('ref', 'avx2', 'avx512', 'neon' or 'auto'), process-wide. Raises Error
    when the name is unknown or the CPU cannot run it (ArgumentTypeError when it is not a str)."""
    _check(_lib.ropekit_set_cpu_variant(_str(name, "name", _CPU_VARIANTS).encode()))


def set_num_threads(n: int) -> None:
    """Threads used by large calls (the caller's included), process-wide; default 1; n in [1, 256]."""
    # beyond a C int the binding refuses; within it the library checks [1, 256]
    _check(_lib.ropekit_set_num_threads(_int(n, "n", lo=-(2**31), hi=2**31 - 1, range_text="[1, 256]")))


def get_num_threads() -> int:
    """The thread count set by set_num_threads (default 1)."""
    return int(_lib.ropekit_get_num_threads())


# ---- ONNX fusion and inspection (libropekit_onnx; ropekit/_fuse.py) -------------------------
from ._fuse import FuseReport, fuse, inspect  # noqa: E402

__all__ += ["fuse", "inspect", "FuseReport", "__version__"]

from ._ort import ort_custom_ops_library  # noqa: E402,F401  (libropekit_ort path, for onnxruntime)

__all__ += ["ort_custom_ops_library"]
