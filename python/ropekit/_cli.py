"""The `ropekit` console command of an installed wheel: runs the bundled C program
(ropekit/bin/ropekit), with the same arguments and exit status."""

from __future__ import annotations

import os
import pathlib
import signal
import sys


def executable() -> pathlib.Path:
    here = pathlib.Path(__file__).resolve().parent
    for p in (here / "bin" / "ropekit", here.parent.parent / "build" / "ropekit"):
        if p.is_file() and os.access(p, os.X_OK):
            return p
    raise FileNotFoundError(f"the ropekit program is not in {here / 'bin'} (a build without the ONNX layer?)")


def main() -> int:
    try:
        exe = executable()
    except FileNotFoundError as e:
        print(f"ropekit: {e}", file=sys.stderr)
        return 1
    # Python starts with SIGPIPE and SIGXFSZ ignored, and exec keeps ignored signals ignored: give
    # the C program the dispositions it would have when started directly from a shell
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    os.execv(str(exe), [str(exe), *sys.argv[1:]])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
