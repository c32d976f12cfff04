"""ropekit.torch: the operators on torch tensors (CPU here and in CI when torch is importable;
CUDA when a GPU is present), the custom ops under torch.compile, and the transformers and
FlashInfer drop-ins against float64 transcriptions of their originals' conventions.

References: the CPU tensors must give exactly the bits of the numpy binding on the same data
(the same C library; this tests the strides, views, dtypes and in-place handling of the torch
layer); CUDA tensors must give exactly the CPU library's bits (include/ropekit_cuda.h: the CUDA
kernels reproduce the CPU's arithmetic) and those of a direct ctypes call of the C CUDA API."""

import ctypes

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ml_dtypes = pytest.importorskip("ml_dtypes")

import ropekit  # noqa: E402
import ropekit.torch as rt  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def to_np(t):
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def bits(t):
    t = t.detach().cpu().contiguous()
    return t.view(torch.int32 if t.element_size() == 4 else torch.int16)


def tables(P, R, theta=10000.0, dtype=torch.float32):
    inv = 1.0 / theta ** (torch.arange(0, R, 2, dtype=torch.float64) / R)
    ang = torch.arange(P, dtype=torch.float64)[:, None] * inv
    return ang.cos().to(dtype), ang.sin().to(dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rotary_embedding_in_place_on_packed_qkv(device, dtype):
    g = torch.Generator().manual_seed(1)
    B, S, Nq, Nk, H, P = 2, 7, 4, 2, 32, 64
    qkv = torch.randn(B, S, (Nq + 2 * Nk) * H, generator=g).to(dtype)
    cos, sin = tables(P, H, dtype=dtype)
    pos = torch.randint(0, P, (B, S), generator=g)
    # reference: the numpy binding on copies
    q_ref = ropekit.rotary_embedding(to_np(qkv[..., : Nq * H]).copy(), to_np(cos), to_np(sin), pos.numpy(),
                                     num_heads=Nq)
    k_ref = ropekit.rotary_embedding(to_np(qkv[..., Nq * H:(Nq + Nk) * H]).copy(), to_np(cos), to_np(sin),
                                     pos.numpy(), num_heads=Nk)
    qkv, cos, sin, pos = qkv.to(device), cos.to(device), sin.to(device), pos.to(device)
    v_before = qkv[..., (Nq + Nk) * H:].clone()
    q, k = qkv[..., : Nq * H], qkv[..., Nq * H:(Nq + Nk) * H]  # strided views
    assert rt.rotary_embedding(q, cos, sin, pos, num_heads=Nq, out=q) is q
    rt.rotary_embedding(k, cos, sin, pos, num_heads=Nk, out=k)
    assert np.array_equal(to_np(q).view(np.uint8), q_ref.view(np.uint8))
    assert np.array_equal(to_np(k).view(np.uint8), k_ref.view(np.uint8))
    assert torch.equal(qkv[..., (Nq + Nk) * H:], v_before)  # v untouched


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_ms_rotary_embedding_float32_tables_and_offset(device, dtype):
    g = torch.Generator().manual_seed(2)
    B, N, S, H, P = 3, 2, 5, 16, 40
    x = torch.randn(B, N, S, H, generator=g).to(dtype)
    cos, sin = tables(P, 12)  # float32 tables for any x dtype, partial rotation R = 12
    off = torch.tensor([9])
    ref = ropekit.ms_rotary_embedding(to_np(x), off.numpy(), cos.numpy(), sin.numpy(), rotary_embedding_dim=12,
                                      interleaved=1)
    y = rt.ms_rotary_embedding(x.to(device), off.to(device), cos.to(device), sin.to(device),
                               rotary_embedding_dim=12, interleaved=1)
    assert y.device.type == device and y.dtype == dtype
    assert np.array_equal(to_np(y).view(np.uint8), ref.view(np.uint8))


def _hf_reference(x, cos, sin, unsqueeze_dim):
    """transformers' apply_rotary_pos_emb in float64: x*cos + rotate_half(x)*sin."""
    x, c, s = x.double(), cos.double().unsqueeze(unsqueeze_dim), sin.double().unsqueeze(unsqueeze_dim)
    R = c.shape[-1]
    xr, xp = x[..., :R], x[..., R:]
    x1, x2 = xr[..., : R // 2], xr[..., R // 2:]
    return torch.cat([xr * c + torch.cat([-x2, x1], -1) * s, xp], -1)


def _hf_original(q, k, cos, sin, unsqueeze_dim=1):
    """transformers' apply_rotary_pos_emb, transcribed (computes in the tensors' dtype)."""
    def rotate_half(x):
        return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


TOL = {torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}  # ~1 ulp at |x| <= 4


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("unsqueeze_dim", [1, 2])
def test_hf_apply_rotary_pos_emb(device, dtype, unsqueeze_dim):
    g = torch.Generator().manual_seed(3)
    B, Nq, Nk, S, H = 2, 4, 2, 9, 64
    shape = (lambda n: (B, n, S, H)) if unsqueeze_dim == 1 else (lambda n: (B, S, n, H))
    q, k = torch.randn(*shape(Nq), generator=g).to(dtype), torch.randn(*shape(Nk), generator=g).to(dtype)
    pos = torch.randint(0, 500, (B, S), generator=g)
    inv = 1.0 / 10000 ** (torch.arange(0, H, 2).float() / H)
    freqs = pos[..., None].float() * inv
    emb = torch.cat((freqs, freqs), -1)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)  # as LlamaRotaryEmbedding returns them
    q, k, cos, sin = (t.to(device) for t in (q, k, cos, sin))
    qe, ke = rt.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    qo, ko = _hf_original(q, k, cos, sin, unsqueeze_dim)
    for got, orig, x in ((qe, qo, q), (ke, ko, k)):
        assert got.shape == x.shape and got.dtype == dtype and got.device == x.device
        ref = _hf_reference(x, cos, sin, unsqueeze_dim)
        assert (got.double() - ref).abs().max().item() <= TOL[dtype] * 4  # one rounding of exact products
        assert (got.double() - orig.double()).abs().max().item() <= TOL[dtype] * 8  # vs the original
    assert torch.equal(q, q.clone())  # inputs untouched (not in place)


@pytest.mark.parametrize("device", DEVICES)
def test_hf_partial_rotary_and_broadcast_batch(device):
    g = torch.Generator().manual_seed(4)
    q = torch.randn(3, 2, 5, 32, generator=g, device="cpu").to(device)
    k = torch.randn(3, 1, 5, 32, generator=g).to(device)
    ang = torch.arange(5.0)[:, None] * torch.tensor([1.0, 0.5, 0.25, 0.125])
    emb = torch.cat((ang, ang), -1)[None]  # (1, S, R = 8): one batch row for all 3
    cos, sin = emb.cos().to(device), emb.sin().to(device)
    qe, ke = rt.apply_rotary_pos_emb(q, k, cos, sin)
    for got, x in ((qe, q), (ke, k)):
        ref = _hf_reference(x, torch.broadcast_to(cos, (3, 5, 8)), torch.broadcast_to(sin, (3, 5, 8)), 1)
        assert (got.double() - ref).abs().max().item() < 1e-5
        assert torch.equal(got[..., 8:], x[..., 8:])


def _flashinfer_reference(positions, x, head_size, cache, is_neox):
    """FlashInfer's apply_rope_with_cos_sin_cache_inplace convention in float64 (vLLM's
    RotaryEmbedding.forward_native): cache rows [cos | sin] of rotary_dim; neox rotates halves,
    otherwise adjacent pairs; features past rotary_dim pass through."""
    R = cache.shape[1]
    xs = x.reshape(x.shape[0], -1, head_size).double()
    c = cache[positions.long()].double()[:, None, : R // 2]
    s = cache[positions.long()].double()[:, None, R // 2:]
    xr, xp = xs[..., :R], xs[..., R:]
    if is_neox:
        x1, x2 = xr[..., : R // 2], xr[..., R // 2:]
        out = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)
    else:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        out = torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], -1).flatten(-2)
    return torch.cat([out, xp], -1).reshape(x.shape)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_neox", [True, False])
def test_flashinfer_drop_in(device, dtype, is_neox):
    g = torch.Generator().manual_seed(5)
    nnz, Nq, Nk, D, R, P = 11, 4, 2, 64, 32, 256
    qkv = torch.randn(nnz, (Nq + 2 * Nk) * D, generator=g).to(dtype).to(device)
    query, key = qkv[:, : Nq * D], qkv[:, Nq * D:(Nq + Nk) * D]  # views of the packed buffer
    c, s = tables(P, R)
    cache = torch.cat([c, s], -1).to(device)  # float32, as FlashInfer requires
    positions = torch.randint(0, P, (nnz,), generator=g, dtype=torch.int32).to(device)
    q_ref = _flashinfer_reference(positions, query, D, cache, is_neox)
    k_ref = _flashinfer_reference(positions, key, D, cache, is_neox)
    v_before = qkv[:, (Nq + Nk) * D:].clone()
    assert rt.apply_rope_with_cos_sin_cache_inplace(positions, query, key, D, cache, is_neox) is None
    assert (query.double() - q_ref).abs().max().item() <= TOL[dtype] * 4
    assert (key.double() - k_ref).abs().max().item() <= TOL[dtype] * 4
    assert torch.equal(qkv[:, (Nq + Nk) * D:], v_before)
    # the 3D form (nnz, heads, head_size) gives the same bits
    q3 = torch.randn(nnz, Nq, D, generator=g).to(dtype).to(device)
    k3 = torch.randn(nnz, Nk, D, generator=g).to(dtype).to(device)
    q2, k2 = q3.clone().flatten(1), k3.clone().flatten(1)
    rt.apply_rope_with_cos_sin_cache_inplace(positions, q3, k3, D, cache, is_neox)
    rt.apply_rope_with_cos_sin_cache_inplace(positions, q2, k2, D, cache, is_neox)
    assert torch.equal(bits(q3.flatten(1)), bits(q2)) and torch.equal(bits(k3.flatten(1)), bits(k2))


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_keeps_the_custom_ops(device):
    B, N, S, H = 2, 4, 6, 32
    cos, sin = tables(64, H)
    cos, sin = cos.to(device), sin.to(device)

    def f(x, pos):
        y = rt.rotary_embedding(x * 2.0, cos, sin, pos)
        z = x.clone()
        rt.rotary_embedding(z, cos, sin, pos, out=z)  # in place inside the graph
        return y + z

    x = torch.randn(B, N, S, H, device=device)
    pos = torch.randint(0, 64, (B, S), device=device)
    eager = f(x, pos)
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)  # fullgraph: a graph break would raise
    assert torch.equal(compiled(x, pos), eager)
    gm_ops = []

    def backend(gm, example_inputs):
        gm_ops.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    torch._dynamo.reset()
    torch.compile(f, fullgraph=True, backend=backend)(x, pos)
    assert any("ropekit.rotary_embedding" in t for t in gm_ops), gm_ops


@pytest.mark.parametrize("device", DEVICES)
def test_ms_rotary_embedding_under_torch_compile_returns_y_and_writes_out(device):
    """The registered-op path of ms_rotary_embedding (both the returning op and the _out op),
    against the numpy binding's bits."""
    B, S, N, H, P = 2, 5, 3, 8, 16
    cos, sin = tables(P, H)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(B, S, N * H, generator=g)
    pos = torch.randint(0, P, (B, S), generator=g)
    ref = ropekit.ms_rotary_embedding(x.numpy(), pos.numpy(), cos.numpy(), sin.numpy(), num_heads=N, scale=0.5)
    cos, sin = cos.to(device), sin.to(device)

    def f(x, pos):
        y = rt.ms_rotary_embedding(x, pos, cos, sin, num_heads=N, scale=0.5)
        z = torch.empty_like(x)
        rt.ms_rotary_embedding(x, pos, cos, sin, num_heads=N, scale=0.5, out=z)
        return y, z

    torch._dynamo.reset()
    y, z = torch.compile(f, fullgraph=True)(x.to(device), pos.to(device))
    assert np.array_equal(to_np(y).view(np.uint8), ref.view(np.uint8))
    assert np.array_equal(to_np(z).view(np.uint8), ref.view(np.uint8))


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_in_place_drop_ins(device):
    """The FlashInfer form mutates graph inputs (views of a packed QKV buffer); the HF form
    returns new tensors. Compiled (fullgraph) and eager must give the same bits."""
    nnz, D = 5, 32
    c, s = tables(64, D)
    cache = torch.cat([c, s], -1).to(device)

    def fi(qkv, positions):
        rt.apply_rope_with_cos_sin_cache_inplace(positions, qkv[:, : 4 * D], qkv[:, 4 * D: 6 * D], D, cache, True)
        return qkv * 1.0

    def hf(q, k, cos, sin):
        a, b = rt.apply_rotary_pos_emb(q, k, cos, sin)
        return a + 1.0, b

    qkv = torch.randn(nnz, 8 * D, device=device)
    positions = torch.randint(0, 64, (nnz,), device=device)
    torch._dynamo.reset()
    e, cpl = qkv.clone(), qkv.clone()
    fi(e, positions)
    torch.compile(fi, fullgraph=True)(cpl, positions)
    assert torch.equal(e, cpl) and not torch.equal(e, qkv)
    q, k = torch.randn(2, 4, nnz, D, device=device), torch.randn(2, 2, nnz, D, device=device)
    ang = torch.arange(nnz, dtype=torch.float32, device=device)[:, None] * torch.rand(D // 2, device=device)
    cos, sin = torch.cat([ang, ang], -1).cos()[None], torch.cat([ang, ang], -1).sin()[None]
    got = torch.compile(hf, fullgraph=True)(q, k, cos, sin)
    ref = hf(q, k, cos, sin)
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])


def test_opcheck():
    x = torch.randn(2, 3, 4, 8)
    cos, sin = tables(16, 8)
    pos = torch.randint(0, 16, (2, 4))
    torch.library.opcheck(torch.ops.ropekit.rotary_embedding.default, (x, cos, sin, pos, 0, 0, 0, 0))
    torch.library.opcheck(torch.ops.ropekit.rotary_embedding_out.default, (x, cos, sin, pos, 0, 0, 0, 0, x.clone()))
    torch.library.opcheck(torch.ops.ropekit.ms_rotary_embedding.default, (x, pos, cos, sin, 1, 0, 0, 1.0, 0))


def test_errors_cpu():
    x = torch.randn(1, 2, 3, 8)
    cos, sin = tables(4, 8)
    with pytest.raises(ropekit.Error, match=r"ROPEKIT_ERROR_POSITION_OUT_OF_RANGE: position_ids\[0\]\[2\] = 9"):
        rt.rotary_embedding(x, cos, sin, torch.tensor([[0, 1, 9]]))
    with pytest.raises(TypeError, match="dtype torch.float64"):
        rt.rotary_embedding(x.double(), cos, sin, torch.tensor([[0, 1, 2]]))
    with pytest.raises(TypeError, match="not an integer"):
        rt.rotary_embedding(x, cos, sin, torch.tensor([[0.0, 1, 2]]))
    with pytest.raises(ropekit.Error, match="ROPEKIT_ERROR_SHAPE"):
        rt.rotary_embedding(x, cos[:, :3], sin[:, :3], torch.tensor([[0, 1, 2]]))
    with pytest.raises(ropekit.Error, match="out has shape"):
        rt.rotary_embedding(x, cos, sin, torch.tensor([[0, 1, 2]]), out=torch.empty(3))
    q = torch.randn(3, 16)
    with pytest.raises(ropekit.Error, match="positions has 2"):
        rt.apply_rope_with_cos_sin_cache_inplace(torch.tensor([0, 1]), q, q.clone(), 8, torch.cat(tables(4, 8), -1))
    with pytest.raises(ropekit.Error, match="unsqueeze_dim"):
        rt.apply_rotary_pos_emb(x, x, cos[None, :3], sin[None, :3], unsqueeze_dim=3)


# ---- CUDA only ----------------------------------------------------------------------------------
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@cuda
def test_cuda_matches_a_direct_c_cuda_call_and_uses_the_current_stream():
    lib = rt._cuda_lib()
    g = torch.Generator().manual_seed(6)
    B, S, N, H, P = 4, 33, 8, 128, 4096
    x = torch.randn(B, S, N * H, generator=g).to(torch.bfloat16).cuda()
    cos, sin = (t.cuda() for t in tables(P, H))
    pos = torch.randint(0, P, (B, S), generator=g).cuda()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        y = rt.rotary_embedding(x, cos, sin, pos, num_heads=N)
    # the C CUDA API called directly on the same buffers, on the default stream
    y2 = torch.empty_like(x)
    torch.cuda.synchronize()
    attrs = ropekit._RotaryAttrs(0, 0, N, 0)
    views = [rt._view(t, n) for n, t in (("x", x), ("cos", cos), ("sin", sin), ("pos", pos), ("y", y2))]
    code = lib.ropekit_cuda_rotary_embedding(*(ctypes.byref(v) for v in views[:4]), ctypes.byref(attrs),
                                             ctypes.byref(views[4]), None, None)
    assert code == 0, lib.ropekit_cuda_last_error()
    torch.cuda.synchronize()
    assert torch.equal(bits(y), bits(y2))
    ref = ropekit.rotary_embedding(to_np(x), cos.cpu().numpy(), sin.cpu().numpy(), pos.cpu().numpy(), num_heads=N)
    assert np.array_equal(to_np(y).view(np.uint8), ref.view(np.uint8))


@cuda
def test_cuda_out_of_range_positions_are_reported():
    rt.reset_errors()
    x = torch.randn(1, 4, 2 * 8, device="cuda")
    cos, sin = (t.cuda() for t in tables(16, 8))
    pos = torch.tensor([[0, 70000, 3, -1]], device="cuda")
    y = rt.rotary_embedding(x, cos, sin, pos, num_heads=2)
    with pytest.raises(ropekit.Error, match=r"POSITION_OUT_OF_RANGE: position_ids\[0\]\[1\] = 70000 .*2 out-of-range"):
        rt.check_errors()
    assert rt.check_errors() == 0  # reset by the previous check
    assert torch.equal(y[0, 1], x[0, 1]) and torch.equal(y[0, 3], x[0, 3])  # copied, not rotated
    assert not torch.equal(y[0, 2], x[0, 2])
    rt.set_sync_check(True)
    try:
        with pytest.raises(ropekit.Error, match="70000"):
            rt.rotary_embedding(x, cos, sin, pos, num_heads=2)
    finally:
        rt.set_sync_check(False)
        rt.reset_errors()


@cuda
def test_cuda_graph_capture():
    x = torch.randn(2, 8, 4 * 64, device="cuda", dtype=torch.float16)
    cos, sin = (t.cuda() for t in tables(64, 64, dtype=torch.float16))
    pos = torch.randint(0, 64, (2, 8), device="cuda")
    y = torch.empty_like(x)
    rt.rotary_embedding(x, cos, sin, pos, num_heads=4, out=y)  # warm up (creates the error state)
    ref = y.clone()
    y.zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        rt.rotary_embedding(x, cos, sin, pos, num_heads=4, out=y)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, ref)


def test_requires_grad_is_never_silently_detached():
    x = torch.randn(1, 2, 3, 8, requires_grad=True)
    cos, sin = tables(4, 8)
    y = rt.rotary_embedding(x, cos, sin, torch.tensor([[0, 1, 2]]))
    assert torch.equal(y, rt.rotary_embedding(x.detach(), cos, sin, torch.tensor([[0, 1, 2]])))
    with pytest.raises(RuntimeError, match="no autograd formula"):
        y.sum().backward()


@pytest.mark.parametrize("bad", [2.7, "2", 2**64 + 2, None])
def test_attributes_are_checked_like_the_numpy_binding(bad):
    x = torch.zeros(1, 2, 16)
    c = torch.ones(4, 4)
    p = torch.zeros(1, 2, dtype=torch.int64)
    with pytest.raises(ropekit.Error, match="num_heads"):
        rt.rotary_embedding(x, c, c, p, num_heads=bad)
    with pytest.raises(ropekit.Error, match="num_heads"):
        rt.ms_rotary_embedding(x, p, c, c, num_heads=bad)
