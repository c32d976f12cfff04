"""`ropekit fuse --json` / `ropekit inspect --json`: stdout is one JSON object on every path —
the report on success, {"error": {...}} on runtime and usage errors (stdout was empty then, so a
program reading the JSON got nothing to parse). The message stays on stderr too."""

import json
import pathlib
import subprocess

import pytest

from test_fuse import CLI, MODELS

CORPUS = pathlib.Path(__file__).resolve().parents[2] / "fuzz" / "corpus"


def run(*args):
    res = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=120)
    return res.returncode, json.loads(res.stdout), res.stderr  # raises when stdout is not JSON


@pytest.mark.parametrize("args,rc,status,words", [
    (("fuse", "/nonexistent/in.onnx", "OUT", "--json"), 1, "ROPEKIT_ERROR_IO", "No such file"),
    (("fuse", CORPUS / "not_onnx.onnx", "OUT", "--json"), 1, "ROPEKIT_ERROR_PARSE", "not an ONNX model"),
    (("fuse", CORPUS / "cycle.onnx", "OUT", "--json"), 1, "ROPEKIT_ERROR_PARSE", "cycle"),
    (("fuse", MODELS / "llama.onnx", "OUT", "--json", "--max-positions", "40000000"), 1,
     "ROPEKIT_ERROR_OVERFLOW", "2 GiB"),
    (("fuse", MODELS / "qwen3.onnx", "/dev/null", "--json"), 1, "ROPEKIT_ERROR_IO", "character device"),
    (("fuse", MODELS / "qwen3.onnx", "--json"), 2, "usage", "missing the output file"),
    (("fuse", MODELS / "qwen3.onnx", "OUT", "--bogus", "--json"), 2, "usage", "unknown option '--bogus'"),
    (("fuse", MODELS / "qwen3.onnx", "OUT", "--json", "--max-positions", "x"), 2, "usage", "positive integer"),
    (("inspect", "/nonexistent/in.onnx", "--json"), 1, "ROPEKIT_ERROR_IO", "No such file"),
    (("inspect", CORPUS / "not_onnx.onnx", "--json"), 1, "ROPEKIT_ERROR_PARSE", "not an ONNX model"),
    (("inspect", "--json"), 2, "usage", "missing the model file"),
    (("inspect", "a.onnx", "b.onnx", "--json"), 2, "usage", "one model at a time"),
])
def test_errors_are_json_objects(tmp_path, args, rc, status, words):
    args = [tmp_path / "out.onnx" if a == "OUT" else a for a in args]
    got_rc, out, err = run(*args)
    assert got_rc == rc
    e = out["error"]
    assert e["status"] == status and words in e["message"] and e["exit_status"] == rc, e
    assert e["command"] == args[0]
    assert e["message"] in err  # the people's message is unchanged on stderr
    assert not (tmp_path / "out.onnx").exists()


def test_success_paths_are_json(tmp_path):
    rc, out, _ = run("fuse", MODELS / "qwen3.onnx", tmp_path / "o.onnx", "--json")
    assert rc == 0 and out["sites_fused"] == 4 and "error" not in out
    rc, out, _ = run("fuse", MODELS / "qwen3.onnx", "--dry-run", "--json")
    assert rc == 0 and out["dry_run"] is True
    rc, out, _ = run("inspect", tmp_path / "o.onnx", "--json")
    assert rc == 0 and "error" not in out
    rc, out, _ = run("inspect", CORPUS / "bad_external.onnx", "--json")  # warnings: still JSON
    assert rc == 0 and "error" not in out
