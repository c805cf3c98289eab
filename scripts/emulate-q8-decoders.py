#!/usr/bin/env python3
"""An independent numpy implementation of the q8_0 GGUF fixtures whose HF
reference ferrite leaves partway through a sequence (tiny-qwen3, tiny-gemma2,
tiny-phi3), written from the formulas, not from ferrite or transformers.

Why: the q8_0 reference in goldens.json (make-hf-decoder-fixtures.py,
`dequantized_reference`) is transformers in float32 with the q8_0 file's
roundings hooked in: each matrix input rounded to int8 blocks, keys and
values rounded to f16. Where one of those roundings falls within float32
noise of a tie, two correct float32 programs can round apart, and in these
tiny random models one flipped int8 step moves every later logit by ~0.1.
That happens in these three files (first rows 30, 16 and 17 of the 40-token
sequence; e.g. qwen3's layer-0 attention output at row 30 is 9e-5 of a step
from a tie, gemma2's layer-0 FFN input at row 16 is 4e-6 from one). This
implementation does the same roundings with float64 matrix products and
softmax, each result stored as float32; ferrite's logits are compared with
it on every row (tests/hf_decoders.rs).

Writes testdata/hf-decoders/emulated-<name>.q8_0.f32 and
q8-emulation.json, whose "tie_rows" are each sequence's rows with a
rounding within TIE_STEPS of a tie (`--margins [NAME...]` prints every
row's smallest margin and where it is). Needs numpy and gguf-py (llama.cpp's, under
$FERRITE_LLAMACPP, scripts/env.sh).
"""
import json
import pathlib
import sys

import numpy as np

import common

ROOT = pathlib.Path(__file__).resolve().parent.parent
DIR = ROOT / "testdata" / "hf-decoders"
common.use_llama_gguf_py()
import gguf  # noqa: E402
from gguf.quants import dequantize  # noqa: E402

F32 = np.float32
MODELS = ["tiny-qwen3", "tiny-gemma2", "tiny-phi3"]


# A rounding whose input is closer than this to a tie, in steps of the
# rounding, may round either way in two correct float32 programs: an int8
# input |x| / d is up to 127.5, where float32's spacing is 7.6e-6, and x
# itself carries the float32 noise of the sums before it. Rows with such a
# rounding are listed as "tie_rows" in q8-emulation.json.
TIE_STEPS = 1e-5

# --margins: per token row, the smallest distance of any rounding's input
# from a tie (half-way between two results), in units of the rounding's
# step, and where it was: {row: (margin, site)}.
MARGINS = None
SITE = ""


def note_margins(m, kind):
    """Records the row minima of `m` (rows x values: distances from a tie
    in steps) for --margins."""
    if MARGINS is None:
        return
    m = m.reshape(m.shape[0], -1)
    for row, v in enumerate(m.min(axis=1)):
        if row not in MARGINS or v < MARGINS[row][0]:
            MARGINS[row] = (float(v), f"{SITE} {kind}")


def q8_0(x):
    """x rounded as ggml's quantize_row_q8_0 rounds a matrix input: blocks
    of 32, d = amax / 127 in f32, q = round-half-away(x * (1/d)), value
    q * f16(d)."""
    b = x.reshape(-1, 32).astype(F32)
    d = (np.abs(b).max(axis=1, keepdims=True) / F32(127)).astype(F32)
    inv = np.where(d > 0, F32(1) / np.where(d > 0, d, 1), 0).astype(F32)
    y = (np.abs(b) * inv).astype(F32)
    note_margins(np.abs(y - np.floor(y) - 0.5).reshape(x.shape[0], -1), "int8")
    q = np.sign(b) * np.floor(y + F32(0.5))
    return (q * d.astype(np.float16).astype(F32)).reshape(x.shape).astype(F32)


def f16(x):
    h = x.astype(np.float16)
    step = np.spacing(np.abs(h)).astype(np.float64)
    err = np.abs(x.astype(np.float64) - h.astype(np.float64))
    note_margins(np.abs(0.5 - err / np.where(step > 0, step, 1)).reshape(x.shape[0], -1), "f16")
    return h.astype(F32)


def rms_norm(x, w, eps):
    x64 = x.astype(np.float64)
    return (x / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps)).astype(F32) * w


def linear(x, w):
    return (q8_0(x).astype(np.float64) @ w.T.astype(np.float64)).astype(F32)


class Model:
    def __init__(self, name):
        reader = gguf.GGUFReader(str(DIR / f"{name}.q8_0.gguf"))
        self.w = {t.name: dequantize(t.data, t.tensor_type).reshape([int(x) for x in reversed(t.shape)]).astype(F32)
                  for t in reader.tensors}
        self.cfg = cfg = json.loads((DIR / name / "config.json").read_text())
        self.family = cfg["model_type"]
        self.hidden = cfg["hidden_size"]
        self.n_head, self.n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.head_dim = cfg.get("head_dim") or self.hidden // self.n_head
        self.eps = cfg["rms_norm_eps"]

    def rope(self, x, n_ctx):
        """NEOX-style rotation (halves) of the first `rot` dims; Phi-3's
        LongRoPE picks its factors by the context size."""
        rp = self.cfg["rope_parameters"]
        rot = int(self.head_dim * rp.get("partial_rotary_factor", 1.0))
        base = (F32(rp["rope_theta"]) ** (np.arange(0, rot, 2).astype(F32) / F32(rot))).astype(F32)
        scale = F32(1)
        if rp["rope_type"] == "longrope":
            orig = rp["original_max_position_embeddings"]
            factors = rp["long_factor"] if n_ctx > orig else rp["short_factor"]
            base = (np.array(factors, F32) * base).astype(F32)
            factor = self.cfg["max_position_embeddings"] / orig
            scale = F32(np.sqrt(1 + np.log(factor) / np.log(orig)))
        inv = (F32(1) / base).astype(F32)
        angle = (np.arange(x.shape[0]).astype(F32)[:, None] * inv[None, :]).astype(F32)
        cos = np.tile((np.cos(angle) * scale).astype(F32), 2)[:, None, :]
        sin = np.tile((np.sin(angle) * scale).astype(F32), 2)[:, None, :]
        xr, rest = x[..., :rot], x[..., rot:]
        half = np.concatenate([-xr[..., rot // 2:], xr[..., :rot // 2]], -1)
        return np.concatenate([(xr * cos + half * sin).astype(F32), rest], -1)

    def attention(self, q, k, v, layer):
        cfg, T = self.cfg, q.shape[0]
        scale = 1 / np.sqrt(cfg.get("query_pre_attn_scalar") or self.head_dim)
        mask = np.tril(np.ones((T, T), bool))
        if (cfg.get("layer_types") or [None] * 99)[layer] == "sliding_attention":
            mask &= (np.arange(T)[:, None] - np.arange(T)[None, :]) < cfg["sliding_window"]
        out = np.zeros((T, self.n_head, self.head_dim), F32)
        for h in range(self.n_head):
            kh = h // (self.n_head // self.n_kv)
            s = (q[:, h].astype(np.float64) @ k[:, kh].T.astype(np.float64)) * scale
            if cfg.get("attn_logit_softcapping"):
                s = np.tanh(s / cfg["attn_logit_softcapping"]) * cfg["attn_logit_softcapping"]
            s = np.where(mask, s, -np.inf)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            out[:, h] = (s @ v[:, kh].astype(np.float64)).astype(F32)
        return out.reshape(T, -1)

    def logits(self, ids, n_ctx):
        w, fam, T, hd = self.w, self.family, len(ids), self.head_dim
        x = w["token_embd.weight"][ids]
        if fam == "gemma2":
            x = x * F32(np.sqrt(self.hidden))
        global SITE
        for l in range(self.cfg["num_hidden_layers"]):
            p = f"blk.{l}."
            SITE = f"layer {l}"
            h = rms_norm(x, w[p + "attn_norm.weight"], self.eps)
            if fam == "phi3":
                qkv = linear(h, w[p + "attn_qkv.weight"])
                nq, nk = self.n_head * hd, self.n_kv * hd
                q, k, v = qkv[:, :nq], qkv[:, nq:nq + nk], qkv[:, nq + nk:]
            else:
                q, k, v = (linear(h, w[p + f"attn_{m}.weight"]) for m in "qkv")
            q, k, v = q.reshape(T, self.n_head, hd), k.reshape(T, self.n_kv, hd), v.reshape(T, self.n_kv, hd)
            if fam == "qwen3":
                q = rms_norm(q, w[p + "attn_q_norm.weight"], self.eps)
                k = rms_norm(k, w[p + "attn_k_norm.weight"], self.eps)
            q, k = self.rope(q, n_ctx), f16(self.rope(k, n_ctx))
            a = linear(self.attention(q, k, f16(v), l), w[p + "attn_output.weight"])
            if fam == "gemma2":
                a = rms_norm(a, w[p + "post_attention_norm.weight"], self.eps)
            x = x + a
            h = rms_norm(x, w[p + "ffn_norm.weight"], self.eps)
            if fam == "phi3":
                gate_up = linear(h, w[p + "ffn_up.weight"])
                gate, up = np.split(gate_up, 2, axis=-1)
            else:
                gate, up = linear(h, w[p + "ffn_gate.weight"]), linear(h, w[p + "ffn_up.weight"])
            g64 = gate.astype(np.float64)
            if fam == "gemma2":  # gelu, tanh form
                act = 0.5 * g64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (g64 + 0.044715 * g64 ** 3)))
            else:  # silu
                act = g64 / (1 + np.exp(-g64))
            m = linear(act.astype(F32) * up, w[p + "ffn_down.weight"])
            if fam == "gemma2":
                m = rms_norm(m, w[p + "post_ffw_norm.weight"], self.eps)
            x = x + m
        x = rms_norm(x, w["output_norm.weight"], self.eps)
        out = linear(x, w.get("output.weight", w["token_embd.weight"]))
        if self.cfg.get("final_logit_softcapping"):
            cap = self.cfg["final_logit_softcapping"]
            out = (np.tanh(out.astype(np.float64) / cap) * cap).astype(F32)
        return out


def margins(name):
    """Prints, for each token row of `name`'s sequences, the smallest
    distance of any int8 or f16 rounding's input from a tie (in steps) and
    where: a row whose margin is within float32 noise (~1e-5 of a step at
    most) may round either way in two correct float32 programs."""
    global MARGINS
    goldens = json.loads((DIR / "goldens.json").read_text(encoding="utf-8"))
    model = Model(name)
    for seq in goldens["models"][name]["q8_0_reference"]["logits"]["sequences"]:
        MARGINS = {}
        model.logits(np.array(seq["ids"]), seq.get("n_ctx", 128))
        for row in sorted(MARGINS):
            m, site = MARGINS[row]
            print(f"{name} {seq['name']} row {row}: {m:.2e} of a step from a tie ({site})")


def main():
    if sys.argv[1:2] == ["--margins"]:
        for name in sys.argv[2:] or MODELS:
            margins(name)
        return
    goldens = json.loads((DIR / "goldens.json").read_text(encoding="utf-8"))
    summary = {}
    for name in MODELS:
        model = Model(name)
        entry = goldens["models"][name]["q8_0_reference"]["logits"]
        hf = np.fromfile(DIR / entry["file"], dtype="<f4")
        chunks, seqs, offset = [], [], 0
        for seq in entry["sequences"]:
            ids = np.array(seq["ids"])
            global MARGINS
            MARGINS = {}
            logits = model.logits(ids, seq.get("n_ctx", 128))
            ties = sorted(r for r, (m, _) in MARGINS.items() if m < TIE_STEPS)
            MARGINS = None
            theirs = hf[seq["offset"]:seq["offset"] + logits.size].reshape(logits.shape)
            rows = np.abs(logits - theirs).max(-1)
            apart = np.nonzero(rows > 1e-4)[0]
            print(f"{name} {seq['name']}: HF reference within {rows.max():.1e}, first row over 1e-4: "
                  f"{int(apart[0]) if apart.size else None}", file=sys.stderr)
            chunks.append(logits.astype("<f4").tobytes())
            seqs.append({"name": seq["name"], "ids": seq["ids"], "offset": offset, **(
                {"n_ctx": seq["n_ctx"]} if "n_ctx" in seq else {}), "tie_rows": ties})
            offset += logits.size
        file = f"emulated-{name}.q8_0.f32"
        (DIR / file).write_bytes(b"".join(chunks))
        summary[name] = {"file": file, "dtype": "f32", "byte_order": "little",
                         "n_vocab": entry["n_vocab"], "tie_steps": TIE_STEPS, "sequences": seqs}
    (DIR / "q8-emulation.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
