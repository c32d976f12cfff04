"""onnxruntime's WebGPU execution provider (PyPI onnxruntime-ep-webgpu) on the rotary bench
shapes of bench_webgpu.c: ai.onnx RotaryEmbedding (opset 23) and com.microsoft RotaryEmbedding,
one node per model, float32 and float16 (x and tables of one type).

Timing: the inputs and the output live in device memory (IOBinding with OrtValues allocated
through the EP device's memory info, filled once); `run_with_iobinding` returns before the device
has finished (synchronize_outputs does not wait either), so a batch of n runs ends with a run of a
4-element model in a second session on the same device whose output is read back (the queue is in
order: it waits for the batch); time per run = (T(2N) - T(N)) / N, the sync's own cost
cancelling, median of 7 such pairs. Everything a run does is included: ORT's
per-run host work, its WebGPU submission and the kernel. If device-resident inputs are refused,
the row says which inputs came from host memory.

--new-ids: each shape also timed with new position ids every run, alternating two id sets (the
upload a model with new positions pays; bench_decode's "op, new ids" row), in the same session,
two ways: the ids OrtValue in device memory rewritten with update_inplace before each run, and
the ids bound from host memory (bind_cpu_input) for each run, which ORT copies to the device.
Usage: python bench_ort_webgpu.py [--reps N] [--small] [--only PREFIX] [--shapes 4,5] [--new-ids]
Environment: ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER=1 on a software adapter.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

try:
    import onnxruntime_ep_webgpu as wep
except ImportError:  # pragma: no cover
    sys.exit("onnxruntime-ep-webgpu is not installed")

SHAPES = [  # name, B, S, N, H, R, P, dtype  (bench_webgpu.c)
    ("Llama-3-8B prefill S=8192/div, 32 heads x128", 1, 8192, 32, 128, 128, 131072, np.float32),
    ("same, float16 x and tables", 1, 8192, 32, 128, 128, 131072, np.float16),
    ("Phi-2 partial R=32 of 80, S=4096/div, 32 heads", 1, 4096, 32, 80, 32, 8192, np.float16),
    ("same, float32", 1, 4096, 32, 80, 32, 8192, np.float32),
    ("decode B=64, 32 heads x128", 64, 1, 32, 128, 128, 131072, np.float32),
    ("same, float16", 64, 1, 32, 128, 128, 131072, np.float16),
]


def model(domain, B, S, N, H, R, P, dt):
    et = TensorProto.FLOAT if dt == np.float32 else TensorProto.FLOAT16
    x = helper.make_tensor_value_info("x", et, [B, S, N * H])
    y = helper.make_tensor_value_info("y", et, [B, S, N * H])
    c = helper.make_tensor_value_info("cos", et, [P, R // 2])
    s = helper.make_tensor_value_info("sin", et, [P, R // 2])
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [B, S])
    attrs = dict(interleaved=0, num_heads=N, rotary_embedding_dim=R if R != H else 0)
    if domain == "com.microsoft":
        # the contrib op takes rotary_embedding_dim only for partial rotation
        node = helper.make_node("RotaryEmbedding", ["x", "ids", "cos", "sin"], ["y"],
                                domain=domain, **attrs)
        opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    else:
        node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "ids"], ["y"], **attrs)
        opsets = [helper.make_opsetid("", 23)]
    g = helper.make_graph([node], "rope", [x, c, s, ids], [y])
    m = helper.make_model(g, opset_imports=opsets, producer_name="ropekit-bench")
    m.ir_version = 10
    return m.SerializeToString()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--only", default="", help="run only the shapes whose name starts with this")
    ap.add_argument("--profile", action="store_true", help="also report ORT profiler events of the node")
    ap.add_argument("--shapes", default="", help="comma-separated indices into SHAPES (0-5): only those")
    ap.add_argument("--new-ids", action="store_true", help="also time runs that upload new position ids")
    a = ap.parse_args()
    ort.register_execution_provider_library("webgpu", wep.get_library_path())
    devs = [d for d in ort.get_ep_devices() if d.ep_name == "WebGpuExecutionProvider"]
    if not devs:
        sys.exit("no WebGpuExecutionProvider device")
    dev = devs[0]
    print(f"onnxruntime {ort.__version__}, onnxruntime-ep-webgpu "
          f"{getattr(wep, '__version__', '?')}, device: vendor {dev.device.vendor} "
          f"(id {dev.device.vendor_id:#x}), {dict(dev.ep_metadata)} {dict(dev.device.metadata)}")
    try:
        mem = dev.memory_info(ort.OrtDeviceMemoryType.DEFAULT)
    except Exception as e:  # noqa: BLE001
        mem = None
        print("no device memory info:", e)
    # The runs return before the device has finished (synchronize_outputs does not wait). A
    # second session on the same device (the EP shares one WebGPU context per device) runs a
    # 4-element Neg and reads its output back:
    # the queue is in order, so that read waits for every run submitted before it.
    gs = helper.make_graph([helper.make_node("Neg", ["a"], ["b"])], "sync",
                           [helper.make_tensor_value_info("a", TensorProto.FLOAT, [4])],
                           [helper.make_tensor_value_info("b", TensorProto.FLOAT, [4])])
    ms = helper.make_model(gs, opset_imports=[helper.make_opsetid("", 21)])
    ms.ir_version = 10
    so = ort.SessionOptions()
    so.add_provider_for_devices([dev], {})
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    sync_sess = ort.InferenceSession(ms.SerializeToString(), sess_options=so)
    four = np.ones(4, np.float32)

    def sync():
        sync_sess.run(None, {"a": four})

    d = 16 if a.small else 1
    print("\n| shape | x and tables | operator | ORT WebGPU EP ms per run | inputs | max abs diff vs CPU EP |")
    print("|---|---|---|---:|---|---:|")
    pick = {int(i) for i in a.shapes.split(",") if i.strip()}
    for idx, (name, B, S, N, H, R, P, dt) in enumerate(SHAPES):
        if not name.startswith(a.only) or (pick and idx not in pick):
            continue
        S2, P2 = max(1, S // d), max(1, P // d) if P > 8192 else P
        rng = np.random.default_rng(1)
        host = {
            "x": (rng.random((B, S2, N * H), dtype=np.float32) * 2 - 1).astype(dt),
            "cos": (rng.random((P2, R // 2), dtype=np.float32) * 2 - 1).astype(dt),
            "sin": (rng.random((P2, R // 2), dtype=np.float32) * 2 - 1).astype(dt),
            "ids": ((np.arange(B * S2, dtype=np.int64) * 7919) % P2).reshape(B, S2),
        }
        for domain in ("ai.onnx", "com.microsoft"):
            mb = model(domain, B, S2, N, H, R, P2, dt)
            so = ort.SessionOptions()
            so.add_provider_for_devices([dev], {})
            so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
            try:
                sess = ort.InferenceSession(mb, sess_options=so)
            except Exception as e:  # noqa: BLE001
                print(f"| {name} | {np.dtype(dt).name} | {domain} | error: {str(e).splitlines()[0][:200]} | | |")
                continue
            io = sess.io_binding()
            where = []
            ovs = {}
            for k, v in host.items():
                ov = None
                if mem is not None:
                    try:
                        ov = ort.OrtValue.ortvalue_from_shape_and_type(list(v.shape), v.dtype, memory_info=mem)
                        ov.update_inplace(v)
                    except Exception:  # noqa: BLE001
                        ov = None
                if ov is None:
                    ov = ort.OrtValue.ortvalue_from_numpy(v)
                    where.append(k)
                ovs[k] = ov
                io.bind_ortvalue_input(k, ov)
            yv = None
            if mem is not None:
                try:
                    yv = ort.OrtValue.ortvalue_from_shape_and_type(list(host["x"].shape), host["x"].dtype, memory_info=mem)
                except Exception:  # noqa: BLE001
                    yv = None
            if yv is not None:
                io.bind_ortvalue_output("y", yv)
            else:
                io.bind_output("y")
                where.append("y")
            try:
                sess.run_with_iobinding(io)  # warm-up (shader compile)
                sync()
            except Exception as e:  # noqa: BLE001
                print(f"| {name} | {np.dtype(dt).name} | {domain} | error: {str(e).splitlines()[0][:200]} | | |")
                continue
            alt = [host["ids"], (host["ids"] + 1) % P2]  # two id sets, alternated (--new-ids)

            def batch(n, new_ids=False):  # n runs, then a tiny run whose read-back waits for the queue
                t0 = time.perf_counter()
                if new_ids == "host":  # ids bound from host memory each run: ORT copies them
                    for i in range(n):
                        io.bind_cpu_input("ids", alt[i & 1])
                        sess.run_with_iobinding(io)
                elif new_ids:
                    ids_ov = ovs["ids"]
                    for i in range(n):
                        ids_ov.update_inplace(alt[i & 1])
                        sess.run_with_iobinding(io)
                else:
                    for _ in range(n):
                        sess.run_with_iobinding(io)
                sync()
                return time.perf_counter() - t0

            def per_run(new_ids=False):
                ts = []
                for _ in range(7):
                    t1 = batch(a.reps, new_ids)
                    t2 = batch(2 * a.reps, new_ids)
                    ts.append((t2 - t1) / a.reps)
                return statistics.median(ts)

            t_same = per_run()
            t_new = t_host = None
            if a.new_ids and "ids" not in where:
                t_new = per_run(True)
                ovs["ids"].update_inplace(host["ids"])  # back to the ids the check below uses
                try:
                    t_host = per_run("host")
                except Exception as e:  # noqa: BLE001
                    print(f"| {name}, ids bound from host memory | error: {str(e).splitlines()[0][:200]} | | |")
                io.bind_ortvalue_input("ids", ovs["ids"])
                sess.run_with_iobinding(io)
                sync()
            prof = ""
            if a.profile:  # ORT's profiler: its events for the node, median duration by category
                sp = ort.SessionOptions()
                sp.add_provider_for_devices([dev], {})
                sp.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
                sp.enable_profiling = True
                sp.profile_file_prefix = "/tmp/ort_rope_prof"
                ps = ort.InferenceSession(mb, sess_options=sp)
                pio = ps.io_binding()
                for k in host:
                    pio.bind_ortvalue_input(k, ort.OrtValue.ortvalue_from_numpy(host[k]))
                pio.bind_output("y")
                for _ in range(10):
                    ps.run_with_iobinding(pio)
                sync()
                path = ps.end_profiling()
                ev = json.load(open(path))
                os.remove(path)
                cats = {}
                for e in ev:
                    if "RotaryEmbedding" in str(e.get("name", "")) + str(e.get("args", {})) and "dur" in e:
                        cats.setdefault(f"{e.get('cat')}:{e.get('name')}"[:60], []).append(e["dur"])
                prof = "; ".join(f"{k} {statistics.median(v) / 1e3:.3f} ms x{len(v)}" for k, v in cats.items())
            out = io.copy_outputs_to_cpu()[0]
            ref = ort.InferenceSession(mb, providers=["CPUExecutionProvider"]).run(None, host)[0]
            diff = float(np.max(np.abs(out.astype(np.float64) - ref.astype(np.float64))))
            inputs = "device" if not where else "host: " + ", ".join(where)
            print(f"| {name} | {np.dtype(dt).name} | {domain} | {t_same * 1e3:.4f} | {inputs} | {diff:.3g} |"
                  + (f" {prof} |" if a.profile else ""), flush=True)
            if t_new is not None:
                print(f"| {name}, new ids every run | {np.dtype(dt).name} | {domain} | {t_new * 1e3:.4f} | "
                      f"{inputs}, ids rewritten (update_inplace) | |", flush=True)
            if t_host is not None:
                print(f"| {name}, new ids every run | {np.dtype(dt).name} | {domain} | {t_host * 1e3:.4f} | "
                      f"{inputs}, ids bound from host memory (bind_cpu_input) | |", flush=True)


if __name__ == "__main__":
    main()
