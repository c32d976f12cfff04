"""A PROTOTYPE of item 6 of issue 12, in Python: rewrites a DeepSeek-V4 dynamo export
(bench/dsv4/make_dsv4_model.py) so that each layer's q_b_norm + RoPE and kv_norm + RoPE become
one com.microsoft.QKNormRotaryEmbedding and the conjugate rotation + group reshape before the
grouped output projection becomes one com.microsoft.InverseRotaryRegroup (run by libropekit_ort).

It is NOT `ropekit fuse` (the C matcher, src/onnx/match_qknorm.c, is still to be written): it
checks only the structure it walks (RoPE = Concat(Slice, Add(Mul(Slice, cos), Mul(rot, sin)))
classified by what feeds it), takes the sizes as arguments and does not verify constants. It
exists to check the operator contract against the real model (tests/python/test_ort_dsv4.py)
and to measure what the fusion buys (bench/dsv4/bench_fuse.py). The graph's own cos/sin (the
repeat_interleave'd per-token tables) stay and feed the fused nodes."""
import sys
import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto as TP

def fuse(src, dst, num_heads, head_dim, rope_dim, groups, eps):
    m = onnx.load(src)
    g = m.graph
    prod = {o: n for n in g.node for o in n.output}
    cons = {}
    for n in g.node:
        for i in n.input:
            cons.setdefault(i, []).append(n)
    inits = {i.name: i for i in g.initializer}
    def skip(name):  # through Casts (16-bit graphs widen to float around the norm and RoPE)
        while prod.get(name) is not None and prod[name].op_type == "Cast":
            name = prod[name].input[0]
        return name

    def p(name, op):
        n = prod.get(skip(name))
        return n if n is not None and n.op_type == op else None

    def as_float(name):
        uid[0] += 1
        out = f"rk_f{uid[0]}"
        new_nodes.append(helper.make_node("Cast", [name], [out], to=TP.FLOAT, name=out))
        return out
    new_nodes, drop = [], set()
    uid = [0]
    def const(vals):
        uid[0] += 1
        name = f"rk_c{uid[0]}"
        g.initializer.append(numpy_helper.from_array(np.array(vals, np.int64), name))
        return name
    sites = []
    for n in g.node:
        if n.op_type != "Concat" or len(n.input) != 2:
            continue
        add = p(n.input[1], "Add")  # (a Cast to T after it in 16-bit graphs)
        nope_slice = p(n.input[0], "Slice")
        if add is None or nope_slice is None:
            continue
        m1, m2 = p(add.input[0], "Mul"), p(add.input[1], "Mul")
        if m1 is None or m2 is None:
            continue
        rope_slice = p(m1.input[0], "Slice")
        if rope_slice is None or rope_slice.input[0] != nope_slice.input[0]:
            continue
        x = rope_slice.input[0]
        if p(m2.input[0], "Reshape") is None:
            continue
        cos_u, sin_u = m1.input[1], m2.input[1]
        # cos_u = Unsqueeze(repeat_interleave(cos)); sin_u likewise (of sin or -sin)
        cos_ri = p(cos_u, "Unsqueeze").input[0]
        sin_ri = p(sin_u, "Unsqueeze").input[0]
        sites.append((n, x, cos_ri, sin_ri))
    # group: each layer has q, kv, inverse sites in order
    layer = 0
    fused = 0
    for n, x, cos_ri, sin_ri in sites:
        xn = prod[x]
        if xn.op_type == "Mul" and p(xn.input[1], "Reciprocal") is not None and p(xn.input[0], "Transpose") is not None:
            # query: x = Transpose(Reshape(q_lin)) * rsqrt
            qlin = p(p(xn.input[0], "Transpose").input[0], "Reshape").input[0]
            q_site = (n, qlin, cos_ri, sin_ri)
            continue
        if xn.op_type == "Transpose" and p(xn.input[0], "Reshape") is not None:
            wmul = p(p(xn.input[0], "Reshape").input[0], "Mul")
            if wmul is not None and skip(wmul.input[0]) in inits:
                inner = p(wmul.input[1], "Mul")
                klin = skip(inner.input[0])
                w = wmul.input[0] if skip(wmul.input[0]) != wmul.input[0] else wmul.input[0]
                qn, qlin, qc, qs = q_site
                assert qc == cos_ri and qs == sin_ri
                L = f"rk_qk{layer}"
                new_nodes.append(helper.make_node("QKNormRotaryEmbedding", [qlin, klin, as_float(w), as_float(cos_ri), as_float(sin_ri)],
                    [L + "_q", L + "_kv"], domain="com.microsoft", name=L, num_heads=num_heads, head_dim=head_dim,
                    rope_head_dim=rope_dim, epsilon=eps, simulate_fp8=0))
                new_nodes.append(helper.make_node("Transpose", [L + "_q"], [qn.output[0]], perm=[0, 2, 1, 3], name=L + "_qt"))
                new_nodes.append(helper.make_node("Unsqueeze", [L + "_kv", const([1])], [n.output[0]], name=L + "_ku"))
                drop.add(qn.name or id(qn)); drop.add(n.name or id(n))
                fused += 2
                continue
        # inverse: Concat -> Transpose(0,2,1,3) -> Reshape -> Transpose(1,0,2)
        t1 = [c for c in cons.get(n.output[0], []) if c.op_type == "Transpose"]
        if len(t1) == 1:
            rs = [c for c in cons.get(t1[0].output[0], []) if c.op_type == "Reshape"]
            t2 = [c for c in cons.get(rs[0].output[0], []) if c.op_type == "Transpose"] if len(rs) == 1 else []
            if len(t2) == 1 and list(t2[0].attribute[0].ints) == [1, 0, 2]:
                negsin = p(sin_ri, "Reshape")
                neg = p(p(negsin.input[0], "Expand").input[0], "Unsqueeze")
                neg = p(neg.input[0], "Neg")
                sin_pos = [s for s in sites if s[3] != sin_ri][0][3]
                L = f"rk_inv{layer}"
                new_nodes += [
                    helper.make_node("Transpose", [x], [L + "_t"], perm=[0, 2, 1, 3], name=L + "_t"),
                    helper.make_node("Reshape", [L + "_t", const([-1, num_heads * head_dim])], [L + "_x"], name=L + "_r"),
                    helper.make_node("Reshape", [as_float(cos_ri), const([-1, rope_dim])], [L + "_c"], name=L + "_rc"),
                    helper.make_node("Reshape", [as_float(sin_pos), const([-1, rope_dim])], [L + "_s"], name=L + "_rs"),
                    helper.make_node("InverseRotaryRegroup", [L + "_x", L + "_c", L + "_s"], [t2[0].output[0]],
                                     domain="com.microsoft", name=L, num_heads=num_heads, head_dim=head_dim,
                                     rope_head_dim=rope_dim, num_groups=groups)]
                drop.add(t2[0].name or id(t2[0]))
                fused += 1
                layer += 1
    keep = [n for n in g.node if (n.name or id(n)) not in drop]
    del g.node[:]
    g.node.extend(keep + new_nodes)
    # dead-code elimination + topological sort
    need = {o.name for o in g.output}
    prod = {o: n for n in g.node for o in n.output}
    live, stack = set(), list(need)
    while stack:
        v = stack.pop()
        n = prod.get(v)
        if n is None or id(n) in live:
            continue
        live.add(id(n))
        stack.extend(i for i in n.input if i)
    nodes = [n for n in g.node if id(n) in live]
    avail = {i.name for i in g.input} | {i.name for i in g.initializer} | {""}
    order, pending = [], nodes
    while pending:
        rest = []
        for n in pending:
            if all(i in avail for i in n.input):
                order.append(n); avail.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            raise RuntimeError("cycle")
        pending = rest
    del g.node[:]
    g.node.extend(order)
    if not any(o.domain == "com.microsoft" for o in m.opset_import):
        m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    m.metadata_props.append(onnx.StringStringEntryProto(key="ropekit.requires", value="libropekit_ort"))
    onnx.save(m, dst)
    return fused, len(order)

if __name__ == "__main__":
    # IN OUT num_heads head_dim rope_head_dim o_groups epsilon
    a = sys.argv[1:]
    print(fuse(a[0], a[1], int(a[2]), int(a[3]), int(a[4]), int(a[5]), float(a[6])))
