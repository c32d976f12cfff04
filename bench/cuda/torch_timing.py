"""What bench_torch.py and bench_torch_binding.py share: the table size, Hugging Face's
rotate_half RoPE (the eager peer) and CUDA-event / CUDA-graph timing."""
import statistics

import torch

ROWS = 131072  # rows of the cos/sin table, as the ropekit benchmark reads its table
dev = "cuda"


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def hf_rope(q, k, cos_t, sin_t, pos):
    cos = cos_t[pos].unsqueeze(1)  # (B, 1, S, D)
    sin = sin_t[pos].unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def event_us(f, reps, warm, hold_cycles=0):
    """Median microseconds of f between two CUDA events, after `warm` untimed calls.
    hold_cycles > 0: hold the stream (torch.cuda._sleep spins the GPU that many cycles) while f
    is enqueued, so the time is the GPU's alone; otherwise the host's dispatch latency is inside
    the interval."""
    for _ in range(warm):
        f()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if hold_cycles:
            torch.cuda._sleep(hold_cycles)
        a.record()
        f()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1000.0)
    return statistics.median(ts)


def capture_graph(f, k):
    """A CUDA graph of k calls of f (warmed up on a side stream first)."""
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
    return g
