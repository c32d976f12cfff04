#!/usr/bin/env python3
"""Write the shared correctness vectors tests/cases/<op>.bin (format: tests/cases/README.md).

Every backend (CPU variants, CUDA, WebGPU, ...) runs these very cases and compares its outputs
with the CPU reference; the Python conformance suite checks them against the float64 oracles
(tests/python/test_shared_cases.py). The files hold inputs only.

The cases come from the generators of tests/python/cases.py with fixed seeds, so this script
rewrites the files bit for bit (`--check` compares instead of writing). For the three rotary
operators, each (x dtype, table dtype) stream first draws, for every entry of a wish list, the
first generated case that has the wished feature (partial rotary, interleaved, inverse, rank 4
with and without num_heads, 3D tables, the offset form, scale != 1, both MRoPE layouts, ...),
then a few unconstrained cases. QKNorm and the regroup walk the geometries of cases.QK_CASES and
cases.REGROUP_PARAMS.

    .venv/bin/python scripts/make_shared_cases.py            # rewrite tests/cases/*.bin
    .venv/bin/python scripts/make_shared_cases.py --check    # exit 1 if a file is not current
"""

from __future__ import annotations

import argparse
import pathlib
import struct
import sys
import zlib

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

import cases as C  # noqa: E402
import oracle as O  # noqa: E402

CASE_DIR = ROOT / "tests" / "cases"
MAGIC = b"RKCASES1"
OP_CODES = {
    "rotary_embedding": 0,
    "ms_rotary_embedding": 1,
    "mrotary_embedding": 2,
    "qknorm_rotary_embedding": 3,
    "inverse_rotary_regroup": 4,
}
DTYPE_CODES = {O.F32: 1, O.F16: 2, O.BF16: 3, np.dtype(np.int64): 4}  # ropekit_dtype
SEED = 20250101  # every stream's rng is default_rng([SEED, op code, stream index])

# (x dtype, table dtype) streams of the rotary operators, and how many unconstrained cases each
# draws after its wished ones.
ROTARY_STREAMS = [
    (O.F32, O.F32, 6),
    (O.F16, O.F16, 6),
    (O.BF16, O.BF16, 6),
    (O.F16, O.F32, 1),   # float32 tables with 16-bit x (ropekit extension)
    (O.BF16, O.F32, 1),
]

# ---- features of a rotary case -------------------------------------------------------------


def _geom(case):
    """(rank, N, H, R) of a rotary case."""
    x, a = case["args"][0], case["attrs"]
    if x.ndim == 4:
        N, H = x.shape[1], x.shape[3]
    else:
        N = a["num_heads"]
        H = x.shape[2] // N
    return x.ndim, N, H, a["rotary_embedding_dim"] or H


def _seq(case):
    x = case["args"][0]
    return x.shape[2] if x.ndim == 4 else x.shape[1]


def partial(c):
    _, _, H, R = _geom(c)
    return R < H


def full_explicit(c):
    """R = H, given as rotary_embedding_dim (not 0)."""
    _, _, H, R = _geom(c)
    return R == H and c["attrs"]["rotary_embedding_dim"] != 0


def odd_head(c):
    return _geom(c)[2] % 2 == 1


def scaled(c):
    return c["attrs"]["scale"] != 1.0


def num_heads_given(c):
    return c["attrs"]["num_heads"] != 0


def multi_batch(c):
    return c["args"][0].shape[0] > 1


def table_3d(c):
    """ai.onnx without position_ids: tables (B, S, R/2)."""
    return c["args"][3] is None


def offset_form(c):
    """com.microsoft: position_ids of shape (1,), an offset."""
    return c["args"][1].shape == (1,)


def text_tokens(c):
    """MRoPE text tokens: the three position streams are equal."""
    p = c["args"][1]
    return bool((p[0] == p[1]).all() and (p[0] == p[2]).all())


def zero_section(c):
    return 0 in c["attrs"]["mrope_section"]


def fewer_rows(op):
    """Fewer table rows than tokens (allowed when every id is in range)."""
    def pred(c):
        table = c["args"][1] if op == "rotary_embedding" else c["args"][2]
        return table.ndim == 2 and table.shape[0] < _seq(c)
    return pred


def rank(n):
    return lambda c: c["args"][0].ndim == n


def attr(name, value):
    return lambda c: c["attrs"][name] == value


def all_of(*preds):
    return lambda c: all(p(c) for p in preds)


COMMON_WISHES = [
    all_of(attr("interleaved", 0), partial, rank(3)),
    all_of(attr("interleaved", 1), partial, rank(4)),
    all_of(attr("interleaved", 1), attr("rotary_embedding_dim", 0), rank(3)),
    full_explicit,
    all_of(attr("inverse", 1), attr("interleaved", 0)),
    all_of(attr("inverse", 1), attr("interleaved", 1), partial),
    all_of(rank(4), attr("num_heads", 0)),
    all_of(rank(4), num_heads_given, multi_batch),
    odd_head,
]
WISHES = {
    "rotary_embedding": COMMON_WISHES + [
        all_of(table_3d, rank(3)),
        all_of(table_3d, rank(4), attr("inverse", 1)),
        all_of(table_3d, attr("interleaved", 1), partial),
        fewer_rows("rotary_embedding"),
    ],
    "ms_rotary_embedding": COMMON_WISHES + [
        all_of(offset_form, rank(3)),
        all_of(offset_form, rank(4), attr("interleaved", 1)),
        all_of(scaled, attr("inverse", 1)),
        all_of(scaled, offset_form),
        all_of(scaled, partial, rank(4)),
        fewer_rows("ms_rotary_embedding"),
    ],
    "mrotary_embedding": COMMON_WISHES + [
        all_of(attr("mrope_layout", 0), partial, scaled),
        all_of(attr("mrope_layout", 1), partial, attr("interleaved", 1)),
        all_of(attr("mrope_layout", 0), text_tokens),
        all_of(attr("mrope_layout", 1), text_tokens),
        all_of(attr("mrope_layout", 1), scaled, attr("inverse", 1)),
        all_of(attr("mrope_layout", 0), zero_section),
        all_of(attr("mrope_layout", 1), zero_section, rank(4)),
        fewer_rows("mrotary_embedding"),
    ],
}
GENERATORS = {"rotary_embedding": C.onnx_case, "ms_rotary_embedding": C.ms_case, "mrotary_embedding": C.mrope_case}


def rotary_cases(op):
    """The cases of one rotary operator: list of (label, case dict)."""
    out = []
    for si, (dt, tab_dt, extra) in enumerate(ROTARY_STREAMS):
        rng = np.random.default_rng([SEED, OP_CODES[op], si])
        gen = GENERATORS[op]
        wishes = WISHES[op]
        for wi, wish in enumerate(wishes):
            for _ in range(100000):
                case = gen(rng, dt, tab_dt)
                if wish(case):
                    break
            else:
                raise RuntimeError(f"{op}: no case with wish {wi} in 100000 draws")
            out.append(case)
        for _ in range(extra):
            out.append(gen(rng, dt, tab_dt))
    return out


def qknorm_cases():
    """Every geometry of cases.QK_CASES in each dtype, twice: with a zero fp8 block and a zero
    query head where the geometry has a 64-channel block, then with epsilon 1e-5.
    Inputs with an ambiguous fp8 block (amax / 448 within 2^-18 of a power of two, where the
    contract lets logf pick either binade) are drawn again, so that every backend can be
    compared with the CPU bit for bit."""
    out = []
    for di, dt in enumerate([O.F32, O.F16, O.BF16]):
        rng = np.random.default_rng([SEED, OP_CODES["qknorm_rotary_embedding"], di])
        for B, S, nh, hd, rope, fp8 in C.QK_CASES:
            for rep in range(2):
                attrs = dict(num_heads=nh, head_dim=hd, rope_head_dim=rope, epsilon=1e-6 if rep == 0 else 1e-5,
                             simulate_fp8=fp8)
                for _ in range(100):
                    q, kv, w, cos, sin = C.qknorm_inputs(rng, B, S, nh, hd, rope, dt,
                                                         zero_block=(rep == 0 and hd - rope >= 64))
                    if not (fp8 and O.qknorm(q, kv, w, cos, sin, **attrs)[3].any()):
                        break
                else:
                    raise RuntimeError("qknorm: no inputs without an ambiguous fp8 block in 100 draws")
                out.append(dict(args=(q, kv, w, cos if rope else None, sin if rope else None), attrs=attrs))
    return out


def regroup_cases():
    """Every (geometry, num_groups) of cases.REGROUP_PARAMS in each dtype, plus three pure regroups
    (rope_head_dim 0, no tables) per dtype."""
    out = []
    pure = [(5, 4, 16, 0, 4), (3, 8, 64, 0, 8), (4, 2, 9, 0, 2)]
    for di, dt in enumerate([O.F32, O.F16, O.BF16]):
        rng = np.random.default_rng([SEED, OP_CODES["inverse_rotary_regroup"], di])
        for N, nh, hd, rope, G in C.REGROUP_PARAMS + pure:
            x, cos, sin = C.regroup_inputs(rng, N, nh, hd, rope, dt)
            attrs = dict(num_heads=nh, head_dim=hd, rope_head_dim=rope, num_groups=G)
            out.append(dict(args=(x, cos if rope else None, sin if rope else None), attrs=attrs))
    return out


# ---- encoding ----------------------------------------------------------------------------------


def encode_attrs(op, a):
    """(int64 list, float32 list) in the file's fixed per-op order (tests/cases/README.md)."""
    if op == "rotary_embedding":
        return [a["interleaved"], a["rotary_embedding_dim"], a["num_heads"], a["inverse"]], []
    if op == "ms_rotary_embedding":
        return [a["interleaved"], 0, a["num_heads"], a["rotary_embedding_dim"], a["inverse"]], [a["scale"]]
    if op == "mrotary_embedding":
        sec = list(a["mrope_section"])
        return [a["interleaved"], a["num_heads"], a["rotary_embedding_dim"], a["inverse"], a["mrope_layout"],
                *sec], [a["scale"]]
    if op == "qknorm_rotary_embedding":
        return [a["num_heads"], a["head_dim"], a["rope_head_dim"], a["simulate_fp8"]], [a["epsilon"]]
    if op == "inverse_rotary_regroup":
        return [a["num_heads"], a["head_dim"], a["rope_head_dim"], a["num_groups"]], []
    raise ValueError(op)


def encode_tensor(a) -> bytes:
    if a is None:
        return struct.pack("<I", 0)
    a = np.ascontiguousarray(a)
    head = struct.pack("<III", 1, DTYPE_CODES[a.dtype], a.ndim) + struct.pack(f"<{a.ndim}q", *a.shape)
    return head + a.tobytes()


def encode_file(op, case_list) -> bytes:
    assert sys.byteorder == "little"  # tensor data is written in the machine's order
    parts = [MAGIC, struct.pack("<II", OP_CODES[op], len(case_list))]
    for case in case_list:
        ints, floats = encode_attrs(op, case["attrs"])
        parts.append(struct.pack(f"<I{len(ints)}q", len(ints), *[int(v) for v in ints]))
        parts.append(struct.pack(f"<I{len(floats)}f", len(floats), *[float(np.float32(v)) for v in floats]))
        parts.append(struct.pack("<I", len(case["args"])))
        parts.extend(encode_tensor(t) for t in case["args"])
    body = b"".join(parts)
    return body + struct.pack("<I", zlib.crc32(body))  # trailer: CRC-32 of everything before it


def build_all() -> dict[str, bytes]:
    """op name -> file contents."""
    files = {}
    for op in GENERATORS:
        files[op] = encode_file(op, rotary_cases(op))
    files["qknorm_rotary_embedding"] = encode_file("qknorm_rotary_embedding", qknorm_cases())
    files["inverse_rotary_regroup"] = encode_file("inverse_rotary_regroup", regroup_cases())
    return files


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the files instead of writing them")
    ap.add_argument("--out", type=pathlib.Path, default=CASE_DIR, help="directory (default tests/cases)")
    args = ap.parse_args()
    stale = 0
    for op, data in build_all().items():
        path = args.out / f"{op}.bin"
        count = struct.unpack_from("<I", data, 12)[0]
        if args.check:
            same = path.exists() and path.read_bytes() == data
            stale += not same
            print(f"{path}: {count} cases, {len(data)} bytes, {'current' if same else 'STALE'}")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            print(f"wrote {path}: {count} cases, {len(data)} bytes")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
