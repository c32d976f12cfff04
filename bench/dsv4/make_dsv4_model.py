"""Export a DeepSeek-V4 model with random weights (transformers 5.x, torch.onnx dynamo) for the
ONNX Runtime fusion experiments: python make_dsv4_model.py OUT.onnx [--size tiny|bench] [--dtype float32|float16|bfloat16]

The MoE blocks are replaced by one dense MLP (DeepseekV4MLP) so the export is plain ops; all
layers are sliding-window attention (no compressor), no cache (prefill graphs; a decode step is a
length-1 input). Needs /opt/venv-torch (torch 2.11, transformers 5.24); not run in CI."""
import argparse

import torch
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as dsv4

SIZES = {  # hidden, heads, head_dim, rope_head_dim, q_lora, o_groups, o_lora, vocab, layers
    "tiny": (64, 4, 64, 16, 32, 2, 16, 128, 2),
    "bench": (1024, 16, 512, 64, 512, 4, 256, 1024, 2),
}


class DenseMoe(torch.nn.Module):
    def __init__(self, config, layer_idx=0):
        super().__init__()
        self.mlp = dsv4.DeepseekV4MLP(config)

    def forward(self, hidden_states, input_ids=None):
        return self.mlp(hidden_states)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--size", default="tiny", choices=SIZES)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    a = ap.parse_args()
    hid, nh, hd, rd, qr, og, olr, vocab, layers = SIZES[a.size]
    torch.manual_seed(0)
    cfg = DeepseekV4Config(vocab_size=vocab, hidden_size=hid, moe_intermediate_size=hid // 2,
                           num_hidden_layers=layers, num_attention_heads=nh, head_dim=hd, q_lora_rank=qr,
                           partial_rotary_factor=rd / hd, layer_types=["sliding_attention"] * layers,
                           mlp_layer_types=["moe"] * layers, o_groups=og, o_lora_rank=olr, hc_mult=2,
                           hc_sinkhorn_iters=3, sliding_window=4096, max_position_embeddings=4096,
                           use_cache=False, num_nextn_predict_layers=0)
    dsv4.DeepseekV4SparseMoeBlock = DenseMoe
    model = DeepseekV4ForCausalLM(cfg).eval()
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.2 if a.size == "tiny" else 0.05)
    model = model.to(getattr(torch, a.dtype))
    ids = torch.randint(0, vocab, (1, 7))
    S = torch.export.Dim("S", min=1, max=4096)
    prog = torch.onnx.export(model, (ids,), dynamo=True, dynamic_shapes={"input_ids": {1: S}},
                             input_names=["input_ids"], output_names=["logits"], optimize=True)
    prog.save(a.out)
    print(f"wrote {a.out}: {a.size} {a.dtype}, num_heads {nh} head_dim {hd} rope_head_dim {rd} o_groups {og}")


if __name__ == "__main__":
    main()
