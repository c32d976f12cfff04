"""The onnxruntime custom-op library (libropekit_ort) that ships with ropekit."""

from __future__ import annotations

import os
import pathlib

_NAME = "libropekit_ort.so"


def ort_custom_ops_library() -> str:
    """Path of libropekit_ort, for ``onnxruntime.SessionOptions.register_custom_ops_library``.

    It registers com.microsoft.QKNormRotaryEmbedding / InverseRotaryRegroup and the ai.ropekit
    domain (RotaryEmbedding, MsRotaryEmbedding, MRotaryEmbedding, QKNormRotaryEmbedding,
    InverseRotaryRegroup) for the CPU execution provider. Looked up in order: the
    ``ROPEKIT_ORT_LIB`` environment variable, next to this package (or in its lib/), next to the library named by
    ``ROPEKIT_LIB``, the source tree's ``build/``. Raises FileNotFoundError if none exists.
    """
    env = os.environ.get("ROPEKIT_ORT_LIB")
    if env:
        candidates = [pathlib.Path(env)]
    else:
        here = pathlib.Path(__file__).resolve().parent
        candidates = [here / _NAME, here / "lib" / _NAME]  # lib/: where the wheel installs it
        lib = os.environ.get("ROPEKIT_LIB")
        if lib:
            candidates.append(pathlib.Path(lib).resolve().parent / _NAME)
        candidates.append(here.parent.parent / "build" / _NAME)
    for path in candidates:
        if path.is_file():
            return str(path)
    raise FileNotFoundError(
        "ropekit: libropekit_ort.so not found (build it: scripts/bootstrap.sh, then cmake); "
        "looked at: " + ", ".join(str(p) for p in candidates)
    )
