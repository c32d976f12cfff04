"""`ropekit fuse` on models that keep their weights in external data, as torch.onnx writes them
(model.onnx + model.onnx.data), or in many files: any output path works, the weights end up in
one new data file beside the output (never a reference that leaves its directory), the input's
files are untouched, and the fused model loads and computes in onnxruntime what the original
computes. Also: every problem of an external constant the fusion needs is reported with the
tensor, the file and the cause, and `ropekit inspect` warns about it; output destinations that
are not regular files are refused; a signal during a save leaves no temporary file."""

import hashlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import time

import numpy as np
import onnx
from onnx import numpy_helper
import onnxruntime as ort
import pytest

from test_fuse import CLI, MODELS, check_parity, count_ops, session

INV_FREQ = "inner.model.rotary_emb.inv_freq"  # the llama fixture's constant


def digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


def torch_style(folder, one_file=True, name="model.onnx"):
    """The llama fixture saved as torch.onnx (2.x) saves: weights in external data."""
    folder.mkdir(parents=True, exist_ok=True)
    m = onnx.load(str(MODELS / "llama.onnx"))
    path = folder / name
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=one_file,
                    location=name + ".data" if one_file else None, size_threshold=1024)
    shutil.copy(MODELS / "llama.config.json", folder / "config.json")
    return path


def fuse(src, dst, *extra, rc=0):
    res = subprocess.run([str(CLI), "fuse", str(src), str(dst), "--json", *extra],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == rc, res.stderr
    return json.loads(res.stdout) if rc in (0, 3) else res


def external_locations(path):
    m = onnx.load(str(path), load_external_data=False)
    return {e.value for t in m.graph.initializer for e in t.external_data if e.key == "location"}


def check_fused_model(src, dst, expect_sites=4):
    fused = onnx.load(str(dst))  # loads the external data too
    assert count_ops(fused, {"RotaryEmbedding"}) == expect_sites
    onnx.checker.check_model(fused, full_check=True)  # with its data loaded
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                  ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        session(dst, level)
    check_parity(src, dst, fp16=False)


@pytest.mark.parametrize("one_file", [True, False], ids=["one-data-file", "many-data-files"])
def test_fuse_into_another_directory(tmp_path, one_file):
    src = torch_style(tmp_path / "in", one_file)
    before = digests(src.parent)
    out = tmp_path / "elsewhere" / "deeper"
    out.mkdir(parents=True)
    dst = out / "fused.onnx"
    report = fuse(src, dst)
    assert report["sites_fused"] == report["sites_found"] == 4
    assert digests(src.parent) == before, "the input's files were changed"
    assert sorted(p.name for p in out.iterdir()) == ["fused.onnx", "fused.onnx.data"]
    assert external_locations(dst) == {"fused.onnx.data"}
    check_fused_model(src, dst)
    # the output stands alone: the input folder can go
    shutil.rmtree(src.parent)
    a = session(dst)
    assert a.get_inputs()


def test_real_torch_export_into_another_directory(tmp_path):
    """A real torch 2.11 dynamo export (tests/onnx/data/torch_llama: model.onnx +
    model.onnx.data + config.json, made by export.py there) fused into another directory."""
    src_dir = pathlib.Path(__file__).resolve().parents[1] / "onnx" / "data" / "torch_llama"
    src = tmp_path / "in" / "model.onnx"
    shutil.copytree(src_dir, src.parent)
    assert external_locations(src) == {"model.onnx.data"}
    before = digests(src.parent)
    dst = tmp_path / "out" / "fused.onnx"
    dst.parent.mkdir()
    report = fuse(src, dst)
    assert report["sites_fused"] == report["sites_found"] == 4
    assert digests(src.parent) == before
    assert sorted(p.name for p in dst.parent.iterdir()) == ["fused.onnx", "fused.onnx.data"]
    assert external_locations(dst) == {"fused.onnx.data"}
    fused = onnx.load(str(dst))
    assert count_ops(fused, {"RotaryEmbedding"}) == 4
    onnx.checker.check_model(fused, full_check=True)
    a, b = session(src), session(dst, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    rng = np.random.default_rng(7)
    for S, base in ((1, 0), (9, 100), (33, 1500)):  # the export has batch 1, dynamic length
        feeds = {"input_ids": rng.integers(0, 128, (1, S)).astype(np.int64),
                 "position_ids": (np.arange(S)[None] + base).astype(np.int64)}
        ya, yb = a.run(None, feeds)[0], b.run(None, feeds)[0]
        assert float(np.abs(ya - yb).max() / np.abs(ya).max()) <= 1e-5


def test_fuse_beside_the_input_keeps_references(tmp_path):
    src = torch_style(tmp_path)
    dst = tmp_path / "fused.onnx"
    fuse(src, dst)
    assert external_locations(dst) == {"model.onnx.data"}
    assert not (tmp_path / "fused.onnx.data").exists()
    check_fused_model(src, dst)


def test_relative_output_path_and_cwd(tmp_path):
    src = torch_style(tmp_path / "in")
    (tmp_path / "out").mkdir()
    res = subprocess.run([str(CLI), "fuse", "../in/model.onnx", "fused.onnx"],
                         cwd=tmp_path / "out", capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert external_locations(tmp_path / "out" / "fused.onnx") == {"fused.onnx.data"}
    check_fused_model(src, tmp_path / "out" / "fused.onnx")


def test_external_data_option_moves_tables(tmp_path):
    src = MODELS / "llama.onnx"
    dst = tmp_path / "fused.onnx"
    fuse(src, dst, "--max-positions", "4096", "--external-data")
    m = onnx.load(str(dst), load_external_data=False)
    ext = {t.name for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
    assert {"ropekit_cos_cache", "ropekit_sin_cache"} <= ext
    small = [t.name for t in m.graph.initializer if t.name not in ext]
    assert all(len(t.raw_data) < 1024 for t in m.graph.initializer if t.name in small)
    assert external_locations(dst) == {"fused.onnx.data"}
    check_fused_model(src, dst)
    # a threshold in bytes
    dst2 = tmp_path / "fused2.onnx"
    fuse(src, dst2, "--external-data=100000000")
    assert not (tmp_path / "fused2.onnx.data").exists(), "nothing is that large"


def bad_inv_freq_model(folder, location, offset=None):
    """The llama fixture with its inv_freq constant in external data at `location`."""
    folder.mkdir(parents=True, exist_ok=True)
    m = onnx.load(str(MODELS / "llama.onnx"))
    t = next(t for t in m.graph.initializer if t.name == INV_FREQ)
    t.ClearField("raw_data")
    del t.float_data[:]
    t.data_location = onnx.TensorProto.EXTERNAL
    t.external_data.add(key="location", value=location)
    if offset is not None:
        t.external_data.add(key="offset", value=str(offset))
    path = folder / "model.onnx"
    path.write_bytes(m.SerializeToString())
    return path


@pytest.mark.parametrize("case", ["absolute", "dotdot", "fifo", "missing", "past-end"])
def test_bad_external_inv_freq_is_reported(tmp_path, case):
    folder = tmp_path / "m"
    folder.mkdir()
    location, offset, cause = {
        "absolute": ("/nonexistent/ropekit/w.bin", None, "is an absolute path"),
        "dotdot": ("../w.bin", None, "leaves the model directory"),
        "fifo": ("pipe.bin", None, "is a FIFO, not a regular file"),
        "missing": ("gone.bin", None, "No such file or directory"),
        "past-end": ("short.bin", 64, "past the end"),
    }[case]
    (tmp_path / "w.bin").write_bytes(bytes(32))
    (folder / "short.bin").write_bytes(bytes(32))
    if case == "fifo":
        os.mkfifo(folder / "pipe.bin")
    src = bad_inv_freq_model(folder, location, offset)
    t0 = time.monotonic()
    report = fuse(src, "-", "--dry-run", rc=3)  # sites found, none fusable
    assert time.monotonic() - t0 < 30, "a FIFO must not block"
    assert report["sites_found"] == 4 and report["sites_fused"] == 0
    for s in report["sites"]:
        assert s["status"] == "skipped"
        assert INV_FREQ in s["reason"] and cause in s["reason"], s["reason"]
        assert location.split("/")[-1] in s["reason"], s["reason"]
        assert "no constant source" not in s["reason"]
    res = subprocess.run([str(CLI), "inspect", str(src)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert "ropekit inspect: warning: external data file" in res.stderr, res.stderr
    assert "warning: this file" in res.stdout


@pytest.mark.parametrize("kind", ["dev-null", "directory", "fifo", "dangling-link"])
def test_non_regular_destinations_are_refused(tmp_path, kind):
    dst = {"dev-null": pathlib.Path("/dev/null"), "directory": tmp_path / "d",
           "fifo": tmp_path / "f", "dangling-link": tmp_path / "l"}[kind]
    if kind == "directory":
        dst.mkdir()
    elif kind == "fifo":
        os.mkfifo(dst)
    elif kind == "dangling-link":
        dst.symlink_to(tmp_path / "nowhere.onnx")
    res = fuse(MODELS / "llama.onnx", dst, rc=1)
    assert "only regular files are replaced (nothing was written)" in res.stderr
    # no report on stdout: with --json, the error as a JSON object
    assert json.loads(res.stdout)["error"]["status"] == "ROPEKIT_ERROR_IO", res.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [dst.name] if dst.parent == tmp_path else [])
    if kind == "dangling-link":
        assert dst.is_symlink() and not (tmp_path / "nowhere.onnx").exists()


def test_symlink_destination_is_written_through_and_mode_kept(tmp_path):
    target = tmp_path / "real.onnx"
    target.write_bytes(b"old")
    target.chmod(0o600)
    link = tmp_path / "link.onnx"
    link.symlink_to("real.onnx")
    fuse(MODELS / "llama.onnx", link)
    assert link.is_symlink()
    assert (target.stat().st_mode & 0o777) == 0o600
    assert onnx.load(str(target)).graph.node


def test_signal_during_save_leaves_no_temporary_file(tmp_path):
    # a file size limit makes the write raise SIGXFSZ, deterministically, mid-save
    dst = tmp_path / "out.onnx"
    res = subprocess.run(["bash", "-c", 'ulimit -f 64; exec "$0" fuse "$1" "$2"', str(CLI),
                          str(MODELS / "llama.onnx"), str(dst)], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 128 + signal.SIGXFSZ or res.returncode == -signal.SIGXFSZ, res
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)


def test_sigterm_during_save_leaves_no_temporary_file(tmp_path):
    """SIGTERM while the output is written (a FIFO as external data source would block, so a
    large --max-positions table makes the save long enough to be hit)."""
    dst = tmp_path / "out.onnx"
    proc = subprocess.Popen([str(CLI), "fuse", str(MODELS / "llama.onnx"), str(dst),
                             "--max-positions", "2000000"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if any(p.name.startswith(".ropekit-") for p in tmp_path.iterdir()):
            proc.send_signal(signal.SIGTERM)
            break
        time.sleep(0.002)
    proc.wait(timeout=60)
    if proc.returncode == 0:
        pytest.skip("the save finished before the signal could be sent")  # not counted as pass
    assert proc.returncode == -signal.SIGTERM
    left = os.listdir(tmp_path)
    # no temporary file; the output exists only if the signal came after its rename (complete)
    assert not any(n.startswith(".ropekit-") for n in left), left
    assert left in ([], ["out.onnx"]), left
    if left:
        onnx.load(str(dst), load_external_data=False)


def test_huge_max_positions_fails_fast(tmp_path):
    """Tables past what an .onnx file holds are refused before any is built (it took minutes and
    gigabytes), with the length that fits."""
    dst = tmp_path / "out.onnx"
    t0 = time.monotonic()
    res = fuse(MODELS / "llama.onnx", dst, "--max-positions", "40000000", rc=1)
    assert time.monotonic() - t0 < 5
    assert "over the 2 GiB an .onnx file can hold" in res.stderr, res.stderr
    assert "at most 33554431" in res.stderr, res.stderr  # 2 GiB / (2 tables x 8 x 4 bytes)
    assert not dst.exists() and os.listdir(tmp_path) == []


def test_tables_over_2_gib_are_allowed_with_external_data(tmp_path):
    """The 2 GiB limit is the .onnx file's: with --external-data the tables of at least BYTES go
    to OUT.data and only the smaller ones count (it refused 40000000 rows even then). Checked
    with --dry-run, which runs the same size check before building anything (a real run writes
    2.4 GiB)."""
    src = MODELS / "llama.onnx"
    report = fuse(src, tmp_path / "never.onnx", "--dry-run", "--external-data", "--max-positions", "40000000", rc=0)
    assert report["max_positions"] == 40000000, report
    assert [st["status"] for st in report["sites"]] == ["fusable"] * 4, report["sites"]
    # each table (40000000 x 8 x 4 bytes = 1.2 GiB) below a 4 GiB threshold stays inline: refused
    res = fuse(src, tmp_path / "never.onnx", "--dry-run", "--external-data=4294967296", "--max-positions", "40000000", rc=1)
    assert "over the 2 GiB an .onnx file can hold" in res.stderr and "--external-data" in res.stderr
    # external tables must still fit in memory: 2^31 rows are 128 GiB of tables
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if memory < 128 * 2**30:
        res = fuse(src, tmp_path / "never.onnx", "--dry-run", "--external-data", "--max-positions", str(2**31), rc=1)
        assert "more than this machine's" in res.stderr, res.stderr
    import ropekit

    rep = ropekit.fuse(src, dry_run=True, max_positions=40000000, external_data=True)
    assert [st["status"] for st in rep["sites"]] == ["fusable"] * 4
    with pytest.raises(ropekit.Error, match="2 GiB"):
        ropekit.fuse(src, dry_run=True, max_positions=40000000)


def test_python_fuse_writes_external_data(tmp_path):
    import ropekit

    dst = tmp_path / "out.onnx"
    ropekit.fuse(MODELS / "llama.onnx", dst, max_positions=4096, external_data=True)
    locs = external_locations(dst)
    assert locs == {"out.onnx.data"}, locs
    check_fused_model(MODELS / "llama.onnx", dst)
    with pytest.raises(ropekit.Error, match="external_data"):
        ropekit.fuse(MODELS / "llama.onnx", dst, external_data=-5)


def test_non_finite_inv_freq_skips_the_site_naming_the_tensor(tmp_path):
    """A fixed table from an inv_freq holding inf: each site is skipped with a reason naming the
    tensor and the element (it used to abort the whole run with "inv_freq[0] is not finite")."""
    m = onnx.load(str(MODELS / "llama.onnx"))
    (init,) = [t for t in m.graph.initializer if t.name == INV_FREQ]
    v = numpy_helper.to_array(init).copy()
    v.flat[1] = np.inf
    init.CopyFrom(numpy_helper.from_array(v, INV_FREQ))
    src = tmp_path / "inf.onnx"
    onnx.save(m, str(src))
    report = fuse(src, tmp_path / "out.onnx", "--max-positions", "64", rc=3)
    assert report["sites_found"] == 4 and report["sites_fused"] == 0
    for s in report["sites"]:
        assert f"inv_freq '{INV_FREQ}'[1] = inf is not finite" in s["reason"], s["reason"]
