"""Rotate q/k of a Hugging Face model with ropekit.torch: a tiny randomly initialised Llama (no
download), run once with transformers' own apply_rotary_pos_emb and once with ropekit's drop-in
(one line), and compare the logits. Also runs the model under torch.compile with the drop-in.

    python examples/hf_rope_torch.py [cuda|cpu] [float32|bfloat16|float16]

Needs: pip install ropekit torch transformers."""

import sys

import torch
import transformers
from transformers.models.llama import modeling_llama

import ropekit.torch as rt

device = sys.argv[1] if len(sys.argv) > 1 else ("cuda" if torch.cuda.is_available() else "cpu")
dtype = getattr(torch, sys.argv[2] if len(sys.argv) > 2 else "float32")
torch.manual_seed(0)
cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                               rope_theta=10000.0)
model = transformers.LlamaForCausalLM(cfg).to(device=device, dtype=dtype).eval()
ids = torch.randint(0, cfg.vocab_size, (2, 40), device=device)

original = modeling_llama.apply_rotary_pos_emb
with torch.no_grad():
    ref = model(ids).logits.float()
    modeling_llama.apply_rotary_pos_emb = rt.apply_rotary_pos_emb  # the one line
    try:
        got = model(ids).logits.float()
        compiled = torch.compile(model, fullgraph=True)
        got_c = compiled(ids).logits.float()
    finally:
        modeling_llama.apply_rotary_pos_emb = original

err, err_c = (got - ref).abs().max().item(), (got_c - got).abs().max().item()
scale = ref.abs().max().item()
print(f"{device} {dtype}: logits {tuple(ref.shape)}, max |logit| {scale:.3g}")
print(f"  max |ropekit - transformers| = {err:.3g}; torch.compile(fullgraph) vs eager ropekit: {err_c:.3g}")
tol = {torch.float32: 1e-4, torch.bfloat16: 0.1, torch.float16: 0.02}[dtype] * max(scale, 1.0)
if err > tol or err_c > tol:
    sys.exit(f"FAILED: differences above {tol:.3g}")
print("ok")
