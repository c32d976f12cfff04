"""`ropekit fuse` recognizes a RoPE by what its subgraph computes (src/onnx/match_linear.c), not by
one exporter's spelling. Each graph here writes the same rotation in another way (Split instead of
Slice, a Gather of channels with a sign vector, halves computed separately and concatenated,
stacked pairs, cos/sin broadcast by Expand or Reshape, BSNH, partial widths, channels interleaved
before the rotation) and must fuse with parity in onnxruntime; graphs that are linear in q but are
not a rotation the fused operator computes must be left alone, unchanged in what they compute.

The expected outputs are onnxruntime's results on the original graph (never ropekit's)."""

import os
import pathlib
import subprocess
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = pathlib.Path(os.environ.get("ROPEKIT_CLI", ROOT / "build" / "ropekit"))
ort.set_default_logger_severity(3)

N, H = 2, 8
h = H // 2


class G:
    """A graph under construction: q (B, N, S, H) or (B, S, N, H), pos (B, S), cos/sin helpers."""

    def __init__(self, layout="BNSH", R=H):
        self.nodes, self.inits, self.k = [], [], 0
        self.layout, self.R = layout, R
        r = R // 2
        inv = (10000.0 ** (-np.arange(0, R, 2) / R)).astype(np.float32)
        self.const("inv_freq", inv)
        pu = self.op("Unsqueeze", "pos", self.ints([-1]))
        pf = self.op("Cast", pu, to=TensorProto.FLOAT)
        self.freqs = self.op("Mul", pf, "inv_freq")                    # (B, S, r)
        emb = self.op("Concat", self.freqs, self.freqs, axis=-1)        # (B, S, R)
        self.cos_full, self.sin_full = self.op("Cos", emb), self.op("Sin", emb)
        self.cos_half, self.sin_half = self.op("Cos", self.freqs), self.op("Sin", self.freqs)
        self.heads_axis = 1 if layout == "BNSH" else 2
        self.r = r

    def name(self, base="t"):
        self.k += 1
        return f"{base}_{self.k}"

    def const(self, name, value):
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def ints(self, v):
        return self.const(self.name("c"), np.array(v, np.int64))

    def op(self, op, *ins, outs=1, **attrs):
        o = [self.name(op.lower()) for _ in range(outs)]
        self.nodes.append(helper.make_node(op, list(ins), o, **attrs))
        return o[0] if outs == 1 else o

    def heads(self, t):
        """broadcast a (B, S, W) term over the heads axis"""
        return self.op("Unsqueeze", t, self.ints([self.heads_axis]))

    def slice(self, t, a, b, step=1, axis=-1):
        return self.op("Slice", t, self.ints([a]), self.ints([b]), self.ints([axis]), self.ints([step]))

    def model(self, y, opset=18):
        shape = ["B", N, "S", H] if self.layout == "BNSH" else ["B", "S", N, H]
        g = helper.make_graph(
            self.nodes, "rope",
            [helper.make_tensor_value_info("q", TensorProto.FLOAT, shape),
             helper.make_tensor_value_info("pos", TensorProto.INT64, ["B", "S"])],
            [helper.make_tensor_value_info(y, TensorProto.FLOAT, shape)], initializer=self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def rot_half_slices(g, x, width):
    lo, hi = g.slice(x, 0, width // 2), g.slice(x, width // 2, 2**62)
    return g.op("Concat", g.op("Neg", hi), lo, axis=-1)


# ---- spellings of the same rotation --------------------------------------------------------------

def split_rotate_half(g):
    a, b = g.op("Split", "q", g.ints([h, h]), axis=-1, outs=2)
    rot = g.op("Concat", g.op("Neg", b), a, axis=-1)
    return g.op("Add", g.op("Mul", "q", g.heads(g.cos_full)), g.op("Mul", rot, g.heads(g.sin_full)))


def gather_rotate_half(g):
    idx = g.ints(list(range(h, H)) + list(range(h)))
    sign = g.const("sign", np.array([-1.0] * h + [1.0] * h, np.float32))
    rot = g.op("Mul", g.op("Gather", "q", idx, axis=3), sign)
    return g.op("Add", g.op("Mul", g.heads(g.sin_full), rot), g.op("Mul", g.heads(g.cos_full), "q"))


def chunk_halves(g):  # GPT-OSS: first*cos - second*sin, second*cos + first*sin, concat
    first, second = g.slice("q", 0, h), g.slice("q", h, H)
    c, s = g.heads(g.cos_half), g.heads(g.sin_half)
    y1 = g.op("Sub", g.op("Mul", first, c), g.op("Mul", second, s))
    y2 = g.op("Add", g.op("Mul", second, c), g.op("Mul", first, s))
    return g.op("Concat", y1, y2, axis=-1)


def expand_over_heads(g):  # cos/sin expanded to every head before the product
    shape = g.op("Shape", "q")
    c = g.op("Expand", g.heads(g.cos_full), shape)
    s = g.op("Expand", g.heads(g.sin_full), shape)
    return g.op("Add", g.op("Mul", "q", c), g.op("Mul", rot_half_slices(g, "q", H), s))


def reshape_over_heads(g):  # (B, S, H) -> (B, 1, S, H) by Reshape
    tgt = g.ints([0, 1, -1, H] if g.layout == "BNSH" else [0, -1, 1, H])
    c, s = g.op("Reshape", g.cos_full, tgt), g.op("Reshape", g.sin_full, tgt)
    return g.op("Add", g.op("Mul", "q", c), g.op("Mul", rot_half_slices(g, "q", H), s))


def stacked_pairs(g):  # interleaved: stack((e*c - o*s, o*c + e*s), -1).flatten(-2)
    e, o = g.slice("q", 0, 2**62, 2), g.slice("q", 1, 2**62, 2)
    c, s = g.heads(g.cos_half), g.heads(g.sin_half)
    ye = g.op("Sub", g.op("Mul", e, c), g.op("Mul", o, s))
    yo = g.op("Add", g.op("Mul", o, c), g.op("Mul", e, s))
    st = g.op("Concat", g.op("Unsqueeze", ye, g.ints([-1])), g.op("Unsqueeze", yo, g.ints([-1])), axis=-1)
    shape = g.op("Shape", "q")
    return g.op("Reshape", st, shape)


def interleave_then_halves(g):  # DeepSeek-V3 (MLA): even/odd channels, result in half-split order
    e, o = g.slice("q", 0, 2**62, 2), g.slice("q", 1, 2**62, 2)
    c, s = g.heads(g.cos_half), g.heads(g.sin_half)
    y1 = g.op("Sub", g.op("Mul", e, c), g.op("Mul", o, s))
    y2 = g.op("Add", g.op("Mul", o, c), g.op("Mul", e, s))
    return g.op("Concat", y1, y2, axis=-1)


def partial_by_split(g):  # leading R channels rotated, Split into rotated and pass-through parts
    R = g.R
    xr, xp = g.op("Split", "q", g.ints([R, H - R]), axis=-1, outs=2)
    y = g.op("Add", g.op("Mul", xr, g.heads(g.cos_full)), g.op("Mul", rot_half_slices(g, xr, R),
                                                                 g.heads(g.sin_full)))
    return g.op("Concat", y, xp, axis=-1)


def repeat_interleave_tile(g):  # interleaved pairs, cos/sin widened by Tile+Reshape
    def rep(t):
        u = g.op("Unsqueeze", t, g.ints([-1]))
        tl = g.op("Tile", u, g.ints([1, 1, 1, 2]))
        return g.heads(g.op("Reshape", tl, g.ints([0, 0, -1])))
    e, o = g.slice("q", 0, 2**62, 2), g.slice("q", 1, 2**62, 2)
    st = g.op("Concat", g.op("Unsqueeze", g.op("Neg", o), g.ints([-1])), g.op("Unsqueeze", e, g.ints([-1])),
              axis=-1)
    rot = g.op("Reshape", st, g.op("Shape", "q"))
    return g.op("Add", g.op("Mul", "q", rep(g.cos_half)), g.op("Mul", rot, rep(g.sin_half)))


def complex_pairs(g):  # view_as_complex (Llama 4): (.., h, 2) real/imaginary parts, rank 5
    x5 = g.op("Reshape", "q", g.ints([0, 0, 0, h, 2]))
    re, im = g.slice(x5, 0, 1), g.slice(x5, 1, 2)
    c = g.op("Unsqueeze", g.heads(g.cos_half), g.ints([-1]))
    s = g.op("Unsqueeze", g.heads(g.sin_half), g.ints([-1]))
    yr = g.op("Sub", g.op("Mul", re, c), g.op("Mul", im, s))
    yi = g.op("Add", g.op("Mul", re, s), g.op("Mul", im, c))
    return g.op("Reshape", g.op("Concat", yr, yi, axis=-1), g.op("Shape", "q"))


def sign_on_sin(g):  # rotate_half without Neg, the sign carried by the sin factor Concat(-s, s)
    lo, hi = g.slice("q", 0, h), g.slice("q", h, H)
    rot = g.op("Concat", hi, lo, axis=-1)
    sf = g.op("Concat", g.op("Neg", g.sin_half), g.sin_half, axis=-1)
    return g.op("Add", g.op("Mul", "q", g.heads(g.cos_full)), g.op("Mul", rot, g.heads(sf)))


FUSE = {
    "sign_on_sin": (sign_on_sin, "BNSH", H, 0),
    "sign_on_sin_bsnh": (sign_on_sin, "BSNH", H, 0),
    "complex_pairs": (complex_pairs, "BNSH", H, 1),
    "complex_pairs_bsnh": (complex_pairs, "BSNH", H, 1),
    "split_rotate_half": (split_rotate_half, "BNSH", H, 0),
    "gather_rotate_half": (gather_rotate_half, "BNSH", H, 0),
    "chunk_halves": (chunk_halves, "BNSH", H, 0),
    "chunk_halves_bsnh": (chunk_halves, "BSNH", H, 0),
    "expand_over_heads": (expand_over_heads, "BNSH", H, 0),
    "reshape_over_heads": (reshape_over_heads, "BNSH", H, 0),
    "reshape_over_heads_bsnh": (reshape_over_heads, "BSNH", H, 0),
    "stacked_pairs": (stacked_pairs, "BNSH", H, 1),
    "stacked_pairs_bsnh": (stacked_pairs, "BSNH", H, 1),
    "interleave_then_halves": (interleave_then_halves, "BNSH", H, 0),
    "partial_by_split": (partial_by_split, "BNSH", 4, 0),
    "repeat_interleave_tile": (repeat_interleave_tile, "BSNH", H, 1),
}


# ---- linear in q, but not a rotation the fused operator computes --------------------------------

def no_neg(g):  # Concat(x2, x1) * sin: both cross terms +sin
    lo, hi = g.slice("q", 0, h), g.slice("q", h, H)
    rot = g.op("Concat", hi, lo, axis=-1)
    return g.op("Add", g.op("Mul", "q", g.heads(g.cos_full)), g.op("Mul", rot, g.heads(g.sin_full)))


def odd_pairing(g):  # pairs (k, k+2) inside blocks of 4: neither half-split nor adjacent
    idx = g.ints([2, 3, 0, 1, 6, 7, 4, 5])
    sign = g.const("sign", np.array([-1, -1, 1, 1, -1, -1, 1, 1], np.float32))
    rot = g.op("Mul", g.op("Gather", "q", idx, axis=3), sign)
    return g.op("Add", g.op("Mul", "q", g.heads(g.cos_full)), g.op("Mul", rot, g.heads(g.sin_full)))


def other_token(g):  # the rotated partner read from the previous token (a shift along S)
    axis = 2 if g.layout == "BNSH" else 1
    first = g.slice("q", 0, 1, axis=axis)
    prev = g.op("Concat", first, g.slice("q", 0, -1, axis=axis), axis=axis)
    return g.op("Add", g.op("Mul", "q", g.heads(g.cos_full)),
                g.op("Mul", rot_half_slices(g, prev, H), g.heads(g.sin_full)))


def per_head_cos(g):  # cos scaled differently per head: not one row per token
    shape = (1, N, 1, 1) if g.layout == "BNSH" else (1, 1, N, 1)
    scale = g.const("scale", np.array([1.0, 0.5], np.float32).reshape(shape))
    c = g.op("Mul", g.heads(g.cos_full), scale)
    return g.op("Add", g.op("Mul", "q", c), g.op("Mul", rot_half_slices(g, "q", H), g.heads(g.sin_full)))


def sin_twice(g):  # the second half of the pair reads 2*sin
    two = g.const("two", np.array([1.0] * h + [2.0] * h, np.float32))
    s = g.op("Mul", g.heads(g.sin_full), two)
    return g.op("Add", g.op("Mul", "q", g.heads(g.cos_full)), g.op("Mul", rot_half_slices(g, "q", H), s))


LEAVE = {
    "no_neg": no_neg,
    "odd_pairing": odd_pairing,
    "other_token": other_token,
    "per_head_cos": per_head_cos,
    "sin_twice": sin_twice,
}


def run_fuse(src, dst, *extra):
    res = subprocess.run([str(CLI), "fuse", str(src), str(dst), "--json", *extra],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode in (0, 3), res.stderr
    return json.loads(res.stdout)


def outputs(path, q, pos):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return s.run(None, {"q": q, "pos": pos})[0]


def parity(orig, fused, layout):
    rng = np.random.default_rng(7)
    for S, base in ((1, 0), (5, 3), (9, 100000)):
        shape = (2, N, S, H) if layout == "BNSH" else (2, S, N, H)
        q = rng.standard_normal(shape).astype(np.float32)
        pos = (base + rng.integers(0, 4096, (2, S))).astype(np.int64)
        a, b = outputs(orig, q, pos), outputs(fused, q, pos)
        scale = max(1.0, float(np.abs(a).max()))
        assert np.abs(a - b).max() <= 1e-5 * scale, (S, base, float(np.abs(a - b).max()))


@pytest.mark.parametrize("name", sorted(FUSE))
def test_spelling_fuses_with_parity(name, tmp_path):
    fn, layout, R, interleaved = FUSE[name]
    g = G(layout, R)
    src, dst = tmp_path / "m.onnx", tmp_path / "m_fused.onnx"
    onnx.save(g.model(fn(g)), str(src))
    r = run_fuse(src, dst)
    assert r["sites_found"] == 1 and r["sites_fused"] == 1, r["sites"]
    site = r["sites"][0]
    assert site["rotary_dim"] == R and site["interleaved"] == interleaved, site
    assert site["layout"] == layout, site
    m = onnx.load(str(dst))
    onnx.checker.check_model(m, full_check=True)
    assert sum(n.op_type == "RotaryEmbedding" for n in m.graph.node) == 1
    # the rotation's own Neg / Sub are gone (sign_on_sin's Neg is on sin, whose rows the fused
    # node reads: it stays)
    keep = 1 if name.startswith("sign_on_sin") else 0
    assert sum(n.op_type in ("Neg", "Sub") for n in m.graph.node) == keep, [n.op_type for n in m.graph.node]
    parity(src, dst, layout)


@pytest.mark.parametrize("name", sorted(LEAVE))
@pytest.mark.parametrize("layout", ["BNSH", "BSNH"])
def test_linear_but_not_a_rope_is_left_alone(name, layout, tmp_path):
    g = G(layout)
    src, dst = tmp_path / "m.onnx", tmp_path / "m_fused.onnx"
    onnx.save(g.model(LEAVE[name](g)), str(src))
    r = run_fuse(src, dst)
    assert r["sites_fused"] == 0, r["sites"]
    assert all(s["reason"] for s in r["sites"]), r["sites"]
    parity(src, dst, layout)  # unchanged in what it computes


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotation_of_trailing_channels_fuses(interleaved, tmp_path):
    """[pass | rot] (DeepSeek's [nope | rope]): the fused node rotates leading channels, so it
    reads x with the rotated channels first and the result goes back to the graph's order."""
    g = G("BNSH", 4)
    xp, xr = g.op("Split", "q", g.ints([H - 4, 4]), axis=-1, outs=2)
    if interleaved:
        e, o = g.slice(xr, 0, 2**62, 2), g.slice(xr, 1, 2**62, 2)
        c, s = g.heads(g.cos_half), g.heads(g.sin_half)
        ye = g.op("Sub", g.op("Mul", e, c), g.op("Mul", o, s))
        yo = g.op("Add", g.op("Mul", o, c), g.op("Mul", e, s))
        st = g.op("Concat", g.op("Unsqueeze", ye, g.ints([-1])), g.op("Unsqueeze", yo, g.ints([-1])),
                  axis=-1)
        y = g.op("Reshape", st, g.op("Shape", xr))
    else:
        y = g.op("Add", g.op("Mul", xr, g.heads(g.cos_full)),
                 g.op("Mul", rot_half_slices(g, xr, 4), g.heads(g.sin_full)))
    out = g.op("Concat", xp, y, axis=-1)
    src, dst = tmp_path / "m.onnx", tmp_path / "m_fused.onnx"
    onnx.save(g.model(out), str(src))
    r = run_fuse(src, dst)
    assert r["sites_found"] == 1 and r["sites_fused"] == 1, r["sites"]
    s = r["sites"][0]
    assert s["rotary_dim"] == 4 and s["interleaved"] == interleaved, s
    m = onnx.load(str(dst))
    onnx.checker.check_model(m, full_check=True)
    assert sum(n.op_type == "RotaryEmbedding" for n in m.graph.node) == 1
    parity(src, dst, "BNSH")


@pytest.mark.parametrize("half_width", [True, False])
def test_cos_sin_fed_as_graph_inputs(half_width, tmp_path):
    """A layer exported alone with its position embeddings as inputs (no Cos/Sin in the graph).
    Half-width inputs widened by Concat(c, c) are a rotation whatever their values: fused, and the
    fused node reads the rows of the inputs themselves (cos from c, sin from s: fed different
    values, a mix-up shows). Full-width inputs are not: the halves may differ at run time."""
    W = h if half_width else H
    nodes, inits = [], [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
                        (("ax1", [1]), ("ax3", [3]), ("c0", [0]), ("ch", [h]), ("cbig", [2**62]))]
    cos, sin = "c", "s"
    if half_width:
        nodes += [helper.make_node("Concat", ["c", "c"], ["cos"], axis=-1),
                  helper.make_node("Concat", ["s", "s"], ["sin"], axis=-1)]
        cos, sin = "cos", "sin"
    nodes += [helper.make_node("Unsqueeze", [cos, "ax1"], ["cu"]),
              helper.make_node("Unsqueeze", [sin, "ax1"], ["su"]),
              helper.make_node("Mul", ["q", "cu"], ["qc"]),
              helper.make_node("Slice", ["q", "c0", "ch", "ax3"], ["lo"]),
              helper.make_node("Slice", ["q", "ch", "cbig", "ax3"], ["hi"]),
              helper.make_node("Neg", ["hi"], ["nh"]),
              helper.make_node("Concat", ["nh", "lo"], ["rot"], axis=-1),
              helper.make_node("Mul", ["rot", "su"], ["qs"]),
              helper.make_node("Add", ["qc", "qs"], ["y"])]
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "layer", [vi("q", TensorProto.FLOAT, ["B", N, "S", H]),
                                           vi("c", TensorProto.FLOAT, ["B", "S", W]),
                                           vi("s", TensorProto.FLOAT, ["B", "S", W])],
                          [vi("y", TensorProto.FLOAT, ["B", N, "S", H])], initializer=inits)
    src, dst = tmp_path / "m.onnx", tmp_path / "m_fused.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    r = run_fuse(src, dst)
    assert r["sites_fused"] == (1 if half_width else 0), r["sites"]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    a = ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(str(dst), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    for S in (1, 6):
        f = {"q": rng.standard_normal((2, N, S, H)).astype(np.float32),
             "c": rng.standard_normal((2, S, W)).astype(np.float32),
             "s": rng.standard_normal((2, S, W)).astype(np.float32)}
        ya, yb = a.run(None, f)[0], b.run(None, f)[0]
        assert np.abs(ya - yb).max() <= 1e-5 * max(1.0, float(np.abs(ya).max())), S
