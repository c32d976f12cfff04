"""Finding ropekit's shared libraries (no compiled extension: everything goes through ctypes).

For a library NAME (``ropekit``, ``ropekit_onnx``, ``ropekit_cuda``, ...) the candidates are,
first match wins:

1. the environment: ``ROPEKIT_LIB`` names libropekit itself; the others are looked for in the
   same directory, unless their own variable is set (``ROPEKIT_ONNX_LIB``, ``ROPEKIT_CUDA_LIB``);
2. beside the package: ``ropekit/libNAME.so``, then ``ropekit/lib/libNAME.so`` (where an
   installed wheel keeps them);
3. the source tree's build directory, ``build/libNAME.so`` (a checkout used with PYTHONPATH).
"""

from __future__ import annotations

import ctypes
import os
import pathlib

_HERE = pathlib.Path(__file__).resolve().parent
_ENV = {"ropekit": "ROPEKIT_LIB", "ropekit_onnx": "ROPEKIT_ONNX_LIB", "ropekit_cuda": "ROPEKIT_CUDA_LIB"}


def candidates(name: str) -> list[pathlib.Path]:
    """Where libNAME.so is looked for, in order."""
    fname = f"lib{name}.so"
    own = os.environ.get(_ENV[name], "") if name in _ENV else ""
    if own:  # an explicit choice is never silently replaced by another library
        return [pathlib.Path(own)]
    out = []
    env = os.environ.get("ROPEKIT_LIB")
    if env:
        out.append(pathlib.Path(env).parent / fname)
    return out + [_HERE / fname, _HERE / "lib" / fname, _HERE.parent.parent / "build" / fname]


def find(name: str) -> pathlib.Path | None:
    for p in candidates(name):
        if p.exists():
            return p
    return None


def load(name: str, what: str) -> tuple[ctypes.CDLL, str]:
    """Load libNAME.so; ImportError naming every place looked at when it is nowhere.
    `what` says what the library is for (put in the message)."""
    p = find(name)
    if p is None:
        tried = ", ".join(str(c) for c in candidates(name))
        raise ImportError(f"ropekit: lib{name}.so ({what}) not found; looked at: {tried}")
    return ctypes.CDLL(str(p)), str(p)


def package_prefix() -> pathlib.Path:
    """The install prefix inside the package (bin/, lib/, include/ of an installed wheel)."""
    return _HERE
