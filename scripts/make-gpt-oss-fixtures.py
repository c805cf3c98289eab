#!/usr/bin/env python3
"""A tiny random-weight gpt-oss (transformers' GptOssForCausalLM) with
reference outputs from HF transformers, in the layout of
scripts/make-moe-fixtures.py (whose golden runner it imports, and through it
make-hf-decoder-fixtures.py's tokenizer, randomization, reference runs and
converter wrapper), so that ferrite's gpt-oss path is tested without
Python: crates/ferrite/tests/gpt_oss.rs.

Run from anywhere (under a minute on 2 cores):

    scripts/refenv python scripts/make-gpt-oss-fixtures.py

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

  tiny-gpt-oss-mxfp4/      the same model as OpenAI publishes gpt-oss: each
                          layer's experts as MXFP4 (`gate_up_proj_blocks`
                          / `_scales`, `down_proj_blocks` / `_scales`: uint8
                          blocks of 32 E2M1 codes, two per byte, value 2k
                          in byte k's low nibble, and one E8M0 scale per
                          block), `quantization_config` {"quant_method":
                          "mxfp4"}; the other tensors float32 as above.
                          The experts are quantized here by numpy (see
                          `mxfp4_quantize`), not by transformers.
  goldens.json "models"."tiny-gpt-oss-mxfp4": transformers loading that
                          directory with Mxfp4Config(dequantize=True) in
                          float32 (dequantization to f32 is exact):
                          logits (logits-tiny-gpt-oss-mxfp4.f32), greedy
                          runs and gaps; "f32_noise": the largest
                          |float32 - float64| logit of the same run;
                          "q8_reference": the same run with both expert
                          matmuls' inputs rounded to q8_0 blocks as ggml
                          rounds activations for its MXFP4 x Q8_0 dot
                          (logits-tiny-gpt-oss-mxfp4.q8.f32), and its
                          largest distance from the float32 run;
                          "converter": sha256 and tensors of
                          convert_hf_to_gguf.py's f32 and q8_0 files of
                          the directory (experts kept MXFP4), not
                          committed themselves.

The MXFP4 part alone (reading the committed float32 directory):

    scripts/refenv python scripts/make-gpt-oss-fixtures.py --mxfp4

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

import common

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


FP4 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float64)
MXFP4_NAME = NAME + "-mxfp4"


def mxfp4_quantize(w):
    """Rows of `w` (last axis a multiple of 32) as HF MXFP4: blocks
    [..., n/32, 16] uint8 and scales [..., n/32] uint8. Per block of 32:
    the OCP MX rule, shared exponent floor(log2(max |x|)) - 2 (E2M1's
    largest exponent), E8M0 byte = exponent + 127; each x / 2^exp rounded
    to the nearest E2M1 magnitude (ties to the smaller), saturating at 6,
    sign in bit 3; code 2k in byte k's low nibble, 2k+1 in its high one."""
    *lead, n = w.shape
    x = w.astype(np.float64).reshape(-1, n // 32, 32)
    amax = np.abs(x).max(axis=-1)
    exp = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - 2, -127)
    exp = np.clip(exp, -127, 127)
    scaled = np.abs(x) / np.exp2(exp)[..., None]
    mag = np.argmin(np.abs(scaled[..., None] - FP4), axis=-1)
    codes = (mag | np.where(x < 0, 8, 0)).astype(np.uint8)
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)
    scales = (exp + 127).astype(np.uint8)
    return blocks.reshape(*lead, n // 32, 16), scales.reshape(*lead, n // 32)


def mxfp4_dequantize(blocks, scales):
    """The exact values of HF MXFP4 blocks (rows as quantized)."""
    lut = np.concatenate([FP4, -FP4])
    codes = np.stack([blocks & 15, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], 32)
    v = lut[codes] * np.exp2(scales.astype(np.float64) - 127)[..., None]
    return v.reshape(*blocks.shape[:-2], -1)


def write_mxfp4_dir(src, dst):
    """`src` (the float32 directory) with its experts as MXFP4 (the rows:
    gate_up_proj's 2 ffn outputs, interleaved gate/up, of `dim` inputs;
    down_proj's `dim` outputs of ffn inputs)."""
    import json
    import shutil

    from safetensors.numpy import load_file, save_file

    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir()
    for f in src.iterdir():
        if f.name not in ("model.safetensors", "config.json"):
            shutil.copy(f, dst / f.name)
    tensors = load_file(str(src / "model.safetensors"))
    out = {}
    for name, t in sorted(tensors.items()):
        if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
            rows = np.ascontiguousarray(np.swapaxes(t, 1, 2))  # [e][out][in]
            blocks, scales = mxfp4_quantize(rows)
            assert np.array_equal(mxfp4_dequantize(blocks, scales).shape, rows.shape)
            out[name + "_blocks"] = blocks
            out[name + "_scales"] = scales
        else:
            out[name] = t
    save_file(out, str(dst / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"],
    }
    (dst / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def load_mxfp4_reference(directory):
    """transformers' own MXFP4 loading, dequantized (exactly) to float32,
    experts run by the eager per-expert loop."""
    import torch
    from transformers import AutoModelForCausalLM, Mxfp4Config

    model = AutoModelForCausalLM.from_pretrained(
        str(directory), dtype=torch.float32, attn_implementation="eager",
        quantization_config=Mxfp4Config(dequantize=True))
    model.eval()
    model.config._experts_implementation = "eager"
    for m in model.modules():
        if hasattr(m, "config") and hasattr(m.config, "_experts_implementation"):
            m.config._experts_implementation = "eager"
    return model


def q8_experts(model):
    """Both expert matmuls' inputs rounded to q8_0 blocks of 32 as ggml
    rounds activations (make-moe-fixtures.py's `q8_0`), in the modeling
    file's own eager loop."""
    import torch

    q8_0 = moefix.q8_0

    for name, m in model.named_modules():
        if not name.endswith("mlp.experts"):
            continue
        def forward(hidden_states, router_indices=None, routing_weights=None, self=m):
            next_states = torch.zeros_like(hidden_states)
            for e in range(self.num_experts):
                token_idx, top_k_pos = torch.where(router_indices == e)
                if token_idx.numel() == 0:
                    continue
                x = q8_0(hidden_states[token_idx])
                gate_up = x @ self.gate_up_proj[e] + self.gate_up_proj_bias[e]
                h = q8_0(self._apply_gate(gate_up))
                out = h @ self.down_proj[e] + self.down_proj_bias[e]
                next_states.index_add_(0, token_idx, out * routing_weights[token_idx, top_k_pos, None])
            return next_states

        m.forward = forward
    return model


def make_mxfp4(hf, sequences):
    """tiny-gpt-oss-mxfp4 and its goldens (see the notes)."""
    import hashlib
    import tempfile

    import torch

    common.use_llama_gguf_py()
    import gguf

    directory = OUT / MXFP4_NAME
    write_mxfp4_dir(OUT / NAME, directory)
    model = load_mxfp4_reference(directory)
    # transformers' dequantized experts are the numpy dequantization.
    from safetensors.numpy import load_file
    raw = load_file(str(directory / "model.safetensors"))
    for l, layer in enumerate(model.model.layers):
        for proj in ("gate_up_proj", "down_proj"):
            key = f"model.layers.{l}.mlp.experts.{proj}"
            want = np.swapaxes(mxfp4_dequantize(raw[key + "_blocks"], raw[key + "_scales"]), 1, 2)
            got = getattr(layer.mlp.experts, proj).detach().numpy()
            assert got.dtype == np.float32 and np.array_equal(got, want.astype(np.float32)), key
    n_vocab = model.config.vocab_size
    logits, cases, gap = moefix.run_goldens(model, MXFP4_NAME, "", n_vocab, hf, SEED, sequences)
    rgap = min(router_gap(model, s["ids"]) for s in logits["sequences"])
    model64 = load_mxfp4_reference(directory).double()
    noise = 0.0
    for s in logits["sequences"]:
        with torch.no_grad():
            out64 = model64(torch.tensor([s["ids"]]), use_cache=False).logits[0].numpy()
        noise = max(noise, float(np.abs(hfdec.logits_of(model, s["ids"]) - out64.astype(np.float32)).max()))
    qmodel = q8_experts(load_mxfp4_reference(directory))
    qlogits, qcases, qgap = moefix.run_goldens(qmodel, MXFP4_NAME, ".q8", n_vocab, hf, SEED, logits["sequences"])
    q8_distance = 0.0
    for s in logits["sequences"]:
        q8_distance = max(q8_distance, float(np.abs(hfdec.logits_of(model, s["ids"])
                                                    - hfdec.logits_of(qmodel, s["ids"])).max()))
    converter = {}
    with tempfile.TemporaryDirectory() as tmp:
        for outtype in ("f32", "q8_0"):
            path = pathlib.Path(tmp) / f"{outtype}.gguf"
            hfdec.convert(directory, outtype, path)
            data = path.read_bytes()
            reader = gguf.GGUFReader(str(path))
            converter[outtype] = {
                "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
                "metadata": [[f.name] for f in reader.fields.values() if not f.name.startswith("GGUF.")],
                "tensors": [[t.name, gguf.GGMLQuantizationType(t.tensor_type).name, [int(d) for d in t.shape],
                             hashlib.sha256(np.asarray(t.data).tobytes()).hexdigest()] for t in reader.tensors],
            }
    hfdec.log(f"  {MXFP4_NAME}: greedy gap {gap:.3f}, router gap {rgap:.4f}, f32 noise {noise:.2e}, "
              f"q8 reference {q8_distance:.2e} away (greedy gap {qgap:.3f})")
    return {
        "architecture": type(model).__name__, "dtype": "float32 (experts MXFP4)", "n_vocab": n_vocab,
        "reference": "transformers from_pretrained(quantization_config=Mxfp4Config(dequantize=True), "
                     "dtype=float32): the MXFP4 experts dequantized exactly",
        "logits": logits, "greedy": cases, "min_greedy_gap": gap, "min_router_gap": rgap,
        "f32_noise": noise,
        "q8_reference": {"logits": qlogits, "greedy": qcases, "min_greedy_gap": qgap,
                         "max_distance_from_f32": q8_distance},
        "converter": converter,
    }


def mxfp4_only():
    """Only the MXFP4 directory and its goldens, from the committed float32
    directory and goldens.json."""
    import json

    import torch
    from transformers import AutoTokenizer

    torch.set_num_threads(2)
    moefix.OUT = OUT
    goldens = json.loads((OUT / "goldens.json").read_text())
    hf = AutoTokenizer.from_pretrained(str(OUT / NAME))
    goldens["models"][MXFP4_NAME] = make_mxfp4(hf, goldens["models"][NAME]["logits"]["sequences"])
    hfdec.write_json(OUT / "goldens.json", goldens)


# A q8_0 rounding of the q8 reference whose input is this close to a tie
# may round either way in two correct float32 programs: the int8 codes'
# |x| / d (in steps; float32's spacing is 7.6e-6 at 64..128) and the f16
# rounding of the block scale d = max|x| / 127 (in f16 steps; one float32
# spacing of d is 1.2e-4 of one, and max|x| carries the float32 noise of
# the sums before it).
INT8_TIE_STEPS = 1e-5
F16_TIE_STEPS = 1e-3


def q8_margins(write):
    """`--q8-margins [--write]`: for each token of the MXFP4 goldens' q8
    reference sequences, the smallest distance of any q8_0 rounding of its
    expert inputs from a tie (int8 codes and f16 block scales, in steps)
    and its smallest top-k / next router logit gap; with --write, the rows
    with a rounding within INT8_TIE_STEPS / F16_TIE_STEPS of a tie are
    stored as each sequence's "tie_rows" in goldens.json (nothing else
    changes)."""
    import json

    import torch

    torch.set_num_threads(2)
    goldens = json.loads((OUT / "goldens.json").read_text())
    rows = {}

    def note(x, tokens):
        b = x.reshape(x.shape[0], -1, 32)
        d = b.abs().amax(dim=2, keepdim=True) / 127
        y = (b.abs() * torch.where(d > 0, 1 / d, torch.zeros_like(d))).double()
        m8 = (y - torch.floor(y) - 0.5).abs().reshape(x.shape[0], -1).amin(dim=1)
        h = d.half()
        step = torch.from_numpy(np.spacing(h.abs().numpy())).double()
        m16 = (0.5 - (d.double() - h.double()).abs() / torch.where(step > 0, step, 1)).abs()
        m16 = m16.reshape(x.shape[0], -1).amin(dim=1)
        for t, a, c in zip(tokens.tolist(), m8.tolist(), m16.tolist()):
            old = rows.get(t, (1.0, 1.0))
            rows[t] = (min(old[0], a), min(old[1], c))
        return moefix.q8_0(x)

    model = load_mxfp4_reference(OUT / MXFP4_NAME)
    for name, m in model.named_modules():
        if not name.endswith("mlp.experts"):
            continue

        def forward(hidden_states, router_indices=None, routing_weights=None, self=m):
            # q8_experts' loop, each rounding's margins noted.
            next_states = torch.zeros_like(hidden_states)
            for e in range(self.num_experts):
                token_idx, top_k_pos = torch.where(router_indices == e)
                if token_idx.numel() == 0:
                    continue
                x = note(hidden_states[token_idx], token_idx)
                gate_up = x @ self.gate_up_proj[e] + self.gate_up_proj_bias[e]
                h = note(self._apply_gate(gate_up), token_idx)
                out = h @ self.down_proj[e] + self.down_proj_bias[e]
                next_states.index_add_(0, token_idx, out * routing_weights[token_idx, top_k_pos, None])
            return next_states

        m.forward = forward
    gaps = {}
    k = model.config.num_experts_per_tok

    def hook(module, args, out):
        # Each token's gap between its k-th and (k+1)-th router logit.
        logits = out[0].float().sort(dim=-1, descending=True).values
        for t, g in enumerate((logits[:, k - 1] - logits[:, k]).tolist()):
            gaps[t] = min(gaps.get(t, float("inf")), g)

    for n, m in model.named_modules():
        if n.endswith("mlp.router"):
            m.register_forward_hook(hook)
    for seq in goldens["models"][MXFP4_NAME]["q8_reference"]["logits"]["sequences"]:
        rows.clear()
        gaps.clear()
        hfdec.logits_of(model, seq["ids"])
        for t in sorted(rows):
            print(f"{seq['name']} row {t}: int8 {rows[t][0]:.2e}, f16 scale {rows[t][1]:.2e} of a step "
                  f"from a tie, router gap {gaps[t]:.2e}")
        seq["tie_rows"] = [t for t in sorted(rows) if rows[t][0] < INT8_TIE_STEPS or rows[t][1] < F16_TIE_STEPS]
    if write:
        hfdec.write_json(OUT / "goldens.json", goldens)


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
    goldens["models"][MXFP4_NAME] = make_mxfp4(hf, logits["sequences"])
    goldens["yarn"] = yarn_goldens(model.config)
    goldens["sinks"] = sink_goldens(model)
    hfdec.write_json(OUT / "goldens.json", goldens)
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    hfdec.log(f"wrote {OUT} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    if sys.argv[1:] == ["--mxfp4"]:
        mxfp4_only()
    elif sys.argv[1:2] == ["--q8-margins"]:
        q8_margins(sys.argv[2:] == ["--write"])
    else:
        main()
