"""The onnxruntime custom-op library (libropekit_ort) that ships with ropekit."""

from __future__ import annotations

import os
import pathlib

from . import _libpath


def ort_custom_ops_library() -> str:
    """Path of libropekit_ort, for ``onnxruntime.SessionOptions.register_custom_ops_library``.

    It registers com.microsoft.QKNormRotaryEmbedding / InverseRotaryRegroup and the ai.ropekit
    domain (RotaryEmbedding, MsRotaryEmbedding, MRotaryEmbedding, QKNormRotaryEmbedding,
    InverseRotaryRegroup) for the CPU execution provider. Looked up in order: the
    ``ROPEKIT_ORT_LIB`` environment variable, then where ropekit's other libraries are looked for
    (``_libpath.candidates``: beside ``ROPEKIT_LIB``, the package, its ``lib/``, the source tree's
    ``build/``). Raises FileNotFoundError if none exists.
    """
    env = os.environ.get("ROPEKIT_ORT_LIB")
    candidates = [pathlib.Path(env)] if env else _libpath.candidates("ropekit_ort")
    for path in candidates:
        if path.is_file():
            return str(path)
    raise FileNotFoundError(
        "ropekit: libropekit_ort.so not found: this ropekit was built without the onnxruntime C "
        "API header (in a clone: run scripts/bootstrap.sh, which unpacks it into .deps/, then "
        "rebuild or `pip install .` again; or pass -DROPEKIT_ORT_INCLUDE_DIR=DIR, with pip "
        "-C cmake.define.ROPEKIT_ORT_INCLUDE_DIR=DIR); looked at: " + ", ".join(str(p) for p in candidates)
    )
