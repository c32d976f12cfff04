"""Writes the small ONNX models of tests/onnx/data/ (committed, so the C tests and the CLI golden
tests need no Python) and the fuzz seed corpus fuzz/corpus/.

    .venv/bin/python tests/onnx/make_models.py      # then review and commit the changes

Every model is tiny (< 2 KB) and built with onnx.helper; the bytes are deterministic for a given
onnx/protobuf version.
"""
import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
CORPUS = os.path.join(HERE, "..", "..", "fuzz", "corpus")


def rope_model():
    """A graph with one ai.onnx RotaryEmbedding (opset 23) and one com.microsoft one, a Constant,
    metadata, value_info and symbolic dims."""
    h = 4
    pos = np.arange(16, dtype=np.float32)[:, None]
    inv = (10000.0 ** (-np.arange(h, dtype=np.float32) / h)).astype(np.float32)
    cos = numpy_helper.from_array(np.cos(pos * inv).astype(np.float32), "cos_cache")
    sin = numpy_helper.from_array(np.sin(pos * inv).astype(np.float32), "sin_cache")
    nodes = [
        helper.make_node("Constant", [], ["two"], name="two",
                         value=numpy_helper.from_array(np.array(2.0, dtype=np.float32))),
        helper.make_node("Mul", ["x", "two"], ["x2"], name="scale"),
        helper.make_node("RotaryEmbedding", ["x2", "cos_cache", "sin_cache", "position_ids"],
                         ["q_rot"], name="rope_q", num_heads=2, interleaved=0),
        helper.make_node("RotaryEmbedding", ["x", "position_ids", "cos_cache", "sin_cache"],
                         ["k_rot"], name="rope_k", domain="com.microsoft", num_heads=2,
                         interleaved=1, scale=1.0),
        helper.make_node("Add", ["q_rot", "k_rot"], ["y"], name="sum"),
    ]
    graph = helper.make_graph(
        nodes, "tiny_rope",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 16]),
         helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 16])],
        initializer=[cos, sin],
        value_info=[helper.make_tensor_value_info("x2", TensorProto.FLOAT, ["batch", "seq", 16])])
    model = helper.make_model(graph, producer_name="ropekit-tests", producer_version="1",
                              opset_imports=[helper.make_opsetid("", 23),
                                             helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    helper.set_model_props(model, {"purpose": "golden test", "weird\tkey": "caf\u00e9 \"quoted\""})
    return model


def subgraph_model():
    """An If whose branches read outer values (outer_a from the main graph)."""
    then_g = helper.make_graph(
        [helper.make_node("Add", ["outer_a", "outer_a"], ["t_out"], name="then_add")], "then",
        [], [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [2])])
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["outer_a"], ["e_out"], name="else_neg")], "else",
        [], [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, [2])])
    nodes = [
        helper.make_node("Relu", ["a"], ["outer_a"], name="relu"),
        helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_g,
                         else_branch=else_g),
    ]
    graph = helper.make_graph(
        nodes, "with_if",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, producer_name="ropekit-tests",
                              opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def external_model():
    """Two initializers in external data (one file), one inline; metadata none."""
    w = numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(2, 4), "w")
    b = numpy_helper.from_array(np.arange(4, dtype=np.float32), "b")
    s = numpy_helper.from_array(np.array([3], dtype=np.int64), "small")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"], name="mm"),
             helper.make_node("Add", ["xw", "b"], ["y"], name="bias")]
    graph = helper.make_graph(
        nodes, "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], initializer=[w, b, s])
    model = helper.make_model(graph, producer_name="ropekit-tests",
                              opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def dtypes_model():
    """Fuzz seed: initializers of every readable type, raw and typed; Constant nodes with each
    value attribute; a sparse initializer; a model-local function."""
    inits = []
    for dt, arr in [(TensorProto.FLOAT, np.array([0.5, -1.0], np.float32)),
                    (TensorProto.FLOAT16, np.array([1.0, -2.0], np.float16)),
                    (TensorProto.DOUBLE, np.array([3.0, 4.0], np.float64)),
                    (TensorProto.INT32, np.array([-1, 7], np.int32)),
                    (TensorProto.INT64, np.array([5, -6], np.int64)),
                    (TensorProto.UINT8, np.array([1, 255], np.uint8)),
                    (TensorProto.UINT32, np.array([1, 4000000000], np.uint32)),
                    (TensorProto.UINT64, np.array([2, 2**63 + 1], np.uint64)),
                    (TensorProto.BOOL, np.array([True, False]))]:
        name = helper.tensor_dtype_to_np_dtype(dt).name
        inits.append(numpy_helper.from_array(arr, f"raw_{name}"))
        inits.append(helper.make_tensor(f"typed_{name}", dt, [2], arr.tolist()))
    inits.append(helper.make_tensor("typed_bf16", TensorProto.BFLOAT16, [2], [1.0, 3.0]))
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.5], np.float32), "sp"),
        numpy_helper.from_array(np.array([1], np.int64), "sp_idx"), [4])
    nodes = [helper.make_node("Constant", [], ["c_f"], value_float=1.5),
             helper.make_node("Constant", [], ["c_fs"], value_floats=[1.0, 2.0]),
             helper.make_node("Constant", [], ["c_i"], value_int=3),
             helper.make_node("Constant", [], ["c_is"], value_ints=[1, 2, 3]),
             helper.make_node("Add", ["raw_float32", "c_fs"], ["s1"]),
             helper.make_node("Mul", ["s1", "sp"], ["s2"]),
             helper.make_node("F", ["s2"], ["y"], domain="local")]
    graph = helper.make_graph(nodes, "dtypes",
                              [helper.make_tensor_value_info("unused", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                              initializer=inits, sparse_initializer=[sparse])
    fn = helper.make_function("local", "F", ["a"], ["b"], [helper.make_node("Neg", ["a"], ["b"])],
                              [helper.make_opsetid("", 18)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("local", 1)],
                              functions=[fn])
    model.ir_version = 9
    return model


def nested_if_model():
    """Fuzz seed: an If inside an If branch; the inner branch reads a main-graph value."""
    inner_then = helper.make_graph([helper.make_node("Neg", ["top"], ["it"])], "inner_then", [],
                                   [helper.make_tensor_value_info("it", TensorProto.FLOAT, [1])])
    inner_else = helper.make_graph([helper.make_node("Abs", ["top"], ["ie"])], "inner_else", [],
                                   [helper.make_tensor_value_info("ie", TensorProto.FLOAT, [1])])
    outer_then = helper.make_graph(
        [helper.make_node("If", ["c"], ["ot"], then_branch=inner_then, else_branch=inner_else)],
        "outer_then", [], [helper.make_tensor_value_info("ot", TensorProto.FLOAT, [1])])
    outer_else = helper.make_graph([helper.make_node("Identity", ["x"], ["oe"])], "outer_else",
                                   [], [helper.make_tensor_value_info("oe", TensorProto.FLOAT, [1])])
    nodes = [helper.make_node("Relu", ["x"], ["top"]),
             helper.make_node("If", ["c"], ["y"], then_branch=outer_then, else_branch=outer_else)]
    graph = helper.make_graph(nodes, "nested",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
                               helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def dangling_model():
    """A node reads 'ghost', which nothing defines (built without the checker)."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "ghost"], ["y"], name="bad_add")], "dangling",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def cycle_model(self_loop=False):
    """Nodes that read their own output through a cycle (a -> b -> a), or directly."""
    if self_loop:
        nodes = [helper.make_node("Add", ["x", "s"], ["s"], name="selfish"),
                 helper.make_node("Relu", ["s"], ["y"], name="after")]
    else:
        nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="first"),
                 helper.make_node("Neg", ["a"], ["b"], name="second"),
                 helper.make_node("Relu", ["b"], ["y"], name="after")]
    graph = helper.make_graph(nodes, "self_loop" if self_loop else "cycle",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def bad_external_model():
    """Initializers whose external data cannot be read: an absolute path, a location leaving
    the folder, a missing file, an offset past the end of external.bin, a location naming the
    folder itself; one good reference to external.bin (56 bytes)."""
    refs = [("abs", "/nonexistent/ropekit/w.bin", None), ("escape", "../w.bin", None),
            ("missing", "missing.bin", None), ("past_end", "external.bin", "4096"),
            ("folder", "sub/..", None), ("good", "external.bin", "0")]
    inits = []
    for name, loc, off in refs:
        t = helper.make_tensor(name, TensorProto.FLOAT, [2], [0.0, 0.0])
        del t.float_data[:]
        t.data_location = TensorProto.EXTERNAL
        t.external_data.add(key="location", value=loc)
        if off is not None:
            t.external_data.add(key="offset", value=off)
        inits.append(t)
    nodes = [helper.make_node("Add", ["x", name], [f"y{i}"]) for i, (name, _, _) in enumerate(refs)]
    graph = helper.make_graph(nodes, "bad_external",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [2])
                               for i in range(len(refs))], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def main():
    os.makedirs(DATA, exist_ok=True)
    os.makedirs(CORPUS, exist_ok=True)
    rope = rope_model()
    onnx.checker.check_model(rope)
    onnx.save_model(rope, os.path.join(DATA, "tiny_rope.onnx"))
    sub = subgraph_model()
    onnx.checker.check_model(sub)
    onnx.save_model(sub, os.path.join(DATA, "subgraph_if.onnx"))
    ext = external_model()
    if os.path.exists(os.path.join(DATA, "external.bin")):  # onnx appends to an existing file
        os.remove(os.path.join(DATA, "external.bin"))
    onnx.checker.check_model(ext)
    onnx.save_model(ext, os.path.join(DATA, "external.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="external.bin", size_threshold=16)
    os.chmod(os.path.join(DATA, "external.bin"), 0o644)
    onnx.save_model(dangling_model(), os.path.join(DATA, "dangling.onnx"))
    data = rope.SerializeToString()
    with open(os.path.join(DATA, "truncated.onnx"), "wb") as f:
        f.write(data[: len(data) // 2])
    with open(os.path.join(CORPUS, "dtypes.onnx"), "wb") as f:
        f.write(dtypes_model().SerializeToString())
    nested = nested_if_model()
    onnx.checker.check_model(nested)
    with open(os.path.join(CORPUS, "nested_if.onnx"), "wb") as f:
        f.write(nested.SerializeToString())
    # hostile models: CLI goldens and fuzz seeds
    with open(os.path.join(DATA, "not_onnx.onnx"), "wb") as f:
        f.write(b"this is a README, not a model\n")
    onnx.save_model(cycle_model(), os.path.join(DATA, "cycle.onnx"))
    onnx.save_model(cycle_model(self_loop=True), os.path.join(DATA, "self_loop.onnx"))
    onnx.save_model(bad_external_model(), os.path.join(DATA, "bad_external.onnx"))
    # a RoPE seed whose graph is made cyclic: the first node reads the last node's output
    qwen = os.path.join(CORPUS, "rope_qwen3.onnx")
    if os.path.exists(qwen):
        m = onnx.load(qwen)
        first = next(n for n in m.graph.node if n.input)
        first.input[0] = m.graph.node[-1].output[0]
        with open(os.path.join(CORPUS, "rope_qwen3_cycle.onnx"), "wb") as f:
            f.write(m.SerializeToString())
    for name in ("tiny_rope.onnx", "subgraph_if.onnx", "external.onnx", "cycle.onnx",
                 "self_loop.onnx", "bad_external.onnx", "not_onnx.onnx"):
        shutil.copy(os.path.join(DATA, name), os.path.join(CORPUS, name))


if __name__ == "__main__":
    main()
