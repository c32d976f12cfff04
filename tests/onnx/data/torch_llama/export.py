"""How model.onnx + model.onnx.data here were made (torch 2.11, transformers 5.24, random weights):
torch.onnx's dynamo exporter with external_data=True, as users get it. Run from this folder:
    /opt/venv-torch/bin/python export.py    (writes in/; copy in/* here)
Used by tests/python/test_fuse_external.py; CI does not need torch."""
import torch, transformers, os
cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
m = transformers.LlamaForCausalLM(cfg).eval()
ids = torch.randint(0, 128, (1, 8)); pos = torch.arange(8)[None]
class W(torch.nn.Module):
    def __init__(s, m): super().__init__(); s.m = m
    def forward(s, input_ids, position_ids): return s.m(input_ids=input_ids, position_ids=position_ids, use_cache=False).logits
torch.onnx.export(W(m), (ids, pos), "in/model.onnx", dynamo=True, external_data=True,
                  input_names=["input_ids", "position_ids"], output_names=["logits"],
                  dynamic_shapes={"input_ids": {1: "seq"}, "position_ids": {1: "seq"}})
cfg.save_pretrained("in")
print(os.listdir("in"))
