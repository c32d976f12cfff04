"""The Python package as users get it: version, library lookup, the `ropekit` command, and
ropekit.fuse / ropekit.inspect against the command line tool on the committed fixture models.

With ROPEKIT_TEST_INSTALLED=1 (the CI stage that installs the wheel into a fresh venv) the
package must come from site-packages, never the checkout, and carry its own libraries."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest

import ropekit

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "fixtures" / "models"
INSTALLED = os.environ.get("ROPEKIT_TEST_INSTALLED") == "1"


def cli():
    """The command line tool: ROPEKIT_CLI, else the installed console script, else build/."""
    if os.environ.get("ROPEKIT_CLI"):
        return [os.environ["ROPEKIT_CLI"]]
    exe = shutil.which("ropekit", path=str(pathlib.Path(sys.executable).parent))
    if exe:
        return [exe]
    return [str(ROOT / "build" / "ropekit")]


def run_cli(*args):
    return subprocess.run([*cli(), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_version_is_the_cmake_project_version():
    m = re.search(r"project\(ropekit VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    assert ropekit.__version__ == m.group(1) == ropekit.version()
    out = run_cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"ropekit {m.group(1)}"


@pytest.mark.skipif(not INSTALLED, reason="only for the installed wheel (ROPEKIT_TEST_INSTALLED=1)")
def test_installed_package_is_self_contained():
    pkg = pathlib.Path(ropekit.__file__).resolve().parent
    assert ROOT not in pkg.parents, f"imported from the checkout: {pkg}"
    assert "ROPEKIT_LIB" not in os.environ
    assert pathlib.Path(ropekit.library_path).resolve().parent == pkg / "lib"
    from ropekit import _fuse, _libpath

    assert _libpath.find("ropekit_onnx").resolve().parent == pkg / "lib"
    assert (pkg / "include" / "ropekit_fuse.h").exists()
    assert (pkg / "lib" / "pkgconfig" / "ropekit_onnx.pc").exists()
    assert (pkg / "lib" / "cmake" / "ropekit" / "ropekitConfig.cmake").exists()
    # the console script is the installed one and runs the bundled program
    exe = shutil.which("ropekit", path=str(pathlib.Path(sys.executable).parent))
    assert exe and run_cli("--help").returncode == 0


def test_rope_lib_env_is_honoured(tmp_path):
    # a ROPEKIT_LIB that does not exist must fail loudly, not fall back to another library
    env = dict(os.environ, ROPEKIT_LIB=str(tmp_path / "nowhere" / "libropekit.so"))
    code = "import ropekit"
    if not INSTALLED:
        code = f"import sys; sys.path.insert(0, {str(ROOT / 'python')!r}); " + code
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert res.returncode != 0 and "nowhere/libropekit.so" in res.stderr


@pytest.mark.parametrize("name", ["qwen3", "llama_fp16", "gpt_neox", "qwen2_vl_text", "phi3_longrope"])
def test_fuse_matches_the_cli(name, tmp_path):
    src = MODELS / f"{name}.onnx"
    before = src.read_bytes()
    rep = ropekit.fuse(src, tmp_path / "py.onnx")
    res = run_cli("fuse", src, tmp_path / "cli.onnx", "--json")
    # exit status 3: sites found, none fused (ropekit fuse --help)
    assert res.returncode == (0 if rep["sites_fused"] else 3), res.stderr
    assert dict(rep) == json.loads(res.stdout)
    assert (tmp_path / "py.onnx").read_bytes() == (tmp_path / "cli.onnx").read_bytes()
    assert src.read_bytes() == before
    assert rep["sites_found"] == len(rep["sites"]) > 0
    assert "RoPE sites found" in rep.text


def test_fuse_options_match_the_cli(tmp_path):
    src = MODELS / "llama.onnx"
    rep = ropekit.fuse(src, None, max_positions=77, dry_run=True)
    res = run_cli("fuse", src, "--max-positions", "77", "--dry-run", "--json")
    assert dict(rep) == json.loads(res.stdout)
    assert rep["dry_run"] is True and rep["max_positions"] == 77
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"max_position_embeddings": 300}))
    rep = ropekit.fuse(src, tmp_path / "o.onnx", config=cfg)
    assert rep["max_positions"] == 300 and (tmp_path / "o.onnx").exists()


def test_fused_model_runs_in_onnxruntime(tmp_path):
    src, dst = MODELS / "qwen3.onnx", tmp_path / "fused.onnx"
    rep = ropekit.fuse(src, dst)
    assert rep["sites_fused"] == rep["sites_found"] == 4
    info = ropekit.inspect(dst)
    assert len(info["rotary_nodes"]) == 4
    assert all(n["op_type"] == "RotaryEmbedding" and n["domain"] == "com.microsoft" for n in info["rotary_nodes"])
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    a = ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(str(dst), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, 128, (2, 9)).astype(np.int64),
             "position_ids": np.tile(np.arange(9), (2, 1)).astype(np.int64) + 3,
             "attention_mask": np.ones((2, 9), np.int64)}
    feeds = {i.name: feeds[i.name] for i in a.get_inputs()}
    ya, yb = a.run(None, feeds)[0], b.run(None, feeds)[0]
    assert ya.shape == yb.shape and np.abs(ya - yb).max() < 1e-4


def test_inspect_matches_the_cli():
    src = MODELS / "gemma.onnx"
    res = run_cli("inspect", src, "--json")
    assert res.returncode == 0
    assert ropekit.inspect(src) == json.loads(res.stdout)
    assert ropekit.inspect(str(src))["nodes"] > 0


def test_errors(tmp_path):
    with pytest.raises(ropekit.Error, match="ROPEKIT_ERROR_IO: .*missing.onnx"):
        ropekit.fuse(tmp_path / "missing.onnx", tmp_path / "o.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x0a\xff\xff\xff\xff\x0f not a model")
    with pytest.raises(ropekit.Error, match="ROPEKIT_ERROR_PARSE"):
        ropekit.inspect(bad)
    with pytest.raises(ropekit.Error, match="opset 23"):
        ropekit.fuse(MODELS / "qwen3.onnx", tmp_path / "o.onnx", target="onnx")
    assert not (tmp_path / "o.onnx").exists()
    with pytest.raises(ropekit.Error, match="target must be"):
        ropekit.fuse(MODELS / "qwen3.onnx", tmp_path / "o.onnx", target="cuda")
    for v in (0, -5, 2.5, True):
        with pytest.raises(ropekit.Error, match="max_positions"):
            ropekit.fuse(MODELS / "qwen3.onnx", tmp_path / "o.onnx", max_positions=v)
    with pytest.raises(ropekit.Error, match="dst"):
        ropekit.fuse(MODELS / "qwen3.onnx")
    with pytest.raises(TypeError, match="src must be a path"):
        ropekit.fuse(123, tmp_path / "o.onnx")
    with pytest.raises(ropekit.Error, match="ROPEKIT_ERROR_IO"):  # the input is never overwritten
        ropekit.fuse(MODELS / "qwen3.onnx", MODELS / "qwen3.onnx")
    with pytest.raises(ropekit.Error, match="ROPEKIT_ERROR_IO: .*nope.json"):
        ropekit.fuse(MODELS / "qwen3.onnx", tmp_path / "o.onnx", config=tmp_path / "nope.json")
