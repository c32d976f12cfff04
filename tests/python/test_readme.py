"""README.md's Python examples run as written (a new user pastes them): every ```python block
that does not need torch, on its own, in a folder holding a `model.onnx` (the bundled qwen3
fixture) and the `model_fused.onnx` that `ropekit fuse` makes of it."""

import pathlib
import re
import shutil

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# ropekit.torch's block needs torch: tests/python/test_torch.py covers it
BLOCKS = [b for b in re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S) if "torch" not in b]


def test_readme_has_python_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_readme_python_block_runs(i, tmp_path, monkeypatch):
    code = BLOCKS[i]
    shutil.copy(ROOT / "tests" / "fixtures" / "models" / "qwen3.onnx", tmp_path / "model.onnx")
    import ropekit

    ropekit.fuse(tmp_path / "model.onnx", tmp_path / "model_fused.onnx")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"README.md python block {i}", "exec"), {"__name__": "__readme__"})
