#!/usr/bin/env python3
"""Tiny random-weight Hugging Face decoder directories (LlamaForCausalLM,
Qwen2ForCausalLM) with reference outputs from HF transformers, so that
ferrite's safetensors-directory path for decoders can be tested without
Python.

Run from anywhere (about half a minute on 2 cores):

    scripts/refenv python scripts/make-hf-decoder-fixtures.py

Needs the reference venv (scripts/setup-refenv.sh): torch,
transformers, tokenizers, safetensors, numpy; and llama.cpp's source tree at
$FERRITE_LLAMACPP (scripts/env.sh; made by
scripts/build-llamacpp.sh) for its convert_hf_to_gguf.py and gguf-py
(only the Python converter is run; nothing is compiled). Every file it
writes is deterministic (fixed seeds, no time stamps); re-running it
rewrites the same bytes.

What it writes, under testdata/hf-decoders/:

  tiny-llama/        LlamaForCausalLM, float32, UNTIED output (lm_head.weight
                     saved), saved in two shards (model-00001-of-00002.
                     safetensors, model-00002-of-00002.safetensors,
                     model.safetensors.index.json); Llama-3-style tokenizer
                     (byte-level BPE, Llama 3's split regex, BOS
                     <|begin_of_text|> added by a TemplateProcessing
                     post-processor, <|eot_id|> turn ends, a Llama-3-style
                     chat template writing {{ bos_token }} itself).
  tiny-qwen2/        Qwen2ForCausalLM, float32, TIED embeddings (no
                     lm_head.weight), Q/K/V biases, model vocabulary padded
                     past the tokenizer's (as Qwen's is); Qwen2-style
                     tokenizer (NFC normalizer, Qwen's split regex, no BOS,
                     ChatML <|im_start|>/<|im_end|>, <|endoftext|>, and a
                     NON-special added token <tool_call>).
  tiny-qwen2-bf16/   Qwen2ForCausalLM saved in bfloat16, UNTIED, other seeds,
                     same tokenizer files as tiny-qwen2.
  goldens.json       everything but the logits (layout below)
  logits-<name>.f32  HF logits of each model (layout below)

Every directory holds config.json, generation_config.json, the safetensors,
tokenizer.json and tokenizer_config.json (and chat_template.jinja when
transformers writes the template there), as `save_pretrained` writes them.

Models: hidden 64, 2 layers, 4 heads of 16, 2 KV heads (grouped-query),
intermediate 128, 128 positions, SiLU, RMSNorm. Every parameter is redrawn
from a seeded torch.Generator (see randomize): matrices and embeddings
N(0, 0.2^2) (o_proj and down_proj N(0, 0.1^2)), biases N(0, 0.2^2), RMSNorm
gains 1 + N(0, 0.1^2), so that logits are far from flat (std ~1.5) and a
wrong bias, gain or RoPE pairing shows up.

Tokenizers are trained with the `tokenizers` library (BpeTrainer, byte-level
alphabet) on TRAIN_TEXT below and saved through transformers'
TokenizersBackend (PreTrainedTokenizerFast), whose ids the goldens record;
the script asserts that the raw `tokenizers.Tokenizer.from_file` gives the
same ids.

The reference model runs are HF transformers in float32 with eager
attention. For tiny-qwen2-bf16 the model is loaded from its bfloat16 files
with dtype=float32, i.e. float32 arithmetic on the bf16-rounded weights.

goldens.json:

  "versions":  python, torch, transformers, tokenizers, safetensors
  "models": {name: {
      "architecture", "dtype" (of the files), "tied", "shards",
      "n_vocab" (model), "tokenizer_vocab", "seed",
      "logits": {"file": "logits-<name>.f32", "dtype": "f32",
                 "byte_order": "little", "n_vocab": V,
                 "sequences": [{"name", "ids", "offset", "shape": [T, V]}]},
                 the file is the concatenation of each sequence's row-major
                 T x V matrix; "offset" counts f32 ELEMENTS; row t is the
                 logits after feeding ids[0..=t] at positions 0..t from an
                 empty cache (lengths 1, 9 and 40);
      "greedy": [{"prompt", "prompt_ids", "new_ids"}], prompt_ids = the
                 tokenizer's ids with add_special_tokens=True, new_ids = the
                 20 ids of model.generate(do_sample=False,
                 max_new_tokens=20) with end-of-sequence stopping switched
                 off (generation_config.eos_token_id = None), so always 20;
      "chat": {"messages": [...], "ids": apply_chat_template(messages,
                 add_generation_prompt=True, tokenize=True)},
      "converter": what llama.cpp's convert_hf_to_gguf.py makes of the
                 directory (--outtype f32, or bf16 for the bf16 one; run
                 through the same wrapper as make-gpt2-fixtures.py, which
                 names the pre-tokenizer "gpt-2" when the converter does not
                 know the freshly trained vocabulary's hash; the GGUF itself
                 is not kept): {"outtype", "metadata": {every "{arch}.*"
                 key: value}, "tensors": {name: {"dims": ggml order,
                 "type": ggml type name, "f32_sha256": sha256 of the
                 values widened to little-endian float32}}},
  }}
  "tokenizers": {"llama" | "qwen2": {"dir": the directory holding it,
      "bos_id", "eos_id", "cases": [{"text",
         "ids": encode with add_special_tokens=False (special-token texts
                are recognised, as HF always does),
         "ids_special": the same with add_special_tokens=True,
         "ids_split_special": add_special_tokens=False,
                split_special_tokens=True (special-token texts are plain
                text; non-special added tokens still recognised),
         "decoded": decode(ids, skip_special_tokens=False),
         "decoded_skip": decode(ids_special, skip_special_tokens=True)}]}}
"""

import hashlib
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import common

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "hf-decoders"
LLAMA = common.LLAMA

HIDDEN, LAYERS, HEADS, KV_HEADS, INTER, POSITIONS = 64, 2, 4, 2, 128, 128
MAX_NEW = 20

LLAMA3_PAT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_PAT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

LLAMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

TRAIN_TEXT = """\
The quick brown fox jumps over the lazy dog. It wasn't the first time, and it won't be the last.
"Where are you going?" she asked. "To the market," he said, "and then to the station."
Once upon a time, in a village by the sea, there lived an old baker named Tom. Every morning
at 5:30 he lit the oven, and by 7:15 the whole street smelled of fresh bread. In 2023 he sold
48,761 loaves at $3.50 each; that's 170,663.50 dollars, or about 3.14159 times more than in 1999.
I'm sure they'll come back tomorrow; we've waited long enough, haven't we? You'd think so.

def fibonacci(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a

fn main() {
    let xs: Vec<u32> = (1..=10).map(|x| x * x).collect();
    println!("sum = {}", xs.iter().sum::<u32>());
}

In Paris we drank a café au lait; the waiter was naïve. Straße, Ärger, Übung, déjà vu.
In Tokyo we saw a sign: 日本語を勉強しています。東京は大きい都市です。
In Beijing: 你好，世界！我们在北京。 In Seoul: 안녕하세요.
Emoji are everywhere now 😀 😂 🚀 🍞 ❤️ 👍🏽 — even in bread shops 🥐.
Q: What's the time?
A: It's half past nine. The early bird catches the worm, but the second mouse gets the cheese.
"""

LLAMA_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN2_PLAIN_ADDED = ["<tool_call>"]

# About 50 strings: English, code, CJK, emoji, whitespace, special tokens.
COMMON_CORPUS = [
    "", " ", "\n", "  \n\n\t", "Hello", "Hello world", " Hello world!", "HELLO, World.",
    "The quick brown fox jumps over the lazy dog.",
    "It wasn't the first time, and it won't be the last.",
    "I'm sure they'll come back; we've waited, haven't we? You'd think so.",
    "'s 't 're 've 'm 'll 'd DON'T",
    "0 1 42 123 1234 12345 1234567890", "3.14159 -273.15 +1 (555) 010-2034", "$3.50 99.9% 2023-04-01 12:00:59",
    "def fibonacci(n):\n    a, b = 0, 1\n    return a",
    "fn main() {\n    println!(\"hi\");\n}\n",
    "for (int i = 0; i < 10; i++) { total += values[i]; }",
    "    indented\n\tand tabbed", "trailing spaces   ", "many\n\n\n\nnewlines",
    "café naïve Straße Ärger déjà vu", "e\u0301 combining vs \u00e9 precomposed", "Ελληνικά русский עברית العربية",
    "日本語を勉強しています。", "東京は大きい都市です。", "你好，世界！", "안녕하세요", "カタカナ ひらがな",
    "😀", "😀😂🚀", "❤️ 👍🏽 🇯🇵", "🥐🥖 bread", "mixed 日本 and café and 😀 in one line",
    "\u00a0non-breaking\u00a0space", "zero\u200bwidth", "\ufeffBOM", "\x00nul\x01",
    "“smart quotes” and ‘single’ — em dash",
    "Q: What's the time?\nA: It's half past nine.\n",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "supercalifragilisticexpialidocious",
]
LLAMA_CORPUS = COMMON_CORPUS + [
    "<|begin_of_text|>", "<|begin_of_text|>Hello", "a<|eot_id|>b", "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<|end_of_text|><|end_of_text|>", "<|eot_id", "<|EOT_ID|>",
]
QWEN2_CORPUS = COMMON_CORPUS + [
    "<|endoftext|>", "before<|endoftext|>after", "<|im_start|>user\nHi<|im_end|>\n", "<|im_start|><|im_end|>",
    "<tool_call>{\"name\": \"f\"}", "x <tool_call> <|im_end|> y", "<|im_end", "<|IM_END|>",
]

GREEDY_PROMPTS = [
    "The quick brown fox",
    "Once upon a time, in a village by the sea,",
    "def fibonacci(n):\n",
    "In Tokyo we saw a sign: 日本",
    "Emoji 😀 and",
]
CHAT = [
    {"role": "system", "content": "You are a baker."},
    {"role": "user", "content": "How many loaves did you sell?"},
    {"role": "assistant", "content": "48,761 loaves."},
    {"role": "user", "content": "And cakes? 🍰"},
]

MODELS = [
    # name, architecture, tokenizer, dtype, tied, shard size, seed, vocab padding
    ("tiny-llama", "llama", "llama", "float32", False, "200KB", 1101, 0),
    ("tiny-qwen2", "qwen2", "qwen2", "float32", True, None, 2202, 24),
    ("tiny-qwen2-bf16", "qwen2", "qwen2", "bfloat16", False, None, 3303, 24),
    # The families of issue 29; each also kept as convert_hf_to_gguf.py's
    # GGUF in f32 and q8_0 (<name>.f32.gguf, <name>.q8_0.gguf).
    ("tiny-llama3", "llama", "llama", "float32", True, None, 4404, 0),
    ("tiny-llama-yarn", "llama", "llama", "float32", False, None, 5505, 0),
    ("tiny-qwen3", "qwen3", "qwen2", "float32", True, None, 6606, 24),
    ("tiny-mistral", "mistral", "llama", "float32", False, None, 7707, 0),
    ("tiny-qwen2-swa", "qwen2", "qwen2", "float32", True, None, 8808, 24),
    ("tiny-gemma2", "gemma2", "llama", "float32", True, None, 9909, 0),
    ("tiny-gemma3", "gemma3", "llama", "float32", True, None, 1011, 0),
    ("tiny-phi3", "phi3", "llama", "float32", False, None, 1212, 0),
    ("tiny-olmo2", "olmo2", "qwen2", "float32", False, None, 1313, 0),
    ("tiny-smollm3", "smollm3", "llama", "float32", True, None, 1414, 0),
]
# Config beyond the common one, per model. Llama 3 scaling with a short
# original context so that, over 8 frequency pairs (head_dim 16, theta 1e4),
# pair 0 is kept, pairs 1-2 are smoothed and pairs 3-7 divided by the factor.
# YaRN: factor 4 over an original 32 positions (ramp over pairs 0-2, cos/sin
# times 0.1 ln 4 + 1).
EXTRA_CONFIG = {
    "tiny-llama3": dict(rope_parameters={
        "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    "tiny-llama-yarn": dict(rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
        "original_max_position_embeddings": 32}),
    # Qwen3: per-head Q/K RMSNorm, no biases, head_dim 32 (not 64 / 4).
    "tiny-qwen3": dict(head_dim=32, attention_bias=False),
    # Sliding windows of 8 positions (the 40-token sequences and 20-token
    # greedy runs go well past them): Mistral on every layer, Qwen2 on the
    # layers from max_window_layers = 1 on.
    "tiny-mistral": dict(sliding_window=8),
    "tiny-qwen2-swa": dict(use_sliding_window=True, sliding_window=8, max_window_layers=1),
    # Gemma 2: layer 0 slides over 8 positions, layer 1 is global; attention
    # scores soft-capped at 4 and logits at 6 (small enough to matter with
    # these weights: Gemma 2's real 50 and 30 would barely touch them).
    "tiny-gemma2": dict(head_dim=16, query_pre_attn_scalar=16, sliding_window=8,
                        attn_logit_softcapping=4.0, final_logit_softcapping=6.0),
    # Gemma 3: six layers as the real pattern (five local, one global),
    # narrower so the fixture stays small; global layers with linear RoPE
    # scaling (factor 2) and base 1e6, local ones base 1e4; logits
    # soft-capped at 8.
    "tiny-gemma3": dict(hidden_size=32, num_hidden_layers=6, num_attention_heads=2, num_key_value_heads=1,
                        head_dim=16, intermediate_size=64, query_pre_attn_scalar=16, sliding_window=8,
                        final_logit_softcapping=8.0,
                        rope_parameters={
                            "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 2.0},
                            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
    # Phi-3: fused qkv_proj and gate_up_proj, RoPE on half of each head,
    # LongRoPE over an original 64 positions (factor 128 / 64 = 2, cos/sin
    # times sqrt(1 + ln 2 / ln 64)): short factors up to 64 positions, long
    # ones past (the extra 72-token sequence; see EXTRA_SEQS).
    "tiny-phi3": dict(original_max_position_embeddings=64, rope_parameters={
        "rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
        "original_max_position_embeddings": 64,
        "short_factor": [1.0, 1.25, 1.5, 2.0], "long_factor": [1.0, 3.0, 6.0, 12.0]}),
    # OLMo 2: norms after attention and MLP, Q/K RMSNorm over the whole
    # projection.
    "tiny-olmo2": dict(rms_norm_eps=1e-6),
    # SmolLM3: four layers, the fourth without RoPE (interval 4, as the real
    # model and llama.cpp's fixed step).
    "tiny-smollm3": dict(num_hidden_layers=4, intermediate_size=64, no_rope_layer_interval=4),
}
# The models whose converted GGUF files are kept (f32 and q8_0).
KEEP_GGUF = {"tiny-llama3", "tiny-llama-yarn", "tiny-qwen3", "tiny-gemma2", "tiny-gemma3", "tiny-phi3",
             "tiny-olmo2", "tiny-smollm3"}
# Sequences beyond SEQ_LENGTHS, per model (LongRoPE's long factors), and
# the context each sequence is run with where it matters: HF picks Phi-3's
# factors by the sequence's length, ferrite (as llama.cpp) by the context
# size, so the tests give each sequence a context of its own length, and
# greedy runs (at most 35 positions) a context of 64: short factors.
EXTRA_SEQS = {"tiny-phi3": [("len72", 72)]}
CONTEXT_IS_LENGTH = {"tiny-phi3"}
GREEDY_CTX = {"tiny-phi3": 64}

# transformers' ROPE_INIT_FUNCTIONS on their own: (name, head_dim,
# max_position_embeddings, rope_parameters, seq_len).
ROPE_CASES = [
    ("linear-4", 64, 4096, {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}, None),
    ("llama3.1-8b", 128, 131072, {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                  "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 8192}, None),
    ("llama3.2-1b", 64, 131072, {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 8192}, None),
    ("llama3-tiny", 16, 128, EXTRA_CONFIG["tiny-llama3"]["rope_parameters"], None),
    ("yarn-qwen", 128, 131072, {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                                "original_max_position_embeddings": 32768}, None),
    ("yarn-betas-attn", 64, 16384, {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0,
                                    "original_max_position_embeddings": 2048, "beta_fast": 16.0,
                                    "beta_slow": 2.0, "attention_factor": 1.25}, None),
    ("yarn-mscale", 64, 163840, {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                                 "original_max_position_embeddings": 4096, "mscale": 1.0,
                                 "mscale_all_dim": 0.707}, None),
    ("yarn-tiny", 16, 128, EXTRA_CONFIG["tiny-llama-yarn"]["rope_parameters"], None),
    ("dynamic-at-max", 64, 2048, {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, None),
    ("dynamic-3x", 64, 2048, {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, 6144),
]
SEQ_LENGTHS = [("len1", 1), ("len9", 9), ("len40", 40)]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def write_json(path, obj):
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# ---------------------------------------------------------------- tokenizers

def train_tokenizer(kind):
    """A byte-level BPE of about 450 tokens in Llama-3 or Qwen2 style."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    pat = LLAMA3_PAT if kind == "llama" else QWEN2_PAT
    tok = Tokenizer(models.BPE(ignore_merges=False))
    if kind == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pat), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=440, min_frequency=1, show_progress=False, special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAIN_TEXT.splitlines(keepends=True), trainer)
    specials = LLAMA_SPECIALS if kind == "llama" else QWEN2_SPECIALS
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    if kind == "qwen2":
        tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in QWEN2_PLAIN_ADDED])
    if kind == "llama":
        bos = "<|begin_of_text|>"
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
                special_tokens=[(bos, tok.token_to_id(bos))]),
        ])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def save_tokenizer(kind, raw, directory):
    from transformers import PreTrainedTokenizerFast

    if kind == "llama":
        fast = PreTrainedTokenizerFast(
            tokenizer_object=raw, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
            model_max_length=POSITIONS, clean_up_tokenization_spaces=False)
        fast.chat_template = LLAMA_TEMPLATE
    else:
        fast = PreTrainedTokenizerFast(
            tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<|endoftext|>",
            model_max_length=POSITIONS, clean_up_tokenization_spaces=False)
        fast.chat_template = CHATML_TEMPLATE
    fast.save_pretrained(str(directory))


def tokenizer_goldens(kind, directory):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(directory))
    raw = Tokenizer.from_file(str(directory / "tokenizer.json"))
    corpus = LLAMA_CORPUS if kind == "llama" else QWEN2_CORPUS
    cases = []
    for text in corpus:
        ids = hf(text, add_special_tokens=False)["input_ids"]
        ids_special = hf(text, add_special_tokens=True)["input_ids"]
        ids_split = hf(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        assert ids == raw.encode(text, add_special_tokens=False).ids, text
        assert ids_special == raw.encode(text, add_special_tokens=True).ids, text
        cases.append({
            "text": text,
            "ids": ids,
            "ids_special": ids_special,
            "ids_split_special": ids_split,
            "decoded": hf.decode(ids, skip_special_tokens=False),
            "decoded_skip": hf.decode(ids_special, skip_special_tokens=True),
        })
    if kind == "llama":
        assert cases[4]["ids_special"][0] == hf.bos_token_id
    else:
        assert hf.bos_token_id is None
    return hf, {
        "dir": directory.name,
        "bos_id": hf.bos_token_id,
        "eos_id": hf.eos_token_id,
        "vocab_size": len(hf),
        "cases": cases,
    }


# ---------------------------------------------------------------- models

def randomize(model, seed):
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif "o_proj" in name or "down_proj" in name:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))


def make_model(name, arch, tok, dtype, tied, shard, seed, pad):
    import torch
    from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig,
                              LlamaForCausalLM, MistralConfig, MistralForCausalLM, Olmo2Config, Olmo2ForCausalLM,
                              Phi3Config, Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                              Qwen3ForCausalLM, SmolLM3Config, SmolLM3ForCausalLM)

    torch.manual_seed(seed)
    n_vocab = len(tok) + pad
    common = dict(
        vocab_size=n_vocab, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=POSITIONS,
        tie_word_embeddings=tied, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    )
    extra = EXTRA_CONFIG.get(name, {})
    if arch == "llama":
        if "rope_parameters" not in extra:
            extra = dict(extra, rope_theta=10000.0)
        config = LlamaConfig(**common, rms_norm_eps=1e-5, **extra)
        model = LlamaForCausalLM(config)
    elif arch == "qwen3":
        config = Qwen3Config(**common, rms_norm_eps=1e-6, rope_theta=1000000.0, use_sliding_window=False, **extra)
        model = Qwen3ForCausalLM(config)
    elif arch == "gemma2":
        config = Gemma2Config(**dict(common, rms_norm_eps=1e-6, **extra))
        model = Gemma2ForCausalLM(config)
    elif arch == "gemma3":
        config = Gemma3TextConfig(**dict(common, rms_norm_eps=1e-6, **extra))
        model = Gemma3ForCausalLM(config)
    elif arch == "phi3":
        config = Phi3Config(**dict(common, rms_norm_eps=1e-5, pad_token_id=0, **extra))
        model = Phi3ForCausalLM(config)
    elif arch == "olmo2":
        config = Olmo2Config(**dict(common, rope_theta=10000.0, pad_token_id=0, **extra))
        model = Olmo2ForCausalLM(config)
    elif arch == "smollm3":
        config = SmolLM3Config(**dict(common, rms_norm_eps=1e-6, rope_theta=10000.0, pad_token_id=0, **extra))
        model = SmolLM3ForCausalLM(config)
    elif arch == "mistral":
        config = MistralConfig(**common, rms_norm_eps=1e-5, rope_theta=10000.0, **extra)
        model = MistralForCausalLM(config)
    else:
        config = Qwen2Config(**dict(dict(common, rms_norm_eps=1e-6, rope_theta=1000000.0, use_sliding_window=False),
                                    **extra))
        model = Qwen2ForCausalLM(config)
    randomize(model, seed)
    if tied:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    model.generation_config.do_sample = False
    directory = OUT / name
    if directory.exists():
        shutil.rmtree(directory)
    model = model.to(getattr(torch, dtype))
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(str(directory), **kwargs)
    return directory, n_vocab


def load_reference(directory):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return model


def logits_of(model, ids):
    import torch

    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=False)
    return out.logits[0].float().numpy()


def greedy(model, ids):
    import torch

    model.generation_config.eos_token_id = None
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=MAX_NEW,
                             attention_mask=torch.ones(1, len(ids), dtype=torch.long), pad_token_id=0)
    new = out[0, len(ids):].tolist()
    assert len(new) == MAX_NEW, new
    return new


CONVERT_WRAPPER = r"""
import sys
sys.path.insert(0, sys.argv[1])
import convert_hf_to_gguf  # also puts llama.cpp's own gguf-py on sys.path
from conversion import base

_orig = base.TextModel.get_vocab_base_pre

def get_vocab_base_pre(self, tokenizer):
    try:
        return _orig(self, tokenizer)
    except NotImplementedError:
        return "gpt-2"  # a freshly trained vocabulary has no known hash

base.TextModel.get_vocab_base_pre = get_vocab_base_pre
# Gemma 2's converter wants a SentencePiece tokenizer.model; the fixtures
# have a byte-level BPE tokenizer.json (not what the GGUF tests look at).
from conversion import gemma
gemma.Gemma2Model.set_vocab = base.TextModel._set_vocab_gpt2
from conversion import phi  # Phi-3's too, unless tokenizer_class says GPT2Tokenizer
phi.Phi3MiniModel.set_vocab = base.TextModel._set_vocab_gpt2
sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[2:]
convert_hf_to_gguf.main()
"""


def convert(directory, outtype, out):
    """convert_hf_to_gguf.py's GGUF of `directory` in `outtype`, at `out`."""
    with tempfile.TemporaryDirectory() as tmp:
        wrapper = os.path.join(tmp, "wrapper.py")
        with open(wrapper, "w") as f:
            f.write(CONVERT_WRAPPER)
        subprocess.run([sys.executable, wrapper, str(LLAMA), str(directory), "--outtype", outtype,
                        "--outfile", str(out)], check=True, capture_output=True)


def converter_summary(directory, outtype, arch):
    """Tensors and hyper-parameters of convert_hf_to_gguf.py's GGUF."""
    common.use_llama_gguf_py()
    import gguf

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "model.gguf")
        convert(directory, outtype, out)
        reader = gguf.GGUFReader(out)
        metadata = {}
        for field in reader.fields.values():
            if field.name.startswith(arch + "."):
                v = field.contents()
                metadata[field.name] = float(v) if isinstance(v, float) else v
        tensors = {}
        for t in reader.tensors:
            ty = gguf.GGMLQuantizationType(t.tensor_type)
            raw = np.asarray(t.data)
            if ty == gguf.GGMLQuantizationType.BF16:
                values = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
            else:
                values = raw.astype(np.float32)
            tensors[t.name] = {
                "dims": [int(d) for d in t.shape],
                "type": ty.name,
                "f32_sha256": hashlib.sha256(values.astype("<f4").tobytes()).hexdigest(),
            }
    return {"outtype": outtype, "metadata": metadata, "tensors": tensors}


def top_gap(logits):
    """The smallest difference between the largest and second-largest
    logit over the rows of `logits` (T x V)."""
    part = np.sort(logits, axis=-1)
    return float((part[:, -1] - part[:, -2]).min())


# HF Llama module -> GGUF tensor, per layer (as the converter names them).
GGUF_LAYER = {
    "input_layernorm.weight": "attn_norm", "self_attn.q_proj.weight": "attn_q",
    "self_attn.k_proj.weight": "attn_k", "self_attn.v_proj.weight": "attn_v",
    "self_attn.o_proj.weight": "attn_output", "post_attention_layernorm.weight": "ffn_norm",
    "mlp.gate_proj.weight": "ffn_gate", "mlp.up_proj.weight": "ffn_up", "mlp.down_proj.weight": "ffn_down",
    "self_attn.q_norm.weight": "attn_q_norm", "self_attn.k_norm.weight": "attn_k_norm",
}
# Gemma's own names (its post_attention_layernorm is a post-norm).
GGUF_LAYER.update({
    "self_attn.qkv_proj.weight": "attn_qkv", "mlp.gate_up_proj.weight": "ffn_up",  # Phi-3
    "post_feedforward_layernorm.weight": "post_ffw_norm"})  # OLMo 2
GGUF_LAYER_OLMO2 = dict(GGUF_LAYER, **{"post_attention_layernorm.weight": "post_attention_norm"})
GGUF_LAYER_GEMMA = dict(GGUF_LAYER, **{
    "post_attention_layernorm.weight": "post_attention_norm", "pre_feedforward_layernorm.weight": "ffn_norm",
    "post_feedforward_layernorm.weight": "post_ffw_norm"})


def dequantized_reference(directory, gguf_path):
    """The HF model of `directory` with every weight replaced by its value
    in the q8_0 GGUF file, dequantized by gguf-py, keys (after RoPE) and
    values rounded to f16 (the KV cache of a quantized file), and every
    matrix input
    rounded to q8_0 blocks first (rounded half away from zero at the f32
    scale, which is then stored in f16), as llama.cpp and ferrite multiply
    a q8_0 matrix: the reference for the
    quantized file, free of the quantization's own effect on logits (which
    in these tiny random models is large: ~0.5 for the weights' rounding,
    ~0.3 more for the inputs')."""
    import torch

    common.use_llama_gguf_py()
    import gguf
    from gguf.quants import dequantize

    model = load_reference(directory)
    reader = gguf.GGUFReader(str(gguf_path))
    weights = {t.name: dequantize(t.data, t.tensor_type).reshape([int(x) for x in reversed(t.shape)])
               for t in reader.tensors}
    cfg = model.config

    def unpermute(w, n_head):  # the converter's LlamaModel.permute, undone
        hd = w.shape[0] // n_head
        return w.reshape(n_head, hd // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)

    gemma = cfg.model_type.startswith("gemma")
    layer_names = GGUF_LAYER_GEMMA if gemma else GGUF_LAYER_OLMO2 if cfg.model_type == "olmo2" else GGUF_LAYER
    state = {}
    for key in model.state_dict():
        if key == "model.embed_tokens.weight":
            src = "token_embd.weight"
        elif key == "lm_head.weight":
            src = "output.weight" if "output.weight" in weights else "token_embd.weight"
        elif key == "model.norm.weight":
            src = "output_norm.weight"
        else:
            parts = key.split(".")
            src = f"blk.{parts[2]}.{layer_names['.'.join(parts[3:])]}.weight"
        w = weights[src]
        if gemma and key.endswith("norm.weight"):  # the converter added Gemma's 1
            w = w - np.float32(1)
        if cfg.model_type not in ("llama", "smollm3"):
            pass
        elif "q_proj" in key:
            w = unpermute(w, cfg.num_attention_heads)
        elif "k_proj" in key:
            w = unpermute(w, cfg.num_key_value_heads)
        state[key] = torch.tensor(np.ascontiguousarray(w), dtype=torch.float32)
    model.load_state_dict(state)

    def f16(t):  # the f16 cache
        return t.half().float()

    def round_q8_0(module, args):  # each matrix input as ggml's quantize_row_q8_0:
        (x,) = args                 # q = round(x / d) with d in f32, value q * f16(d)
        blocks = x.reshape(-1, 32)
        d = blocks.abs().amax(dim=1, keepdim=True) / 127
        inv = torch.where(d > 0, 1 / d, torch.zeros_like(d))
        q = torch.sign(blocks) * torch.floor(blocks.abs() * inv + 0.5)
        return ((q * d.half().float()).reshape(x.shape),)

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_pre_hook(round_q8_0)
        if name.endswith(".v_proj"):  # the f16 KV cache: values ... (not Phi-3's qkv_proj)
            module.register_forward_hook(lambda m, a, out: f16(out))
        if name.endswith("qkv_proj"):  # (Phi-3's fused projection: its value part)
            kv = cfg.num_key_value_heads * getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads)
            module.register_forward_hook(
                lambda m, a, out, kv=kv: torch.cat([out[..., :-kv], f16(out[..., -kv:])], dim=-1))
        if name.endswith("k_proj") and cfg.model_type == "smollm3" and not cfg.no_rope_layers[int(name.split(".")[2])]:
            module.register_forward_hook(lambda m, a, out: f16(out))  # keys of NoPE layers
    # ... and keys after RoPE (the modeling module's apply_rotary_pos_emb).
    modeling = sys.modules[type(model).__module__]
    if not hasattr(modeling, "_ferrite_rope"):
        modeling._ferrite_rope = modeling.apply_rotary_pos_emb

        def rope_then_f16(q, k, *args, **kwargs):
            q, k = modeling._ferrite_rope(q, k, *args, **kwargs)
            return q, (f16(k) if getattr(modeling, "_ferrite_f16_keys", False) else k)

        modeling.apply_rotary_pos_emb = rope_then_f16
    modeling._ferrite_f16_keys = True
    return model


def q8_0_reference(name, directory, q8_file, n_vocab, sequences, cases):
    """The q8_0 file's own reference (HF on its dequantized weights, see
    `dequantized_reference`): writes its logits for `sequences` and returns
    the goldens entry, with greedy runs from the prompts of `cases`."""
    qmodel = dequantized_reference(directory, OUT / q8_file)
    qfile = f"logits-{name}.q8_0.f32"
    qchunks, qseqs, qoff = [], [], 0
    for seq in sequences:
        l = logits_of(qmodel, seq["ids"])
        qchunks.append(l.astype("<f4").tobytes())
        qseqs.append(dict(seq, offset=qoff))
        qoff += l.size
    (OUT / qfile).write_bytes(b"".join(qchunks))
    qcases = [{"prompt": c["prompt"], "prompt_ids": c["prompt_ids"],
               "new_ids": greedy(qmodel, c["prompt_ids"])} for c in cases]
    qgaps = [top_gap(logits_of(qmodel, c["prompt_ids"] + c["new_ids"][:-1])[len(c["prompt_ids"]) - 1:])
             for c in qcases]
    sys.modules[type(qmodel).__module__]._ferrite_f16_keys = False
    log(f"  q8_0 reference: smallest greedy gap {min(qgaps):.3f}")
    return {
        "logits": {"file": qfile, "dtype": "f32", "byte_order": "little",
                   "n_vocab": n_vocab, "sequences": qseqs},
        "greedy": qcases, "min_greedy_gap": min(qgaps),
    }


def rope_goldens():
    """transformers' ROPE_INIT_FUNCTIONS outputs for ROPE_CASES."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cases = []
    for name, head_dim, max_pos, params, seq_len in ROPE_CASES:
        n_heads = 4
        config = LlamaConfig(hidden_size=head_dim * n_heads, num_attention_heads=n_heads,
                             max_position_embeddings=max_pos, rope_parameters=dict(params))
        kwargs = {} if seq_len is None else {"seq_len": seq_len}
        inv_freq, attention = ROPE_INIT_FUNCTIONS[params["rope_type"]](config, "cpu", **kwargs)
        cases.append({
            "name": name, "head_dim": head_dim, "max_position_embeddings": max_pos,
            "rope_parameters": params, "seq_len": seq_len,
            "inv_freq": [float(x) for x in inv_freq.float().numpy()],
            "attention_factor": float(attention),
        })
    return {"cases": cases}


def main():
    import safetensors
    import tokenizers
    import torch
    import transformers

    torch.set_num_threads(2)
    OUT.mkdir(parents=True, exist_ok=True)
    goldens = {
        "versions": {
            "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "safetensors": safetensors.__version__,
        },
        "models": {},
        "tokenizers": {},
    }
    raw_tokenizers = {kind: train_tokenizer(kind) for kind in ("llama", "qwen2")}
    hf_tokenizers = {}
    for (name, arch, kind, dtype, tied, shard, seed, pad) in MODELS:
        log(f"{name}: {arch} {dtype} tied={tied}")
        # The tokenizer's ids and texts, for the model's config.
        from transformers import PreTrainedTokenizerFast
        tok = PreTrainedTokenizerFast(tokenizer_object=raw_tokenizers[kind],
                                      bos_token="<|begin_of_text|>" if kind == "llama" else None,
                                      eos_token="<|eot_id|>" if kind == "llama" else "<|im_end|>")
        directory, n_vocab = make_model(name, arch, tok, dtype, tied, shard, seed, pad)
        save_tokenizer(kind, raw_tokenizers[kind], directory)
        if kind not in hf_tokenizers:
            hf, golden = tokenizer_goldens(kind, directory)
            hf_tokenizers[kind] = hf
            goldens["tokenizers"][kind] = golden
        hf = hf_tokenizers[kind]
        model = load_reference(directory)

        rng = np.random.default_rng(seed)
        logit_file = f"logits-{name}.f32"
        chunks, sequences, offset = [], [], 0
        for seq_name, length in SEQ_LENGTHS + EXTRA_SEQS.get(name, []):
            ids = [int(x) for x in rng.integers(0, len(hf), size=length)]
            l = logits_of(model, ids)
            assert l.shape == (length, n_vocab)
            assert float(l.std()) > 0.5, "logits too flat"
            chunks.append(l.astype("<f4").tobytes())
            sequences.append({"name": seq_name, "ids": ids, "offset": offset, "shape": [length, n_vocab]})
            if name in CONTEXT_IS_LENGTH:
                sequences[-1]["n_ctx"] = length
            offset += length * n_vocab
        (OUT / logit_file).write_bytes(b"".join(chunks))

        cases = []
        for prompt in GREEDY_PROMPTS:
            ids = hf(prompt, add_special_tokens=True)["input_ids"]
            cases.append({"prompt": prompt, "prompt_ids": ids, "new_ids": greedy(model, ids)})
        chat_ids = hf.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=True)
        if isinstance(chat_ids, dict) or hasattr(chat_ids, "keys"):
            chat_ids = chat_ids["input_ids"]
        shards = sorted(p.name for p in directory.glob("*.safetensors"))
        goldens["models"][name] = {
            "architecture": type(model).__name__,
            "dtype": dtype,
            "tied": tied,
            "shards": shards,
            "n_vocab": n_vocab,
            "tokenizer": kind,
            "tokenizer_vocab": len(hf),
            "seed": seed,
            "logits": {"file": logit_file, "dtype": "f32", "byte_order": "little",
                       "n_vocab": n_vocab, "sequences": sequences},
            "greedy": cases,
            "greedy_ctx": GREEDY_CTX.get(name, POSITIONS),
            "chat": {"messages": CHAT, "ids": list(chat_ids)},
            "converter": converter_summary(directory, "bf16" if dtype == "bfloat16" else "f32",
                                           "llama" if arch == "mistral" else arch),
        }
        gaps = [top_gap(logits_of(model, c["prompt_ids"] + c["new_ids"][:-1])[len(c["prompt_ids"]) - 1:])
                for c in cases]
        goldens["models"][name]["min_greedy_gap"] = min(gaps)
        if name in KEEP_GGUF:
            files = {}
            for outtype in ("f32", "q8_0"):
                path = OUT / f"{name}.{outtype}.gguf"
                convert(directory, outtype, path)
                files[outtype] = path.name
            goldens["models"][name]["gguf"] = files
            goldens["models"][name]["q8_0_reference"] = q8_0_reference(name, directory, files["q8_0"],
                                                                       n_vocab, sequences, cases)
        log(f"  {n_vocab} vocab, shards {shards}, logits std {float(l.std()):.2f}, "
            f"smallest greedy top-1/top-2 gap {min(gaps):.3f}")
    write_json(OUT / "goldens.json", goldens)
    write_json(OUT / "rope-goldens.json", {"versions": goldens["versions"], **rope_goldens()})
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    log(f"wrote {OUT} ({total / 1e6:.2f} MB)")
    for p in sorted(OUT.rglob("*")):
        if p.is_file():
            log(f"  {p.relative_to(OUT)} {p.stat().st_size} {hashlib.sha256(p.read_bytes()).hexdigest()[:12]}")


def q8_0_references_only():
    """`--q8-references`: recomputes only the q8_0 references of the
    committed fixtures (their directories, GGUF files and sequences kept)."""
    import torch

    torch.set_num_threads(2)
    goldens = json.loads((OUT / "goldens.json").read_text(encoding="utf-8"))
    for name, entry in goldens["models"].items():
        if "q8_0_reference" not in entry:
            continue
        log(name)
        sequences = entry["logits"]["sequences"]
        entry["q8_0_reference"] = q8_0_reference(name, OUT / name, entry["gguf"]["q8_0"], entry["n_vocab"],
                                                 sequences, entry["greedy"])
    write_json(OUT / "goldens.json", goldens)


if __name__ == "__main__":
    q8_0_references_only() if sys.argv[1:] == ["--q8-references"] else main()
