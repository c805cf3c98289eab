#!/usr/bin/env python3
"""A tiny random-weight gpt-oss (transformers' GptOssForCausalLM) with
reference outputs from HF transformers, in the layout of
scripts/make-moe-fixtures.py (whose golden runner it imports, and through it
make-hf-decoder-fixtures.py's tokenizer, randomization, reference runs and
converter wrapper), so that ferrite's gpt-oss path is tested without
Python: crates/ferrite/tests/gpt_oss.rs.

Run from anywhere (under a minute on 2 cores):

    ~/.cache/ferrite-refenv/bin/python scripts/make-gpt-oss-fixtures.py

Needs what make-hf-decoder-fixtures.py needs (the reference venv and
llama.cpp's source tree for convert_hf_to_gguf.py and gguf-py). Every file
is deterministic; re-running rewrites the same bytes.

What it writes, under testdata/hf-gpt-oss/:

  tiny-gpt-oss/           GptOssForCausalLM, float32, untied: hidden 64,
                          4 layers alternating sliding (window 8) and full
                          attention (transformers' default layer_types),
                          4 query heads of 32 over 2 KV heads, Q/K/V/O
                          biases, a learned sink logit per head, YaRN as
                          gpt-oss's own config has it (factor 32, original
                          context 4096, beta 32/1, truncate false, theta
                          150000), 8 experts top-4 of width 32 with biases,
                          the clamped SwiGLU (alpha 1.702, limit 7), a
                          harmony-style chat template and its special
                          tokens. Also as the converter's
                          tiny-gpt-oss.f32.gguf and .q8_0.gguf, and as
                          tiny-gpt-oss.mxfp4.gguf: llama-quantize's
                          MXFP4_MOE of the f32 file (experts MXFP4, the
                          other matrices q8_0), gpt-oss's own format.
  goldens.json, logits-tiny-gpt-oss.f32: as testdata/hf-moe's (logits of
                          sequences of 1, 9 and 40 tokens, greedy runs,
                          smallest top-1/top-2 gap, smallest router gap
                          between the k-th and (k+1)-th logit), plus:
                          logits-tiny-gpt-oss.f64.f32: the same sequences
                          run by transformers in float64 (rounded to f32 at
                          the end), the exact arithmetic against which
                          both f32 implementations' rounding is measured;
                          "chat": the harmony prompt's ids for a short
                          conversation (transformers' apply_chat_template);
                          "yarn": transformers' ROPE_INIT_FUNCTIONS["yarn"]
                          inverse frequencies and attention factor for the
                          model's config, and for the same config with
                          truncate true (the two differ);
                          "sinks": transformers' eager_attention_forward
                          (the module's own function) on random queries,
                          keys, values, mask and sinks, with and without
                          a sliding window.

Weights: as make-hf-decoder-fixtures.py's randomize (matrices N(0, 0.2^2),
down projections N(0, 0.1^2), biases N(0, 0.2^2), norms 1 + N(0, 0.1^2)),
except: the experts' gate_up_proj N(0, 0.6^2), so that about one gate in six
is past the clamp limit of 7 (the clamp is exercised); the sinks N(0, 1) + 1,
so that the sink takes a visible share of each softmax; lm_head N(0, 0.8^2),
so that the logits spread out (std about 6) and greedy picks are not near
ties (the smallest top-1/top-2 gap is printed and stored).
"""

import importlib.util
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "hf-gpt-oss"

_spec = importlib.util.spec_from_file_location("moefix", ROOT / "scripts" / "make-moe-fixtures.py")
moefix = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(moefix)
hfdec = moefix.hfdec

NAME = "tiny-gpt-oss"
SEED = 12012
PAD = 24
HARMONY_SPECIALS = ["<|start|>", "<|message|>", "<|end|>", "<|return|>", "<|channel|>"]
# The harmony layout of a conversation, cut down to what the greedy tests
# need: each message as <|start|>{role}<|message|>{content}<|end|>, the
# generation prompt <|start|>assistant.
HARMONY_TEMPLATE = (
    "{% for message in messages %}<|start|>{{ message['role'] }}<|message|>{{ message['content'] }}<|end|>"
    "{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)
CONFIG = dict(
    vocab_size=None, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
    head_dim=32, intermediate_size=32, num_local_experts=8, num_experts_per_tok=4, sliding_window=8,
    max_position_embeddings=256, rms_norm_eps=1e-5, swiglu_alpha=1.702, swiglu_limit=7.0,
    attention_bias=True, tie_word_embeddings=False,
    rope_parameters={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                     "truncate": False, "original_max_position_embeddings": 4096, "rope_theta": 150000.0},
)


def make_model(tok):
    import shutil

    import torch
    from transformers import GptOssConfig, GptOssForCausalLM

    torch.manual_seed(SEED)
    n_vocab = len(tok) + PAD
    config = dict(CONFIG, vocab_size=n_vocab, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model = GptOssForCausalLM(GptOssConfig(**config))
    hfdec.randomize(model, SEED)
    g = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("experts.gate_up_proj"):
                p.copy_(0.6 * torch.randn(p.shape, generator=g))
            elif name.endswith("sinks"):
                p.copy_(1 + torch.randn(p.shape, generator=g))
            elif name == "lm_head.weight":
                p.copy_(0.8 * torch.randn(p.shape, generator=g))
    model.generation_config.do_sample = False
    directory = OUT / NAME
    if directory.exists():
        shutil.rmtree(directory)
    model.save_pretrained(str(directory))
    return directory, n_vocab


def router_gap(model, ids):
    """Smallest gap between the k-th and (k+1)-th router logit over every
    token and layer of `ids` (gpt-oss picks by logit)."""
    gaps = []
    k = model.config.num_experts_per_tok

    def hook(module, args, out):
        logits = out[0].float().sort(dim=-1, descending=True).values
        gaps.append(float((logits[:, k - 1] - logits[:, k]).min()))

    hooks = [m.register_forward_hook(hook) for n, m in model.named_modules() if n.endswith("mlp.router")]
    hfdec.logits_of(model, ids)
    for h in hooks:
        h.remove()
    return min(gaps)


def clamp_share(model, ids):
    """Share of expert gate values past the clamp limit over `ids`."""
    import torch

    seen = {"past": 0, "all": 0}
    limit = model.config.swiglu_limit

    def hook(module, args):
        gate_up = args[0]
        gate = gate_up[..., ::2]
        seen["past"] += int((gate > limit).sum())
        seen["all"] += gate.numel()

    hooks = []
    for n, m in model.named_modules():
        if n.endswith("mlp.experts"):
            orig = m._apply_gate

            def wrapped(gate_up, orig=orig):
                hook(None, (gate_up,))
                return orig(gate_up)

            m._apply_gate = wrapped
            hooks.append((m, orig))
    with torch.no_grad():
        hfdec.logits_of(model, ids)
    for m, orig in hooks:
        m._apply_gate = orig
    return seen["past"] / max(seen["all"], 1)


def yarn_goldens(config):
    """transformers' YaRN init for `config`, truncate false (the model's)
    and true."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    out = {}
    for truncate in (False, True):
        params = dict(config.rope_parameters, truncate=truncate)
        config.rope_parameters = params
        inv_freq, attention = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
        out["truncate" if truncate else "no_truncate"] = {
            "rope_parameters": params, "head_dim": config.head_dim,
            "inv_freq": [float(x) for x in inv_freq.float().numpy()], "attention_factor": float(attention),
        }
    config.rope_parameters = dict(config.rope_parameters, truncate=False)
    return out


def sink_goldens(model):
    """transformers' eager gpt-oss attention on random inputs: causal, and
    causal with a window of 3 (the mask as create_sliding_window_causal_mask
    makes it: query q sees keys q-2..q)."""
    import torch

    modeling = sys.modules[type(model).__module__]
    g = torch.Generator().manual_seed(SEED + 2)
    heads, kv_heads, hd, n = 4, 2, 8, 6
    q = torch.randn(1, heads, n, hd, generator=g)
    k = torch.randn(1, kv_heads, n, hd, generator=g)
    v = torch.randn(1, kv_heads, n, hd, generator=g)
    sinks = torch.randn(heads, generator=g) + 0.5

    class Module(torch.nn.Module):
        pass

    m = Module()
    m.num_key_value_groups = heads // kv_heads
    m.sinks = sinks
    m.training = False
    cases = []
    for window in (None, 3):
        mask = torch.zeros(n, n)
        for i in range(n):
            for j in range(n):
                if j > i or (window is not None and i - j >= window):
                    mask[i, j] = float("-inf")
        out, _ = modeling.eager_attention_forward(m, q, k, v, mask[None, None], scaling=hd ** -0.5)
        cases.append({"window": window, "out": [float(x) for x in out.reshape(-1)]})
    return {
        "heads": heads, "kv_heads": kv_heads, "head_dim": hd, "n": n, "scale": hd ** -0.5,
        "q": [float(x) for x in q.permute(0, 2, 1, 3).reshape(-1)],
        "k": [float(x) for x in k.permute(0, 2, 1, 3).reshape(-1)],
        "v": [float(x) for x in v.permute(0, 2, 1, 3).reshape(-1)],
        "sinks": [float(x) for x in sinks], "cases": cases,
        "layout": "q/k/v and out: [position][head][dim]",
    }


def main():
    import torch
    from tokenizers import AddedToken
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    torch.set_num_threads(2)
    OUT.mkdir(parents=True, exist_ok=True)
    moefix.OUT = OUT
    raw = hfdec.train_tokenizer("qwen2")
    raw.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in HARMONY_SPECIALS])
    import safetensors
    import tokenizers
    import transformers
    goldens = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                            "tokenizers": tokenizers.__version__, "safetensors": safetensors.__version__},
               "models": {}}
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|return|>", pad_token="<|endoftext|>")
    directory, n_vocab = make_model(tok)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=raw, eos_token="<|return|>", pad_token="<|endoftext|>",
        model_max_length=CONFIG["max_position_embeddings"], clean_up_tokenization_spaces=False)
    fast.chat_template = HARMONY_TEMPLATE
    fast.save_pretrained(str(directory))
    hf = AutoTokenizer.from_pretrained(str(directory))
    model = moefix.load_reference(directory)
    logits, cases, gap = moefix.run_goldens(model, NAME, "", n_vocab, hf, SEED)
    rgap = min(router_gap(model, s["ids"]) for s in logits["sequences"])
    clamped = clamp_share(model, logits["sequences"][-1]["ids"])
    chat_ids = hf.apply_chat_template(hfdec.CHAT, add_generation_prompt=True, tokenize=True)
    if isinstance(chat_ids, dict) or hasattr(chat_ids, "keys"):
        chat_ids = chat_ids["input_ids"]
    entry = {
        "architecture": type(model).__name__, "dtype": "float32", "tied": False, "n_vocab": n_vocab,
        "tokenizer_vocab": len(hf), "seed": SEED,
        "config": {k: v for k, v in CONFIG.items() if k != "vocab_size"},
        "logits": logits, "greedy": cases, "min_greedy_gap": gap, "min_router_gap": rgap,
        "clamped_gate_share": clamped,
        "chat": {"messages": hfdec.CHAT, "ids": list(chat_ids)},
        "converter": hfdec.converter_summary(directory, "f32", "gpt-oss"),
    }
    hfdec.log(f"  smallest greedy top-1/top-2 gap {gap:.3f}, smallest router k/k+1 logit gap {rgap:.4f}, "
              f"gates past the clamp {clamped:.3f}")
    model64 = moefix.load_reference(directory).double()
    chunks = []
    for s in logits["sequences"]:
        with torch.no_grad():
            out = model64(torch.tensor([s["ids"]]), use_cache=False).logits[0].numpy()
        chunks.append(out.astype("<f4").tobytes())
    (OUT / f"logits-{NAME}.f64.f32").write_bytes(b"".join(chunks))
    entry["logits_f64"] = dict(logits, file=f"logits-{NAME}.f64.f32")
    files = {}
    for outtype in ("f32", "q8_0"):
        path = OUT / f"{NAME}.{outtype}.gguf"
        hfdec.convert(directory, outtype, path)
        files[outtype] = path.name
    import subprocess
    path = OUT / f"{NAME}.mxfp4.gguf"
    subprocess.run([str(hfdec.LLAMA / "build" / "bin" / "llama-quantize"), str(OUT / files["f32"]), str(path),
                    "MXFP4_MOE"], check=True, capture_output=True)
    files["mxfp4"] = path.name
    entry["gguf"] = files
    goldens["models"][NAME] = entry
    goldens["yarn"] = yarn_goldens(model.config)
    goldens["sinks"] = sink_goldens(model)
    hfdec.write_json(OUT / "goldens.json", goldens)
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    hfdec.log(f"wrote {OUT} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
