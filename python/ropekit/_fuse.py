"""ONNX models from Python: ``ropekit.fuse`` and ``ropekit.inspect``, over libropekit_onnx (the
C API of include/ropekit_fuse.h and include/ropekit_onnx.h, through ctypes). The library is
loaded on first use, so ``import ropekit`` works without it."""

from __future__ import annotations

import ctypes
import json
import os
import pathlib

from . import Error, _libpath

_TARGETS = {"ort": 0, "onnx": 1, "ropekit": 2}
_onnx = None


class _FuseOptions(ctypes.Structure):  # ropekit_fuse_options
    _fields_ = [
        ("max_positions", ctypes.c_int64),
        ("config_path", ctypes.c_char_p),
        ("target", ctypes.c_int),
        ("dry_run", ctypes.c_int32),
        ("external_min_bytes", ctypes.c_int64),
    ]


class _SaveOptions(ctypes.Structure):  # ropekit_save_options
    _fields_ = [("external_min_bytes", ctypes.c_int64)]


def _library():
    global _onnx
    if _onnx is None:
        lib, _ = _libpath.load("ropekit_onnx", "ONNX model layer and fusion; needs a build with protobuf-c")
        vp, pp = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
        for name, args, res in [
            ("ropekit_last_error", [], ctypes.c_char_p),
            ("ropekit_model_load", [ctypes.c_char_p, pp], ctypes.c_int),
            ("ropekit_model_save", [vp, ctypes.c_char_p], ctypes.c_int),
            ("ropekit_model_save_with", [vp, ctypes.c_char_p, ctypes.POINTER(_SaveOptions)], ctypes.c_int),
            ("ropekit_model_free", [vp], None),
            ("ropekit_model_inspect", [vp, pp], ctypes.c_int),
            ("ropekit_model_info_format", [vp, ctypes.c_int, pp], ctypes.c_int),
            ("ropekit_model_info_free", [vp], None),
            ("ropekit_onnx_free", [vp], None),
            ("ropekit_fuse", [vp, ctypes.POINTER(_FuseOptions), pp], ctypes.c_int),
            ("ropekit_fuse_report_json", [vp, pp], ctypes.c_int),
            ("ropekit_fuse_report_text", [vp, pp], ctypes.c_int),
            ("ropekit_fuse_report_free", [vp], None),
        ]:
            f = getattr(lib, name)
            f.argtypes, f.restype = args, res
        _onnx = lib
    return _onnx


def _check(lib, code):
    if code != 0:
        raise Error(code, lib.ropekit_last_error().decode(errors="replace"))


def _take_string(lib, p: ctypes.c_void_p) -> str:
    try:
        return ctypes.string_at(p.value).decode("utf-8", errors="replace")
    finally:
        lib.ropekit_onnx_free(p)


def _path(p, name) -> bytes:
    if not isinstance(p, (str, bytes, os.PathLike)):
        raise TypeError(f"{name} must be a path (str or os.PathLike), not {type(p).__name__}")
    return os.fsencode(p)


def _find_config(src: bytes) -> bytes | None:
    """As `ropekit fuse`: SRC's stem + '.config.json', else config.json in SRC's directory."""
    p = pathlib.Path(os.fsdecode(src))
    cands = [p.with_name(p.name[:-5] + ".config.json")] if p.name.endswith(".onnx") and len(p.name) > 5 else []
    cands.append(p.parent / "config.json")
    for c in cands:
        if os.access(c, os.R_OK):
            return os.fsencode(c)
    return None


class FuseReport(dict):
    """What ``ropekit fuse --json`` prints, as a dict (``target``, ``dry_run``, ``nodes_before``,
    ``nodes_after``, ``tables``, ``table_bytes``, ``max_positions``, ``max_positions_source``,
    ``sites_found``, ``sites_fused``, ``warnings``, ``sites``: one dict per site with its
    ``status`` and ``reason``). ``text`` is the report as the command prints it for people."""

    text: str = ""

    def __str__(self) -> str:
        return self.text


def fuse(src, dst=None, *, max_positions=None, config=None, target="ort", dry_run=False,
         external_data=None) -> FuseReport:
    """Find the RoPE subgraphs of the ONNX model `src` and write a copy with fused nodes to `dst`
    (atomically; `src` is never modified), as ``ropekit fuse SRC DST`` does.

    max_positions: a fixed cos/sin table of this many rows (largest position id + 1). Default: no
    table — the fused nodes read the graph's own per-call cos/sin rows (no position limit).
    config: a Hugging Face config.json; given without max_positions, a fixed table of its
    max_position_embeddings rows.
    target: 'ort' (com.microsoft.RotaryEmbedding, stock onnxruntime) or 'onnx' (ai.onnx
    RotaryEmbedding, only for opset >= 23 models) or 'ropekit' (the ai.ropekit ops of
    libropekit_ort). DeepSeek-V4 attention becomes QKNormRotaryEmbedding / InverseRotaryRegroup,
    which need libropekit_ort (ropekit.ort_custom_ops_library()) in every target. dry_run: match and report, write nothing
    (`dst` may then be None). external_data: True (initializers of >= 1024 bytes) or a byte count:
    as ``--external-data[=BYTES]``, those initializers go to ``dst + '.data'`` (needed for models,
    or fixed tables, over the 2 GiB an .onnx file holds). Sites that cannot be fused are left as they were and reported with
    the reason; that is not an error. Errors raise ropekit.Error with the library's message."""
    if target not in _TARGETS:
        raise Error(2, f"target must be 'ort', 'onnx' or 'ropekit', not {target!r}")
    if max_positions is not None:
        if isinstance(max_positions, bool) or not isinstance(max_positions, int) or max_positions <= 0:
            raise Error(2, f"max_positions must be a positive integer, not {max_positions!r}")
    s = _path(src, "src")
    d = None
    if dst is not None:
        d = _path(dst, "dst")
    elif not dry_run:
        raise Error(1, "dst: missing the output file (or pass dry_run=True)")
    cfg = _path(config, "config") if config is not None else None
    # as `ropekit fuse`: a fixed table only when asked for (max_positions, or config: its length
    # from the config, -1 = ROPEKIT_FUSE_TABLE_FROM_CONFIG); by default per-call rows, no length
    if max_positions is None and cfg is not None:
        max_positions = -1
    if external_data is None or external_data is False:
        ext = 0
    elif external_data is True:
        ext = 1024  # ROPEKIT_FUSE_EXTERNAL_MIN_BYTES, as `ropekit fuse --external-data`
    elif isinstance(external_data, int) and external_data > 0:
        ext = external_data
    else:
        raise Error(2, f"external_data must be True or a positive byte count, not {external_data!r}")
    lib = _library()
    opts = _FuseOptions(int(max_positions or 0), cfg, _TARGETS[target], 1 if dry_run else 0, ext)
    model, report = ctypes.c_void_p(), ctypes.c_void_p()
    try:
        _check(lib, lib.ropekit_model_load(s, ctypes.byref(model)))
        _check(lib, lib.ropekit_fuse(model, ctypes.byref(opts), ctypes.byref(report)))
        if not dry_run:
            _check(lib, lib.ropekit_model_save_with(model, d, ctypes.byref(_SaveOptions(ext))))
        js, tx = ctypes.c_void_p(), ctypes.c_void_p()
        _check(lib, lib.ropekit_fuse_report_json(report, ctypes.byref(js)))
        out = FuseReport(json.loads(_take_string(lib, js)))
        _check(lib, lib.ropekit_fuse_report_text(report, ctypes.byref(tx)))
        out.text = _take_string(lib, tx)
        return out
    finally:
        lib.ropekit_fuse_report_free(report)
        lib.ropekit_model_free(model)


def inspect(path) -> dict:
    """Summarize the ONNX model at `path`, as ``ropekit inspect --json`` does: ir_version,
    producer, opsets, node counts by op type, initializers, external data files, graph inputs
    and outputs with shapes, existing rotary embedding nodes. The model is validated first
    (ropekit.Error on a malformed file, with the reason)."""
    p = _path(path, "path")
    lib = _library()
    model, info, js = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    try:
        _check(lib, lib.ropekit_model_load(p, ctypes.byref(model)))
        _check(lib, lib.ropekit_model_inspect(model, ctypes.byref(info)))
        _check(lib, lib.ropekit_model_info_format(info, 1, ctypes.byref(js)))
        return json.loads(_take_string(lib, js))
    finally:
        lib.ropekit_model_info_free(info)
        lib.ropekit_model_free(model)
