#!/usr/bin/env python3
"""Tiny random-weight mixture-of-experts decoders (Qwen3-MoE, Qwen2-MoE)
with reference outputs from HF transformers, in the layout of
scripts/make-hf-decoder-fixtures.py (whose tokenizers, randomization,
reference runs and converter wrapper this script imports), so that
ferrite's MoE path is tested without Python: crates/ferrite/tests/moe.rs.

Run from anywhere (under a minute on 2 cores):

    scripts/refenv python scripts/make-moe-fixtures.py

Needs what make-hf-decoder-fixtures.py needs (the reference venv and
llama.cpp's source tree for convert_hf_to_gguf.py and gguf-py). Every file
is deterministic; re-running rewrites the same bytes.

What it writes, under testdata/hf-moe/:

  tiny-qwen3-moe/         Qwen3MoeForCausalLM, float32, untied: 8 experts,
                          top-2, norm_topk_prob true, moe_intermediate_size
                          32, every layer sparse. Also as the converter's
                          tiny-qwen3-moe.f32.gguf and .q8_0.gguf.
  tiny-qwen3-moe-nonorm/  Qwen3MoeForCausalLM with 5 experts, top-3 and
                          norm_topk_prob false (HF directory only: llama.cpp
                          always renormalizes qwen3moe's picked weights, so
                          the converter's file would not be this model).
  tiny-qwen2-moe/         Qwen2MoeForCausalLM, float32, tied: 6 experts,
                          top-2, norm_topk_prob false, a shared expert
                          (intermediate 48) behind its sigmoid gate, Q/K/V
                          biases. Also as tiny-qwen2-moe.f32.gguf.
  goldens.json, logits-<name>.f32, logits-<name>.q8_0.f32: as in
                          testdata/hf-decoders (see that script's notes),
                          plus per model "min_greedy_gap" and, for the q8_0
                          file, the reference of the same layout made by HF
                          on the file's dequantized weights with every
                          quantized matrix's input rounded to q8_0 blocks
                          (the expert matrices included, the router's not:
                          the converter keeps ffn_gate_inp in f32) and keys
                          and values rounded to f16.

Weights: every parameter drawn as in make-hf-decoder-fixtures.py's
randomize (matrices N(0, 0.2^2), down projections N(0, 0.1^2), norms
1 + N(0, 0.1^2)); the router's logits then have a std of about 1.5, so the
picked experts are far from ties for most tokens (the script reports the
smallest gap between the k-th and (k+1)-th router probability over the
golden sequences).
"""

import importlib.util
import json
import pathlib
import sys

import numpy as np

import common

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "hf-moe"

_spec = importlib.util.spec_from_file_location("hfdec", ROOT / "scripts" / "make-hf-decoder-fixtures.py")
hfdec = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hfdec)

HIDDEN, LAYERS, HEADS, KV_HEADS, POSITIONS = 64, 2, 4, 2, 128

MODELS = [
    # name, class, tokenizer kind, tied, seed, vocab padding, config, keep gguf outtypes
    ("tiny-qwen3-moe", "qwen3_moe", "qwen2", False, 9909, 24,
     dict(num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, moe_intermediate_size=32,
          intermediate_size=128), ("f32", "q8_0")),
    ("tiny-qwen3-moe-nonorm", "qwen3_moe", "qwen2", False, 10010, 24,
     dict(num_experts=5, num_experts_per_tok=3, norm_topk_prob=False, moe_intermediate_size=32,
          intermediate_size=128), ()),
    ("tiny-qwen2-moe", "qwen2_moe", "qwen2", True, 11011, 24,
     dict(num_experts=6, num_experts_per_tok=2, norm_topk_prob=False, moe_intermediate_size=32,
          shared_expert_intermediate_size=48, intermediate_size=128, qkv_bias=True), ("f32",)),
]


def make_model(name, cls, tok, tied, seed, pad, extra):
    import shutil

    import torch
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(seed)
    n_vocab = len(tok) + pad
    common = dict(
        vocab_size=n_vocab, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS, max_position_embeddings=POSITIONS, tie_word_embeddings=tied,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, rms_norm_eps=1e-6,
        rope_theta=1000000.0, use_sliding_window=False, decoder_sparse_step=1, mlp_only_layers=[],
    )
    if cls == "qwen3_moe":
        model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**common, **extra))
    else:
        model = Qwen2MoeForCausalLM(Qwen2MoeConfig(**common, **extra))
    hfdec.randomize(model, seed)
    model.generation_config.do_sample = False
    directory = OUT / name
    if directory.exists():
        shutil.rmtree(directory)
    model.save_pretrained(str(directory))
    return directory, n_vocab


def load_reference(directory):
    """HF's model as make-hf-decoder-fixtures.py loads it (float32, eager
    attention), its experts run by the eager per-expert loop (the modeling
    file's own forward, which calls F.linear per expert) rather than
    transformers' default grouped matmul kernels."""
    model = hfdec.load_reference(directory)
    model.config._experts_implementation = "eager"
    for m in model.modules():
        if hasattr(m, "config") and hasattr(m.config, "_experts_implementation"):
            m.config._experts_implementation = "eager"
    return model


def router_gap(model, ids):
    """Smallest gap between the k-th and (k+1)-th router probability over
    every token and layer of `ids`."""
    import torch

    gaps = []
    hooks = []
    k = model.config.num_experts_per_tok

    def hook(module, args, out):
        logits = out[0] if isinstance(out, tuple) else out
        p = torch.softmax(logits.float(), dim=-1).sort(dim=-1, descending=True).values
        if p.shape[-1] > k:
            gaps.append(float((p[:, k - 1] - p[:, k]).min()))

    for name, module in model.named_modules():
        if name.endswith("mlp.gate"):
            hooks.append(module.register_forward_hook(hook))
    hfdec.logits_of(model, ids)
    for h in hooks:
        h.remove()
    return min(gaps)


def q8_0(x):
    """`x` rounded to q8_0 blocks of 32 as ggml rounds activations: d =
    max|x| / 127 stored as f16, q = round(x / d) half away from zero."""
    import torch

    blocks = x.reshape(-1, 32)
    d = blocks.abs().amax(dim=1, keepdim=True) / 127
    inv = torch.where(d > 0, 1 / d, torch.zeros_like(d))
    q = torch.sign(blocks) * torch.floor(blocks.abs() * inv + 0.5)
    return (q * d.half().float()).reshape(x.shape)


def dequantized_moe_reference(directory, gguf_path):
    """HF on the q8_0 file's dequantized weights, each quantized matrix's
    input rounded to q8_0 blocks and keys/values to f16 (see the notes)."""
    import torch

    common.use_llama_gguf_py()
    import gguf
    from gguf.quants import dequantize

    model = load_reference(directory)
    reader = gguf.GGUFReader(str(gguf_path))
    weights = {t.name: dequantize(t.data, t.tensor_type).reshape([int(x) for x in reversed(t.shape)])
               for t in reader.tensors}
    types = {t.name: gguf.GGMLQuantizationType(t.tensor_type).name for t in reader.tensors}
    assert all(types[n] == "F32" for n in types if "ffn_gate_inp" in n or n.endswith("norm.weight")), types
    layer = {
        "input_layernorm.weight": "attn_norm", "self_attn.q_proj.weight": "attn_q",
        "self_attn.k_proj.weight": "attn_k", "self_attn.v_proj.weight": "attn_v",
        "self_attn.o_proj.weight": "attn_output", "post_attention_layernorm.weight": "ffn_norm",
        "self_attn.q_norm.weight": "attn_q_norm", "self_attn.k_norm.weight": "attn_k_norm",
        "mlp.gate.weight": "ffn_gate_inp", "mlp.experts.down_proj": "ffn_down_exps",
    }
    state = {}
    for key in model.state_dict():
        parts = key.split(".")
        if key == "model.embed_tokens.weight":
            w = weights["token_embd.weight"]
        elif key == "lm_head.weight":
            w = weights.get("output.weight", weights["token_embd.weight"])
        elif key == "model.norm.weight":
            w = weights["output_norm.weight"]
        elif key.endswith("mlp.experts.gate_up_proj"):
            b = parts[2]
            w = np.concatenate([weights[f"blk.{b}.ffn_gate_exps.weight"], weights[f"blk.{b}.ffn_up_exps.weight"]],
                               axis=1)
        else:
            w = weights[f"blk.{parts[2]}.{layer['.'.join(parts[3:])]}.weight"]
        state[key] = torch.tensor(np.ascontiguousarray(w), dtype=torch.float32).reshape(model.state_dict()[key].shape)
    model.load_state_dict(state)

    # Every F.linear call rounds its input, but the router's (f32 weights).
    import torch.nn.functional as F
    orig_linear = F.linear
    state_flag = {"router": False}

    def linear(x, w, b=None):
        return orig_linear(x if state_flag["router"] else q8_0(x), w, b)

    F.linear = linear

    def enter(m, a):
        state_flag["router"] = True

    def leave(m, a, out):
        state_flag["router"] = False

    for name, module in model.named_modules():
        if name.endswith("mlp.gate"):
            module.register_forward_pre_hook(enter)
            module.register_forward_hook(leave)
        if name.endswith("v_proj"):
            module.register_forward_hook(lambda m, a, out: out.half().float())
    modeling = sys.modules[type(model).__module__]
    if not hasattr(modeling, "_ferrite_rope"):
        modeling._ferrite_rope = modeling.apply_rotary_pos_emb

        def rope_then_f16(q, k, *args, **kwargs):
            q, k = modeling._ferrite_rope(q, k, *args, **kwargs)
            return q, (k.half().float() if getattr(modeling, "_ferrite_f16_keys", False) else k)

        modeling.apply_rotary_pos_emb = rope_then_f16
    modeling._ferrite_f16_keys = True

    def restore():
        F.linear = orig_linear
        modeling._ferrite_f16_keys = False

    return model, restore


def run_goldens(model, name, suffix, n_vocab, hf, rng_seed, sequences=None):
    """Logits of the golden sequences (drawn when `sequences` is None) into
    logits-<name><suffix>.f32, and the greedy runs."""
    rng = np.random.default_rng(rng_seed)
    chunks, seqs, offset = [], [], 0
    for i, (seq_name, length) in enumerate(hfdec.SEQ_LENGTHS):
        ids = sequences[i]["ids"] if sequences else [int(x) for x in rng.integers(0, len(hf), size=length)]
        logits = hfdec.logits_of(model, ids)
        assert logits.shape == (length, n_vocab)
        assert float(logits.std()) > 0.5, "logits too flat"
        chunks.append(logits.astype("<f4").tobytes())
        seqs.append({"name": seq_name, "ids": ids, "offset": offset, "shape": [length, n_vocab]})
        offset += length * n_vocab
    file = f"logits-{name}{suffix}.f32"
    (OUT / file).write_bytes(b"".join(chunks))
    cases = []
    for prompt in hfdec.GREEDY_PROMPTS:
        ids = hf(prompt, add_special_tokens=True)["input_ids"]
        cases.append({"prompt": prompt, "prompt_ids": ids, "new_ids": hfdec.greedy(model, ids)})
    gaps = [hfdec.top_gap(hfdec.logits_of(model, c["prompt_ids"] + c["new_ids"][:-1])[len(c["prompt_ids"]) - 1:])
            for c in cases]
    logits = {"file": file, "dtype": "f32", "byte_order": "little", "n_vocab": n_vocab, "sequences": seqs}
    return logits, cases, min(gaps)


def main():
    import torch
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    torch.set_num_threads(2)
    OUT.mkdir(parents=True, exist_ok=True)
    raw = hfdec.train_tokenizer("qwen2")
    goldens = {"versions": None, "models": {}}
    import safetensors
    import tokenizers
    import transformers
    goldens["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__,
                           "tokenizers": tokenizers.__version__, "safetensors": safetensors.__version__}
    for name, cls, kind, tied, seed, pad, extra, keep in MODELS:
        hfdec.log(f"{name}: {cls}")
        tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>")
        directory, n_vocab = make_model(name, cls, tok, tied, seed, pad, extra)
        hfdec.save_tokenizer(kind, raw, directory)
        hf = AutoTokenizer.from_pretrained(str(directory))
        model = load_reference(directory)
        logits, cases, gap = run_goldens(model, name, "", n_vocab, hf, seed)
        rgap = min(router_gap(model, s["ids"]) for s in logits["sequences"])
        entry = {
            "architecture": type(model).__name__, "dtype": "float32", "tied": tied, "n_vocab": n_vocab,
            "tokenizer_vocab": len(hf), "seed": seed, "config": extra,
            "logits": logits, "greedy": cases, "min_greedy_gap": gap, "min_router_gap": rgap,
            "converter": hfdec.converter_summary(directory, "f32", cls.replace("_", "")),
        }
        hfdec.log(f"  smallest greedy top-1/top-2 gap {gap:.3f}, smallest router k/k+1 gap {rgap:.4f}")
        files = {}
        for outtype in keep:
            path = OUT / f"{name}.{outtype}.gguf"
            hfdec.convert(directory, outtype, path)
            files[outtype] = path.name
        if files:
            entry["gguf"] = files
        if "q8_0" in files:
            qmodel, restore = dequantized_moe_reference(directory, OUT / files["q8_0"])
            qlogits, qcases, qgap = run_goldens(qmodel, name, ".q8_0", n_vocab, hf, seed, logits["sequences"])
            restore()
            entry["q8_0_reference"] = {"logits": qlogits, "greedy": qcases, "min_greedy_gap": qgap}
            hfdec.log(f"  q8_0 reference: smallest greedy gap {qgap:.3f}")
        goldens["models"][name] = entry
    hfdec.write_json(OUT / "goldens.json", goldens)
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    hfdec.log(f"wrote {OUT} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
