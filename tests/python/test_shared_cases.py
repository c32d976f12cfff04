"""The shared correctness vectors (tests/cases/<op>.bin, the cases every backend runs) through the
Python binding, against the float64 oracles with the tolerances of test_rotary_random.py (rotary
operators, ulps of T) and test_qknorm_regroup.py (QKNorm and the regroup: the contract
transcription's bits). The C test shared_cases_cpu runs the same files on every CPU variant.

The files are read here with a small independent reader (format: tests/cases/README.md), and
checked to be exactly what scripts/make_shared_cases.py writes from cases.py."""

import importlib.util
import pathlib
import struct
import zlib

import numpy as np
import pytest

import oracle as O
import ropekit
import test_qknorm_regroup as TQ
import test_rotary_random as TR

ROOT = pathlib.Path(__file__).resolve().parents[2]
CASE_DIR = ROOT / "tests" / "cases"
OP_NAMES = ["rotary_embedding", "ms_rotary_embedding", "mrotary_embedding", "qknorm_rotary_embedding",
            "inverse_rotary_regroup"]
ROTARY_KEYS = {"rotary_embedding": "onnx", "ms_rotary_embedding": "ms", "mrotary_embedding": "mrope"}
DTYPES = {1: O.F32, 2: O.F16, 3: O.BF16, 4: np.dtype(np.int64)}


# ---- reader ------------------------------------------------------------------------------------


def read_case_file(path):
    """(op code, [(ints, floats, tensors)]): tensors are numpy arrays or None (absent)."""
    data = path.read_bytes()
    assert data[:8] == b"RKCASES1", f"{path}: bad magic"
    body, (crc,) = data[:-4], struct.unpack("<I", data[-4:])
    assert zlib.crc32(body) == crc, f"{path}: CRC-32 mismatch"
    pos = 8

    def take(fmt):
        nonlocal pos
        vals = struct.unpack_from("<" + fmt, body, pos)
        pos += struct.calcsize("<" + fmt)
        return vals

    op, count = take("II")
    cases = []
    for _ in range(count):
        (n,) = take("I")
        ints = take(f"{n}q")
        (n,) = take("I")
        floats = take(f"{n}f")
        (n,) = take("I")
        tensors = []
        for _ in range(n):
            (present,) = take("I")
            if not present:
                tensors.append(None)
                continue
            code, rank = take("II")
            shape = take(f"{rank}q")
            dt = DTYPES[code]
            count_el = int(np.prod(shape, dtype=np.int64))
            a = np.frombuffer(body, dt, count_el, pos).reshape(shape).copy()
            pos += count_el * dt.itemsize
            tensors.append(a)
        cases.append((ints, floats, tensors))
    assert pos == len(body), f"{path}: {len(body) - pos} bytes after the last case"
    return op, cases


def as_case(op, ints, floats, tensors):
    """The case as cases.py's generators give it: dict(args=inputs in operator order, attrs)."""
    if op == "rotary_embedding":
        attrs = dict(zip(("interleaved", "rotary_embedding_dim", "num_heads", "inverse"), ints))
    elif op == "ms_rotary_embedding":
        interleaved, packed, num_heads, rdim, inverse = ints
        assert packed == 0
        attrs = dict(interleaved=interleaved, rotary_embedding_dim=rdim, num_heads=num_heads, inverse=inverse,
                     scale=floats[0])
    elif op == "mrotary_embedding":
        interleaved, num_heads, rdim, inverse, layout, s0, s1, s2 = ints
        attrs = dict(interleaved=interleaved, num_heads=num_heads, rotary_embedding_dim=rdim, inverse=inverse,
                     mrope_layout=layout, mrope_section=[s0, s1, s2], scale=floats[0])
    elif op == "qknorm_rotary_embedding":
        attrs = dict(zip(("num_heads", "head_dim", "rope_head_dim", "simulate_fp8"), ints), epsilon=floats[0])
    else:
        attrs = dict(zip(("num_heads", "head_dim", "rope_head_dim", "num_groups"), ints))
    return dict(args=tuple(tensors), attrs=attrs)


def load(op):
    code, raw = read_case_file(CASE_DIR / f"{op}.bin")
    assert code == OP_NAMES.index(op)
    return [as_case(op, *r) for r in raw]


# ---- tests -------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", OP_NAMES)
def test_shared_cases(op):
    fails, worst, counts = [], {}, {}
    for i, case in enumerate(load(op)):
        args, a = case["args"], case["attrs"]
        x = args[0]
        dtype = str(x.dtype)
        key = dtype
        if op in ROTARY_KEYS:
            k = ROTARY_KEYS[op]
            key = f"{dtype} x / {(args[1] if k == 'onnx' else args[2]).dtype} tables"
        counts[key] = counts.get(key, 0) + 1
        try:
            if op in ROTARY_KEYS:
                y = TR.run(k, case)
                assert y.dtype == x.dtype and y.shape == x.shape
                err = O.ulp_err(y, TR.expected(k, case)[0], x.dtype).max()
                worst[key] = max(worst.get(key, 0.0), float(err))
                assert err <= TR.ORACLE_TOL[dtype], f"{err} ulp > {TR.ORACLE_TOL[dtype]}"
            elif op == "qknorm_rotary_embedding":
                qo, ko = ropekit.qknorm_rotary_embedding(*args, **a)
                TQ.check_qknorm(*args, a, qo, ko, label="shared cases: qknorm")
            else:
                y = ropekit.inverse_rotary_regroup(*args, **a)
                TQ.check_regroup(*args, a, y, label="shared cases: regroup")
        except (AssertionError, ropekit.Error) as e:
            fails.append((i, str(e)[:300], {"shapes": [None if t is None else (t.dtype.name, t.shape) for t in args],
                                            **a}))
    for key, err in worst.items():
        O.report(("shared cases", op, key, "float64 oracle (ulp)"), err)
    print(f"{op}: {sum(counts.values())} cases ({', '.join(f'{k} {v}' for k, v in counts.items())})")
    assert not fails, f"{len(fails)} failing cases, first: {fails[:3]}"


def test_files_are_current():
    """tests/cases/*.bin are exactly what scripts/make_shared_cases.py writes (same generators,
    same seeds). If this fails after a deliberate change to cases.py or the script, regenerate
    them: .venv/bin/python scripts/make_shared_cases.py."""
    spec = importlib.util.spec_from_file_location("make_shared_cases", ROOT / "scripts" / "make_shared_cases.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    stale = [op for op, data in mod.build_all().items() if (CASE_DIR / f"{op}.bin").read_bytes() != data]
    assert not stale, f"stale case files (run scripts/make_shared_cases.py): {stale}"
