"""`ropekit fuse` on the committed fixture models: the fused model must compute what the original
computes (onnxruntime, random inputs, sequence lengths past the export's), contain exactly one
fused node per RoPE site, pass onnx.checker with full checks and load in onnxruntime with graph
optimizations on and off. Refusals are tested on models built to be refused.

Expectations are explicit per fixture: which fuse completely, which are refused and why, and
which are known gaps (sites found but not fused yet, with the reason the tool gives)."""

import json
import os
import pathlib
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "fixtures" / "models"
CLI = pathlib.Path(os.environ.get("ROPEKIT_CLI", ROOT / "build" / "ropekit"))

ort.set_default_logger_severity(3)

# fixture -> expected outcome
FUSE_ALL = [
    "llama", "llama3_scaling", "llama_fp16", "mistral", "qwen2", "qwen3", "qwen3_fp16",
    "qwen3_yarn", "gemma", "phi3", "phi_partial", "gptj", "gpt_neox", "qwen2_vl_text",
    "qwen2_5_vl_text", "qwen3_vl_text",
    "ts_llama", "ts_llama3_scaling", "ts_llama_fp16", "ts_mistral", "ts_qwen2", "ts_gemma",
    "ts_qwen3", "ts_qwen3_fp16", "ts_qwen3_yarn", "ts_phi3",
    # traced with the short factors frozen (see tests/fixtures/models/README.md): the graph has a
    # constant inv_freq, so the fused model reproduces the graph as exported
    "ts_phi3_longrope",
    "ts_gpt_neox", "ts_phi_partial", "ts_gptj", "ts_qwen2_vl_text", "ts_qwen2_5_vl_text",
    "ts_qwen3_vl_text",
    # longrope: the graph's own switch between the short and long factors stays in the graph
    # (per-call rows), so the fused model computes what the original computes
    "phi3_longrope",
]
# refused in the fixed-table mode (--fixed-table / --max-positions), with the reason
REFUSED = {}
REFUSED_FIXED_TABLE = {"phi3_longrope": "longrope short/long factor switching"}
# fixtures whose positions are bounded by a table in the graph itself (the original fails past it)
GRAPH_TABLE = {"gptj", "ts_gptj"}
# Sites that are found but not fused yet; the reason the tool gives is part of the contract.
KNOWN_GAPS = {}


def test_every_fixture_has_an_expectation():
    names = {p.stem for p in MODELS.glob("*.onnx")}
    listed = set(FUSE_ALL) | set(REFUSED) | set(KNOWN_GAPS) | set(REFUSED_FIXED_TABLE)
    assert names == listed, (sorted(names - listed), sorted(listed - names))


def fixture_info(name):
    return json.loads((MODELS / f"{name}.json").read_text())


def run_fuse(src, dst, *extra):
    res = subprocess.run([str(CLI), "fuse", str(src), str(dst), "--json", *extra],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode in (0, 3), res.stderr
    r = json.loads(res.stdout)
    # exit status 3 exactly when sites were found and none was fused (documented)
    assert (res.returncode == 3) == (r["sites_found"] > 0 and r["sites_fused"] == 0), res.returncode
    return r


def session(path, opt=ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
    so = ort.SessionOptions()
    so.graph_optimization_level = opt
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def feeds_for(sess, B, S, base, rng):
    feeds = {}
    for i in sess.get_inputs():
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(0, 128, (B, S)).astype(np.int64)
        elif i.name == "position_ids":
            p = np.tile(np.arange(S), (B, 1)) + base
            if len(i.shape) == 3:  # M-RoPE: three different streams
                p = np.stack([p, p // 2 + 1, (p * 3) % 97])
            feeds[i.name] = p.astype(np.int64)
        elif i.name == "attention_mask":
            feeds[i.name] = np.ones((B, S), np.int64)
        else:
            raise AssertionError(f"unexpected input {i.name}")
    return feeds


def check_parity(orig, fused, fp16, bases=None):
    a, b = session(orig), session(fused)
    rng = np.random.default_rng(1234)
    worst = 0.0
    for k, (B, S) in enumerate(((1, 1), (2, 7), (2, 33))):  # the fixtures were exported with S <= 8
        # positions stay inside 2048-row tables unless bases are given
        base = int(rng.integers(0, 1900)) if bases is None else bases[k % len(bases)]
        feeds = feeds_for(a, B, S, base, rng)
        ya = a.run(None, feeds)[0].astype(np.float64)
        yb = b.run(None, feeds)[0].astype(np.float64)
        assert ya.shape == yb.shape
        worst = max(worst, float(np.abs(ya - yb).max() / np.abs(ya).max()))
    limit = 2e-3 if fp16 else 1e-5
    assert worst <= limit, f"max |diff| / output scale = {worst:.3g} > {limit}"
    return worst


def count_ops(model, ops):
    return sum(1 for n in model.graph.node if n.op_type in ops)


@pytest.mark.parametrize("name", FUSE_ALL)
def test_fuses_every_site_with_parity(name, tmp_path):
    src, dst = MODELS / f"{name}.onnx", tmp_path / f"{name}_fused.onnx"
    before = src.read_bytes()
    report = run_fuse(src, dst)
    assert src.read_bytes() == before, "the input model was modified"
    expected = fixture_info(name)["rope_sites_expected"]
    assert report["sites_found"] == expected
    assert report["sites_fused"] == expected, [s["reason"] for s in report["sites"]]
    fused = onnx.load(str(dst))
    assert count_ops(fused, {"RotaryEmbedding", "MRotaryEmbedding"}) == expected
    # per-call rows: the graph's Cos/Sin stay, read only by the fused nodes' rows
    assert report["mode"] == "per-call rows" and report["unfused"] == [], report["unfused"]
    assert report["nodes_after"] == len(fused.graph.node) < report["nodes_before"]
    onnx.checker.check_model(fused, full_check=True)
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        session(dst, level)
    check_parity(src, dst, fp16="fp16" in name)
    if name not in GRAPH_TABLE:  # no position cliff: far past the export and any table length
        check_parity(src, dst, fp16="fp16" in name, bases=(70000, 150000))


@pytest.mark.parametrize("name", ["llama", "qwen3_fp16", "gptj", "ts_qwen2_vl_text", "phi_partial"])
def test_fixed_table_mode_fuses_with_parity(name, tmp_path):
    src, dst = MODELS / f"{name}.onnx", tmp_path / f"{name}_fixed.onnx"
    report = run_fuse(src, dst, "--max-positions", "2048")
    expected = fixture_info(name)["rope_sites_expected"]
    assert report["mode"] == "fixed table" and report["sites_fused"] == expected
    fused = onnx.load(str(dst))
    assert count_ops(fused, {"Cos", "Sin"}) == 0, "shared Cos/Sin should be gone with their last use"
    onnx.checker.check_model(fused, full_check=True)
    check_parity(src, dst, fp16="fp16" in name)


@pytest.mark.parametrize("name,reason,extra",
                         [(n, r, ()) for n, r in sorted(REFUSED.items()) + sorted(KNOWN_GAPS.items())] +
                         [(n, r, ("--fixed-table",)) for n, r in sorted(REFUSED_FIXED_TABLE.items())])
def test_sites_left_alone_with_a_reason(name, reason, extra, tmp_path):
    src, dst = MODELS / f"{name}.onnx", tmp_path / "out.onnx"
    report = run_fuse(src, dst, *extra)
    assert report["sites_found"] == fixture_info(name)["rope_sites_expected"]
    assert report["sites_fused"] == 0
    for s in report["sites"]:
        assert s["status"] == "skipped" and reason in s["reason"], s
    # nothing fused: the model computes exactly what it did
    a, b = onnx.load(str(src)), onnx.load(str(dst))
    assert [n.op_type for n in a.graph.node] == [n.op_type for n in b.graph.node]


def test_max_positions_sources(tmp_path):
    src = MODELS / "llama.onnx"
    r = run_fuse(src, tmp_path / "a.onnx", "--max-positions", "100")
    assert r["max_positions"] == 100 and r["max_positions_source"] == "option"
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"max_position_embeddings": 4096,
                               "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}))
    r = run_fuse(src, tmp_path / "b.onnx", "--config", str(cfg))
    assert r["max_positions"] == 16384, r["max_positions_source"]
    lone = tmp_path / "lone.onnx"
    lone.write_bytes(src.read_bytes())
    r = run_fuse(lone, tmp_path / "c.onnx", "--fixed-table")
    assert r["max_positions"] == 4096 and r["max_positions_source"] == "default"
    assert any("default" in w for w in r["warnings"])
    # the default needs no length at all (config.json beside the model or not)
    r = run_fuse(src, tmp_path / "d.onnx")
    assert r["mode"] == "per-call rows" and r["max_positions"] == 0 and r["tables"] == 0
    # the table length is what the fused op enforces: a position past it is an error in ORT
    sess = session(tmp_path / "a.onnx")
    feeds = feeds_for(sess, 1, 3, 99, np.random.default_rng(0))
    with pytest.raises(Exception):
        sess.run(None, feeds)


def test_dry_run_and_bad_arguments(tmp_path):
    res = subprocess.run([str(CLI), "fuse", str(MODELS / "qwen3.onnx"), "--dry-run", "--json"],
                         capture_output=True, text=True)
    assert res.returncode == 0
    r = json.loads(res.stdout)
    assert r["dry_run"] and r["sites_fused"] == 0 and all(s["status"] == "fusable" for s in r["sites"])
    for args, code in (([], 2), (["x.onnx"], 2), ([str(MODELS / "llama.onnx"), "o.onnx", "--target", "x"], 2),
                       ([str(tmp_path / "missing.onnx"), str(tmp_path / "o.onnx")], 1)):
        res = subprocess.run([str(CLI), "fuse", *args], capture_output=True, text=True)
        assert res.returncode == code, (args, res.stderr)
        assert res.stderr.strip()
    # --target onnx needs opset >= 23: refused with the reason, nothing written
    out = tmp_path / "o23.onnx"
    res = subprocess.run([str(CLI), "fuse", str(MODELS / "llama.onnx"), str(out), "--target", "onnx"],
                         capture_output=True, text=True)
    assert res.returncode == 1 and "opset 23" in res.stderr and not out.exists()


def test_target_onnx_on_an_opset_23_model(tmp_path):
    m = onnx.load(str(MODELS / "llama.onnx"))
    for op in m.opset_import:
        if op.domain in ("", "ai.onnx"):
            op.version = 23
    src = tmp_path / "llama23.onnx"
    onnx.save(m, str(src))
    dst = tmp_path / "llama23_fused.onnx"
    r = run_fuse(src, dst, "--target", "onnx", "--max-positions", "2048")
    assert r["sites_fused"] == 4
    fused = onnx.load(str(dst))
    assert all(n.domain in ("", "ai.onnx") for n in fused.graph.node if n.op_type == "RotaryEmbedding")
    onnx.checker.check_model(fused, full_check=True)
    check_parity(src, dst, fp16=False)


def rope_graph(inv_freq_as_input):
    """A minimal HF-style RoPE site on q (B, N, S, H) with inv_freq a constant or a graph input."""
    H, h = 8, 4
    nodes = [
        helper.make_node("Unsqueeze", ["pos", "ax_last"], ["pos_u"]),
        helper.make_node("Cast", ["pos_u"], ["pos_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["pos_f", "inv_freq"], ["freqs"]),
        helper.make_node("Concat", ["freqs", "freqs"], ["emb"], axis=-1),
        helper.make_node("Cos", ["emb"], ["cos"]),
        helper.make_node("Sin", ["emb"], ["sin"]),
        helper.make_node("Unsqueeze", ["cos", "ax1"], ["cos_u"]),
        helper.make_node("Unsqueeze", ["sin", "ax1"], ["sin_u"]),
        helper.make_node("Mul", ["q", "cos_u"], ["qc"]),
        helper.make_node("Slice", ["q", "c0", "ch", "ax3", "c1"], ["q_lo"]),
        helper.make_node("Slice", ["q", "ch", "cbig", "ax3", "c1"], ["q_hi"]),
        helper.make_node("Neg", ["q_hi"], ["q_hi_neg"]),
        helper.make_node("Concat", ["q_hi_neg", "q_lo"], ["q_rot"], axis=-1),
        helper.make_node("Mul", ["q_rot", "sin_u"], ["qs"]),
        helper.make_node("Add", ["qc", "qs"], ["y"]),
    ]
    ints = lambda n, v: numpy_helper.from_array(np.array(v, np.int64), n)
    inits = [ints("ax_last", [-1]), ints("ax1", [1]), ints("ax3", [3]), ints("c0", [0]), ints("c1", [1]),
             ints("ch", [h]), ints("cbig", [2**62])]
    inputs = [helper.make_tensor_value_info("q", TensorProto.FLOAT, ["B", 2, "S", H]),
              helper.make_tensor_value_info("pos", TensorProto.INT64, ["B", "S"])]
    inv = (10000.0 ** (-np.arange(0, H, 2) / H)).astype(np.float32)
    if inv_freq_as_input:
        inputs.append(helper.make_tensor_value_info("inv_freq", TensorProto.FLOAT, [h]))
    else:
        inits.append(numpy_helper.from_array(inv, "inv_freq"))
    g = helper.make_graph(nodes, "rope", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_minimal_site_fuses_and_dynamic_inv_freq_is_refused(tmp_path):
    ok = tmp_path / "ok.onnx"
    onnx.save(rope_graph(False), str(ok))
    r = run_fuse(ok, tmp_path / "ok_fused.onnx", "--max-positions", "64")
    assert r["sites_found"] == 1 and r["sites_fused"] == 1
    a, b = session(ok), session(tmp_path / "ok_fused.onnx")
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 2, 5, 8)).astype(np.float32)
    pos = rng.integers(0, 64, (2, 5)).astype(np.int64)
    np.testing.assert_allclose(b.run(None, {"q": q, "pos": pos})[0], a.run(None, {"q": q, "pos": pos})[0],
                               rtol=0, atol=2e-6)
    dyn = tmp_path / "dyn.onnx"
    onnx.save(rope_graph(True), str(dyn))
    r = run_fuse(dyn, tmp_path / "dyn_out.onnx", "--max-positions", "64")
    assert r["sites_found"] == 1 and r["sites_fused"] == 0
    assert "graph input" in r["sites"][0]["reason"]
    # per-call rows: whatever computes the angles stays in the graph, so it fuses, exactly
    r = run_fuse(dyn, tmp_path / "dyn_rows.onnx")
    assert r["sites_fused"] == 1, r["sites"]
    a, b = session(dyn), session(tmp_path / "dyn_rows.onnx")
    inv = rng.random(4).astype(np.float32)
    feeds = {"q": q, "pos": pos + 100000, "inv_freq": inv}
    np.testing.assert_allclose(b.run(None, feeds)[0], a.run(None, feeds)[0], rtol=0, atol=2e-6)


def test_fp16_tables_are_fp16(tmp_path):
    dst = tmp_path / "f.onnx"
    run_fuse(MODELS / "qwen3_fp16.onnx", dst, "--max-positions", "2048")
    m = onnx.load(str(dst))
    tables = [i for i in m.graph.initializer if i.name.startswith("ropekit_")]
    assert len(tables) == 2 and all(t.data_type == TensorProto.FLOAT16 for t in tables)


def _set_const_input(model, node, slot, value):
    """Point input `slot` of `node` at a new int64 initializer holding `value`."""
    name = f"mutated_{node.output[0]}_{slot}"
    model.graph.initializer.append(numpy_helper.from_array(np.array(value, np.int64), name))
    node.input[slot] = name


def _producer(model, name):
    return next(n for n in model.graph.node if name in n.output)


# TorchScript (4.x) table assemblies changed into valid models that compute something else: the
# matchers verify the constants, so these must not fuse (sites found, none fused).
def _mutate_section_stream(m):  # the 5th section gathers stream 2 instead of 1
    cat = next(n for n in m.graph.node if n.op_type == "Concat" and len(n.input) == 6)
    _set_const_input(m, _producer(m, cat.input[4]), 1, 2)


def _mutate_section_sizes(m):  # the two halves cut differently
    split = next(n for n in m.graph.node if n.op_type == "Split" and len(n.output) == 6)
    _set_const_input(m, split, 1, [2, 3, 3, 3, 3, 2])


def _mutate_scatter_offset(m):  # the values of a step read columns 2, 5 instead of 1, 4
    nd = next(n for n in m.graph.node if n.op_type == "ScatterND")
    sl = _producer(m, _producer(m, _producer(m, nd.input[2]).input[0]).input[0])
    assert sl.op_type == "Slice"
    _set_const_input(m, sl, 1, [2] if sl.input[1] else 2)


def _mutate_gptj_ids(m):  # ids repeated to 6 of the table's 8 columns (fails at run time in ORT:
    # the fused model must not run where the original does not)
    ge = next(n for n in m.graph.node if n.op_type == "GatherElements")
    tile = _producer(m, ge.input[1])
    _set_const_input(m, tile, 1, [1, 1, 6])


@pytest.mark.parametrize("name,mutate", [
    ("ts_qwen2_vl_text", _mutate_section_stream), ("ts_qwen2_vl_text", _mutate_section_sizes),
    ("ts_qwen3_vl_text", _mutate_scatter_offset), ("ts_gptj", _mutate_gptj_ids)])
def test_torchscript_assemblies_are_verified(name, mutate, tmp_path):
    m = onnx.load(str(MODELS / f"{name}.onnx"))
    mutate(m)
    src = tmp_path / "mutated.onnx"
    onnx.save(m, str(src))
    # the fixed table is built from inv_freq: the changed assembly must be refused
    report = run_fuse(src, tmp_path / "out.onnx", "--max-positions", "2048")
    assert report["sites_found"] == fixture_info(name)["rope_sites_expected"]
    assert report["sites_fused"] < report["sites_found"], report["sites"]
    # per-call rows read what the changed graph computes: fused sites compute the same
    report = run_fuse(src, tmp_path / "rows.onnx")
    if report["sites_fused"]:
        check_parity(src, tmp_path / "rows.onnx", fp16=False)


# ---- hostile graphs: the analysis stays linear (issue #13, item 1) -----------------------------

def _site_neg(m):
    return next(n for n in m.graph.node if n.op_type == "Neg")


def _concat_chain_before_x(m, links=20):
    """20 chained Concat(prev, prev, prev) in front of the first site's rotated tensor, then a
    Slice back to its first rows: the model computes the same, shape inference sees 3^20 paths."""
    neg = _site_neg(m)
    x = _producer(m, neg.input[0]).input[0]
    nodes, prev = [], x
    for i in range(links):
        nodes.append(helper.make_node("Concat", [prev] * 3, [f"hostile_cat_{i}"], axis=0))
        prev = f"hostile_cat_{i}"
    m.graph.initializer.extend([numpy_helper.from_array(np.array([0], np.int64), "hostile_zero"),
                                numpy_helper.from_array(np.array([0], np.int64), "hostile_axis0")])
    nodes += [helper.make_node("Shape", [x], ["hostile_shape"], start=0, end=1),
              helper.make_node("Slice", [prev, "hostile_zero", "hostile_shape", "hostile_axis0"],
                               ["hostile_x"])]
    readers = [n for n in m.graph.node if x in n.input and n.op_type in ("Slice", "Mul")]
    for n in readers:
        n.input[:] = ["hostile_x" if v == x else v for v in n.input]
    pos = max(i for i, n in enumerate(m.graph.node) if x in n.output)
    for k, n in enumerate(nodes):
        m.graph.node.insert(pos + 1 + k, n)


def _add_chain_in_slice_start(m, links=30):
    """The lower rotate_half Slice's start (0) as Add(prev, prev) 30 times over: 2^30 paths."""
    lo = _producer(m, next(n for n in m.graph.node if n.op_type == "Concat" and
                           n.input[0] == _site_neg(m).output[0]).input[1])
    m.graph.initializer.append(numpy_helper.from_array(np.array([0], np.int64), "hostile_k0"))
    prev, nodes = "hostile_k0", []
    for i in range(links):
        nodes.append(helper.make_node("Add", [prev, prev], [f"hostile_add_{i}"]))
        prev = f"hostile_add_{i}"
    lo.input[1] = prev
    pos = next(i for i, n in enumerate(m.graph.node) if n is lo)
    for k, n in enumerate(nodes):
        m.graph.node.insert(pos + k, n)


@pytest.mark.parametrize("mutate", [_concat_chain_before_x, _add_chain_in_slice_start])
def test_hostile_chains_are_analysed_in_linear_time(mutate, tmp_path):
    import time
    m = onnx.load(str(MODELS / "llama.onnx"))
    mutate(m)  # the new values have no value_info: their shapes must be inferred
    src = tmp_path / "hostile.onnx"
    onnx.save(m, str(src))
    session(src)  # still a valid model
    t0 = time.monotonic()
    res = subprocess.run([str(CLI), "fuse", str(src), str(tmp_path / "out.onnx"), "--json",
                          "--max-positions", "64"], capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - t0
    assert res.returncode in (0, 3), res.stderr
    assert elapsed < 10, f"fuse took {elapsed:.1f} s"  # generous for ASan; ~0.05 s in release
    report = json.loads(res.stdout)
    assert report["sites_found"] == fixture_info("llama")["rope_sites_expected"]
    if mutate is _add_chain_in_slice_start:  # 30 levels deep: evaluated, not cut off by depth
        assert report["sites_fused"] == report["sites_found"], report["sites"]


# ---- never a wrong fusion: sites are checked numerically (issue #11 item 6, #13 item 6) --------

def test_rotate_half_with_an_empty_half_is_refused(tmp_path):
    m = rope_graph(False)
    hi = next(n for n in m.graph.node if n.output[0] == "q_hi")
    hi.input[2] = "ch"  # Slice(q, h, h): the upper half is empty
    src = tmp_path / "empty_half.onnx"
    onnx.save(m, str(src))
    with pytest.raises(Exception):  # the original does not run
        session(src).run(None, {"q": np.zeros((1, 2, 3, 8), np.float32), "pos": np.zeros((1, 3), np.int64)})
    res = subprocess.run([str(CLI), "fuse", str(src), str(tmp_path / "out.onnx"), "--json",
                          "--max-positions", "64"], capture_output=True, text=True, timeout=60)
    r = json.loads(res.stdout)
    assert r["sites_found"] == 1 and r["sites_fused"] == 0, r["sites"]
    assert "does not evaluate" in r["sites"][0]["reason"]


def test_a_float16_angle_is_not_replaced_by_a_float32_table(tmp_path):
    """Positions cast to float16 before the angle: the original loses precision at large positions,
    a float32 table would not; the structure matches, the numbers do not."""
    m = rope_graph(False)
    cast = next(n for n in m.graph.node if n.op_type == "Cast")
    cast.attribute[0].i = TensorProto.FLOAT16
    inv = next(i for i in m.graph.initializer if i.name == "inv_freq")
    inv.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(inv).astype(np.float16), "inv_freq"))
    for trig in ("cos", "sin"):
        node = next(n for n in m.graph.node if n.output[0] == trig)
        node.output[0] = trig + "_h"
        m.graph.node.insert(list(m.graph.node).index(node) + 1,
                            helper.make_node("Cast", [trig + "_h"], [trig], to=TensorProto.FLOAT))
    src = tmp_path / "f16_angle.onnx"
    onnx.save(m, str(src))
    session(src).run(None, {"q": np.zeros((1, 2, 3, 8), np.float32), "pos": np.zeros((1, 3), np.int64)})
    r = run_fuse(src, tmp_path / "out.onnx", "--max-positions", "4096")
    assert r["sites_found"] == 1 and r["sites_fused"] == 0, r["sites"]
    assert "disagree" in r["sites"][0]["reason"]


def test_honest_outcome_exit_status_and_unfused_cos_sin(tmp_path):
    src = MODELS / "phi3_longrope.onnx"  # refused in the fixed-table mode
    res = subprocess.run([str(CLI), "fuse", str(src), str(tmp_path / "o.onnx"), "--max-positions", "64"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 3, res.stderr
    assert "none fused" in res.stderr and "warning" in res.stderr
    assert "warning" not in res.stdout
    # every Cos/Sin left in the graph is named with the reason
    m = onnx.load(str(src))
    trig = [n.output[0] for n in m.graph.node if n.op_type in ("Cos", "Sin")]
    assert trig
    for t in trig:
        assert f"'{t}': site" in res.stdout and "longrope" in res.stdout
    r = run_fuse(src, tmp_path / "o2.onnx", "--max-positions", "64")
    assert sorted(u["value"] for u in r["unfused"]) == sorted(trig)
    assert all("longrope" in u["reason"] for u in r["unfused"])
    # fully fused: rc 0, nothing unfused (both modes)
    r = run_fuse(MODELS / "llama.onnx", tmp_path / "o3.onnx", "--max-positions", "64")
    assert r["sites_fused"] == r["sites_found"] and r["unfused"] == []
    r = run_fuse(src, tmp_path / "o5.onnx")
    assert r["sites_fused"] == r["sites_found"] and r["unfused"] == []
    # a Cos that feeds no RoPE site is listed as such (sinusoidal embedding, no rotation)
    g = helper.make_graph([helper.make_node("Cos", ["a"], ["c"]), helper.make_node("Mul", ["c", "a"], ["y"])],
                          "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    lone = tmp_path / "lone_cos.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(lone))
    r = run_fuse(lone, tmp_path / "o4.onnx")
    assert r["sites_found"] == 0 and len(r["unfused"]) == 1
    assert "no RoPE site was recognized" in r["unfused"][0]["reason"]


def test_per_call_rows_are_verified_column_by_column(tmp_path):
    """cos/sin whose halves differ (Concat(freqs, 2 * freqs)): the fused op reads only the first
    half of each row, so the site must be refused, in both modes."""
    m = rope_graph(False)
    cat = next(n for n in m.graph.node if n.output[0] == "emb")
    m.graph.initializer.append(numpy_helper.from_array(np.array(2.0, np.float32), "two"))
    m.graph.node.insert(list(m.graph.node).index(cat), helper.make_node("Mul", ["freqs", "two"], ["freqs2"]))
    cat.input[1] = "freqs2"
    src = tmp_path / "halves.onnx"
    onnx.save(m, str(src))
    for extra in ((), ("--max-positions", "64")):
        r = run_fuse(src, tmp_path / "out.onnx", *extra)
        assert r["sites_found"] == 1 and r["sites_fused"] == 0, (extra, r["sites"])
    # (refused as not one rotation of each channel pair; verification would also disagree)
    reason = run_fuse(src, tmp_path / "out.onnx")["sites"][0]["reason"]
    assert "disagree" in reason or "not rotated by one angle" in reason, reason


def test_empty_half_and_float16_angle_in_the_default_mode(tmp_path):
    m = rope_graph(False)
    next(n for n in m.graph.node if n.output[0] == "q_hi").input[2] = "ch"
    onnx.save(m, str(tmp_path / "e.onnx"))
    r = run_fuse(tmp_path / "e.onnx", tmp_path / "e_out.onnx")
    assert r["sites_fused"] == 0 and "does not evaluate" in r["sites"][0]["reason"]
