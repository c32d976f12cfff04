"""`ropekit fuse` on hand-built graphs for cases the fixture matrix cannot hold or should not be
the only witness of (issue #11):

* graphs without shape information (TorchScript exports carry no value_info) whose head count
  is only known from what the graph computes: a fused q/k/v projection sliced before the
  `view(B, S, -1, H)` (Phi-3 / Phi-4-mini). The tool must derive it, and must not guess a head
  count that depends on the inputs;
* dynamic NTK scaling (inv_freq recomputed from the sequence length): the fixed-table mode must
  refuse it with its reason; the default mode (the graph's own per-call rows) keeps the graph's
  arithmetic and must agree with the original on both sides of the switch.

Expected values come from onnxruntime running the original graph, never from ropekit."""

import json
import os
import pathlib
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = pathlib.Path(os.environ.get("ROPEKIT_CLI", ROOT / "build" / "ropekit"))

ort.set_default_logger_severity(3)


def fuse(src, dst, *extra):
    res = subprocess.run([str(CLI), "fuse", str(src), str(dst), "--json", *extra],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode in (0, 3), res.stderr
    r = json.loads(res.stdout)
    assert (res.returncode == 3) == (r["sites_found"] > 0 and r["sites_fused"] == 0)
    return r


def fuse_one_site(model, src, dst):
    """Save `model` as src (checked), fuse it into dst (a new folder), require its one RoPE site
    found and fused and the output to pass onnx.checker's full check; the report."""
    onnx.save(model, str(src))
    onnx.checker.check_model(str(src), full_check=True)
    dst.parent.mkdir()
    r = fuse(src, dst)
    assert r["sites_found"] == 1 and r["sites_fused"] == 1, r["sites"]
    onnx.checker.check_model(str(dst), full_check=True)
    return r


def session(path, level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def ints(name, v):
    return numpy_helper.from_array(np.array(v, np.int64), name)


def rope_nodes(x, y, R, H, cos, sin):
    """y = x * cos + rotate_half(x) * sin on the last axis of x (B, N, S, H); for R < H on the
    first R channels only, y = Concat(that, x[..., R:]). cos/sin (B, S, R) are broadcast over the
    heads by Unsqueeze(axis 1)."""
    h = R // 2
    xr = x + "_rot" if R < H else x
    yr = x + "_r" if R < H else y
    nodes = [
        helper.make_node("Unsqueeze", [cos, "ax1"], [cos + "_u"]),
        helper.make_node("Unsqueeze", [sin, "ax1"], [sin + "_u"]),
        helper.make_node("Mul", [xr, cos + "_u"], [x + "_c"]),
        helper.make_node("Slice", [xr, "c0", "ch", "ax3", "c1"], [x + "_lo"]),
        helper.make_node("Slice", [xr, "ch", "cbig", "ax3", "c1"], [x + "_hi"]),
        helper.make_node("Neg", [x + "_hi"], [x + "_hin"]),
        helper.make_node("Concat", [x + "_hin", x + "_lo"], [x + "_rh"], axis=-1),
        helper.make_node("Mul", [x + "_rh", sin + "_u"], [x + "_s"]),
        helper.make_node("Add", [x + "_c", x + "_s"], [yr]),
    ]
    if R < H:
        nodes = [helper.make_node("Slice", [x, "c0", "cR", "ax3", "c1"], [xr]),
                 helper.make_node("Slice", [x, "cR", "cbig", "ax3", "c1"], [x + "_pass"])] + nodes
        nodes.append(helper.make_node("Concat", [yr, x + "_pass"], [y], axis=-1))
    consts = [ints("ax1", [1]), ints("ax3", [3]), ints("c0", [0]), ints("c1", [1]), ints("cR", [R]),
              ints("ch", [h]), ints("cbig", [2**62])]
    return nodes, consts


def angle_nodes(inv_freq, pos="pos"):
    """cos/sin (B, S, R) = Cos/Sin(Concat(freqs, freqs)), freqs = float(pos)[..., None] * inv_freq."""
    return [
        helper.make_node("Unsqueeze", [pos, "ax_last"], ["pos_u"]),
        helper.make_node("Cast", ["pos_u"], ["pos_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["pos_f", inv_freq], ["freqs"]),
        helper.make_node("Concat", ["freqs", "freqs"], ["emb"], axis=-1),
        helper.make_node("Cos", ["emb"], ["cos"]),
        helper.make_node("Sin", ["emb"], ["sin"]),
    ], [ints("ax_last", [-1])]


# ---- head count from what the graph computes ------------------------------------------------

N, HD, R, HIDDEN = 4, 16, 12, 32


def qkv_slice_graph(symbolic_width=False):
    """TorchScript-like Phi-3 attention input, no value_info: qkv = hs @ W (B, S, 3*N*HD),
    q = qkv[..., :N*HD], x = view(q, B, S, -1, HD).transpose(1, 2), partial rotation of R of HD
    channels. With symbolic_width, q is a graph input (B, S, "width") instead: the head count then
    depends on the input and cannot be known."""
    rng = np.random.default_rng(7)
    nodes, inits = [], []
    if symbolic_width:
        inputs = [helper.make_tensor_value_info("q", TensorProto.FLOAT, ["batch", "sequence", "width"])]
        shape_src = "q"
    else:
        inputs = [helper.make_tensor_value_info("hs", TensorProto.FLOAT, ["batch", "sequence", HIDDEN])]
        inits.append(numpy_helper.from_array(
            rng.standard_normal((HIDDEN, 3 * N * HD)).astype(np.float32) * 0.2, "W"))
        inits += [ints("q_end", [N * HD]), ints("ax2", [2])]
        nodes += [helper.make_node("MatMul", ["hs", "W"], ["qkv"]),
                  helper.make_node("Slice", ["qkv", "c0", "q_end", "ax2", "c1"], ["q"])]
        shape_src = "hs"
    inputs.append(helper.make_tensor_value_info("pos", TensorProto.INT64, ["batch", "sequence"]))
    nodes += [
        helper.make_node("Shape", [shape_src], ["shp"]),
        helper.make_node("Gather", ["shp", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["shp", "i1"], ["s"], axis=0),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
        helper.make_node("Unsqueeze", ["s", "ax0"], ["s1"]),
        helper.make_node("Concat", ["b1", "s1", "m1", "hd"], ["target"], axis=0),
        helper.make_node("Reshape", ["q", "target"], ["q4"]),
        helper.make_node("Transpose", ["q4"], ["x"], perm=[0, 2, 1, 3]),
    ]
    inits += [numpy_helper.from_array(np.array(0, np.int64), "i0"),
              numpy_helper.from_array(np.array(1, np.int64), "i1"),
              ints("ax0", [0]), ints("m1", [-1]), ints("hd", [HD])]
    an, ac = angle_nodes("inv_freq")
    inv = (10000.0 ** (-np.arange(0, R, 2) / R)).astype(np.float32)
    rn, rc = rope_nodes("x", "y", R, HD, "cos", "sin")
    g = helper.make_graph(nodes + an + rn, "qkv_slice", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", N, "sequence", HD])],
                          initializer=inits + ac + rc + [numpy_helper.from_array(inv, "inv_freq")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert not m.graph.value_info
    return m


def test_head_count_of_a_sliced_qkv_projection_without_shape_information(tmp_path):
    src = tmp_path / "qkv.onnx"
    onnx.save(qkv_slice_graph(), str(src))
    dst = tmp_path / "out" / "qkv.onnx"
    dst.parent.mkdir()
    r = fuse(src, dst)
    assert r["sites_found"] == 1 and r["sites_fused"] == 1, r["sites"]
    assert r["sites"][0]["num_heads"] == N and r["sites"][0]["head_size"] == HD
    fused = onnx.load(str(dst))
    onnx.checker.check_model(fused, full_check=True)
    node = next(n for n in fused.graph.node if n.op_type == "RotaryEmbedding")
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs.get("num_heads") == N and attrs.get("rotary_embedding_dim") == R, attrs
    a = session(src)
    rng = np.random.default_rng(3)
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        b = session(dst, level)
        for B, S, base in ((1, 1, 0), (2, 9, 5), (3, 4, 100000)):
            feeds = {"hs": rng.standard_normal((B, S, HIDDEN)).astype(np.float32),
                     "pos": (np.arange(S)[None, :] + base + np.arange(B)[:, None]).astype(np.int64)}
            ya, yb = a.run(None, feeds)[0], b.run(None, feeds)[0]
            assert np.abs(ya - yb).max() <= 1e-5 * np.abs(ya).max(), (B, S, base)


def test_a_head_count_that_depends_on_the_inputs_is_not_guessed(tmp_path):
    src = tmp_path / "width.onnx"
    onnx.save(qkv_slice_graph(symbolic_width=True), str(src))
    r = fuse(src, tmp_path / "o.onnx")
    assert r["sites_found"] == 1 and r["sites_fused"] == 0, r["sites"]
    assert "number of heads" in r["sites"][0]["reason"]


# ---- dynamic NTK ----------------------------------------------------------------------------

def dynamic_ntk_graph(H=16, base=10000.0, factor=4.0, original=16):
    """HF's "dynamic" rope_type on q (B, N, S, H), spelled as the graph computes it per call:
    seq = max(position_ids) + 1; past the original context the base grows,
    base' = base * (factor * seq / original - (factor - 1)) ** (H / (H - 2));
    inv_freq = base' ** (-(0, 2, ..., H - 2) / H). inv_freq depends on the positions of the call."""
    f = lambda n, v: numpy_helper.from_array(np.array(v, np.float32), n)
    nodes = [
        helper.make_node("ReduceMax", ["pos"], ["pmax"], keepdims=0),
        helper.make_node("Add", ["pmax", "one_i"], ["seq_i"]),
        helper.make_node("Cast", ["seq_i"], ["seq"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["seq", "k_ratio"], ["r0"]),        # factor * seq / original
        helper.make_node("Sub", ["r0", "k_fm1"], ["r1"]),           # - (factor - 1)
        helper.make_node("Pow", ["r1", "k_exp"], ["r2"]),
        helper.make_node("Mul", ["r2", "k_base"], ["base_ntk"]),
        helper.make_node("Greater", ["seq", "k_orig"], ["longer"]),
        helper.make_node("Where", ["longer", "base_ntk", "k_base"], ["base_eff"]),
        helper.make_node("Pow", ["base_eff", "k_e"], ["inv_freq"]),
    ]
    consts = [ints("one_i", 1), f("k_ratio", factor / original), f("k_fm1", factor - 1),
              f("k_exp", H / (H - 2)), f("k_base", base), f("k_orig", float(original)),
              f("k_e", -np.arange(0, H, 2) / H)]
    an, ac = angle_nodes("inv_freq")
    rn, rc = rope_nodes("q", "y", H, H, "cos", "sin")
    inputs = [helper.make_tensor_value_info("q", TensorProto.FLOAT, ["batch", 2, "sequence", H]),
              helper.make_tensor_value_info("pos", TensorProto.INT64, ["batch", "sequence"])]
    g = helper.make_graph(nodes + an + rn, "dynamic_ntk", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2, "sequence", H])],
                          initializer=consts + ac + rc)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_dynamic_ntk_fixed_table_refused_and_per_call_rows_exact(tmp_path):
    src = tmp_path / "ntk.onnx"
    onnx.save(dynamic_ntk_graph(), str(src))
    onnx.checker.check_model(str(src), full_check=True)
    a = session(src)
    rng = np.random.default_rng(11)
    cases = [(1, 1, 0), (2, 8, 0), (2, 40, 0), (1, 5, 3000), (2, 3, 100000)]  # below and past 16
    feeds = [{"q": rng.standard_normal((B, 2, S, 16)).astype(np.float32),
              "pos": (np.arange(S)[None, :] + base + np.arange(B)[:, None]).astype(np.int64)}
             for B, S, base in cases]
    # the switch is real: position 5 gets other angles in a call longer than the original context
    short = {"q": feeds[2]["q"][:, :, :8], "pos": feeds[2]["pos"][:, :8]}
    assert np.abs(a.run(None, short)[0][:, :, 5] - a.run(None, feeds[2])[0][:, :, 5]).max() > 1e-3
    # fixed table: one row per position cannot hold angles that depend on the whole call
    r = fuse(src, tmp_path / "t.onnx", "--max-positions", "64")
    assert r["sites_found"] == 1 and r["sites_fused"] == 0, r["sites"]
    reason = r["sites"][0]["reason"]
    assert "computed at run time" in reason and "static table cannot" in reason, reason
    # default: the fused node reads the graph's own per-call rows, so the switch stays, exactly
    dst = tmp_path / "out" / "ntk.onnx"
    dst.parent.mkdir()
    r = fuse(src, dst)
    assert r["sites_found"] == 1 and r["sites_fused"] == 1, r["sites"]
    assert r["sites"][0]["angles"] == "the graph's own cos/sin rows" and r["sites"][0]["variant"] == "rotate_half"
    fused = onnx.load(str(dst))
    onnx.checker.check_model(fused, full_check=True)
    assert sum(n.op_type == "RotaryEmbedding" for n in fused.graph.node) == 1
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        b = session(dst, level)
        for fd, case in zip(feeds + [short], cases + ["short"]):
            ya, yb = a.run(None, fd)[0], b.run(None, fd)[0]
            assert np.abs(ya - yb).max() <= 1e-5 * np.abs(ya).max(), case


# ---- rotation computed in float32 on a float16 tensor (OLMo 2's apply_rotary_pos_emb) -------

def widened_graph(narrow=TensorProto.FLOAT16):
    """q (B, N, S, 16) in float16; float32 cos/sin; q * cos and rotate_half(q) * sin promoted to
    float32 (Cast of q, Cast of rotate_half(q)), the sum cast back: y = f16(f32(q) * cos +
    f32(rotate_half(q)) * sin), as torch writes OLMo 2's RoPE in float16 models."""
    H = 16
    an, ac = angle_nodes("inv_freq")
    nodes = an + [
        helper.make_node("Unsqueeze", ["cos", "ax1"], ["cos_u"]),
        helper.make_node("Unsqueeze", ["sin", "ax1"], ["sin_u"]),
        helper.make_node("Cast", ["q"], ["q32"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["q32", "cos_u"], ["qc"]),
        helper.make_node("Slice", ["q", "c0", "ch", "ax3", "c1"], ["q_lo"]),
        helper.make_node("Slice", ["q", "ch", "cbig", "ax3", "c1"], ["q_hi"]),
        helper.make_node("Neg", ["q_hi"], ["q_hin"]),
        helper.make_node("Concat", ["q_hin", "q_lo"], ["q_rh"], axis=-1),
        helper.make_node("Cast", ["q_rh"], ["q_rh32"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["q_rh32", "sin_u"], ["qs"]),
        helper.make_node("Add", ["qc", "qs"], ["y32"]),
        helper.make_node("Cast", ["y32"], ["y"], to=narrow),
    ]
    inv = (10000.0 ** (-np.arange(0, H, 2) / H)).astype(np.float32)
    consts = ac + [ints("ax1", [1]), ints("ax3", [3]), ints("c0", [0]), ints("c1", [1]),
                   ints("ch", [H // 2]), ints("cbig", [2**62]), numpy_helper.from_array(inv, "inv_freq")]
    shape = ["batch", 2, "sequence", H]
    g = helper.make_graph(nodes, "widened", [helper.make_tensor_value_info("q", narrow, shape),
                                             helper.make_tensor_value_info("pos", TensorProto.INT64, ["batch", "sequence"])],
                          [helper.make_tensor_value_info("y", narrow, shape)], initializer=consts)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_rotation_widened_to_float32_fuses_in_float32(tmp_path):
    src = tmp_path / "widened.onnx"
    onnx.save(widened_graph(), str(src))
    onnx.checker.check_model(str(src), full_check=True)
    for extra in ((), ("--max-positions", "4096")):
        dst = tmp_path / "out" / ("t" if extra else "r") / "w.onnx"
        dst.parent.mkdir(parents=True)
        r = fuse(src, dst, *extra)
        assert r["sites_found"] == 1 and r["sites_fused"] == 1, r["sites"]
        assert r["sites"][0]["dtype"] == "float32" and r["sites"][0]["x"] == "q32"
        fused = onnx.load(str(dst))
        onnx.checker.check_model(fused, full_check=True)
        assert [n.op_type for n in fused.graph.node].count("RotaryEmbedding") == 1
        assert not any(n.op_type == "Neg" for n in fused.graph.node)
        a = session(src)
        rng = np.random.default_rng(2)
        for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
            b = session(dst, level)
            for B, S, base in ((1, 1, 0), (2, 9, 7), (2, 4, 3000)):
                fd = {"q": rng.standard_normal((B, 2, S, 16)).astype(np.float16),
                      "pos": (np.arange(S)[None, :] + base + 5 * np.arange(B)[:, None]).astype(np.int64)}
                ya, yb = a.run(None, fd)[0], b.run(None, fd)[0]
                assert yb.dtype == np.float16
                # the same float32 arithmetic (up to its rounding), rounded once to float16
                ya, yb = ya.astype(np.float64), yb.astype(np.float64)
                assert np.abs(ya - yb).max() <= 1e-3 * np.abs(ya).max(), (extra, B, S, base)


def test_a_narrowing_cast_in_rotate_half_is_not_a_site(tmp_path):
    m = widened_graph()
    # rotate_half(q) narrowed to float16 before the sin product (q float32 now): not x * cos +
    # rot(x) * sin in one precision, and the rotation loses bits: never fused (the linear-map
    # discovery may report it as a site; the numeric check then refuses it with its reason)
    for v in list(m.graph.input) + list(m.graph.output):
        if v.name in ("q", "y"):
            v.type.tensor_type.elem_type = TensorProto.FLOAT
    for n in m.graph.node:
        if n.output[0] == "q_rh32":
            n.attribute[0].i = TensorProto.FLOAT16
        if n.output[0] == "y":
            n.attribute[0].i = TensorProto.FLOAT
    src = tmp_path / "narrow.onnx"
    onnx.save(m, str(src))
    res = subprocess.run([str(CLI), "fuse", str(src), str(tmp_path / "o.onnx"), "--json"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode in (0, 3), res.stderr
    assert json.loads(res.stdout)["sites_fused"] == 0
    if res.returncode == 3:
        assert "disagree" in res.stderr + res.stdout, res.stdout


# ---- rotation by -angle ---------------------------------------------------------------------

def conjugate_graph(R=16, H=16):
    """y = x * cos + cat(x2, -x1) * sin: rotate_half with the sign on the other half (NanoChat's
    rotate_half), i.e. a rotation by -angle. The graph holds +sin; the coefficients are -sin."""
    an, ac = angle_nodes("inv_freq")
    rn, rc = rope_nodes("x", "y", R, H, "cos", "sin")
    for n in rn:
        if n.op_type == "Neg":
            n.input[0] = "x_lo"
        if n.op_type == "Concat" and n.output[0] == "x_rh":
            n.input[:] = ["x_hi", "x_hin"]
    inv = (10000.0 ** (-np.arange(0, R, 2) / R)).astype(np.float32)
    shape = ["batch", 2, "sequence", H]
    g = helper.make_graph(an + rn, "conjugate",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
                           helper.make_tensor_value_info("pos", TensorProto.INT64, ["batch", "sequence"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                          initializer=ac + rc + [numpy_helper.from_array(inv, "inv_freq")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_rotation_by_minus_angle_fuses_with_negated_sin_rows(tmp_path):
    for R in (16, 8):  # full and partial
        src, dst = tmp_path / f"conj{R}.onnx", tmp_path / f"out{R}" / "c.onnx"
        fuse_one_site(conjugate_graph(R), src, dst)
        fused = onnx.load(str(dst))
        assert [n.op_type for n in fused.graph.node].count("RotaryEmbedding") == 1
        a = session(src)
        rng = np.random.default_rng(3)
        for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
            b = session(dst, level)
            for B, S, base in ((1, 1, 0), (2, 9, 7), (2, 4, 5000)):
                fd = {"x": rng.standard_normal((B, 2, S, 16)).astype(np.float32),
                      "pos": (np.arange(S)[None, :] + base + 5 * np.arange(B)[:, None]).astype(np.int64)}
                ya, yb = a.run(None, fd)[0], b.run(None, fd)[0]
                assert np.abs(ya - yb).max() <= 1e-5 * np.abs(ya).max(), (R, B, S, base)
        # a fixed table is built from the angle source, which has no sign: refused, with why
        res = subprocess.run([str(CLI), "fuse", str(src), str(tmp_path / f"t{R}.onnx"), "--json",
                              "--max-positions", "4096"], capture_output=True, text=True, timeout=60)
        assert res.returncode == 3, res.stderr
        rep = json.loads(res.stdout)
        assert rep["sites_fused"] == 0 and "-angle" in rep["sites"][0]["reason"], rep["sites"]


# ---- spellings of torch's optimize=False exports ----------------------------------------------

def unoptimized_graph(H=16):
    """As torch.onnx.export(..., optimize=False) writes GPT-J's angles: sin and cos are one
    tensor split by SplitToSequence and read back by SequenceAt (torch.split), a variadic Max
    with one input, and Constant nodes (value_ints) whose value_info has a type but no shape."""
    an, ac = angle_nodes("inv_freq")
    an = [n for n in an if n.op_type not in ("Cos", "Sin")]
    for n in an:
        if n.op_type == "Mul":
            n.input[0] = "pos_m"
    k = next(i for i, n in enumerate(an) if n.op_type == "Mul")
    an.insert(k, helper.make_node("Max", ["pos_f"], ["pos_m"]))
    an += [
        helper.make_node("Sin", ["emb"], ["sin0"]),
        helper.make_node("Cos", ["emb"], ["cos0"]),
        helper.make_node("Concat", ["sin0", "cos0"], ["sincos"], axis=-1),
        helper.make_node("Constant", [], ["split_w"], value=numpy_helper.from_array(np.array(H, np.int64))),
        helper.make_node("SplitToSequence", ["sincos", "split_w"], ["seq"], axis=-1),
        helper.make_node("Constant", [], ["at0"], value_int=0),
        helper.make_node("Constant", [], ["at1"], value_int=-1),
        helper.make_node("SequenceAt", ["seq", "at0"], ["sin"]),
        helper.make_node("SequenceAt", ["seq", "at1"], ["cos"]),
        helper.make_node("Constant", [], ["ax1"], value_ints=[1]),
    ]
    rn, rc = rope_nodes("x", "y", H, H, "cos", "sin")
    rc = [t for t in rc if t.name != "ax1"]
    inv = (10000.0 ** (-np.arange(0, H, 2) / H)).astype(np.float32)
    shape = ["batch", 2, "sequence", H]
    g = helper.make_graph(an + rn, "unoptimized",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
                           helper.make_tensor_value_info("pos", TensorProto.INT64, ["batch", "sequence"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                          initializer=ac + rc + [numpy_helper.from_array(inv, "inv_freq")],
                          value_info=[helper.make_tensor_value_info(c, TensorProto.INT64, None)
                                      for c in ("ax1", "split_w", "at0", "at1")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def test_unoptimized_export_spellings_fuse(tmp_path):
    src = tmp_path / "unopt.onnx"
    onnx.save(unoptimized_graph(), str(src))
    onnx.checker.check_model(str(src), full_check=True)
    # the fixed-table mode reads the angle source structurally and does not follow a sequence:
    # refused with its reason (a limit, stated), never a wrong table
    r = fuse(src, tmp_path / "t.onnx", "--max-positions", "8192")
    assert r["sites_fused"] == 0 and "not Cos/Sin of" in r["sites"][0]["reason"], r["sites"]
    for extra in ((),):
        dst = tmp_path / "r" / "u.onnx"
        dst.parent.mkdir()
        r = fuse(src, dst, *extra)
        assert r["sites_found"] == 1 and r["sites_fused"] == 1, r["sites"]
        onnx.checker.check_model(str(dst), full_check=True)
        a, rng = session(src), np.random.default_rng(4)
        for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
            b = session(dst, level)
            for B, S, base in ((1, 1, 0), (2, 9, 7), (2, 4, 5000)):
                fd = {"x": rng.standard_normal((B, 2, S, 16)).astype(np.float32),
                      "pos": (np.arange(S)[None, :] + base + 5 * np.arange(B)[:, None]).astype(np.int64)}
                ya, yb = a.run(None, fd)[0], b.run(None, fd)[0]
                assert np.abs(ya - yb).max() <= 1e-5 * np.abs(ya).max(), (extra, B, S, base)


def transposed_cache_graph(H=16, P=64):
    """A precomputed cos/sin cache (P, H) gathered by position ids through a Transpose pair, as
    torch.gather exported with optimize=False reads GPT-J's table (GatherND of a transposed
    table): cos = Transpose(Transpose(cache))[pos]."""
    inv = 10000.0 ** (-np.arange(0, H, 2) / H)
    ang = np.arange(P)[:, None] * inv[None, :]
    emb = np.concatenate([ang, ang], -1)
    nodes, inits = [], [ints("ax1", [1])]
    for nm, f in (("cos", np.cos), ("sin", np.sin)):
        inits.append(numpy_helper.from_array(f(emb).astype(np.float32), nm + "_cache"))
        nodes += [helper.make_node("Transpose", [nm + "_cache"], [nm + "_t"], perm=[1, 0]),
                  helper.make_node("Transpose", [nm + "_t"], [nm + "_tt"], perm=[1, 0]),
                  helper.make_node("Gather", [nm + "_tt", "pos"], [nm], axis=0)]
    rn, rc = rope_nodes("x", "y", H, H, "cos", "sin")
    rc = [t for t in rc if t.name != "ax1"]
    shape = ["batch", 2, "sequence", H]
    g = helper.make_graph(nodes + rn, "transposed_cache",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
                           helper.make_tensor_value_info("pos", TensorProto.INT64, ["batch", "sequence"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                          initializer=inits + rc)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def test_cache_gathered_through_a_transpose_fuses(tmp_path):
    src, dst = tmp_path / "tc.onnx", tmp_path / "o" / "tc.onnx"
    fuse_one_site(transposed_cache_graph(), src, dst)
    a, b, rng = session(src), session(dst), np.random.default_rng(5)
    for B, S in ((1, 1), (2, 9)):
        fd = {"x": rng.standard_normal((B, 2, S, 16)).astype(np.float32),
              "pos": rng.integers(0, 64, (B, S)).astype(np.int64)}
        ya, yb = a.run(None, fd)[0], b.run(None, fd)[0]
        assert np.abs(ya - yb).max() <= 1e-5 * np.abs(ya).max(), (B, S)


# ---- encoders: positions from an arange over the sequence read off a computed value ---------

def encoder_graph(H=16, NH=2):
    """ESM-style encoder attention (TorchScript): no position input; the angle is
    Einsum("i,j->ij", arange(S), inv_freq) with S read by Shape off a value computed by
    LayerNormalization and Softmax (in the exports: the hidden state after a whole layer), and
    x = transpose(reshape(that value)) is rotated with rotate_half."""
    E = H * NH
    inv = (10000.0 ** (-np.arange(0, H, 2) / H)).astype(np.float32)
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(inv, "inv_freq"),
             numpy_helper.from_array(rng.standard_normal(E).astype(np.float32), "ln_w"),
             numpy_helper.from_array(rng.standard_normal(E).astype(np.float32), "ln_b"),
             ints("shp", [0, 0, NH, H]), ints("i0", 0), ints("i1", 1), ints("ax0", [0]),
             ints("one", 1)]
    nodes = [
        helper.make_node("LayerNormalization", ["h", "ln_w", "ln_b"], ["hn"], axis=-1,
                         epsilon=1e-5),
        helper.make_node("Softmax", ["hn"], ["hs"], axis=-1),
        helper.make_node("Shape", ["hs"], ["hshape"]),
        helper.make_node("Gather", ["hshape", "i1"], ["slen"], axis=0),
        helper.make_node("Range", ["i0", "slen", "one"], ["t_i"]),
        helper.make_node("Cast", ["t_i"], ["t"], to=TensorProto.FLOAT),
        helper.make_node("Einsum", ["t", "inv_freq"], ["freqs"], equation="i,j->ij"),
        helper.make_node("Concat", ["freqs", "freqs"], ["emb"], axis=-1),
        helper.make_node("Cos", ["emb"], ["cos_s"]),
        helper.make_node("Sin", ["emb"], ["sin_s"]),
        helper.make_node("Unsqueeze", ["cos_s", "ax0"], ["cos"]),
        helper.make_node("Unsqueeze", ["sin_s", "ax0"], ["sin"]),
        helper.make_node("Reshape", ["hs", "shp"], ["hr"]),
        helper.make_node("Transpose", ["hr"], ["x"], perm=[0, 2, 1, 3]),
    ]
    rn, rc = rope_nodes("x", "y", H, H, "cos", "sin")
    g = helper.make_graph(nodes + rn, "encoder",
                          [helper.make_tensor_value_info("h", TensorProto.FLOAT,
                                                         ["batch", "sequence", E])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                         ["batch", NH, "sequence", H])],
                          initializer=inits + rc)
    # value_info as the exporters write it (onnx shape inference: S of the angle is unk__0)
    return onnx.shape_inference.infer_shapes(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))


def test_encoder_angle_from_einsum_over_a_computed_length_fuses(tmp_path):
    src, dst = tmp_path / "enc.onnx", tmp_path / "o" / "enc.onnx"
    fuse_one_site(encoder_graph(), src, dst)
    a, b, rng = session(src), session(dst), np.random.default_rng(5)
    for B, S in ((1, 1), (2, 9), (1, 70)):
        fd = {"h": rng.standard_normal((B, S, 32)).astype(np.float32)}
        ya, yb = a.run(None, fd)[0], b.run(None, fd)[0]
        assert np.abs(ya - yb).max() <= 1e-5 * np.abs(ya).max(), (B, S)


def folded_tables_graph(H=16, S=7):
    """A fixed-shape encoder's RoPE: no position input, cos/sin of arange(S) folded to constant
    (1, S, H) tables by the exporter (the slow channels' sines stay below 0.25 over 7 rows)."""
    inv = 10000.0 ** (-np.arange(0, H, 2) / H)
    ang = np.arange(S)[:, None] * inv[None, :]
    emb = np.concatenate([ang, ang], -1)[None]
    rn, rc = rope_nodes("x", "y", H, H, "cos", "sin")
    shape = [2, 2, S, H]
    g = helper.make_graph(rn, "folded_tables",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                          initializer=rc + [
                              numpy_helper.from_array(np.cos(emb).astype(np.float32), "cos"),
                              numpy_helper.from_array(np.sin(emb).astype(np.float32), "sin")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def test_cos_sin_folded_to_constant_tables_fuse(tmp_path):
    src, dst = tmp_path / "ft.onnx", tmp_path / "o" / "ft.onnx"
    fuse_one_site(folded_tables_graph(), src, dst)
    fd = {"x": np.random.default_rng(5).standard_normal((2, 2, 7, 16)).astype(np.float32)}
    ya, yb = session(src).run(None, fd)[0], session(dst).run(None, fd)[0]
    assert np.abs(ya - yb).max() <= 1e-5 * np.abs(ya).max()


def test_a_constant_that_is_no_sinusoid_is_not_a_site(tmp_path):
    """The same graph with random constant factors: x * A + rotate_half(x) * B is no RoPE."""
    m = folded_tables_graph()
    rng = np.random.default_rng(9)
    for t in m.graph.initializer:
        if t.name in ("cos", "sin"):
            t.CopyFrom(numpy_helper.from_array(rng.uniform(-1, 1, (1, 7, 16)).astype(np.float32),
                                               t.name))
    src = tmp_path / "nt.onnx"
    onnx.save(m, str(src))
    r = fuse(src, tmp_path / "nt_out.onnx")
    assert r["sites_fused"] == 0, r["sites"]
