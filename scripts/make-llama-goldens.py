#!/usr/bin/env python3
"""Goldens from llama.cpp for ferrite's decoder models.

For each real GGUF model this writes, under testdata/llama/:

  <model>-greedy.json  For every prompt of prompts.json: the prompt's token
                       ids (llama-tokenize, special tokens parsed, BOS as the
                       model says) and 64 greedily generated ids, with the
                       top-2 ids and logits at each step. Generation does not
                       stop at end-of-generation tokens.
  <model>-logits.json  + <model>-logits.bin: llama.cpp's next-token logits for
                       the first N_EVAL tokens of eval-text.txt (512; 640 for
                       Gemma 3, more than its 512-token sliding window, so
                       that local layers really drop old positions), stored
                       compactly (see below). The .json also holds
                       llama.cpp's agreement with itself when it computes the
                       same logits one token at a time (ubatch 1, as in
                       generation) instead of in one batch -- top-1, NMSE,
                       and the largest change of a top-1-over-top-2 margin:
                       the numerical noise floor of llama.cpp on this model.
  <model>-f64.json     + <model>-f64.bin (Llama and Gemma 3): the logits of an
                       independent float64 numpy forward pass over the first
                       N_F64 of those tokens (128; 640 for Gemma 3), with
                       weights dequantized by `gguf.quants` and activations
                       NOT quantized -- the exact arithmetic both engines
                       approximate -- stored the same compact way, together
                       with how close llama.cpp gets to it (top-1 agreement,
                       NMSE). Both engines quantize activations to 8 bits
                       before every matrix product, so neither matches the
                       other to the last bit; this tells how far each is
                       from exact math.

Compact logits: storing 512 x vocab floats would take 100 MB or more, so for
each position t we store the exact top-1 and top-2 ids, the exact sum of
squares of the logits (f64), and P = 32 random projections
s[t][p] = sum_v sign(p, v) * logit[t][v] (f64), with sign(p, v) = +1 if bit
(v mod 64) of mix64((p << 32) | (v >> 6)) is set, else -1, where mix64 is the
SplitMix64 finaliser of x + 0x9E3779B97F4A7C15. For any other logits o,
(1/P) * sum_p (proj_p(o) - s[t][p])^2 is an unbiased estimate of
|o_t - logit_t|^2 (relative standard deviation sqrt(2/P) per position,
averaging down over 512 positions), which gives the NMSE the tests check.
The .bin holds, per position, P f64 projections then the f64 sum of
squares, little-endian.

llama.cpp comes from the llama-cpp-python sdist, built by
scripts/build-llamacpp.sh (or any build of that source that runs on
this CPU, at $FERRITE_LLAMACPP/build, scripts/env.sh). Our own small program
scripts/oracle/llama-oracle.cpp is compiled against it to read logits.

Run (after scripts/fetch-models.sh; python from scripts/setup-refenv.sh):
    scripts/refenv python scripts/make-llama-goldens.py [smollm2 gemma3-270m qwen2.5-0.5b]
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.environ.get("FERRITE_MODELS", os.path.join(ROOT, "models"))
LLAMA = str(common.LLAMA)
BIN = str(common.LLAMA_BIN)
OUT = os.path.join(ROOT, "testdata", "llama")
FILES = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3-270m": "gemma-3-270m-q4_k_m.gguf",
    "qwen2.5-0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
}
N_GREEDY = 64
N_EVAL = {"smollm2": 512, "gemma3-270m": 640, "qwen2.5-0.5b": 512}
N_F64 = {"smollm2": 128, "gemma3-270m": 640, "qwen2.5-0.5b": 128}
SELF_UBATCH = 1
P = 32
MASK = (1 << 64) - 1


def mix64(x):
    """SplitMix64 finaliser on uint64 numpy arrays."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def signs(n_vocab):
    """(P, n_vocab) matrix of +-1."""
    v = np.arange(n_vocab, dtype=np.uint64)
    out = np.empty((P, n_vocab), dtype=np.float64)
    for p in range(P):
        words = mix64((np.uint64(p) << np.uint64(32)) | (v >> np.uint64(6)))
        bits = (words >> (v & np.uint64(63))) & np.uint64(1)
        out[p] = np.where(bits == 1, 1.0, -1.0)
    return out


def build_oracle():
    exe = os.path.join(tempfile.gettempdir(), "ferrite-llama-oracle")
    src = os.path.join(ROOT, "scripts", "oracle", "llama-oracle.cpp")
    subprocess.run(
        ["g++", "-O2", "-std=c++17", f"-I{LLAMA}/include", f"-I{LLAMA}/ggml/include", src,
         f"-L{BIN}", "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{BIN}", "-o", exe],
        check=True,
    )
    return exe


def tokenize(model, text):
    out = subprocess.run(
        [os.path.join(BIN, "llama-tokenize"), "-m", model, "-p", text, "--ids", "--log-disable"],
        check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def write_ids(ids):
    f = tempfile.NamedTemporaryFile("w", suffix=".ids", delete=False)
    f.write(" ".join(map(str, ids)))
    f.close()
    return f.name


def greedy(oracle, model, prompts):
    cases = []
    for prompt in prompts:
        ids = tokenize(model, prompt)
        path = write_ids(ids)
        lines = subprocess.run([oracle, "greedy", model, path, str(N_GREEDY)],
                               check=True, capture_output=True, text=True).stdout.splitlines()
        os.unlink(path)
        steps = [line.split() for line in lines]
        cases.append({
            "prompt": prompt,
            "prompt_ids": ids,
            "tokens": [int(s[0]) for s in steps],
            "top2": [[int(s[1]), float(s[2]), int(s[3]), float(s[4])] for s in steps],
        })
    return cases


def oracle_logits(oracle, model, ids, short, ubatch=None):
    """llama.cpp's logits for every position of `ids` (n_tokens x n_vocab)."""
    path = write_ids(ids)
    raw = os.path.join(tempfile.gettempdir(), f"ferrite-{short}-logits.f32")
    subprocess.run([oracle, "logits", model, path, raw] + ([str(ubatch)] if ubatch else []),
                   check=True)
    os.unlink(path)
    values = np.fromfile(raw, dtype="<f4").reshape(len(ids), -1).astype(np.float64)
    os.unlink(raw)
    return values


def agreement(values, reference):
    """Top-1 agreement and NMSE of `values` against `reference`."""
    diff = values - reference
    return (float((values.argmax(1) == reference.argmax(1)).mean()),
            float((diff * diff).sum() / (reference * reference).sum()))


def margin_change(values, reference):
    """Largest change, over positions, of the margin of `reference`'s top-1
    token over its top-2 token when measured in `values` instead."""
    order = np.argsort(-reference, axis=1, kind="stable")[:, :2]
    rows = np.arange(len(reference))
    margin = lambda v: v[rows, order[:, 0]] - v[rows, order[:, 1]]
    return float(np.abs(margin(values) - margin(reference)).max())


def logits(oracle, model, text, short):
    ids = tokenize(model, text)[:N_EVAL[short]]
    assert len(ids) == N_EVAL[short], f"eval-text.txt has only {len(ids)} tokens for {short}"
    values = oracle_logits(oracle, model, ids, short)
    unbatched = oracle_logits(oracle, model, ids, short, SELF_UBATCH)
    self_top1, self_nmse = agreement(unbatched, values)
    write_sketch(values, f"{short}-logits", {
        "ids": ids,
        "llama_cpp_self_ubatch": SELF_UBATCH,
        "llama_cpp_self_top1": self_top1,
        "llama_cpp_self_nmse": self_nmse,
        "llama_cpp_self_margin_max": margin_change(unbatched, values),
    })
    del unbatched
    forward = {
        "smollm2": f64_llama_forward,
        "gemma3-270m": f64_gemma3_forward,
        "qwen2.5-0.5b": f64_llama_forward,
    }[short]
    n = N_F64[short]
    exact = forward(model, ids[:n])
    top1, nmse = agreement(values[:n], exact)
    write_sketch(exact, f"{short}-f64", {
        "ids": ids[:n],
        "llama_cpp_top1": top1,
        "llama_cpp_nmse": nmse,
    })


def gguf_weights(path):
    """(reader, hyper-parameter getter, f64 weight getter) of a GGUF file."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(path)
    tensors = {t.name: t for t in reader.tensors}
    arch = reader.fields["general.architecture"].contents()

    def hp(key, default=None):
        field = reader.fields.get(f"{arch}.{key}")
        return default if field is None else field.contents()

    def w(name):
        t = tensors[name]
        values = dequantize(t.data, t.tensor_type).astype(np.float64)
        rows = int(np.prod([int(d) for d in t.shape[1:]])) if len(t.shape) > 1 else 1
        return values.reshape(rows, -1) if len(t.shape) > 1 else values.reshape(-1)

    return tensors, hp, w


def f64_gemma3_forward(path, ids):
    """Float64 forward pass of a Gemma 3 GGUF (exact activations), written
    from the Hugging Face Gemma 3 model's definition: embedding times
    sqrt(dim); per layer RMSNorm, Q/K/V, per-head RMSNorm of Q and K, NEOX
    RoPE (base rope.freq_base_swa, default 10000, in sliding-window layers,
    rope.freq_base in global ones), softmax(q.k / sqrt(head_dim)) over the
    causal window (a local layer sees the last `sliding_window` positions),
    output projection, RMSNorm, residual; RMSNorm, GELU(tanh)-gated MLP,
    RMSNorm, residual. Norm weights are used as stored (the converter added
    Gemma's 1). Every fifth of six layers is global (the default pattern)."""
    tensors, hp, w = gguf_weights(path)
    dim, n_head, n_kv = hp("embedding_length"), hp("attention.head_count"), hp("attention.head_count_kv")
    n_layer, eps, hd = hp("block_count"), hp("attention.layer_norm_rms_epsilon"), hp("attention.key_length")
    window, pattern = hp("attention.sliding_window"), hp("attention.sliding_window_pattern", 6)
    assert isinstance(pattern, int) and hp("rope.scaling.factor") is None and n_layer != 62
    bases = {True: hp("rope.freq_base_swa", 10000.0), False: hp("rope.freq_base")}

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g

    n = len(ids)
    emb = w("token_embd.weight")
    out_w = w("output.weight") if "output.weight" in tensors else emb
    pos = np.arange(n)
    rot = {}
    for local, base in bases.items():
        ang = pos[:, None] * (base ** (-np.arange(0, hd, 2) / hd))[None, :]
        rot[local] = (np.cos(ang)[:, None, :], np.sin(ang)[:, None, :])

    def rope(v, local):  # ggml "neox" rope: pairs (i, i + hd/2)
        cos, sin = rot[local]
        x0, x1 = v[..., : hd // 2].copy(), v[..., hd // 2:].copy()
        return np.concatenate([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1)

    causal = pos[None, :] > pos[:, None]
    far = pos[:, None] - pos[None, :] >= (window or n)
    masks = {False: np.where(causal, -np.inf, 0.0), True: np.where(causal | far, -np.inf, 0.0)}
    x = emb[ids] * np.sqrt(dim)
    for layer in range(n_layer):
        blk = lambda what: w(f"blk.{layer}.{what}.weight")
        local = window is not None and layer % pattern < pattern - 1
        h = rms(x, blk("attn_norm"))
        q = rope(rms((h @ blk("attn_q").T).reshape(n, n_head, hd), blk("attn_q_norm")), local)
        k = rope(rms((h @ blk("attn_k").T).reshape(n, n_kv, hd), blk("attn_k_norm")), local)
        v = (h @ blk("attn_v").T).reshape(n, n_kv, hd)
        att = np.empty((n, n_head, hd))
        for head in range(n_head):
            kv = head // (n_head // n_kv)
            scores = q[:, head] @ k[:, kv].T / np.sqrt(hd) + masks[local]
            p = np.exp(scores - scores.max(-1, keepdims=True))
            att[:, head] = (p / p.sum(-1, keepdims=True)) @ v[:, kv]
        x = x + rms(att.reshape(n, -1) @ blk("attn_output").T, blk("post_attention_norm"))
        h = rms(x, blk("ffn_norm"))
        gate, up = h @ blk("ffn_gate").T, h @ blk("ffn_up").T
        gelu = 0.5 * gate * (1 + np.tanh(np.sqrt(2 / np.pi) * (gate + 0.044715 * gate ** 3)))
        x = x + rms((gelu * up) @ blk("ffn_down").T, blk("post_ffw_norm"))
    return rms(x, w("output_norm.weight")) @ out_w.T


def f64_llama_forward(path, ids):
    """Float64 forward pass of a Llama-architecture GGUF (exact activations).
    Qwen2 files (general.architecture = qwen2) are the same block with
    biases on Q, K and V (added where the file has them) and "neox" RoPE
    (pairs (i, i + hd/2), as HF's rotate_half)."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(path)
    tensors = {t.name: t for t in reader.tensors}
    arch = reader.fields["general.architecture"].contents()
    hp = lambda k: reader.fields[f"{arch}.{k}"].contents()
    dim, n_head, n_kv = hp("embedding_length"), hp("attention.head_count"), hp("attention.head_count_kv")
    n_layer, eps, base = hp("block_count"), hp("attention.layer_norm_rms_epsilon"), hp("rope.freq_base")
    hd = dim // n_head

    def w(name):
        t = tensors[name]
        values = dequantize(t.data, t.tensor_type).astype(np.float64)
        rows = int(np.prod([int(d) for d in t.shape[1:]])) if len(t.shape) > 1 else 1
        return values.reshape(rows, -1) if len(t.shape) > 1 else values.reshape(-1)

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g

    n = len(ids)
    emb = w("token_embd.weight")
    out_w = w("output.weight") if "output.weight" in tensors else emb
    ang = np.arange(n)[:, None] * (base ** (-np.arange(0, hd, 2) / hd))[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(v):
        if arch == "qwen2":  # ggml "neox" rope: pairs (i, i + hd/2)
            x0, x1 = v[..., : hd // 2].copy(), v[..., hd // 2:].copy()
            return np.concatenate([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1)
        # ggml "normal" rope: adjacent pairs
        x0, x1 = v[..., 0::2].copy(), v[..., 1::2].copy()
        v[..., 0::2], v[..., 1::2] = x0 * cos - x1 * sin, x0 * sin + x1 * cos
        return v

    def proj(h, layer, what):  # h @ W.T (+ b where the file has a bias)
        out = h @ w(f"blk.{layer}.{what}.weight").T
        bias = f"blk.{layer}.{what}.bias"
        return out + w(bias) if bias in tensors else out

    mask = np.triu(np.full((n, n), -np.inf), 1)
    x = emb[ids]
    for layer in range(n_layer):
        blk = lambda what: w(f"blk.{layer}.{what}.weight")
        h = rms(x, blk("attn_norm"))
        q = rope(proj(h, layer, "attn_q").reshape(n, n_head, hd))
        k = rope(proj(h, layer, "attn_k").reshape(n, n_kv, hd))
        v = proj(h, layer, "attn_v").reshape(n, n_kv, hd)
        att = np.empty((n, n_head, hd))
        for head in range(n_head):
            kv = head // (n_head // n_kv)
            scores = q[:, head] @ k[:, kv].T / np.sqrt(hd) + mask
            p = np.exp(scores - scores.max(-1, keepdims=True))
            att[:, head] = (p / p.sum(-1, keepdims=True)) @ v[:, kv]
        x = x + att.reshape(n, -1) @ blk("attn_output").T
        h = rms(x, blk("ffn_norm"))
        gate, up = h @ blk("ffn_gate").T, h @ blk("ffn_up").T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ blk("ffn_down").T
    return rms(x, w("output_norm.weight")) @ out_w.T


def write_sketch(values, name, extra):
    """The compact form described at the top: projections + sum of squares."""
    proj = values @ signs(values.shape[1]).T
    sumsq = (values * values).sum(axis=1)
    order = np.argsort(-values, axis=1, kind="stable")[:, :2]
    blob = np.concatenate([proj, sumsq[:, None]], axis=1).astype("<f8")
    with open(os.path.join(OUT, f"{name}.bin"), "wb") as f:
        f.write(blob.tobytes())
    meta = {
        "n_vocab": int(values.shape[1]),
        "projections": P,
        "top1": [int(x) for x in order[:, 0]],
        "top2": [int(x) for x in order[:, 1]],
        "margin": [float(values[i, order[i, 0]] - values[i, order[i, 1]]) for i in range(len(values))],
    }
    meta.update(extra)
    with open(os.path.join(OUT, f"{name}.json"), "w") as f:
        json.dump(meta, f)


def main():
    wanted = sys.argv[1:] or list(FILES)
    oracle = build_oracle()
    prompts = json.load(open(os.path.join(OUT, "prompts.json")))
    text = open(os.path.join(OUT, "eval-text.txt")).read()
    for short in wanted:
        model = os.path.join(MODELS, FILES[short])
        with open(os.path.join(OUT, f"{short}-greedy.json"), "w") as f:
            json.dump(greedy(oracle, model, prompts), f, indent=1)
        logits(oracle, model, text, short)
        print(f"{short}: done", file=sys.stderr)


if __name__ == "__main__":
    main()
