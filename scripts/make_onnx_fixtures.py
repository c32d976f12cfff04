#!/usr/bin/env python3
"""Build tiny random-weight decoder models with transformers and export them to ONNX.

These are fixtures for ropekit's RoPE fusion tool: each model has 2 decoder layers, so a
correct fusion finds 2*num_layers = 4 q/k rotation sites.

Default mode (transformers 5.x, torch >= 2.9, onnxscript): torch.onnx.export(dynamo=True),
files tests/fixtures/models/<name>.onnx.
--torchscript mode (meant for a transformers 4.x venv): torch.onnx.export(dynamo=False),
files tests/fixtures/models/ts_<name>.onnx.

Every model is verified with onnxruntime (two input shapes, to exercise the dynamic dims)
against PyTorch; results go to stdout and to --results (JSON), which the README summarises.

Usage (repository root):
    /work/venvs/torch/bin/python scripts/make_onnx_fixtures.py [--only NAME ...]
    /work/venvs/tf4/bin/python scripts/make_onnx_fixtures.py --torchscript
"""

import argparse
import copy
import json
import os
import sys
import tempfile
import traceback

import numpy as np
import torch
import transformers
from torch import nn

from tiny_hf_models import (HEAD_DIM, HEADS, HIDDEN, LAYERS, SEED, TF_MAJOR, longrope_factors,
                            register_ts_attention, rope_kw)
from tiny_hf_models import common as _common

VOCAB, INTER = 128, 128


def common(**over):
    return _common(VOCAB, INTER, **over)


class TextLM(nn.Module):
    """Text decoder of a VL model + a random lm_head, returning logits."""

    def __init__(self, text_model_cls, config):
        super().__init__()
        self.model = text_model_cls(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.config = config

    def forward(self, input_ids, position_ids, attention_mask=None):
        out = self.model(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                         use_cache=False)
        return self.lm_head(out.last_hidden_state)


def spec(name):
    """Return (arch, config, model_factory, mrope) for one fixture name."""
    T = transformers
    if name in ("llama", "llama_fp16"):
        cfg = T.LlamaConfig(head_dim=HEAD_DIM, **common(), **rope_kw())
        return "LlamaForCausalLM", cfg, T.LlamaForCausalLM, False
    if name == "llama3_scaling":
        cfg = T.LlamaConfig(head_dim=HEAD_DIM, **common(max_position_embeddings=131072),
                            **rope_kw("llama3", 500000.0, factor=8.0, low_freq_factor=1.0,
                                      high_freq_factor=4.0, original_max_position_embeddings=8192))
        return "LlamaForCausalLM", cfg, T.LlamaForCausalLM, False
    if name == "mistral":
        cfg = T.MistralConfig(head_dim=HEAD_DIM, sliding_window=None, **common(), **rope_kw())
        return "MistralForCausalLM", cfg, T.MistralForCausalLM, False
    if name == "qwen2":
        cfg = T.Qwen2Config(**common(), **rope_kw(theta=1000000.0))
        return "Qwen2ForCausalLM", cfg, T.Qwen2ForCausalLM, False
    if name in ("qwen3", "qwen3_fp16"):
        cfg = T.Qwen3Config(head_dim=HEAD_DIM, **common(), **rope_kw(theta=1000000.0))
        return "Qwen3ForCausalLM", cfg, T.Qwen3ForCausalLM, False
    if name == "qwen3_yarn":
        # attention_factor != 1: the graph has a scaling Mul after Cos/Sin
        cfg = T.Qwen3Config(head_dim=HEAD_DIM, **common(max_position_embeddings=131072),
                            **rope_kw("yarn", 1000000.0, factor=4.0, original_max_position_embeddings=32768))
        return "Qwen3ForCausalLM", cfg, T.Qwen3ForCausalLM, False
    if name == "phi3_longrope":
        # negative fixture: inv_freq switches at run time (max(position_ids)+1 > 4096 -> long factors)
        short, long_ = longrope_factors(HEAD_DIM // 2)
        kw = common(max_position_embeddings=131072)
        kw["original_max_position_embeddings"] = 4096
        cfg = T.Phi3Config(**kw, **rope_kw("longrope", short_factor=short, long_factor=long_))
        return "Phi3ForCausalLM", cfg, T.Phi3ForCausalLM, False
    if name == "gemma":
        cfg = T.GemmaConfig(head_dim=HEAD_DIM, **common(), **rope_kw())
        return "GemmaForCausalLM", cfg, T.GemmaForCausalLM, False
    if name == "phi3":
        cfg = T.Phi3Config(**common(), **rope_kw())
        return "Phi3ForCausalLM", cfg, T.Phi3ForCausalLM, False
    if name == "phi_partial":
        kw = common()
        kw["partial_rotary_factor"] = 0.5
        cfg = T.PhiConfig(**kw, **rope_kw())
        return "PhiForCausalLM", cfg, T.PhiForCausalLM, False
    if name == "gptj":
        cfg = T.GPTJConfig(vocab_size=VOCAB, n_positions=2048, n_embd=HIDDEN, n_layer=LAYERS,
                           n_head=HEADS, rotary_dim=8, n_inner=INTER, use_cache=False,
                           tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
        return "GPTJForCausalLM", cfg, T.GPTJForCausalLM, False
    if name == "gpt_neox":
        kw = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                  num_attention_heads=HEADS, intermediate_size=INTER, max_position_embeddings=2048,
                  use_cache=False, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
        if TF_MAJOR >= 5:
            kw.update(rope_kw(partial_rotary_factor=0.25))
        else:
            kw.update(rotary_pct=0.25, rotary_emb_base=10000)
        cfg = T.GPTNeoXConfig(**kw)
        return "GPTNeoXForCausalLM", cfg, T.GPTNeoXForCausalLM, False
    if name == "qwen2_vl_text":
        cfg = T.Qwen2VLTextConfig(**common(), **rope_kw(theta=1000000.0, mrope_section=[2, 3, 3]))
        return "Qwen2VLTextModel+lm_head", cfg, lambda c: TextLM(T.Qwen2VLTextModel, c), True
    if name == "qwen2_5_vl_text":
        cfg = T.Qwen2_5_VLTextConfig(**common(), **rope_kw(theta=1000000.0, mrope_section=[2, 3, 3]))
        return "Qwen2_5_VLTextModel+lm_head", cfg, lambda c: TextLM(T.Qwen2_5_VLTextModel, c), True
    if name == "qwen3_vl_text":
        cfg = T.Qwen3VLTextConfig(head_dim=HEAD_DIM, **common(),
                                  **rope_kw(theta=5000000.0, mrope_section=[4, 2, 2],
                                            mrope_interleaved=True))
        return "Qwen3VLTextModel+lm_head", cfg, lambda c: TextLM(T.Qwen3VLTextModel, c), True
    raise KeyError(name)


ALL = ["llama", "llama3_scaling", "mistral", "qwen2", "qwen3", "gemma", "phi3", "phi_partial",
       "gptj", "gpt_neox", "qwen2_vl_text", "qwen2_5_vl_text", "qwen3_vl_text",
       "llama_fp16", "qwen3_fp16", "qwen3_yarn", "phi3_longrope"]


class CausalLMLogits(nn.Module):
    """Makes a *ForCausalLM return only logits for export."""

    def __init__(self, model):
        super().__init__()
        self.inner = model

    def forward(self, input_ids, position_ids, attention_mask=None):
        return self.inner(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                          use_cache=False).logits


def make_inputs(b, s, mrope, gen, offset=0, distinct_streams=False):
    ids = torch.randint(3, VOCAB, (b, s), generator=gen, dtype=torch.int64)
    pos = torch.arange(offset, offset + s, dtype=torch.int64).unsqueeze(0).expand(b, s).contiguous()
    if mrope:
        # text tokens: equal streams; add a small offset per batch row to make it non-trivial
        pos = (pos + torch.arange(b).unsqueeze(1) * 3).unsqueeze(0).expand(3, b, s).contiguous()
        if distinct_streams:  # image-like grid positions: T, H, W streams differ
            pos = pos.clone()
            pos[1] += torch.arange(s) % 3
            pos[2] += 2 * (torch.arange(s) // 3)
    return ids, pos


ATTN_IMPL = "sdpa"


def build_model(name):
    arch, cfg, factory, mrope = spec(name)
    attn = ATTN_IMPL
    if name == "gptj" and TF_MAJOR < 5:
        attn = "eager"  # transformers 4.x GPT-J has no SDPA path
    elif attn == "sdpa" and TF_MAJOR < 5:
        # transformers 4.5x builds the SDPA mask with torch.vmap, which the TorchScript tracer
        # cannot handle ("RuntimeError: unordered_map::at")
        attn = register_ts_attention()
    try:
        cfg._attn_implementation = attn
    except Exception:
        pass
    torch.manual_seed(SEED)
    model = factory(cfg)
    model.eval()
    fp16 = name.endswith("_fp16")
    if fp16:
        model = model.half()  # note: also casts the inv_freq buffer to float16
        cfg.dtype = "float16"
    wrapper = model if isinstance(model, TextLM) else CausalLMLogits(model)
    wrapper.eval()
    return arch, cfg, model, wrapper, mrope, fp16


def export(name, outdir, torchscript, with_mask):
    arch, cfg, model, wrapper, mrope, fp16 = build_model(name)
    gen = torch.Generator().manual_seed(SEED)
    ids, pos = make_inputs(2, 7, mrope, gen)
    args_ = (ids, pos)
    in_names = ["input_ids", "position_ids"]
    if with_mask:
        args_ = (ids, pos, torch.ones_like(ids))
        in_names.append("attention_mask")
    fname = ("ts_" if torchscript else "") + name
    path = os.path.join(outdir, fname + ".onnx")
    pos_axes = {1: "batch", 2: "sequence"} if mrope else {0: "batch", 1: "sequence"}
    with torch.no_grad():
        if torchscript:
            axes = {"input_ids": {0: "batch", 1: "sequence"}, "position_ids": pos_axes,
                    "logits": {0: "batch", 1: "sequence"}}
            if with_mask:
                axes["attention_mask"] = {0: "batch", 1: "sequence"}
            torch.onnx.export(wrapper, args_, path, input_names=in_names,
                              output_names=["logits"], opset_version=17, dynamo=False,
                              dynamic_axes=axes)
        else:
            B = torch.export.Dim("batch", min=1, max=64)
            S = torch.export.Dim("sequence", min=2, max=4096)
            dyn = {"input_ids": {0: B, 1: S},
                   "position_ids": ({1: B, 2: S} if mrope else {0: B, 1: S})}
            if with_mask:
                dyn["attention_mask"] = {0: B, 1: S}
            prog = torch.onnx.export(wrapper, args_, None, input_names=in_names,
                                     output_names=["logits"], dynamo=True, dynamic_shapes=dyn,
                                     external_data=False, optimize=True)
            prog.save(path, external_data=False)
    import onnx
    m = onnx.load(path)
    if not torchscript:
        # Drop the per-node Python stack traces (about half the file, full of local paths);
        # the other pkg.torch.onnx.* node metadata (namespace, fx_node, ...) is kept as exported.
        for node in m.graph.node:
            keep = [(p.key, p.value) for p in node.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
            del node.metadata_props[:]
            for k, v in keep:
                node.metadata_props.add(key=k, value=v)
        onnx.save(m, path)
    def shp(vi):
        return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
    inputs = [{"name": i.name, "shape": shp(i),
               "dtype": onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type).name}
              for i in m.graph.input]
    outputs = [{"name": o.name, "shape": shp(o),
                "dtype": onnx.helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type).name}
               for o in m.graph.output]
    meta = {
        "arch": arch,
        "config": json.loads(cfg.to_json_string(use_diff=False)),
        "inputs": inputs,
        "outputs": outputs,
        "rope_sites_expected": 2 * LAYERS,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "exporter": "torchscript" if torchscript else "dynamo",
        "dtype": "float16" if fp16 else "float32",
    }
    with open(os.path.join(outdir, fname + ".json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    with tempfile.TemporaryDirectory() as td:
        cfg.save_pretrained(td)
        with open(os.path.join(td, "config.json")) as src, \
                open(os.path.join(outdir, fname + ".config.json"), "w") as dst:
            dst.write(src.read())
    return path, wrapper, mrope, fp16, m


def verify(path, wrapper, mrope, fp16, name=""):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    res = []
    gen = torch.Generator().manual_seed(SEED + 1)
    shapes = [(2, 7, 0, False), (1, 13, 0, False)]
    if name == "phi3_longrope":
        shapes.append((1, 5, 5000, False))  # max position > 4096: the long factors must be used
    if mrope:
        shapes.append((2, 9, 0, True))  # T/H/W position streams differ
    for b, s, off, distinct in shapes:
        ids, pos = make_inputs(b, s, mrope, gen, off, distinct)
        with torch.no_grad():
            ref = wrapper(ids, pos).float().numpy()
        feed = {"input_ids": ids.numpy(), "position_ids": pos.numpy(),
                "attention_mask": np.ones(ids.shape, dtype=np.int64)}
        feed = {k: v for k, v in feed.items() if k in names}
        got = sess.run(None, feed)[0].astype(np.float32)
        assert got.shape == ref.shape, (got.shape, ref.shape)
        res.append({"batch": b, "seq": s, "pos_offset": off, "distinct_mrope_streams": distinct, "max_abs_diff": float(np.abs(got - ref).max()),
                    "max_abs_ref": float(np.abs(ref).max())})
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join("tests", "fixtures", "models"))
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--torchscript", action="store_true", help="dynamo=False export, ts_ prefix")
    ap.add_argument("--results", default=None, help="write a JSON summary here")
    ap.add_argument("--attention-mask", choices=["auto", "yes", "no"], default="auto",
                    help="add an attention_mask input (auto: only for --torchscript)")
    ap.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa")
    args = ap.parse_args()
    global ATTN_IMPL
    ATTN_IMPL = args.attn
    with_mask = args.attention_mask == "yes" or (args.attention_mask == "auto" and args.torchscript)
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(2)
    results = {"transformers": transformers.__version__, "torch": torch.__version__, "models": {}}
    try:
        import onnxruntime, onnx
        results["onnxruntime"] = onnxruntime.__version__
        results["onnx"] = onnx.__version__
    except Exception:
        pass
    try:
        import onnxscript
        results["onnxscript"] = onnxscript.__version__
    except Exception:
        pass
    for name in args.only or ALL:
        r = {}
        try:
            path, wrapper, mrope, fp16, m = export(name, args.out, args.torchscript, with_mask)
            r["export"] = "ok"
            r["bytes"] = os.path.getsize(path)
            r["nodes"] = len(m.graph.node)
            r["opset"] = {o.domain or "ai.onnx": o.version for o in m.opset_import}
            try:
                # reference from a freshly built model (same seed): export can leave state behind
                # in the traced module (seen with longrope's in-place inv_freq update)
                fresh = build_model(name)[3]
                r["verify"] = verify(path, fresh, mrope, fp16, name)
            except Exception as e:
                r["verify_error"] = f"{type(e).__name__}: {str(e)[:800]}"
        except Exception as e:
            r["export"] = "failed"
            r["error"] = f"{type(e).__name__}: {str(e)[:1500]}"
            traceback.print_exc(limit=3)
        results["models"][name] = r
        print(name, json.dumps(r), flush=True)
    if args.results:
        with open(args.results, "w") as f:
            json.dump(results, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
