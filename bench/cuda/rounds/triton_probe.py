"""What torch.compile makes of Hugging Face's RoPE on one benchmark shape (the peer bench_torch.py
times): run with TORCH_LOGS=output_code to print the generated Triton kernel and its launch
(block size, warps, loads per thread), and under Nsight Compute (-k regex:triton) for its
counters. Times the compiled call as bench_torch.py does (GPU time, stream held).
Usage: triton_probe.py [bfloat16|float16|float32] [S]   (Llama-3-8B shape: 32+8 heads x 128)"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

from torch_timing import ROWS, dev, event_us, hf_rope  # noqa: E402


def main():
    torch.manual_seed(0)
    dt = getattr(torch, sys.argv[1] if len(sys.argv) > 1 else "bfloat16")
    S = int(sys.argv[2]) if len(sys.argv) > 2 else 8192
    B, NQ, NK, D = 1, 32, 8, 128
    inv = 1.0 / (500000.0 ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D))
    ang = torch.outer(torch.arange(ROWS, device=dev, dtype=torch.float32), inv)
    emb = torch.cat((ang, ang), dim=-1)
    cos_t, sin_t = emb.cos().to(dt), emb.sin().to(dt)
    q = torch.randn(B, NQ, S, D, device=dev, dtype=dt)
    k = torch.randn(B, NK, S, D, device=dev, dtype=dt)
    pos = torch.randint(0, ROWS, (B, S), device=dev)
    fc = torch.compile(hf_rope, dynamic=False)
    f = lambda: fc(q, k, cos_t, sin_t, pos)  # noqa: E731
    us = event_us(f, 30, 3, 1_000_000)
    es = q.element_size()
    mb = (2 * (q.numel() + k.numel()) * es + B * S * (2 * D * es + 8)) / 1e6
    print(f"torch.compile {dt} S={S}: {us:.2f} us, {mb / us:.2f} TB/s", flush=True)


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no interpreter teardown (inductor's compile workers made it outlast the round's limit)
