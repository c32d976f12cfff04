"""ropekit.torch (the PyTorch binding, called from Python as users call it) vs PyTorch eager and
torch.compile on the benchmark shapes of bench/results-cuda.md: Hugging Face style RoPE of q and
k (rotate_half), cos/sin gathered per token from a 131072-row table.

  eager     : transformers' arithmetic on bf16 tables (bench/cuda/torch_timing.py's hf_rope)
  compile   : torch.compile(eager), default inductor
  ropekit   : ropekit.torch.rotary_embedding on q and k (float32 (P, 64) tables; two launches)
  rk+compile: the same inside torch.compile (the custom op kept in the graph)
  rk inplace: ropekit.torch.apply_rope_with_cos_sin_cache_inplace on a packed QKV buffer
              (FlashInfer's calling convention; one call = q and k)

Columns per implementation: GPU time (the stream held while the call is enqueued, so the
kernels alone; median of 50 with CUDA events) and host time (wall clock of the Python call
without synchronisation, median of 200: validation, marshalling and launch as the caller pays
them). Decode rows add a CUDA-graph figure (per call, graph of 20 calls).
Usage: python3 bench/cuda/bench_torch_binding.py [substring of a shape name]"""
import statistics
import sys
import time

import torch

from torch_timing import ROWS, capture_graph, dev, event_us, hf_rope

import ropekit
import ropekit.torch as rt


def rk_rope(q, k, cos_h, sin_h, pos):
    return rt.rotary_embedding(q, cos_h, sin_h, pos), rt.rotary_embedding(k, cos_h, sin_h, pos)


def gpu_us(f, reps=50, warm=5):
    return event_us(f, reps, warm, hold_cycles=2_000_000)  # hold the stream while f is enqueued


def host_us(f, reps=200):
    for _ in range(5):
        f()
    torch.cuda.synchronize()
    ts = []
    for i in range(reps):
        if i % 20 == 0:
            torch.cuda.synchronize()  # never let the launch queue fill up
        t0 = time.perf_counter()
        f()
        ts.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(ts)


def graph_us(f, k=20):
    return event_us(capture_graph(f, k).replay, reps=30, warm=1) / k


def main():
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, ropekit {ropekit.__version__} "
          f"({rt.cuda_library_path or 'libropekit_cuda not loaded yet'})")
    D = 128
    inv = 1.0 / (500000.0 ** (torch.arange(0, D, 2, device=dev, dtype=torch.float64) / D))
    ang = torch.outer(torch.arange(ROWS, device=dev, dtype=torch.float64), inv)
    cos_h, sin_h = ang.cos().float(), ang.sin().float()  # (ROWS, 64) float32: ropekit's tables
    emb = torch.cat((ang, ang), dim=-1)
    cos_t, sin_t = emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)  # HF's bf16 tables
    cache = torch.cat((cos_h, sin_h), -1).contiguous()  # FlashInfer's (ROWS, 128) float32 cache
    compiled = torch.compile(hf_rope, dynamic=False)
    rk_compiled = torch.compile(rk_rope, dynamic=False, fullgraph=True)
    shapes = [
        ("Llama-3-8B prefill B=1 S=8192 32+8 x128", 1, 8192, 32, 8),
        ("Llama-3-8B prefill B=1 S=4096 32+8 x128", 1, 4096, 32, 8),
        ("Qwen3-0.6B prefill B=4 S=2048 16+8 x128", 4, 2048, 16, 8),
        ("decode B=1 S=1 32+8 x128", 1, 1, 32, 8),
        ("decode B=64 S=1 32+8 x128", 64, 1, 32, 8),
        ("decode B=256 S=1 32+8 x128", 256, 1, 32, 8),
    ]
    only = sys.argv[1] if len(sys.argv) > 1 else None
    print("\nGPU µs / host µs per call (bf16 q and k)\n")
    print("| shape | eager | torch.compile | ropekit.torch | ropekit in torch.compile | ropekit in place (FlashInfer form) |"
          " graph µs: compile / ropekit / rk inplace |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, B, S, NQ, NK in shapes:
        if only and only not in name:
            continue
        q = torch.randn(B, NQ, S, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn(B, NK, S, D, device=dev, dtype=torch.bfloat16)
        pos = torch.randint(0, ROWS, (B, S), device=dev)
        qkv = torch.randn(B * S, (NQ + 2 * NK) * D, device=dev, dtype=torch.bfloat16)
        qv, kv = qkv[:, : NQ * D], qkv[:, NQ * D:(NQ + NK) * D]
        flat = pos.flatten()
        fns = {
            "eager": lambda: hf_rope(q, k, cos_t, sin_t, pos),
            "compile": lambda: compiled(q, k, cos_t, sin_t, pos),
            "ropekit": lambda: rk_rope(q, k, cos_h, sin_h, pos),
            "rk_compile": lambda: rk_compiled(q, k, cos_h, sin_h, pos),
            "rk_inplace": lambda: rt.apply_rope_with_cos_sin_cache_inplace(flat, qv, kv, D, cache, True),
        }
        cells = []
        for key, f in fns.items():
            cells.append(f"{gpu_us(f):.1f} / {host_us(f):.1f}")
        g = ""
        if S == 1:
            g = " / ".join(f"{graph_us(fns[k_]):.2f}" for k_ in ("compile", "ropekit", "rk_inplace"))
        print(f"| {name} | " + " | ".join(cells) + f" | {g} |", flush=True)
    rt.check_errors()  # every position was in range


if __name__ == "__main__":
    sys.exit(main())
