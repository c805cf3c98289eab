#!/usr/bin/env python3
"""Tiny random-weight GPT-2 fixtures with reference outputs from HF transformers
and llama.cpp, so that ferrite's GPT-2 path can be tested without Python.

Run from anywhere (takes under a minute on 2 cores):

    scripts/refenv python scripts/make-gpt2-fixtures.py

Needs the reference venv (scripts/setup-refenv.sh: torch,
transformers, tokenizers, numpy, safetensors, gguf) and llama.cpp built from
the llama-cpp-python sdist (scripts/build-llamacpp.sh), found at
$FERRITE_LLAMACPP (scripts/env.sh), with its binaries in
$FERRITE_LLAMACPP/build/bin. It also compiles scripts/oracle/llama-oracle.cpp (ours,
already in the repository) with g++ into a temporary file.

What it writes, under testdata/gpt2/ (every file is deterministic: fixed
seeds, no time stamps):

  train.txt             ~3 KB of varied text (written from TRAIN_TEXT below)
                        on which the tokenizer is trained
  tiny-hf/              the HF model directory:
      config.json, generation_config.json, model.safetensors (f32, tied
      embeddings so no lm_head.weight), vocab.json, merges.txt,
      tokenizer.json, tokenizer_config.json, special_tokens_map.json
  tiny.f32.gguf         convert_hf_to_gguf.py --outtype f32
  tiny.f16.gguf         convert_hf_to_gguf.py --outtype f16
  tiny.q8_0.gguf        convert_hf_to_gguf.py --outtype q8_0
  logits-hf.f32         HF logits (see "logits" below)
  logits-llamacpp.f32   llama.cpp logits of the 33-token sequence for the
                        f32, f16 and q8_0 GGUFs
  goldens.json          everything else (layout below)

Tokenizer: a byte-level BPE trained with HF `tokenizers` exactly in the GPT-2
style: ByteLevel pre-tokenizer (add_prefix_space=False, GPT-2 regex), ByteLevel
decoder, ByteLevel post-processor, no normalizer; 256 byte tokens + merges,
and <|endoftext|> as the LAST id (as in GPT-2, where it is 50256). It is saved
as vocab.json + merges.txt ("#version: 0.2" header), and tokenizer.json is
rebuilt from those two files so that they are the single source of truth.
No BOS is added (tokenizer_config.json: add_bos_token false), like GPT-2.

Model: GPT2LMHeadModel, n_layer 2, n_embd 64, n_head 4, n_positions = n_ctx =
128, vocab = tokenizer size, gelu_new, LayerNorm eps 1e-5, tied embeddings.
Every parameter is redrawn from a seeded torch.Generator (see make_model):
matrices and embeddings N(0, 0.2^2) (attention/MLP output projections
N(0, 0.1^2)), biases N(0, 0.1^2), LayerNorm gains 1 + N(0, 0.1^2) and LayerNorm
biases N(0, 0.1^2) -- all non-trivial so that a missing bias or a wrong gain
shows up. `config.json` also carries "n_ctx" (transformers 5 no longer writes
it, convert_hf_to_gguf.py's GPT-2 path requires it).

GGUF conversion and the pre-tokenizer hash: convert_hf_to_gguf.py identifies a
BPE pre-tokenizer by hashing the ids its tokenizer gives for a fixed check
string (get_vocab_base_pre). A freshly trained vocabulary gives ids no known
model gives, so the converter refuses it ("BPE pre-tokenizer was not
recognized"). Since our pre-tokenizer IS GPT-2's (same regex, byte-level), we
run the converter in a subprocess through a tiny wrapper (CONVERT_WRAPPER
below) that imports convert_hf_to_gguf.py as a module, replaces
TextModel.get_vocab_base_pre by a function that calls the original and, only
if it raises NotImplementedError, returns "gpt-2" -- which makes the converter
write tokenizer.ggml.pre = "gpt-2" (llama.cpp: LLAMA_VOCAB_PRE_TYPE_GPT2) --
then calls its main(). Nothing under $FERRITE_LLAMACPP is modified.

goldens.json (all ids are token ids of this vocabulary, integers):

  "versions":   torch, transformers, tokenizers, numpy, gguf-py, llama.cpp
                (llama-cpp-python sdist version + `--version` line), python
  "model":      the hyper-parameters above, eot id, seeds
  "files":      {file name: {"bytes": n, "sha256": hex}} of every file written
  "tokenizer":  {"corpus_size": n, "all_agree": bool, "n_disagree": k,
                 "cases": [{"text": str, "hf": [ids], "llama_cpp": [ids],
                            "agree": bool}, ...]}
                hf = HF fast tokenizer, add_special_tokens=False (special
                tokens in the text ARE recognised, as HF always does);
                llama_cpp = `llama-tokenize -m tiny.f32.gguf -f FILE --ids
                --no-bos --no-escape --log-disable` (special tokens parsed,
                llama-tokenize's default), FILE holding the text's UTF-8 bytes
                verbatim.
  "logits":     {"file": "logits-hf.f32", "dtype": "f32", "byte_order":
                 "little", "n_vocab": V, "sequences": [{"name": ..., "ids":
                 [...], "offset": o, "shape": [T, V]}, ...]}
                The file is the concatenation, in this order, of each
                sequence's row-major T x V float32 matrix; "offset" is the
                index (in f32 ELEMENTS, not bytes) of its first value; row t
                is the logits after feeding ids[0..=t] (HF f32, eager
                attention, positions 0..T-1, one forward pass). Each sequence
                also has "max_abs_diff_vs_f64_numpy_from_f32_gguf": the largest
                difference from an independent float64 numpy forward pass
                over tiny.f32.gguf (f64_forward_from_gguf; a few 1e-6).
  "llama_cpp_logits": same layout for file "logits-llamacpp.f32", one entry
                per GGUF ("model": "tiny.f32.gguf" / "tiny.f16.gguf" /
                "tiny.q8_0.gguf") of the 33-token sequence, computed by
                scripts/oracle/llama-oracle.cpp (llama.cpp library, one
                batch, 2 threads, flash attention off, f16 KV cache), each
                with its agreement with HF: "top1_agree" (fraction of
                positions with the same argmax), "max_abs_diff", "nmse"
                (sum (l-h)^2 / sum h^2).
  "greedy":     {"max_new_tokens": 20, "n_agree_hf_vs_llama_cpp_f32": k,
                 "n_agree_hf_vs_llama_cpp_q8_0": k, "all_completions_match_oracle":
                 bool, "cases": [{"prompt": str,
                 "prompt_ids": [...], "hf": [20 ids],
                 "llama_cpp": {"tiny.f32.gguf": {...}, "tiny.q8_0.gguf":
                 {...}}, "hf_vs_llama_cpp_f32_ids": bool, ...}]}
                hf = model.generate(do_sample=False, max_new_tokens=20).
                Per GGUF: "oracle_ids" = llama.cpp's argmax ids (llama-oracle
                greedy: prompt in one batch, then one token per decode call,
                exactly as llama-completion does), "completion_text" /
                "completion_hex" = what `llama-completion -p PROMPT
                --no-escape -n 20 --temp 0 --top-k 1 --seed 42 -no-cnv
                --no-display-prompt` printed (it tokenizes the prompt itself)
                (text decoded with errors="replace"; hex = exact bytes; see
                llama_completion() for how its output is captured),
                "completion_stopped_at_eot" = it printed " [end of text]",
                "completion_matches_oracle" = those bytes equal the byte-level
                decoding of oracle_ids (up to a first <|endoftext|>),
                "completion_retokenized" = the HF
                tokenizer's ids of that text (NOT generally equal to the
                generated ids: BPE re-tokenizes a concatenation canonically),
                "agree_with_hf" = oracle_ids == hf. Per case also
                "prompt_ids_llama_cpp_agree" (llama-tokenize gives the same
                prompt ids), "hf_vs_llama_cpp_{f32,q8_0}_ids" (oracle ids ==
                hf) and "hf_vs_llama_cpp_{f32,q8_0}_completion_text"
                (llama-completion's bytes == byte-level decoding of hf).

The HF tokenizer is also checked (assertions) against GPT2Tokenizer loaded
from a directory holding only vocab.json + merges.txt, and to round-trip every
string exactly.
"""

import hashlib
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile

import numpy as np

import common

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "gpt2"
HF_DIR = OUT / "tiny-hf"
LLAMA = common.LLAMA
BIN = common.LLAMA_BIN
LLAMA_CPP_PYTHON_VERSION = common.LLAMA_CPP_PYTHON_VERSION  # the sdist build-llamacpp.sh unpacks

VOCAB_SIZE = 768  # including <|endoftext|>
EOT = "<|endoftext|>"
N_LAYER, N_EMBD, N_HEAD, N_POS = 2, 64, 4, 128
SEED = 20240611
MAX_NEW = 20
THREADS = 2

TRAIN_TEXT = """\
The quick brown fox jumps over the lazy dog. It wasn't the first time, and it won't be the last.
"Where are you going?" she asked. "To the market," he said, "and then to the station."
I'm sure they'll come back tomorrow; we've waited long enough, haven't we? You'd think so.

Chapter 1: A Small Beginning

Once upon a time, in a village by the sea, there lived an old baker named Tom. Every morning
at 5:30 he lit the oven, and by 7:15 the whole street smelled of fresh bread. People came from
the north and from the south, from the hills and from the harbour, to buy his loaves.
"Two, please," said the first customer. "Three for me," said the second. The third wanted a cake.

The baker's daughter, Anna, kept the accounts. In 1999 they sold 12,345 loaves; in 2000 they
sold 13,002; by 2023 the number had grown to 48,761. Prices rose from $0.99 to $3.50 (about
3.25 EUR), a change of +253.5%. She wrote everything down: dates like 2023-04-01 and 01/02/2024,
times like 12:00:59, phone numbers like +1 (555) 010-2034, and e-mail addresses like
anna.baker@example.com. Her favourite numbers were 3.14159, 2.71828, 1.41421 and 42.

Numbers, lists and odd punctuation:
  1. flour -- 500 g
  2. water -- 350 ml
  3. salt  -- 10 g (not 100!)
  4. yeast -- 7 g; wait 2-3 hours...
Is it 50/50? Maybe 60/40... or 99.9% sure?! #bread @home [draft] {v2} <tag> a|b ~x^2 `code`

Code samples:

def fibonacci(n):
    \"\"\"Return the n-th Fibonacci number.\"\"\"
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a

fn main() {
    let xs: Vec<u32> = (1..=10).map(|x| x * x).collect();
    println!("sum = {}", xs.iter().sum::<u32>());
}

for (int i = 0; i < 10; i++) { total += values[i] * 2; }
if x != None and y >= 3: print(f"x={x}, y={y}")
SELECT name, COUNT(*) FROM orders WHERE price > 10.5 GROUP BY name;

Travel notes. In Paris we drank a café au lait at a small café near the Seine; the waiter was
naïve enough to think we spoke French. In Zürich the façade of the old hôtel looked brand new.
Señor Muñoz cooked jalapeño crêpes, and the smörgåsbord in Malmö was déjà vu all over again.
Straße, Ärger, Öl, Übung; œuvre, cœur; Ελληνικά; русский язык; עברית; العربية.
In Tokyo we saw a sign: 日本語を勉強しています。 東京は大きい都市です。日本, 日本人, 東京.
In Beijing: 你好，世界！我们在北京。中文很有意思。 In Seoul: 안녕하세요, 서울입니다.
Emoji are everywhere now 😀 😂 🚀 🍞 ❤️ 👍🏽 🇯🇵 ✅ — even in bread shops 🥐🥖.

Whitespace matters too:	tabs	between	words, double  spaces,   triple   spaces,
    indented lines,
        more indented lines,

and blank lines.



A short dialogue:
Q: What's the time?
A: It's half past nine.
Q: Who'd have thought it?
A: Nobody. They're all asleep, and we're the only ones awake.

Some proverbs. Don't count your chickens before they hatch. A stitch in time saves nine.
All that glitters is not gold. Actions speak louder than words. When in Rome, do as the
Romans do. The early bird catches the worm, but the second mouse gets the cheese.
Better late than never. Practice makes perfect. Time and tide wait for no one.

THE END (or is it?) -- Written on Monday, 3rd of June; revised on Friday the 13th.
"""

# At least 100 strings for the tokenizer goldens.
TOKENIZER_CORPUS = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n",
    "Hello", "Hello world", " Hello world", "Hello world!", "hello, world.", "HELLO WORLD",
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time, in a village by the sea, there lived an old baker.",
    "It wasn't the first time, and it won't be the last.",
    "I'm sure they'll come back; we've waited, haven't we? You'd think so.",
    "I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
    "'s 't 're 've 'm 'll 'd", "don't", "DON'T", "rock 'n' roll", "''''''", "\"quoted\" text",
    "0", "1", "42", "123", "1234", "12345", "1234567890", "3.14159", "-273.15", "+1 (555) 010-2034",
    "3 33 333 3333 33333 333333 3333333 33333333", "3.3 3..3 3...3", "1,000,000", "$3.50", "99.9%",
    "2023-04-01", "12:00:59", "0x1F 0b1010 1e-9", "v1.2.3",
    "Hello, world! How are you?", "Wait... what?!", "(parentheses) [brackets] {braces} <angles>",
    "a|b ~x^2 `code` #tag @user", "------======= ......!!!!!!??????", "```````\"\"\"\"",
    "end.", "semi;colon:colon", "a-b_c/d\\e", "100/50=2", "key=value&x=1",
    "def fibonacci(n):\n    a, b = 0, 1\n    return a",
    "fn main() {\n    println!(\"hi\");\n}\n",
    "for (int i = 0; i < 10; i++) { total += values[i]; }",
    "if x != None and y >= 3: print(f\"x={x}\")",
    "SELECT name FROM t WHERE a > 1;",
    "    indented", "\tindented with tab", "trailing spaces   ", "trailing newline\n", "many\n\n\n\nnewlines",
    "word  word   word    word", " leading space", "  two leading", "mixed \t tabs \t and spaces",
    "café", "a café au lait", "naïve", "Zürich façade hôtel", "jalapeño crêpes", "smörgåsbord Malmö",
    "Straße Ärger Öl Übung", "œuvre cœur", "déjà vu", "Ελληνικά", "русский язык", "нещо на Български",
    "עברית", "العربية", "हिन्दी", "ไทย",
    "日本", "日本語", "日本語を勉強しています。", "東京は大きい都市です。", "你好，世界！", "我想在apple工作1314151天～",
    "안녕하세요", "カタカナ ひらがな", "កាន់តែពិសេសអាច",
    "😀", "😀😂", "🚀 rocket", "❤️", "👍🏽", "🇯🇵", "✅ done", "🦙🦙", "😶\u200d🌫️", "🥐🥖 bread",
    "mixed 日本 and café and 😀 in one line",
    "<|endoftext|>", "before<|endoftext|>after", "text <|endoftext|> more text",
    "<|endoftext|><|endoftext|>", "A<|endoftext|>\nB", "<|endoftext", "|endoftext|>", "<|ENDOFTEXT|>",
    "\u00a0non-breaking\u00a0space", "zero\u200bwidth", "e\u0301 combining", "\ufeffBOM", "\x00nul\x01",
    "\x7f del", "€ £ ¥ ₹", "± × ÷ ≠ ≤ ≥ ∞", "“smart quotes” and ‘single’", "em—dash en–dash",
    "The baker's daughter, Anna, kept the accounts. In 1999 they sold 12,345 loaves.",
    "Q: What's the time?\nA: It's half past nine.\n",
    "All that glitters is not gold. Actions speak louder than words.",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "abababababababab", "xyzzy qwerty zxcvbnm",
    "supercalifragilisticexpialidocious", "Antidisestablishmentarianism",
]

EVAL_TEXT = (
    "In the morning the baker opened the shop at 6:45, sold 37 loaves and 12 cakes, "
    "and wrote \"café\" on the board next to 日本 bread 🍞. "
    "def bake(n):\n    return [loaf(i) for i in range(n)]\n"
    "The naïve apprentice asked: \"Why 350 ml of water, not 400?\" "
    "The answer was simple -- practice makes perfect!<|endoftext|>"
    "A new story begins: once upon a time there was a quick brown fox who lived near the harbour. "
    "Every day at 12:00 she counted 1, 2, 3, 4, 5 boats and wrote the numbers down... "
    "On Friday the 13th, 2024-06-14 was still a day away; the market was quiet, the sea calm, "
    "and the old man said, \"Don't count your chickens before they hatch.\" "
    "Then the bread was gone, the shop closed, and the village slept until the next morning."
)
# (name, start, length) slices of EVAL_TEXT's ids; the 100-token one contains <|endoftext|>.
SEQUENCES = [("len1", 0, 1), ("len7", 3, 7), ("len33", 20, 33), ("len100", 100, 100)]
Q8_SEQUENCE = "len33"

GREEDY_PROMPTS = [
    "The quick brown fox",
    "Once upon a time, in a village by the sea,",
    "def fibonacci(n):\n",
    "In Tokyo we saw a sign: 日本",
    "Prices rose from $0.99 to",
]

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
        # Unknown check-string hash (a freshly trained vocabulary); the
        # pre-tokenizer is GPT-2's own ByteLevel regex, so say so.
        return "gpt-2"

base.TextModel.get_vocab_base_pre = get_vocab_base_pre
sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[2:]
convert_hf_to_gguf.main()
"""


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def bytes_to_unicode():
    """GPT-2's byte <-> printable-unicode table (as in openai/gpt-2 encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_OF = {c: b for b, c in bytes_to_unicode().items()}


def write_json(path, obj):
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# ---------------------------------------------------------------- tokenizer

def make_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, processors, trainers, AddedToken

    (OUT / "train.txt").write_text(TRAIN_TEXT, encoding="utf-8")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - 1, min_frequency=1, show_progress=False, special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAIN_TEXT.splitlines(keepends=True), trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = model["vocab"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    assert sorted(vocab.values()) == list(range(len(vocab)))
    eot_id = len(vocab)
    vocab[EOT] = eot_id
    log(f"tokenizer: {len(vocab)} tokens ({len(merges)} merges), {EOT} = {eot_id}")

    HF_DIR.mkdir(parents=True, exist_ok=True)
    ordered = dict(sorted(vocab.items(), key=lambda kv: kv[1]))
    (HF_DIR / "vocab.json").write_text(json.dumps(ordered, ensure_ascii=False) + "\n", encoding="utf-8")
    (HF_DIR / "merges.txt").write_text("#version: 0.2\n" + "".join(m + "\n" for m in merges), encoding="utf-8")

    # tokenizer.json rebuilt from vocab.json + merges.txt, GPT-2's settings.
    fast = Tokenizer(models.BPE.from_file(str(HF_DIR / "vocab.json"), str(HF_DIR / "merges.txt")))
    fast.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    fast.post_processor = processors.ByteLevel(trim_offsets=False)
    fast.decoder = decoders.ByteLevel()
    fast.add_special_tokens([AddedToken(EOT, single_word=False, lstrip=False, rstrip=False, normalized=True, special=True)])
    assert fast.token_to_id(EOT) == eot_id and fast.get_vocab_size() == len(vocab)
    tj = json.loads(fast.to_str())
    write_json(HF_DIR / "tokenizer.json", tj)

    special = {"bos_token": EOT, "eos_token": EOT, "unk_token": EOT}
    write_json(HF_DIR / "special_tokens_map.json", special)
    write_json(HF_DIR / "tokenizer_config.json", {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {str(eot_id): {
            "content": EOT, "lstrip": False, "normalized": True, "rstrip": False,
            "single_word": False, "special": True}},
        **special,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "model_max_length": N_POS,
        "tokenizer_class": "GPT2Tokenizer",
    })
    return len(vocab), eot_id


def load_tokenizers():
    """The HF fast tokenizer from the directory, checked against GPT2Tokenizer
    loaded from a directory holding only vocab.json + merges.txt (GPT-2's
    legacy files, what the slow tokenizer used to read)."""
    import shutil
    from transformers import AutoTokenizer, GPT2Tokenizer
    auto = AutoTokenizer.from_pretrained(str(HF_DIR))
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("vocab.json", "merges.txt"):
            shutil.copy(HF_DIR / name, tmp)
        files_only = GPT2Tokenizer.from_pretrained(tmp)
    assert files_only.get_vocab() == auto.get_vocab()
    for text in TOKENIZER_CORPUS + GREEDY_PROMPTS + [EVAL_TEXT, TRAIN_TEXT]:
        a = auto.encode(text, add_special_tokens=False)
        b = files_only.encode(text, add_special_tokens=False)
        assert a == b, (text, a, b)
        assert decode_bytes(auto, a).decode("utf-8") == text, text
    return auto


def decode_bytes(tok, ids):
    """Exact bytes of a token sequence (byte-level: no lossy UTF-8 decoding)."""
    out = bytearray()
    for t in tok.convert_ids_to_tokens(ids):
        if t == EOT:
            out += EOT.encode()
        else:
            out += bytes(BYTE_OF[c] for c in t)
    return bytes(out)


# ---------------------------------------------------------------- model

def make_model(n_vocab, eot_id):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(SEED)
    config = GPT2Config(
        vocab_size=n_vocab, n_positions=N_POS, n_ctx=N_POS, n_embd=N_EMBD, n_layer=N_LAYER, n_head=N_HEAD,
        activation_function="gelu_new", layer_norm_epsilon=1e-5, initializer_range=0.2,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=eot_id, eos_token_id=eot_id,
        tie_word_embeddings=True, architectures=["GPT2LMHeadModel"])
    model = GPT2LMHeadModel(config)
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied lm_head is not listed twice
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if ".ln_" in name or name.startswith("transformer.ln_f"):
                p.copy_((1.0 + 0.1 * noise) if name.endswith(".weight") else 0.1 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            elif name.endswith("c_proj.weight"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(0.2 * noise)
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
    model.save_pretrained(str(HF_DIR), safe_serialization=True)
    return model_from_dir()


def model_from_dir():
    from transformers import GPT2LMHeadModel
    model = GPT2LMHeadModel.from_pretrained(str(HF_DIR), attn_implementation="eager")
    model.eval()
    return model


def f64_forward_from_gguf(gguf_path, ids):
    """Independent float64 numpy GPT-2 forward pass reading tiny.f32.gguf with
    llama.cpp's gguf-py: checks (and documents) the GGUF tensor semantics.
    A tensor of GGUF shape (ne0, ne1) is a row-major numpy (ne1, ne0) matrix W
    applied as y = W x (+ bias); attn_qkv rows are Q then K then V (64 each),
    head h uses columns 16h..16h+16 of each; gelu is the tanh form; the output
    projection is token_embd (tied)."""
    from gguf import GGUFReader
    reader = GGUFReader(str(gguf_path))
    w = {t.name: np.array(t.data, dtype=np.float64).reshape([int(d) for d in reversed(t.shape)])
         for t in reader.tensors}
    n, hd = len(ids), N_EMBD // N_HEAD

    def norm(x, name):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + 1e-5) * w[name + ".weight"] + w[name + ".bias"]

    def linear(x, name):
        return x @ w[name + ".weight"].T + w[name + ".bias"]

    x = w["token_embd.weight"][ids] + w["position_embd.weight"][:n]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for layer in range(N_LAYER):
        p = f"blk.{layer}."
        qkv = linear(norm(x, p + "attn_norm"), p + "attn_qkv")
        q, k, v = (qkv[:, i * N_EMBD:(i + 1) * N_EMBD].reshape(n, N_HEAD, hd).transpose(1, 0, 2) for i in range(3))
        a = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + mask
        a = np.exp(a - a.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        x = x + linear((a @ v).transpose(1, 0, 2).reshape(n, N_EMBD), p + "attn_output")
        u = linear(norm(x, p + "ffn_norm"), p + "ffn_up")
        u = 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u ** 3)))
        x = x + linear(u, p + "ffn_down")
    return norm(x, "output_norm") @ w["token_embd.weight"].T


# ---------------------------------------------------------------- llama.cpp

def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, **kw)


def convert():
    files = {}
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(CONVERT_WRAPPER)
        wrapper = f.name
    try:
        for outtype in ("f32", "f16", "q8_0"):
            out = OUT / f"tiny.{outtype}.gguf"
            log(f"convert_hf_to_gguf.py --outtype {outtype}")
            run([sys.executable, wrapper, str(LLAMA), str(HF_DIR), "--outtype", outtype, "--outfile", str(out)])
            files[outtype] = out
    finally:
        os.unlink(wrapper)
    return files


def build_oracle(tmp):
    exe = os.path.join(tmp, "llama-oracle")
    run(["g++", "-O2", "-std=c++17", f"-I{LLAMA}/include", f"-I{LLAMA}/ggml/include",
         str(ROOT / "scripts" / "oracle" / "llama-oracle.cpp"),
         f"-L{BIN}", "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{BIN}", "-o", exe])
    return exe


def llama_tokenize(gguf, text, tmp):
    path = os.path.join(tmp, "text.txt")
    with open(path, "wb") as f:
        f.write(text.encode("utf-8"))
    out = run([str(BIN / "llama-tokenize"), "-m", str(gguf), "-f", path, "--ids", "--no-bos",
               "--no-escape", "--log-disable"], text=True).stdout
    lines = out.strip().splitlines()
    return json.loads(lines[-1]) if lines else []


def write_ids(ids, tmp):
    path = os.path.join(tmp, "ids.txt")
    with open(path, "w") as f:
        f.write(" ".join(map(str, ids)))
    return path


def oracle_logits(oracle, gguf, ids, n_vocab, tmp):
    raw = os.path.join(tmp, "logits.f32")
    run([oracle, "logits", str(gguf), write_ids(ids, tmp), raw])
    return np.fromfile(raw, dtype="<f4").reshape(len(ids), n_vocab)


def oracle_greedy(oracle, gguf, ids, tmp):
    out = run([oracle, "greedy", str(gguf), write_ids(ids, tmp), str(MAX_NEW)], text=True).stdout
    return [int(line.split()[0]) for line in out.splitlines()]


def llama_completion(gguf, prompt):
    """(generated bytes, stopped at end-of-generation) from llama-completion.

    llama-completion prints the text through llama.cpp's asynchronous logger,
    which can lose its tail when the process exits (seen here: 1 run in 10
    truncated or empty, more often through a pipe). A complete output ends
    with the "\\n\\n" printed after generation; we run it until two
    complete outputs are identical and strip that suffix (and the
    " [end of text]\\n" printed when an end-of-generation token stops it)."""
    # The prompt goes in -p (verbatim with --no-escape): -f would drop a
    # trailing newline of the file (common/arg.cpp), changing the prompt.
    cmd = [str(BIN / "llama-completion"), "-m", str(gguf), "-p", prompt, "--no-escape",
           "-n", str(MAX_NEW), "--temp", "0", "--top-k", "1", "--seed", "42", "-c", str(N_POS),
           "-t", str(THREADS), "-tb", str(THREADS), "-no-cnv", "--no-display-prompt",
           "--no-warmup", "-fa", "off"]
    seen = {}
    for _ in range(20):
        out = run(cmd).stdout
        if out.endswith(b"\n\n"):
            seen[out] = seen.get(out, 0) + 1
            if seen[out] == 2:
                text = out[:-2]
                eog = text.endswith(b" [end of text]\n")
                return (text[:-len(b" [end of text]\n")] if eog else text), eog
    raise RuntimeError(f"llama-completion gave no two identical complete outputs: {list(seen)}")


# ---------------------------------------------------------------- main

def main():
    import torch
    import transformers
    import tokenizers

    torch.set_num_threads(THREADS)
    transformers.logging.set_verbosity_error()  # EVAL_TEXT is longer than model_max_length: we slice it
    transformers.utils.logging.disable_progress_bar()
    OUT.mkdir(parents=True, exist_ok=True)
    n_vocab, eot_id = make_tokenizer()
    tok = load_tokenizers()
    model = make_model(n_vocab, eot_id)
    ggufs = convert()

    goldens = {
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "numpy": np.__version__,
            "llama_cpp_python_sdist": LLAMA_CPP_PYTHON_VERSION,
            "llama_cpp": run([str(BIN / "llama-tokenize"), "--version"], text=True).stderr.strip().splitlines()[0],
        },
        "model": {
            "architecture": "GPT2LMHeadModel", "n_layer": N_LAYER, "n_embd": N_EMBD, "n_head": N_HEAD,
            "n_positions": N_POS, "n_vocab": n_vocab, "n_ff": 4 * N_EMBD, "activation": "gelu_new",
            "layer_norm_epsilon": 1e-5, "tied_embeddings": True, "eot_id": eot_id, "add_bos": False,
            "seed": SEED,
        },
    }
    common.use_llama_gguf_py()  # the gguf-py the converter uses (f64_forward_from_gguf)
    import re
    pyproject = (LLAMA / "gguf-py" / "pyproject.toml").read_text()
    goldens["versions"]["gguf_py"] = "llama.cpp/gguf-py " + re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1)

    with tempfile.TemporaryDirectory() as tmp:
        oracle = build_oracle(tmp)

        # ---- tokenizer
        cases = []
        for text in TOKENIZER_CORPUS:
            hf = tok.encode(text, add_special_tokens=False)
            lc = llama_tokenize(ggufs["f32"], text, tmp)
            cases.append({"text": text, "hf": hf, "llama_cpp": lc, "agree": hf == lc})
        bad = [c for c in cases if not c["agree"]]
        for c in bad:
            log(f"TOKENIZER DISAGREEMENT {c['text']!r}: hf {c['hf']} llama.cpp {c['llama_cpp']}")
        goldens["tokenizer"] = {"corpus_size": len(cases), "all_agree": not bad, "n_disagree": len(bad),
                                "cases": cases}
        log(f"tokenizer: {len(cases) - len(bad)}/{len(cases)} strings agree")

        # ---- HF logits
        eval_ids = tok.encode(EVAL_TEXT, add_special_tokens=False)
        assert eot_id in eval_ids[100:200], "the 100-token sequence should contain <|endoftext|>"
        seqs, chunks, offset = [], [], 0
        hf_logits = {}
        for name, start, length in SEQUENCES:
            ids = eval_ids[start:start + length]
            assert len(ids) == length
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0].float().numpy()
            assert logits.shape == (length, n_vocab)
            hf_logits[name] = logits
            chunks.append(logits.astype("<f4").ravel())
            f64_diff = float(np.abs(f64_forward_from_gguf(ggufs["f32"], ids) - logits).max())
            assert f64_diff < 1e-4, (name, f64_diff)
            seqs.append({"name": name, "ids": ids, "offset": offset, "shape": [length, n_vocab],
                         "max_abs_diff_vs_f64_numpy_from_f32_gguf": f64_diff})
            offset += logits.size
            log(f"logits {name}: std {logits.std():.3f}, argmax {logits.argmax(1)[:12].tolist()}, "
                f"f64 numpy forward from tiny.f32.gguf max|d| {f64_diff:.1e}")
        np.concatenate(chunks).tofile(OUT / "logits-hf.f32")
        goldens["logits"] = {"file": "logits-hf.f32", "dtype": "f32", "byte_order": "little",
                             "offset_unit": "f32 elements", "n_vocab": n_vocab, "sequences": seqs}

        # ---- llama.cpp logits of the 33-token sequence
        ids = next(s["ids"] for s in seqs if s["name"] == Q8_SEQUENCE)
        ref = hf_logits[Q8_SEQUENCE].astype(np.float64)
        entries, chunks, offset = [], [], 0
        for kind in ("f32", "f16", "q8_0"):
            lc = oracle_logits(oracle, ggufs[kind], ids, n_vocab, tmp)
            diff = lc.astype(np.float64) - ref
            e = {"model": ggufs[kind].name, "sequence": Q8_SEQUENCE, "ids": ids, "offset": offset,
                 "shape": [len(ids), n_vocab],
                 "top1_agree": float((lc.argmax(1) == ref.argmax(1)).mean()),
                 "max_abs_diff": float(np.abs(diff).max()),
                 "nmse": float((diff * diff).sum() / (ref * ref).sum())}
            entries.append(e)
            chunks.append(lc.astype("<f4").ravel())
            offset += lc.size
            log(f"llama.cpp {kind} vs HF: top1 {e['top1_agree']:.3f} max|d| {e['max_abs_diff']:.2e} nmse {e['nmse']:.2e}")
        np.concatenate(chunks).tofile(OUT / "logits-llamacpp.f32")
        goldens["llama_cpp_logits"] = {
            "file": "logits-llamacpp.f32", "dtype": "f32", "byte_order": "little", "offset_unit": "f32 elements",
            "n_vocab": n_vocab, "tool": "scripts/oracle/llama-oracle.cpp logits (one batch, 2 threads, no flash attention)",
            "entries": entries}

        # ---- greedy
        gcases = []
        for prompt in GREEDY_PROMPTS:
            pids = tok.encode(prompt, add_special_tokens=False)
            with torch.no_grad():
                out = model.generate(torch.tensor([pids]), attention_mask=torch.ones(1, len(pids), dtype=torch.long),
                                     do_sample=False, max_new_tokens=MAX_NEW, pad_token_id=eot_id)
            hf = out[0, len(pids):].tolist()
            case = {"prompt": prompt, "prompt_ids": pids,
                    "prompt_ids_llama_cpp_agree": llama_tokenize(ggufs["f32"], prompt, tmp) == pids,
                    "hf": hf, "llama_cpp": {}}
            for kind in ("f32", "q8_0"):
                g = ggufs[kind]
                oracle_ids = oracle_greedy(oracle, g, pids, tmp)
                text, eog = llama_completion(g, prompt)
                upto_eot = oracle_ids[:oracle_ids.index(eot_id)] if eot_id in oracle_ids else oracle_ids
                expect = decode_bytes(tok, upto_eot)
                case["llama_cpp"][g.name] = {
                    "oracle_ids": oracle_ids,
                    "completion_text": text.decode("utf-8", errors="replace"),
                    "completion_hex": text.hex(),
                    "completion_stopped_at_eot": eog,
                    "completion_matches_oracle": text == expect and eog == (eot_id in oracle_ids),
                    "completion_retokenized": tok.encode(text.decode("utf-8", errors="replace"), add_special_tokens=False),
                    "agree_with_hf": oracle_ids == hf,
                }
                case[f"hf_vs_llama_cpp_{kind}_ids"] = oracle_ids == hf
                case[f"hf_vs_llama_cpp_{kind}_completion_text"] = text == decode_bytes(tok, [t for t in hf if t != eot_id])
            log(f"greedy {prompt!r}: hf {hf}")
            for k, v in case["llama_cpp"].items():
                log(f"    {k}: {v['oracle_ids']} completion==oracle {v['completion_matches_oracle']}")
            gcases.append(case)
        goldens["greedy"] = {
            "max_new_tokens": MAX_NEW,
            "n_agree_hf_vs_llama_cpp_f32": sum(c["hf_vs_llama_cpp_f32_ids"] for c in gcases),
            "n_agree_hf_vs_llama_cpp_q8_0": sum(c["hf_vs_llama_cpp_q8_0_ids"] for c in gcases),
            "all_completions_match_oracle": all(v["completion_matches_oracle"]
                                                for c in gcases for v in c["llama_cpp"].values()),
            "cases": gcases}

    # ---- file inventory
    inventory = {}
    for p in sorted(OUT.rglob("*")):
        if p.is_file() and p.name != "goldens.json":
            data = p.read_bytes()
            inventory[str(p.relative_to(OUT))] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    goldens["files"] = inventory
    write_json(OUT / "goldens.json", goldens)
    total = sum(v["bytes"] for v in inventory.values()) + (OUT / "goldens.json").stat().st_size
    log(f"wrote {len(inventory) + 1} files, {total} bytes in total")


if __name__ == "__main__":
    main()
