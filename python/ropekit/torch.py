"""ropekit on ``torch.Tensor``, CPU and CUDA (``import ropekit.torch``; torch is needed only here).

The operators read the tensor's data pointer, shape and strides (in elements, as torch gives
them), so any strided view works, in place included (``out=x``): e.g. the q and k column ranges of
a packed QKV projection. CUDA tensors run on the current CUDA stream of their device
(``torch.cuda.current_stream(x.device)``), asynchronously, through libropekit_cuda; CPU tensors
through libropekit. dtypes: float32, float16, bfloat16 activations; tables of the activation
dtype or float32; position ids int64 (other integer dtypes are converted).

Every operator is a ``torch.library.custom_op`` (namespace ``ropekit``) with a fake
implementation, so ``torch.compile`` keeps it in the graph (no graph break) and
``torch.export`` sees it. Operators (attributes as in ``ropekit``, i.e. the ONNX names):

    rotary_embedding(x, cos_cache, sin_cache, position_ids=None, *, interleaved, rotary_embedding_dim,
                     num_heads, inverse, out=None)          ai.onnx.RotaryEmbedding
    ms_rotary_embedding(x, position_ids, cos_cache, sin_cache, *, interleaved, rotary_embedding_dim,
                        num_heads, scale, inverse, out=None)  com.microsoft.RotaryEmbedding

Drop-ins (change one line):

    apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1)   transformers
    apply_rope_with_cos_sin_cache_inplace(positions, query, key, head_size, cos_sin_cache,
                                          is_neox=True)                          FlashInfer

Errors: invalid arguments raise ``ropekit.Error`` (the C library's message) before anything runs.
Position ids outside the table: on the CPU the call raises ``ropekit.Error``; on CUDA the ids
live in device memory, so, as the C API does (include/ropekit_cuda.h), the affected pairs are
copied unrotated and the event is counted in the device's error state; :func:`check_errors`
synchronizes and raises ``ropekit.Error`` naming the first bad id (``set_sync_check(True)``
checks after every call instead, at the cost of a synchronization).
"""

from __future__ import annotations

import ctypes
import struct

import torch

import ropekit as _rk
from ropekit import Error

from . import _libpath

__all__ = [
    "rotary_embedding",
    "ms_rotary_embedding",
    "apply_rotary_pos_emb",
    "apply_rope_with_cos_sin_cache_inplace",
    "check_errors",
    "reset_errors",
    "set_sync_check",
    "cuda_library_path",
]

# ropekit_tensor packed in one go (faster than setting the ctypes fields one by one)
_PACK = struct.Struct("=Qii4q4q")
assert _PACK.size == ctypes.sizeof(_rk._Tensor)
_DTYPES = {torch.float32: 1, torch.float16: 2, torch.bfloat16: 3, torch.int64: 4}
_T = ctypes.POINTER(_rk._Tensor)
_cuda = None
cuda_library_path = None
_states = {}  # device index -> default error state pointer
_sync_check = False


def _cuda_lib():
    """libropekit_cuda, loaded on the first CUDA call (after torch has loaded the CUDA runtime)."""
    global _cuda, cuda_library_path
    if _cuda is None:
        lib, cuda_library_path = _libpath.load("ropekit_cuda", "the CUDA operators; built when nvcc is found")
        vp = ctypes.c_void_p
        lib.ropekit_cuda_last_error.restype = ctypes.c_char_p
        lib.ropekit_cuda_last_error.argtypes = []
        for name, args in {
            "ropekit_cuda_rotary_embedding": [_T, _T, _T, _T, ctypes.POINTER(_rk._RotaryAttrs), _T, vp, vp],
            "ropekit_cuda_ms_rotary_embedding": [_T, _T, _T, _T, ctypes.POINTER(_rk._MsRotaryAttrs), _T, vp, vp],
            "ropekit_cuda_error_state_default": [ctypes.POINTER(vp)],
            "ropekit_cuda_error_state_reset": [vp, vp],
            "ropekit_cuda_check_errors": [vp, vp, ctypes.POINTER(ctypes.c_int64)],
        }.items():
            f = getattr(lib, name)
            f.argtypes, f.restype = args, ctypes.c_int
        _cuda = lib
    return _cuda


def _cuda_check(lib, code):
    if code != 0:
        raise Error(code, lib.ropekit_cuda_last_error().decode(errors="replace"))


def _state(lib, device: torch.device):
    idx = device.index if device.index is not None else torch.cuda.current_device()
    st = _states.get(idx)
    if st is None:
        p = ctypes.c_void_p()
        with torch.cuda.device(idx):
            _cuda_check(lib, lib.ropekit_cuda_error_state_default(ctypes.byref(p)))
        st = _states[idx] = p
    return st


def _view(t: torch.Tensor | None, name: str):
    """A ropekit_tensor over the tensor's memory (no copy); the tensor must stay alive."""
    if t is None:
        return None
    code = _DTYPES.get(t.dtype)
    if code is None:
        raise TypeError(f"{name}: dtype {t.dtype} is not float32, float16, bfloat16 or int64")
    r = t.dim()
    if r < 1 or r > 4:
        raise Error(3, f"{name}: rank {r} is outside [1, {_rk.MAX_RANK}]")
    pad = (0,) * (4 - r)
    return _rk._Tensor.from_buffer_copy(_PACK.pack(t.data_ptr() if t.numel() else 0, code, r, *t.shape, *pad,
                                                   *t.stride(), *pad))


try:  # the raw cudaStream_t of the current stream, without building a torch.cuda.Stream object
    _raw_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream


def _eager(*tensors) -> bool:
    """Call the C library directly (no dispatcher round trip): plain tensors outside tracing.
    Under torch.compile / torch.export / FX tracing, tensors are fakes or proxies and the call
    goes through the registered custom op instead, as do tensors that require grad (the ops have
    no backward: torch then says so instead of a result silently cut from the graph)."""
    if torch.compiler.is_compiling():
        return False
    for t in tensors:
        if t is not None and (type(t) is not torch.Tensor or t.requires_grad):
            return False
    return True


def _ref(v):
    return ctypes.byref(v) if v is not None else None


def _ids(p, like: torch.Tensor, name: str):
    if p is None:
        return None
    if not isinstance(p, torch.Tensor):
        p = torch.as_tensor(p)
    if p.dtype.is_floating_point or p.dtype.is_complex or p.dtype == torch.bool:
        raise TypeError(f"{name}: dtype {p.dtype} is not an integer type")
    return p.to(device=like.device, dtype=torch.int64)


def _same_device(name_tensors):
    dev = None
    for name, t in name_tensors:
        if t is None:
            continue
        if dev is None:
            dev = t.device
        elif t.device != dev:
            raise Error(3, f"{name} is on {t.device}, the other tensors on {dev}")
    return dev


def _launch(cpu_fn: str, cuda_fn: str, x: torch.Tensor, args, attrs, y: torch.Tensor):
    """Run one operator: args are (name, tensor-or-None) in the C order, y the output."""
    dev = _same_device([("x", x), *args, ("out", y)])
    views = [_view(t, n) for n, t in args]
    vx, vy = _view(x, "x"), _view(y, "out")
    if dev.type == "cpu":
        _rk._check(getattr(_rk._lib, cpu_fn)(ctypes.byref(vx), *[_ref(v) for v in views], ctypes.byref(attrs),
                                              ctypes.byref(vy)))
    elif dev.type == "cuda":
        lib = _cuda_lib()
        st = _state(lib, dev)
        stream = ctypes.c_void_p(_raw_stream(dev.index if dev.index is not None else torch.cuda.current_device()))
        fn = getattr(lib, cuda_fn)
        call = (ctypes.byref(vx), *[_ref(v) for v in views], ctypes.byref(attrs), ctypes.byref(vy), stream, st)
        if dev.index is None or dev.index == torch.cuda.current_device():
            _cuda_check(lib, fn(*call))
        else:
            with torch.cuda.device(dev):
                _cuda_check(lib, fn(*call))
        if _sync_check:
            check_errors(dev)
    else:
        raise Error(8, f"x is on {dev}; ropekit.torch runs on CPU and CUDA tensors")


# ---- the custom operators -----------------------------------------------------------------------
# Each has an out-of-place form (returns a new tensor) and an in-place form (writes `out`, which
# may be x itself or any tensor of x's shape; mutates_args tells torch.compile).


def _rotary(x, cos_cache, sin_cache, position_ids, interleaved, rotary_dim, num_heads, inverse, y):
    attrs = _rk._RotaryAttrs(interleaved, rotary_dim, num_heads, inverse)
    _launch("ropekit_rotary_embedding", "ropekit_cuda_rotary_embedding", x,
            [("cos_cache", cos_cache), ("sin_cache", sin_cache), ("position_ids", position_ids)], attrs, y)


def _ms_rotary(x, position_ids, cos_cache, sin_cache, interleaved, rotary_dim, num_heads, scale, inverse, y):
    attrs = _rk._MsRotaryAttrs(interleaved, rotary_dim, num_heads, scale, 0, inverse)
    _launch("ropekit_ms_rotary_embedding", "ropekit_cuda_ms_rotary_embedding", x,
            [("position_ids", position_ids), ("cos_cache", cos_cache), ("sin_cache", sin_cache)], attrs, y)


@torch.library.custom_op("ropekit::rotary_embedding", mutates_args=())
def _op_rotary(x: torch.Tensor, cos_cache: torch.Tensor, sin_cache: torch.Tensor, position_ids: torch.Tensor | None,
               interleaved: int, rotary_embedding_dim: int, num_heads: int, inverse: int) -> torch.Tensor:
    y = torch.empty_like(x)
    _rotary(x, cos_cache, sin_cache, position_ids, interleaved, rotary_embedding_dim, num_heads, inverse, y)
    return y


@_op_rotary.register_fake
def _(x, cos_cache, sin_cache, position_ids, interleaved, rotary_embedding_dim, num_heads, inverse):
    return torch.empty_like(x)


@torch.library.custom_op("ropekit::rotary_embedding_out", mutates_args=("out",))
def _op_rotary_out(x: torch.Tensor, cos_cache: torch.Tensor, sin_cache: torch.Tensor,
                   position_ids: torch.Tensor | None, interleaved: int, rotary_embedding_dim: int, num_heads: int,
                   inverse: int, out: torch.Tensor) -> None:
    _rotary(x, cos_cache, sin_cache, position_ids, interleaved, rotary_embedding_dim, num_heads, inverse, out)


@_op_rotary_out.register_fake
def _(x, cos_cache, sin_cache, position_ids, interleaved, rotary_embedding_dim, num_heads, inverse, out):
    return None


@torch.library.custom_op("ropekit::ms_rotary_embedding", mutates_args=())
def _op_ms(x: torch.Tensor, position_ids: torch.Tensor, cos_cache: torch.Tensor, sin_cache: torch.Tensor,
           interleaved: int, rotary_embedding_dim: int, num_heads: int, scale: float, inverse: int) -> torch.Tensor:
    y = torch.empty_like(x)
    _ms_rotary(x, position_ids, cos_cache, sin_cache, interleaved, rotary_embedding_dim, num_heads, scale, inverse, y)
    return y


@_op_ms.register_fake
def _(x, position_ids, cos_cache, sin_cache, interleaved, rotary_embedding_dim, num_heads, scale, inverse):
    return torch.empty_like(x)


@torch.library.custom_op("ropekit::ms_rotary_embedding_out", mutates_args=("out",))
def _op_ms_out(x: torch.Tensor, position_ids: torch.Tensor, cos_cache: torch.Tensor, sin_cache: torch.Tensor,
               interleaved: int, rotary_embedding_dim: int, num_heads: int, scale: float, inverse: int,
               out: torch.Tensor) -> None:
    _ms_rotary(x, position_ids, cos_cache, sin_cache, interleaved, rotary_embedding_dim, num_heads, scale, inverse,
               out)


@_op_ms_out.register_fake
def _(x, position_ids, cos_cache, sin_cache, interleaved, rotary_embedding_dim, num_heads, scale, inverse, out):
    return None


def _check_out(out, x, name="out"):
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor")
    if out.shape != x.shape or out.dtype != x.dtype:
        raise Error(3, f"{name} has shape {tuple(out.shape)} {out.dtype}, x has {tuple(x.shape)} {x.dtype}")


def _tensor(t, name):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, not {type(t).__name__}")
    return t


# ---- public operators ------------------------------------------------------------------------


def rotary_embedding(x, cos_cache, sin_cache, position_ids=None, *, interleaved=0, rotary_embedding_dim=0,
                     num_heads=0, inverse=0, out=None):
    """ai.onnx.RotaryEmbedding on tensors: x (B, S, N*H) with num_heads, or (B, N, S, H); with
    position_ids (B, S) the tables are (P, R/2), without them (B, S, R/2). Returns y (a new
    tensor), or writes `out` (x itself for in place) and returns it."""
    x = _tensor(x, "x")
    c, s = _tensor(cos_cache, "cos_cache"), _tensor(sin_cache, "sin_cache")
    p = _ids(position_ids, x, "position_ids")
    a = _attrs(interleaved, rotary_embedding_dim, num_heads, inverse)
    return _run(_rotary, torch.ops.ropekit.rotary_embedding, torch.ops.ropekit.rotary_embedding_out,
                (x, c, s, p), a, out)


def _run(eager, op, op_out, tensors, attrs, out):
    """Runs an operator on (*tensors, *attrs), x = tensors[0]: checks `out` against x, then calls
    the C library directly (eager(*tensors, *attrs, y)) where _eager allows, else the registered
    op (op(...) returning y, or op_out(..., out)). Returns y, or `out`."""
    x = tensors[0]
    if out is not None:
        _check_out(out, x)
    if _eager(*tensors, out):
        y = torch.empty_like(x) if out is None else out
        eager(*tensors, *attrs, y)
        return y
    if out is None:
        return op(*tensors, *attrs)
    op_out(*tensors, *attrs, out)
    return out


def _attrs(interleaved, rotary_embedding_dim, num_heads, inverse):
    """The integer attributes, checked as the numpy binding checks them (no silent truncation)."""
    return (_rk._int(interleaved, "interleaved", flag=True),
            _rk._int(rotary_embedding_dim, "rotary_embedding_dim"),
            _rk._int(num_heads, "num_heads"), _rk._int(inverse, "inverse", flag=True))


def ms_rotary_embedding(x, position_ids, cos_cache, sin_cache, *, interleaved=0, rotary_embedding_dim=0,
                        num_heads=0, scale=1.0, inverse=0, out=None):
    """com.microsoft.RotaryEmbedding on tensors: x (B, S, N*H) with num_heads, or (B, N, S, H);
    position_ids (B, S), or (1,) for an offset; tables (P, R/2)."""
    x = _tensor(x, "x")
    c, s = _tensor(cos_cache, "cos_cache"), _tensor(sin_cache, "sin_cache")
    p = _ids(_tensor(position_ids, "position_ids"), x, "position_ids")
    i, r, nh, inv = _attrs(interleaved, rotary_embedding_dim, num_heads, inverse)
    a = (i, r, nh, _rk._float(scale, "scale"), inv)
    return _run(_ms_rotary, torch.ops.ropekit.ms_rotary_embedding, torch.ops.ropekit.ms_rotary_embedding_out,
                (x, p, c, s), a, out)


# ---- drop-ins --------------------------------------------------------------------------------


def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    """Drop-in for transformers' ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)``
    (LLaMA, Mistral, Qwen2/3, Gemma, ... : the rotate_half convention). Returns (q_embed,
    k_embed), new tensors.

    q, k: (B, N, S, H) with unsqueeze_dim=1, (B, S, N, H) with unsqueeze_dim=2 (heads may
    differ, GQA). cos, sin: what the model's rotary embedding returns, (B, S, R) or (S, R), in
    the form transformers builds them, ``cat((freqs, freqs), -1).cos()`` (times the attention
    scaling): only the first half of the last axis is read. R may be < H: the first R features
    are rotated and the rest passed through. Results are rounded once from exact products (the
    original rounds three times in low precision), so they can differ from it by an ulp or so.
    position_ids is ignored, as in transformers."""
    del position_ids
    q, k = _tensor(q, "q"), _tensor(k, "k")
    cos, sin = _tensor(cos, "cos"), _tensor(sin, "sin")
    if unsqueeze_dim not in (1, 2):
        raise Error(2, f"unsqueeze_dim must be 1 ((B, N, S, H) tensors) or 2 ((B, S, N, H)), not {unsqueeze_dim}")
    if q.dim() != 4 or k.dim() != 4:
        raise Error(3, f"q and k must be 4D, got {tuple(q.shape)} and {tuple(k.shape)}")
    if cos.shape != sin.shape or cos.dim() not in (2, 3):
        raise Error(3, f"cos and sin must have the same shape, (B, S, R) or (S, R); got {tuple(cos.shape)} and "
                       f"{tuple(sin.shape)}")
    R = cos.shape[-1]
    if R % 2:
        raise Error(3, f"cos has {R} features, must be even")
    out = []
    for name, x in (("q", q), ("k", k)):
        xv = x if unsqueeze_dim == 1 else x.transpose(1, 2)  # a (B, N, S, H) view either way
        B, _, S, _ = xv.shape
        c = torch.broadcast_to(cos, (B, S, R))[..., : R // 2]
        s = torch.broadcast_to(sin, (B, S, R))[..., : R // 2]
        y = torch.empty_like(x)
        yv = y if unsqueeze_dim == 1 else y.transpose(1, 2)
        if _eager(xv, c, s):
            _rotary(xv, c, s, None, 0, R, 0, 0, yv)
        else:
            torch.ops.ropekit.rotary_embedding_out(xv, c, s, None, 0, R, 0, 0, yv)
        out.append(y)
    return out[0], out[1]


def apply_rope_with_cos_sin_cache_inplace(positions, query, key, head_size, cos_sin_cache, is_neox=True):
    """Drop-in for FlashInfer's ``apply_rope_with_cos_sin_cache_inplace`` (the vLLM/SGLang
    calling convention): rotates query and key IN PLACE and returns None.

    positions (nnz,) integer; query (nnz, num_q_heads * head_size) or (nnz, num_q_heads,
    head_size), key likewise (views into a packed QKV buffer are fine); cos_sin_cache
    (max_positions, rotary_dim), float32 or the query dtype, cos in the first half of each row
    and sin in the second. rotary_dim <= head_size: the first rotary_dim features of each head
    are rotated. is_neox: True rotates halves (rotate_half), False adjacent pairs (GPT-J)."""
    query, key = _tensor(query, "query"), _tensor(key, "key")
    cache = _tensor(cos_sin_cache, "cos_sin_cache")
    positions = _tensor(positions, "positions")
    head_size = _rk._int(head_size, "head_size")
    if cache.dim() != 2 or cache.shape[1] % 2:
        raise Error(3, f"cos_sin_cache must be (max_positions, rotary_dim) with rotary_dim even, got "
                       f"{tuple(cache.shape)}")
    R = cache.shape[1]
    if positions.dim() != 1:
        raise Error(3, f"positions must be 1D (nnz,), got {tuple(positions.shape)}")
    p = _ids(positions, query, "positions").unsqueeze(0)  # (1, nnz)
    c, s = cache[:, : R // 2], cache[:, R // 2:]
    views = []
    for name, x in (("query", query), ("key", key)):
        if x.dim() == 3:
            if x.shape[2] != head_size:
                raise Error(3, f"{name} has head size {x.shape[2]}, head_size is {head_size}")
            try:  # a view (never a copy: the rotation is written through it)
                x2 = x.view(x.shape[0], x.shape[1] * head_size)
            except RuntimeError:
                raise Error(3, f"{name}: the heads of a 3D {name} must be evenly strided "
                               f"(strides {tuple(x.stride())})") from None
        elif x.dim() == 2:
            x2 = x
        else:
            raise Error(3, f"{name} must be (nnz, heads * head_size) or (nnz, heads, head_size), got {tuple(x.shape)}")
        if x2.shape[0] != positions.shape[0]:
            raise Error(3, f"{name} has {x2.shape[0]} tokens, positions has {positions.shape[0]}")
        if head_size <= 0 or x2.shape[1] % head_size:
            raise Error(3, f"{name} has {x2.shape[1]} features per token, not a multiple of head_size {head_size}")
        views.append(x2)
    q2, k2 = views
    eager = _eager(q2, k2, p, c)
    if eager and _adjacent(q2, k2):
        # key's columns follow query's in the same rows (a packed QKV buffer): one launch for both
        views = [q2.as_strided((q2.shape[0], q2.shape[1] + k2.shape[1]), q2.stride())]
    for x2 in views:
        xv = x2.unsqueeze(0)  # (1, nnz, heads * head_size), a view: written in place
        a = (0 if is_neox else 1, R, x2.shape[1] // head_size, 1.0, 0)
        if eager:
            _ms_rotary(xv, p, c, s, *a, xv)
        else:
            torch.ops.ropekit.ms_rotary_embedding_out(xv, p, c, s, *a, xv)


def _adjacent(q: torch.Tensor, k: torch.Tensor) -> bool:
    """k is the column range right after q's in the same 2D buffer (same rows, unit column stride)."""
    return (q.dtype == k.dtype and q.device == k.device and q.shape[0] == k.shape[0] and q.stride() == k.stride()
            and q.stride(1) == 1 and q.numel() > 0 and k.numel() > 0
            and k.data_ptr() == q.data_ptr() + q.shape[1] * q.element_size()
            and q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr())


# ---- CUDA error state ------------------------------------------------------------------------


def _dev(device):
    if device is None:
        return torch.device("cuda", torch.cuda.current_device())
    d = torch.device(device)
    return d if d.index is not None else torch.device("cuda", torch.cuda.current_device())


def check_errors(device=None, *, reset=True) -> int:
    """Synchronize the current stream of `device` (default: the current CUDA device) and raise
    ropekit.Error (ROPEKIT_ERROR_POSITION_OUT_OF_RANGE, with the C API's message naming the first
    bad id) if any CUDA call since the last reset met a position id outside its table; the
    state is then reset (unless reset=False). Returns 0 when there was none."""
    lib = _cuda_lib()
    d = _dev(device)
    st = _state(lib, d)
    stream = ctypes.c_void_p(torch.cuda.current_stream(d).cuda_stream)
    n = ctypes.c_int64(0)
    code = lib.ropekit_cuda_check_errors(st, stream, ctypes.byref(n))
    if code != 0:
        msg = lib.ropekit_cuda_last_error().decode(errors="replace")
        if reset:
            _cuda_check(lib, lib.ropekit_cuda_error_state_reset(st, stream))
        raise Error(code, msg)
    return int(n.value)


def reset_errors(device=None) -> None:
    """Zero the CUDA error state of `device` (enqueued on its current stream)."""
    lib = _cuda_lib()
    d = _dev(device)
    _cuda_check(lib, lib.ropekit_cuda_error_state_reset(_state(lib, d),
                                                       ctypes.c_void_p(torch.cuda.current_stream(d).cuda_stream)))


def set_sync_check(on: bool) -> None:
    """True: every CUDA call synchronizes and raises at once on out-of-range position ids
    (debugging; slow). False (default): asynchronous, read with check_errors()."""
    global _sync_check
    _sync_check = bool(on)
