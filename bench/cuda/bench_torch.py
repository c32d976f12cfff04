"""PyTorch peers for bench/results-cuda.md: Hugging Face style RoPE (rotate_half), bf16, q and k,
cos/sin gathered per token from a 131072-row table (as the ropekit benchmark reads its table),
timed with CUDA events (median; prefill rows with the stream held while the call is enqueued, so
GPU time alone, as in bench_cuda), eager and torch.compile. Decode shapes are also timed inside a
CUDA graph (torch.cuda.CUDAGraph) so the comparison with bench_cuda's graph figures is fair.
FlashInfer is not installed on the benchmark machine, so it is not measured.
Usage: bench_torch.py [substring of a shape name]"""
import os
import statistics
import sys

import torch

ROWS = 131072
dev = "cuda"


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def hf_rope(q, k, cos_t, sin_t, pos):
    cos = cos_t[pos].unsqueeze(1)  # (B, 1, S, D)
    sin = sin_t[pos].unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def median_us(f, reps=50, warm=5, queued=False):
    """queued: hold the stream (torch.cuda._sleep, ~0.5 ms of GPU spinning) while f is
    enqueued, so the time is the GPU's alone, as bench_cuda times its prefill rows; otherwise
    the host's dispatch latency is inside the interval (decode rows)."""
    for _ in range(warm):
        f()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if queued:
            torch.cuda._sleep(1_000_000)
        a.record()
        f()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1000.0)
    return statistics.median(ts)


def graph_us(f, k=20):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            f()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(k):
            f()
    return median_us(g.replay, reps=100) / k


def main():
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    D = 128
    inv = 1.0 / (500000.0 ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D))
    ang = torch.outer(torch.arange(ROWS, device=dev, dtype=torch.float32), inv)
    emb = torch.cat((ang, ang), dim=-1)
    cos_t, sin_t = emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)
    compiled = torch.compile(hf_rope, dynamic=False)
    shapes = [
        ("Llama-3-8B prefill B=1 S=8192 32+8 x128", 1, 8192, 32, 8, True),
        ("Llama-3-8B prefill B=1 S=4096 32+8 x128", 1, 4096, 32, 8, True),
        ("Qwen3-0.6B prefill B=4 S=2048 16+8 x128", 4, 2048, 16, 8, True),
        ("decode B=1 S=1 32+8 x128", 1, 1, 32, 8, True),
        ("decode B=64 S=1 32+8 x128", 64, 1, 32, 8, False),
        ("decode B=256 S=1 32+8 x128", 256, 1, 32, 8, True),
    ]
    print("\n| shape (bf16, HF rotate_half) | eager us | torch.compile us | eager graph us | compile graph us | MB moved | compile TB/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    only = sys.argv[1] if len(sys.argv) > 1 else None  # run only the shapes whose name has it
    for name, B, S, NQ, NK, do_compile in shapes:
        if only and only not in name:
            continue
        q = torch.randn(B, NQ, S, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn(B, NK, S, D, device=dev, dtype=torch.bfloat16)
        pos = torch.randint(0, ROWS, (B, S), device=dev)
        mb = (2 * (q.numel() + k.numel()) * 2 + B * S * (2 * D * 2 + 8)) / 1e6
        queued = S > 1  # prefill: GPU time alone, like bench_cuda's prefill rows
        e = median_us(lambda: hf_rope(q, k, cos_t, sin_t, pos), queued=queued)
        c = float("nan")
        if do_compile:
            c = median_us(lambda: compiled(q, k, cos_t, sin_t, pos), queued=queued)
        eg = cg = float("nan")
        if S == 1:
            eg = graph_us(lambda: hf_rope(q, k, cos_t, sin_t, pos))
            if do_compile:
                cg = graph_us(lambda: compiled(q, k, cos_t, sin_t, pos))
        tbs = mb / c  # MB per us = TB/s
        print(f"| {name} | {e:.1f} | {c:.1f} | {eg:.2f} | {cg:.2f} | {mb:.1f} | {tbs:.2f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
