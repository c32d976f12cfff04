"""PyTorch peers for bench/results-cuda.md: Hugging Face style RoPE (rotate_half; Phi-2's partial
rotary; Qwen2-VL's multimodal sections), bfloat16, float16 and float32, q and k,
cos/sin gathered per token from a 131072-row table (as the ropekit benchmark reads its table),
timed with CUDA events (median; prefill rows with the stream held while the call is enqueued, so
GPU time alone, as in bench_cuda), eager and torch.compile. Decode shapes are also timed inside a
CUDA graph (torch.cuda.CUDAGraph) so the comparison with bench_cuda's graph figures is fair.
FlashInfer, the other CUDA peer, has its own program (bench/cuda/bench_flashinfer.cu, built by
bench/cuda/build_flashinfer.sh; bench/results-cuda.md, "FlashInfer (peer)").
Usage: bench_torch.py [substring of a shape name, or several separated by '|']"""
import os
import sys

import torch

from torch_timing import ROWS, capture_graph, dev, event_us, hf_rope, rotate_half


def hf_rope_partial(q, k, cos_t, sin_t, pos, R):
    """Phi-2 style partial rotary: the first R channels rotated (rotate_half over R), the rest
    passed through."""
    cos = cos_t[pos].unsqueeze(1)
    sin = sin_t[pos].unsqueeze(1)
    out = []
    for t in (q, k):
        tr, tp = t[..., :R], t[..., R:]
        out.append(torch.cat((tr * cos + rotate_half(tr) * sin, tp), dim=-1))
    return tuple(out)


def hf_mrope(q, k, cos_t, sin_t, pos3, section):
    """Qwen2-VL's apply_multimodal_rotary_pos_emb: cos/sin gathered per id stream (3, B, S, D),
    then column chunks of the sections (doubled for the two halves) taken from stream i % 3."""
    cos, sin = cos_t[pos3], sin_t[pos3]
    sec = section * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(sec, dim=-1))], dim=-1).unsqueeze(1)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(sec, dim=-1))], dim=-1).unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def median_us(f, reps=50, warm=5, queued=False):
    """queued: hold the stream (~0.5 ms of GPU spinning) while f is enqueued, so the time is the
    GPU's alone, as bench_cuda times its prefill rows; otherwise the host's dispatch latency is
    inside the interval (decode rows)."""
    return event_us(f, reps, warm, 1_000_000 if queued else 0)


def graph_us(f, k=20):
    return median_us(capture_graph(f, k).replay, reps=100) / k


def main():
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    # run only the rows whose name has one of the '|'-separated parts
    only = [p for p in sys.argv[1].split("|") if p] if len(sys.argv) > 1 else None

    def table(D, dt):
        inv = 1.0 / (500000.0 ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D))
        ang = torch.outer(torch.arange(ROWS, device=dev, dtype=torch.float32), inv)
        emb = torch.cat((ang, ang), dim=-1)
        return emb.cos().to(dt), emb.sin().to(dt)

    # hf_rope compiles once per shape and dtype (dynamic=False): 11 specialisations, above
    # dynamo's default limit of 8, past which calls silently run eager (the 2026-12-01 run's
    # Qwen3 float32 and decode "torch.compile" rows were eager for that reason)
    for knob in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 64)
    compiled = torch.compile(hf_rope, dynamic=False)
    compiled_p = torch.compile(hf_rope_partial, dynamic=False)
    compiled_m = torch.compile(hf_mrope, dynamic=False)
    names = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
    # name, B, S, NQ, NK, D, R (0: all), mrope, dtypes, compile
    all_dt = (torch.bfloat16, torch.float16, torch.float32)
    shapes = [
        ("Llama-3-8B prefill B=1 S=8192 32+8 x128", 1, 8192, 32, 8, 128, 0, False, all_dt, True),
        ("Llama-3-8B prefill B=1 S=4096 32+8 x128", 1, 4096, 32, 8, 128, 0, False, all_dt, True),
        ("Qwen3-0.6B prefill B=4 S=2048 16+8 x128", 4, 2048, 16, 8, 128, 0, False, all_dt, True),
        ("Phi-2 partial B=1 S=8192 32+32 x80 R32", 1, 8192, 32, 32, 80, 32, False, all_dt, True),
        ("MRoPE Qwen2.5-VL-7B S=8192 28+4 x128", 1, 8192, 28, 4, 128, 0, True, all_dt, True),
        ("decode B=1 S=1 32+8 x128", 1, 1, 32, 8, 128, 0, False, (torch.bfloat16,), True),
        ("decode B=64 S=1 32+8 x128", 64, 1, 32, 8, 128, 0, False, (torch.bfloat16,), False),
        ("decode B=256 S=1 32+8 x128", 256, 1, 32, 8, 128, 0, False, (torch.bfloat16,), True),
    ]
    print("\n| shape (HF arithmetic, tables in x's dtype) | x | eager us | torch.compile us | eager graph us | compile graph us | MB moved | compile TB/s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, B, S, NQ, NK, D, R, mrope, dts, do_compile in shapes:
        if only and not any(p in name for p in only):
            continue
        for dt in dts:
            Rr = R or D
            cos_t, sin_t = table(Rr, dt)
            q = torch.randn(B, NQ, S, D, device=dev, dtype=dt)
            k = torch.randn(B, NK, S, D, device=dev, dtype=dt)
            es = q.element_size()
            if mrope:
                pos = torch.randint(0, ROWS, (3, B, S), device=dev)
                f = lambda: hf_mrope(q, k, cos_t, sin_t, pos, [16, 24, 24])
                fc = lambda: compiled_m(q, k, cos_t, sin_t, pos, [16, 24, 24])
                nid = 3
            elif R:
                pos = torch.randint(0, ROWS, (B, S), device=dev)
                f = lambda: hf_rope_partial(q, k, cos_t, sin_t, pos, R)
                fc = lambda: compiled_p(q, k, cos_t, sin_t, pos, R)
                nid = 1
            else:
                pos = torch.randint(0, ROWS, (B, S), device=dev)
                f = lambda: hf_rope(q, k, cos_t, sin_t, pos)
                fc = lambda: compiled(q, k, cos_t, sin_t, pos)
                nid = 1
            # x read + y written + the (full-width, as HF stores them) cos/sin rows and ids per token
            mb = (2 * (q.numel() + k.numel()) * es + B * S * nid * (2 * Rr * es + 8)) / 1e6
            queued = S > 1  # prefill: GPU time alone, like bench_cuda's prefill rows
            e = median_us(f, queued=queued)
            c = median_us(fc, queued=queued) if do_compile else float("nan")
            eg = cg = float("nan")
            if S == 1:
                eg = graph_us(f)
                if do_compile:
                    cg = graph_us(fc)
            tbs = mb / c  # MB per us = TB/s
            print(f"| {name} | {names[dt]} | {e:.1f} | {c:.1f} | {eg:.2f} | {cg:.2f} | {mb:.1f} | {tbs:.2f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
