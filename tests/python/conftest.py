"""Test setup: import the in-tree binding (python/ropekit), or with ROPEKIT_TEST_INSTALLED=1 the
installed one. The binding itself honours
ROPEKIT_LIB (else python/ropekit/libropekit.so, else build/libropekit.so)."""

import os
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# ROPEKIT_TEST_INSTALLED=1: test the installed package (the wheel), never the checkout's copy
_paths = (str(HERE),) if os.environ.get("ROPEKIT_TEST_INSTALLED") == "1" else (str(HERE), str(ROOT / "python"))
for p in _paths:
    if p not in sys.path:
        sys.path.insert(0, p)


def pytest_terminal_summary(terminalreporter):
    import oracle

    if not oracle.REPORT:
        return
    tr = terminalreporter
    tr.section("ropekit max errors measured")
    for key in sorted(oracle.REPORT, key=str):
        tr.write_line(f"{' / '.join(map(str, key)):<70s} {oracle.REPORT[key]:.4g}")
