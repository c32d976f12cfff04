"""Round trips through the C loader/saver of models built with onnx.helper, compared with the
Python protobuf library: unknown fields, fields newer than the build's schema, metadata,
value_info, model functions, external data (never read, never touched); and `ropekit inspect
--json` checked against what onnx itself reports, on these models and on the fixtures.

usage: python test_roundtrip.py ONNX_ROUNDTRIP ROPEKIT SOURCE_DIR
Exit status 77 (skipped) when the onnx package is missing.
"""
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:  # the venv is made by scripts/bootstrap.sh --python
    print(f"SKIP: {e}")
    sys.exit(77)

ROUNDTRIP, ROPEKIT, SRC = sys.argv[1:4]
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL", msg)


def unknown(field, payload=b"\x01\x02"):
    """Bytes of a length-delimited field with a number no ONNX schema uses."""
    key = (field << 3) | 2
    out = bytearray()
    while True:
        b = key & 0x7F
        key >>= 7
        out.append(b | (0x80 if key else 0))
        if not key:
            break
    return bytes(out) + bytes([len(payload)]) + payload


def with_unknown(msg, field=4321):
    """msg with an unknown field appended (python protobuf keeps unknown fields)."""
    out = type(msg)()
    out.ParseFromString(msg.SerializeToString() + unknown(field))
    return out


def rich_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["batch", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["batch", 8])
    w = numpy_helper.from_array(np.arange(64, dtype=np.float16).reshape(8, 8), "w")
    w = with_unknown(w)
    mm = helper.make_node("MatMul", ["x", "w"], ["h"], name="mm", doc_string="a doc string")
    if hasattr(mm, "metadata_props"):  # ONNX >= 1.16: unknown to Debian's 1.12 schema
        mm.metadata_props.add(key="node_meta", value="v")
    mm = with_unknown(mm)
    fn_node = helper.make_node("MyRelu", ["h"], ["y"], domain="local", name="call")
    graph = helper.make_graph([mm, fn_node], "rich", [x], [y], initializer=[w],
                              value_info=[helper.make_tensor_value_info("h", TensorProto.FLOAT16,
                                                                        ["batch", 8])],
                              doc_string="graph doc")
    graph = with_unknown(graph, 777)
    fn = helper.make_function("local", "MyRelu", ["a"], ["b"],
                              [helper.make_node("Relu", ["a"], ["b"])],
                              [helper.make_opsetid("", 18)])
    model = helper.make_model(graph, producer_name="roundtrip", producer_version="0.1",
                              opset_imports=[helper.make_opsetid("", 18),
                                             helper.make_opsetid("local", 1)],
                              functions=[fn])
    model.ir_version = 10
    model.model_version = 3
    model.doc_string = "model doc"
    helper.set_model_props(model, {"a": "1", "b": "\u00fcnicode"})
    return with_unknown(model, 9999)


def external_model(tmp):
    ws = [numpy_helper.from_array(np.full((16, 16), i, dtype=np.float32), f"w{i}") for i in range(3)]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h0"]),
             helper.make_node("MatMul", ["h0", "w1"], ["h1"]),
             helper.make_node("MatMul", ["h1", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "ext",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
                              initializer=ws)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    path = os.path.join(tmp, "ext.onnx")
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=False,
                    size_threshold=0)
    return path


def run(args):
    return subprocess.run(args, capture_output=True, text=True)


def roundtrip(src, dst, what):
    r = run([ROUNDTRIP, src, dst])
    check(r.returncode == 0, f"{what}: onnx_roundtrip failed: {r.stderr}")
    if r.returncode:
        return
    a, b = open(src, "rb").read(), open(dst, "rb").read()
    check(a == b, f"{what}: not byte-identical ({len(a)} vs {len(b)} bytes)")
    ma = onnx.load(src, load_external_data=False)
    mb = onnx.load(dst, load_external_data=False)
    check(ma.SerializeToString() == mb.SerializeToString(), f"{what}: not semantically identical")


def inspect_matches(path, what):
    r = run([ROPEKIT, "inspect", "--json", path])
    check(r.returncode == 0, f"{what}: inspect failed: {r.stderr}")
    if r.returncode:
        return
    info = json.loads(r.stdout)
    m = onnx.load(path, load_external_data=False)
    g = m.graph
    check(info["nodes"] == len(g.node), f"{what}: node count")
    ops = Counter((n.domain, n.op_type) for n in g.node)
    check({(o["domain"], o["op_type"]): o["count"] for o in info["ops"]} == dict(ops),
          f"{what}: op counts")
    check(info["initializers"]["count"] == len(g.initializer) + len(g.sparse_initializer),
          f"{what}: initializer count")
    check([(o["domain"], o["version"]) for o in info["opsets"]] ==
          [(o.domain, o.version) for o in m.opset_import], f"{what}: opsets")
    inits = {t.name for t in g.initializer}
    check([v["name"] for v in info["inputs"]] == [i.name for i in g.input if i.name not in inits],
          f"{what}: inputs")
    check([v["name"] for v in info["outputs"]] == [o.name for o in g.output], f"{what}: outputs")
    ext = sorted({e.value for t in g.initializer if t.data_location == TensorProto.EXTERNAL
                  for e in t.external_data if e.key == "location"})
    check([f["location"] for f in info["external_files"]] == ext, f"{what}: external files")
    rot = [n for n in g.node if n.op_type in ("RotaryEmbedding", "MRotaryEmbedding")]
    check(len(info["rotary_nodes"]) == len(rot), f"{what}: rotary nodes")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        # unknown fields, newer fields, metadata, value_info, functions
        src = os.path.join(tmp, "rich.onnx")
        onnx.save_model(rich_model(), src)
        roundtrip(src, os.path.join(tmp, "rich_out.onnx"), "rich")
        inspect_matches(src, "rich")

        # external data: references kept, files neither read nor modified
        src = external_model(tmp)
        data = sorted(p for p in glob.glob(os.path.join(tmp, "*")) if not p.endswith(".onnx"))
        check(len(data) == 3, f"3 external files, got {data}")
        digests = {p: (hashlib.sha256(open(p, "rb").read()).hexdigest(), os.stat(p).st_mtime_ns)
                   for p in data}
        roundtrip(src, os.path.join(tmp, "ext_out.onnx"), "external")
        check(digests == {p: (hashlib.sha256(open(p, "rb").read()).hexdigest(),
                              os.stat(p).st_mtime_ns) for p in data}, "external files untouched")
        # never read: the round trip works with the data files gone
        hidden = os.path.join(tmp, "hidden")
        os.mkdir(hidden)
        for p in data:
            os.rename(p, os.path.join(hidden, os.path.basename(p)))
        roundtrip(src, os.path.join(tmp, "ext_out2.onnx"), "external (data files absent)")
        inspect_matches(src, "external")
        for p in data:
            os.rename(os.path.join(hidden, os.path.basename(p)), p)
        # another directory: the three data files are copied into one x.onnx.data beside the
        # output, no location leaves its directory, the weights are the same
        other = os.path.join(tmp, "other")
        os.mkdir(other)
        dst = os.path.join(other, "x.onnx")
        r = run([ROUNDTRIP, src, dst])
        check(r.returncode == 0, f"other dir: {r.stderr}")
        check(sorted(os.listdir(other)) == ["x.onnx", "x.onnx.data"],
              f"other dir holds the model and one data file: {os.listdir(other)}")
        mo = onnx.load(dst, load_external_data=False)
        locs = {e.value for t in mo.graph.initializer for e in t.external_data
                if e.key == "location"}
        check(locs == {"x.onnx.data"}, f"every location is x.onnx.data: {locs}")
        mo = onnx.load(dst)
        mi = onnx.load(src)
        for a, b in zip(mi.graph.initializer, mo.graph.initializer):
            check(a.name == b.name and np.array_equal(numpy_helper.to_array(a),
                                                       numpy_helper.to_array(b)),
                  f"{a.name}: same values after the copy")
        check(digests == {p: (hashlib.sha256(open(p, "rb").read()).hexdigest(),
                              os.stat(p).st_mtime_ns) for p in data}, "input data untouched")

        # the committed test models (copied: outputs go next to their external data) and the
        # transformer fixtures
        data_copy = os.path.join(tmp, "data")
        shutil.copytree(os.path.join(SRC, "tests/onnx/data"), data_copy)
        for path in sorted(glob.glob(os.path.join(data_copy, "*.onnx")) +
                           glob.glob(os.path.join(SRC, "tests/fixtures/models/*.onnx"))):
            name = os.path.basename(path)
            if name in ("dangling.onnx", "truncated.onnx", "not_onnx.onnx", "cycle.onnx",
                        "self_loop.onnx"):
                continue
            roundtrip(path, os.path.join(os.path.dirname(path) if path.startswith(tmp) else tmp,
                                         "out.onnx.tmp_rt"), name)
            inspect_matches(path, name)

    print(f"{'FAILED' if failures else 'ok'}: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
