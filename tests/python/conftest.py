"""Test setup: import the in-tree binding (python/ropekit). The binding itself honours
ROPEKIT_LIB (else python/ropekit/libropekit.so, else build/libropekit.so)."""

import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for p in (str(HERE), str(ROOT / "python")):
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
