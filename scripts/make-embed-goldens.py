#!/usr/bin/env python3
"""Test fixtures and golden outputs for ferrite's text-embedding encoders
(BERT and nomic-bert), written under testdata/embed/.

Run from anywhere, with the reference venv (scripts/setup-refenv.sh;
torch, transformers 5.x, sentence-transformers, tokenizers, gguf, numpy),
after scripts/fetch-models.sh has put all-MiniLM-L6-v2 in models/:

    HF_HUB_OFFLINE=1 scripts/refenv python scripts/make-embed-goldens.py

It never touches the network. It needs llama.cpp's source tree for its GGUF
converter (convert_hf_to_gguf.py and gguf-py, at
$FERRITE_LLAMACPP, scripts/env.sh) and, for the cross-check only, the
built llama-embedding and llama-tokenize ($FERRITE_LLAMACPP/build/bin); without the binaries the cross-check is skipped and
recorded as skipped. The llama.cpp tree is never modified.

What it writes (testdata/embed/README.md describes every file):

  corpus.json, corpus.txt   the test strings (JSON list; one per line)
  minilm/                   all-MiniLM-L6-v2 token ids and embeddings
  bert-tiny/                random-weight BertModel: HF directory, GGUF, goldens
  nomic-tiny/               random-weight nomic-bert in the original nomic
                            checkpoint layout: HF directory, GGUF, goldens

Determinism: fixed seeds, one torch thread, sorted iteration everywhere;
rerunning the script must leave its files byte-identical (checked by running
it twice and comparing sha256 sums). It owns testdata/embed/bert-tiny/ and
testdata/embed/nomic-tiny/ (deleted and rewritten on each run) and the files
listed above; other files in testdata/embed/ are left alone.

Internally the script re-runs itself as `make-embed-goldens.py --convert DIR
OUT` to drive llama.cpp's converter in a separate process, with two
patches applied in that process only (see convert_main()).
"""

import collections
import copy
import json
import math
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
import unicodedata

import common

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "embed"
MODELS = pathlib.Path(os.environ.get("FERRITE_MODELS", ROOT / "models"))
MINILM_DIR = MODELS / "all-MiniLM-L6-v2"
LLAMA = common.LLAMA
LLAMA_BIN = common.LLAMA_BIN
COMMAND = "HF_HUB_OFFLINE=1 scripts/refenv python scripts/make-embed-goldens.py"

SEED_BERT = 20240601
SEED_NOMIC = 20240602
N_FREQUENT = 800          # most frequent corpus wordpieces kept in the tiny vocab
VOCAB_MULTIPLE = 64       # model vocab_size is padded up to a multiple of this
BERT_TINY_MAX_SEQ = 128
NOMIC_TINY_MAX_SEQ = 2048
MATRYOSHKA_DIM = 64
# Corpus strings used for the llama.cpp cross-check (indices into the corpus).
CROSS_CHECK = {
    "bert-tiny": [6, 18, 27, 43, 48, 53, 56, 58, 60, 63, 72, 75, 89, 97, 108, 109, 114, 116],
    "nomic-tiny": [6, 18, 27, 43, 48, 53, 56, 58, 60, 63, 72, 75, 89, 97, 108, 109, 114, 116, 124, 127],
}

# ---------------------------------------------------------------------------
# The corpus. Every string is written out here (the long ones are assembled
# from the phrase lists below in a fixed order), so the corpus is the same on
# every run. No string contains a line break of any kind (checked against
# Python's str.splitlines, which knows the most), so corpus.txt can hold one
# string per line.
# ---------------------------------------------------------------------------

SHORT = [
    # empty and whitespace-only (sentence-transformers strips, BERT drops whitespace)
    "",
    " ",
    "\t \t",
    # single words and tiny inputs
    "a",
    "I",
    "hello",
    "Hello",
    "HELLO",
    "embeddings",
    "unbelievably",
    "tokenization",
    "antidisestablishmentarianism",
    "running",
    "?",
    "42",
    "café",
    "naïve",
    "Straße",
    # short English sentences
    "The cat sat on the mat.",
    "A quick brown fox jumps over the lazy dog.",
    "How do I reset my password?",
    "The weather today is sunny with a light breeze.",
    "She sells sea shells by the sea shore.",
    "Machine learning models turn text into vectors.",
    "What is the capital of France?",
    "Paris is the capital and largest city of France.",
    "The meeting was moved to Thursday afternoon.",
    "I can't believe it's already December!",
    "Please don't forget to water the plants while I'm away.",
    "Search engines rank documents by their similarity to a query.",
    "The quick brown fox did not jump; it walked, slowly, around the dog.",
    "Coffee or tea?",
    "This sentence is short.",
    "This sentence, however, is a little bit longer than the previous one and has a clause.",
    "Dogs are loyal animals that have lived alongside people for thousands of years.",
    "The train leaves at 7:45 from platform 9.",
    "A neural network is a function with many adjustable parameters.",
    "Rain is expected tomorrow, so bring an umbrella.",
    # mixed case
    "iPhone and iPad users can download the app from the App Store.",
    "McDonald's opened a new restaurant on MAIN street.",
    "camelCaseIdentifier and snake_case_identifier and SCREAMING_CASE",
    "ThIs TeXt HaS rAnDoM cAsE",
    "NASA, the FBI and the UN are acronyms.",
    # other languages
    "Le café est très chaud, mais la crème brûlée est délicieuse.",
    "Où est la bibliothèque ? Elle est à côté de l'hôpital.",
    "Les élèves français étudient l'histoire et la géographie.",
    "Die Straße ist nass, weil es die ganze Nacht geregnet hat.",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein.",
    "Grüße aus München! Das Bier ist kühl und die Brezeln sind frisch.",
    "El niño comió una manzana y después jugó al fútbol.",
    "¿Dónde está la estación de tren? ¡Necesito ayuda!",
    "La señora García trabaja en una oficina en Barcelona.",
    "O João comeu pão com manteiga no café da manhã.",
    "Привет, как дела? Сегодня хорошая погода.",
    "Москва является столицей России.",
    "Γεια σου κόσμε! Η Αθήνα είναι η πρωτεύουσα της Ελλάδας.",
    "我喜欢学习中文。今天天气很好。",
    "北京是中国的首都，有很多历史名胜。",
    "東京は日本の首都です。桜がとても綺麗です。",
    "ひらがなとカタカナと漢字を使います。",
    "안녕하세요. 저는 학생입니다.",
    "서울은 한국의 수도입니다.",
    "مرحبا بالعالم. اللغة العربية جميلة.",
    "नमस्ते दुनिया। मैं हिंदी सीख रहा हूँ।",
    "שלום עולם, מה שלומך?",
    "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ",
    "Tiếng Việt có rất nhiều dấu thanh điệu khác nhau.",
    "Đà Nẵng là một thành phố ở Việt Nam.",
    "English mixed with français, Deutsch, español, русский, 中文 and 日本語.",
    # accents that NFD-strip, and characters that do not decompose
    "résumé",
    "Ångström",
    "Crème brûlée à la française",
    "Zoë, Chloë and Noël went to the café in São Paulo.",
    "Ørsted, Łódź, Đakovo and İstanbul do not all decompose.",
    "ﬁne ﬂowers (ligatures), Ｆｕｌｌｗｉｄｔｈ letters and ① circled digits",
    # emoji
    "I love pizza 🍕 and ice cream 🍦!",
    "👍",
    "👍🏽 thumbs up with skin tone",
    "Family: 👨\u200d👩\u200d👧\u200d👦",
    "Flags 🇫🇷 🇩🇪 🇯🇵 and hearts ❤️💙💚",
    "😀😃😄😁😆😅😂🤣",
    "Launch 🚀 in 3... 2... 1...",
    # digits and punctuation
    "3.14159265358979",
    "1,000,000 dollars",
    "The price is $12.50 (excluding 20% VAT).",
    "2024-01-15T10:30:00Z",
    "Call +1 (555) 123-4567 ext. 89",
    "!!!???...,,,;;;:::",
    "(a+b)*c = d/e - f^2",
    "e-mail, co-operate, re-enter and well-known",
    "C++ and C# are programming languages; so is F#.",
    "version 1.2.3-beta+build.456",
    "#hashtag @mention & more",
    "\"Quoted text\" and 'single quotes' and `backticks`",
    "50% off \u2014 today only\u2026 don\u2019t miss it!",
    # URLs and code
    "https://www.example.com/path/to/page?query=test&lang=en#section-2",
    "Send an email to someone@example.org or visit http://localhost:8080/",
    "fn main() { println!(\"Hello, world!\"); }",
    "def add(a, b):\treturn a + b",
    "x = [i ** 2 for i in range(10) if i % 2 == 0]",
    "<div class=\"container\"><p>Some HTML text</p></div>",
    "SELECT name, age FROM users WHERE age >= 18 ORDER BY name;",
    "{\"key\": \"value\", \"numbers\": [1, 2, 3], \"nested\": {\"ok\": true}}",
    "C:\\Users\\Public\\Documents\\report_final_v2.docx",
    # whitespace and invisible characters
    "multiple   spaces    between     words",
    "tab\tseparated\tvalues\there",
    "   leading and trailing spaces   ",
    "\t\tindented with tabs",
    "non\u00a0breaking\u00a0spaces here",
    "zero\u200bwidth\u200bspace and zero\u200cwidth\u200dnon-joiner",
    "soft\u00adhyphen and word\u2060joiner",
    "\ufeffbyte order mark at the start",
    "bell\u0007 and escape\u001b control characters",
    "thin\u2009space, en\u2002space and ideographic\u3000space",
    "Combining accents: e\u0301 a\u0300 o\u0308 n\u0303",
    "Mathematical 𝐛𝐨𝐥𝐝 and 𝑖𝑡𝑎𝑙𝑖𝑐 letters",
    # long single tokens
    "a" * 120,
    "Supercalifragilisticexpialidociousandthensomemorelettersjusttomakethiswordlongerthanonehundredcharacterslong",
    "ha" * 40,
    "!" * 30,
]

# Phrases for the long paragraphs (written for this corpus).
PHRASES = [
    "The library opens early on weekdays and stays open late during exams.",
    "Students gather in the reading room to prepare for their final tests.",
    "A small cafe on the ground floor serves coffee, tea and fresh pastries.",
    "Researchers often compare documents by turning them into dense vectors.",
    "Two texts with similar meanings should end up close to each other.",
    "The distance between vectors is usually measured with cosine similarity.",
    "Long documents are split into chunks before they are embedded.",
    "Each chunk is stored in an index together with a pointer to its source.",
    "When a question arrives, it is embedded with the same model.",
    "The nearest chunks are returned and shown to the reader.",
    "Engineers test such systems with carefully chosen example sentences.",
    "Some examples are short, some are long, and some contain unusual symbols.",
    "Numbers like 3.5, 1024 and 2,048 appear in technical writing.",
    "Names such as Zoë, José and Björn include accented letters.",
    "Many people read the news on their phones while commuting to work.",
    "The river flows slowly through the valley before reaching the sea.",
    "In the autumn the leaves turn red, orange and yellow.",
    "The museum exhibition about ancient Egypt attracted thousands of visitors.",
    "Good software is tested, documented and easy to change.",
    "The committee will publish its report at the end of the month.",
]

PHRASES_FR = [
    "La bibliothèque ouvre tôt le matin et ferme tard le soir.",
    "Les étudiants révisent leurs leçons avant les examens.",
    "Un petit café au rez-de-chaussée sert du thé et des croissants.",
    "Les chercheurs comparent les documents grâce à des vecteurs.",
]

PHRASES_DE = [
    "Die Bibliothek öffnet früh am Morgen und schließt spät am Abend.",
    "Die Studenten lernen fleißig für ihre Prüfungen.",
    "Ein kleines Café im Erdgeschoss verkauft Kaffee und Kuchen.",
    "Forscher vergleichen Dokumente mit Hilfe von Vektoren.",
]


BOUNDARY_CYCLE = ["the", "and", "the", "a", "of", "the", "is", "to"]
BOUNDARY_WORDS = [126, 127, 254, 255]


def long_paragraph(n_phrases, start, step):
    """n_phrases phrases from PHRASES, picked in a fixed pattern."""
    return " ".join(PHRASES[(start + i * step) % len(PHRASES)] for i in range(n_phrases))


def build_corpus():
    corpus = list(SHORT)
    # Long English paragraphs: with the bert-base-uncased vocab about 130,
    # 250, 320, 400 and 830 wordpieces, so several exceed all-MiniLM-L6-v2's
    # 256 and one exceeds 600.
    corpus.append(long_paragraph(10, 0, 1))
    corpus.append(long_paragraph(19, 3, 7))
    corpus.append(long_paragraph(24, 5, 3))
    corpus.append(long_paragraph(30, 1, 11))
    corpus.append(long_paragraph(64, 2, 9))
    # Long French/German paragraph, and one with tabs and runs of spaces.
    corpus.append(" ".join(PHRASES_FR + PHRASES_DE + PHRASES[:6] + PHRASES_FR[::-1] + PHRASES_DE[::-1]))
    corpus.append("\t".join(PHRASES[10:20]) + "    " + "  ".join(PHRASES[0:8]))
    # Long paragraph of mixed scripts and symbols (every other short string from the languages on).
    corpus.append(" ".join(SHORT[i] for i in range(40, len(SHORT), 2)))
    # WordPiece's 100-character word limit: 100 characters are tokenized,
    # 101 become [UNK].
    corpus.append("x" * 100)
    corpus.append("x" * 101)
    # Truncation boundaries: with [CLS] and [SEP] these are exactly 128 / 129
    # tokens (bert-tiny's max_seq_length) and 256 / 257 (all-MiniLM-L6-v2's),
    # in both vocabularies (checked in main()).
    for n in BOUNDARY_WORDS:
        corpus.append(" ".join(BOUNDARY_CYCLE[i % len(BOUNDARY_CYCLE)] for i in range(n)))
    for s in corpus:
        assert len(s.splitlines()) <= 1 and "\n" not in s and "\r" not in s, repr(s)
    assert len(set(corpus)) == len(corpus), "duplicate corpus strings"
    return corpus


# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------

def json_text(obj, indent=0):
    """JSON with lists of numbers (and short lists of strings) on one line,
    compact but diffable; strings
    keep their UTF-8, except invisible characters (controls, format
    characters, separators other than the plain space), which are escaped."""
    pad = " " * indent
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f'{pad} {json_text(str(k))}: {json_text(v, indent + 1)}' for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, (list, tuple)):
        if all(isinstance(x, (int, float, bool)) or x is None for x in obj) or (
                len(obj) <= 8 and all(isinstance(x, str) for x in obj)):
            return "[" + ", ".join(json_text(x) for x in obj) + "]"
        items = [pad + " " + json_text(x, indent + 1) for x in obj]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    if isinstance(obj, str):
        out = []
        for ch in json.dumps(obj, ensure_ascii=False):
            cat = unicodedata.category(ch)
            if ord(ch) >= 0x80 and (cat[0] == "C" or cat in ("Zs", "Zl", "Zp")):
                code = ord(ch)
                if code > 0xFFFF:
                    code -= 0x10000
                    out.append("\\u%04x\\u%04x" % (0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)))
                else:
                    out.append("\\u%04x" % code)
            else:
                out.append(ch)
        return "".join(out)
    if isinstance(obj, float):
        return repr(obj) if math.isfinite(obj) else json.dumps(obj)
    return json.dumps(obj)


def write_json(path, obj):
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json_text(obj) + "\n"
    assert json.loads(text) == json.loads(json.dumps(obj)), f"json round trip failed for {path}"
    path.write_text(text, encoding="utf-8")


def write_f32(path, array):
    import numpy as np
    a = np.ascontiguousarray(array, dtype="<f4")
    pathlib.Path(path).write_bytes(a.tobytes())


def write_f64(path, array):
    import numpy as np
    a = np.ascontiguousarray(array, dtype="<f8")
    pathlib.Path(path).write_bytes(a.tobytes())


def versions():
    import numpy
    import safetensors
    import sentence_transformers
    import tokenizers
    import torch
    import transformers
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "safetensors": safetensors.__version__,
        "numpy": numpy.__version__,
    }


def max_abs(a, b):
    import numpy as np
    return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))))


# ---------------------------------------------------------------------------
# Corpus files
# ---------------------------------------------------------------------------

def write_corpus(corpus):
    write_json(OUT / "corpus.json", corpus)
    (OUT / "corpus.txt").write_bytes(("\n".join(corpus) + "\n").encode("utf-8"))
    # corpus.txt must read back line for line (a Rust `str::lines()` reader
    # splits on \n only, which this check is stricter than).
    back = (OUT / "corpus.txt").read_bytes().decode("utf-8").split("\n")[:-1]
    assert back == corpus


# ---------------------------------------------------------------------------
# all-MiniLM-L6-v2
# ---------------------------------------------------------------------------

def st_token_ids(model, model_dir, corpus, end_token):
    """Token ids of `corpus`: full (the directory's tokenizer.json, special
    tokens added) and truncated (as sentence-transformers `model` feeds
    them to the network), checked to agree: the truncated ids are the first
    max_seq_length - 1 full ids then `end_token` when longer."""
    from tokenizers import Tokenizer

    # tokenizer.json may carry its own truncation and padding settings,
    # which Tokenizer.from_file applies unless switched off.
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    full = [e.ids for e in tok.encode_batch(corpus, add_special_tokens=True)]
    feats = model.preprocess(corpus)
    truncated = []
    for ids, mask in zip(feats["input_ids"].tolist(), feats["attention_mask"].tolist()):
        n = sum(mask)
        assert all(m == 1 for m in mask[:n]) and all(m == 0 for m in mask[n:])
        truncated.append(ids[:n])
    max_seq = model.max_seq_length
    end = tok.token_to_id(end_token)
    for f, t in zip(full, truncated):
        expect = f if len(f) <= max_seq else f[: max_seq - 1] + [end]
        assert t == expect, (f[:10], t[:10])
    return full, truncated


def minilm_goldens(corpus):
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    out = OUT / "minilm"
    out.mkdir(parents=True, exist_ok=True)
    model = SentenceTransformer(str(MINILM_DIR), device="cpu")
    model.eval()
    max_seq = model.max_seq_length
    assert max_seq == 256, max_seq

    full, truncated = st_token_ids(model, MINILM_DIR, corpus, "[SEP]")
    tj = json.loads((MINILM_DIR / "tokenizer.json").read_text(encoding="utf-8"))
    write_json(out / "ids.json", {
        "max_seq_length": max_seq,
        "note": "full: tokenizer.json via tokenizers.Tokenizer.from_file with truncation and padding switched off, "
                "special tokens added; truncated: what sentence-transformers feeds the model "
                "(first max_seq_length-1 tokens then [SEP] when longer)",
        "full": full,
        "truncated": truncated,
    })

    with torch.inference_mode():
        emb = model.encode(corpus, batch_size=32, convert_to_numpy=True)
        assert emb.dtype == np.float32 and emb.shape == (len(corpus), 384)
        # Transformer + Pooling only: mean-pooled, not normalized.
        head = SentenceTransformer(modules=[model[0], model[1]], device="cpu")
        head.eval()
        unnorm = head.encode(corpus, batch_size=32, convert_to_numpy=True)
        tokens = head.encode(corpus, batch_size=32, output_value="token_embeddings")
        cls = np.stack([t[0].float().numpy() for t in tokens])
        for t, ids in zip(tokens, truncated):
            assert t.shape[0] == len(ids)
    check = unnorm / np.linalg.norm(unnorm, axis=1, keepdims=True)
    renorm_diff = max_abs(check, emb)
    assert renorm_diff < 1e-6, renorm_diff
    # The same with transformers directly, one string at a time (no padding),
    # in float32 and float64: the size of the batching noise in the goldens
    # and of their distance from exact arithmetic.
    from transformers import BertModel
    bert = BertModel.from_pretrained(str(MINILM_DIR), dtype=torch.float32)
    bert.eval()
    e32 = l2n(pooled_embeddings(run_per_string(bert, truncated, torch.float32))).numpy()
    e64 = l2n(pooled_embeddings(run_per_string(copy.deepcopy(bert).to(torch.float64), truncated,
                                               torch.float64))).numpy()
    noise = {
        "per_string_f32_vs_embeddings_max_abs": max_abs(e32, emb),
        "per_string_f64_vs_embeddings_max_abs": max_abs(e64, emb),
        "per_string_f32_vs_f64_max_abs": max_abs(e32, e64),
    }
    write_f32(out / "embeddings.f32", emb)
    write_f32(out / "embeddings-unnormalized.f32", unnorm)
    write_f32(out / "embeddings-cls.f32", cls)

    meta = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "model_files_sha256": {name: common.sha256_file(MINILM_DIR / name)
                               for name in ("model.safetensors", "tokenizer.json", "config.json")},
        "n": len(corpus),
        "dim": 384,
        "max_seq_length": max_seq,
        "corpus_sha256": common.sha256_file(OUT / "corpus.json"),
        "files": {
            "ids.json": "token ids: full (no truncation) and truncated (as sentence-transformers feeds the model)",
            "embeddings.f32": "n x dim little-endian f32: SentenceTransformer.encode(corpus, batch_size=32) "
                              "(mean pooling + L2 normalization, the model's own pipeline)",
            "embeddings-unnormalized.f32": "n x dim f32: Transformer + Pooling modules only (mean pooling, no normalization)",
            "embeddings-cls.f32": "n x dim f32: last hidden state of the [CLS] token (position 0), not normalized",
        },
        "tokenizer_json_settings": {"truncation": tj.get("truncation"), "padding": tj.get("padding")},
        "renormalized_unnormalized_vs_embeddings_max_abs": renorm_diff,
        "noise": noise,
        "torch_threads": torch.get_num_threads(),
        "versions": versions(),
        "command": COMMAND,
    }
    write_json(out / "meta.json", meta)
    return {"full": full, "truncated": truncated, "meta": meta}


# ---------------------------------------------------------------------------
# The trimmed WordPiece vocabulary shared by the tiny fixtures
# ---------------------------------------------------------------------------

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def trimmed_vocab(corpus, minilm_full_ids):
    """Specials first (ids 0-4), then, in bert-base-uncased id order: every
    character of the normalized corpus and its ##continuation form (where
    bert-base-uncased has them), and the N_FREQUENT most frequent wordpieces
    of the corpus' full tokenization."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(MINILM_DIR / "tokenizer.json"))
    vocab = tok.get_vocab()
    inv = {i: t for t, i in vocab.items()}
    chars = set()
    for s in corpus:
        for word, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(s)):
            chars.update(word)
    keep = set()
    for ch in chars:
        for t in (ch, "##" + ch):
            if t in vocab:
                keep.add(t)
    counts = collections.Counter(inv[i] for ids in minilm_full_ids for i in ids)
    frequent = [t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], vocab[kv[0]])) if t not in SPECIALS]
    keep.update(frequent[:N_FREQUENT])
    keep -= set(SPECIALS)
    tokens = SPECIALS + sorted(keep, key=lambda t: vocab[t])
    stats = {
        "normalized_corpus_chars": len(chars),
        "chars_without_a_bert_token": "".join(sorted(c for c in chars if c not in vocab)),
        "char_tokens": sum(1 for t in tokens if len(t) == 1 or (t.startswith("##") and len(t) == 3)),
        "distinct_wordpieces_in_full_tokenization": len(counts),
        "frequent_wordpieces_kept": N_FREQUENT,
        "tokenizer_vocab": len(tokens),
    }
    return tokens, stats


def write_tokenizer(dst, tokens, model_max_length):
    from transformers import BertTokenizer
    (dst / "vocab.txt").write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    # transformers 5 takes the vocabulary as `vocab=` (a `vocab_file=`
    # keyword is silently ignored and gives an empty vocabulary).
    tk = BertTokenizer(vocab=str(dst / "vocab.txt"), do_lower_case=True, model_max_length=model_max_length)
    assert tk.vocab_size == len(tokens), (tk.vocab_size, len(tokens))
    with tempfile.TemporaryDirectory() as tmp:
        tk.save_pretrained(tmp)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(pathlib.Path(tmp) / name, dst / name)
    write_json(dst / "special_tokens_map.json", {
        "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]",
    })
    tj = json.loads((dst / "tokenizer.json").read_text(encoding="utf-8"))
    assert tj["truncation"] is None and tj["padding"] is None
    assert tj["model"]["type"] == "WordPiece" and len(tj["model"]["vocab"]) == len(tokens)


def padded(n):
    return (n + VOCAB_MULTIPLE - 1) // VOCAB_MULTIPLE * VOCAB_MULTIPLE


def st_files(dst, dim, max_seq, normalize):
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    write_json(dst / "modules.json", modules)
    write_json(dst / "1_Pooling" / "config.json", {
        "word_embedding_dimension": dim,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False,
        "include_prompt": True,
    })
    write_json(dst / "sentence_bert_config.json", {"max_seq_length": max_seq, "do_lower_case": False})


def fixture_ids(dst, corpus, max_seq):
    """Ids from the fixture's own tokenizer.json: full, and truncated the way
    sentence-transformers truncates (first max_seq-1 tokens, then [SEP])."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(dst / "tokenizer.json"))
    full = [e.ids for e in tok.encode_batch(corpus, add_special_tokens=True)]
    sep = tok.token_to_id("[SEP]")
    trunc = [f if len(f) <= max_seq else f[: max_seq - 1] + [sep] for f in full]
    # The transformers tokenizer with truncation must agree.
    from transformers import AutoTokenizer
    at = AutoTokenizer.from_pretrained(str(dst))
    for s, t in zip(corpus, trunc):
        assert at(s, truncation=True, max_length=max_seq)["input_ids"] == t, s
    return full, trunc


# ---------------------------------------------------------------------------
# Random weights
# ---------------------------------------------------------------------------

def randn(gen, shape):
    import torch
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(torch.float32)


def init_tensor(gen, name, shape):
    """The fixture's weight distribution. Chosen so nothing is degenerate: unit
    scale embeddings (positions and token types as large as words), layer
    norm gains 1 +- 0.1 and biases +- 0.1 (so a missing affine term or bias
    shows), linear weights N(0, 1/fan_in) so activations stay O(1) and GELU /
    SiLU work in their curved region, and query weights doubled so attention
    scores have a standard deviation near 2 (attention is not near uniform)."""
    import torch
    if name.endswith("LayerNorm.weight") or name.endswith("_ln.weight") or ".norm" in name and name.endswith(".weight"):
        return 1.0 + 0.1 * randn(gen, shape)
    if name.endswith(".bias"):
        return 0.1 * randn(gen, shape)
    if "embeddings" in name:
        return randn(gen, shape)
    assert len(shape) == 2, name
    w = randn(gen, shape) / math.sqrt(shape[1])
    if ".query." in name:
        w = 2.0 * w
    if name.endswith("attn.Wqkv.weight"):
        q = shape[0] // 3
        w[:q] *= 2.0
    return w.to(torch.float32)


# ---------------------------------------------------------------------------
# Pooling helpers (sentence-transformers semantics)
# ---------------------------------------------------------------------------

def l2n(x):
    import torch.nn.functional as F
    return F.normalize(x, p=2, dim=1)


def run_per_string(model, ids_list, dtype):
    """Last hidden states, one string at a time (no padding)."""
    import torch
    outs = []
    with torch.inference_mode():
        for ids in ids_list:
            t = torch.tensor([ids], dtype=torch.long)
            o = model(input_ids=t, attention_mask=torch.ones_like(t), token_type_ids=torch.zeros_like(t))
            outs.append(o.last_hidden_state[0].to(dtype))
    return outs


def pooled_embeddings(hiddens):
    import torch
    return torch.stack([h.mean(0) for h in hiddens])


def degeneracy_stats(emb, ids):
    """Pairwise cosines over pairs of strings with different token ids (equal
    ids, e.g. "hello" and "HELLO", give equal embeddings by construction)."""
    import numpy as np
    e = np.asarray(emb, dtype=np.float64)
    e = e / np.linalg.norm(e, axis=1, keepdims=True)
    cos = e @ e.T
    keys = [tuple(x) for x in ids]
    distinct = np.array([[keys[i] != keys[j] for j in range(len(keys))] for i in range(len(keys))])
    off = cos[distinct]
    return {"pairwise_cosine_min": round(float(off.min()), 4), "pairwise_cosine_mean": round(float(off.mean()), 4),
            "pairwise_cosine_max": round(float(off.max()), 4),
            "component_std_mean": round(float(np.mean(np.std(e, axis=0))), 4)}


# ---------------------------------------------------------------------------
# bert-tiny
# ---------------------------------------------------------------------------

def make_bert_tiny(corpus, tokens):
    import torch
    from transformers import BertConfig, BertModel

    dst = OUT / "bert-tiny"
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    vocab_size = padded(len(tokens))
    cfg = BertConfig(
        vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=512, type_vocab_size=2, hidden_act="gelu",
        layer_norm_eps=1e-12, pad_token_id=0, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
        initializer_range=0.02, position_embedding_type="absolute",
    )
    model = BertModel(cfg)  # with the pooler, like real checkpoints; the encoders ignore it
    gen = torch.Generator().manual_seed(SEED_BERT)
    sd = model.state_dict()
    new = {}
    for name in sorted(sd):
        if not sd[name].is_floating_point():
            new[name] = sd[name]
            continue
        new[name] = init_tensor(gen, name, tuple(sd[name].shape))
    model.load_state_dict(new)
    model.eval()
    model.save_pretrained(str(dst), safe_serialization=True)
    write_tokenizer(dst, tokens, model_max_length=512)
    st_files(dst, 64, BERT_TINY_MAX_SEQ, normalize=True)
    return dst, vocab_size


# ---------------------------------------------------------------------------
# nomic-tiny
# ---------------------------------------------------------------------------

NOMIC_DIMS = {"n_embd": 128, "n_head": 4, "n_layer": 2, "n_inner": 256}


def nomic_config(vocab_size):
    """config.json with the key set of nomic-ai/nomic-embed-text-v1.5's own
    config.json (the remote-code NomicBertConfig, a GPT2Config subclass),
    with tiny dimensions. The converter and ferrite read the architectural
    keys; the rest is there so the directory looks like the real one."""
    return {
        "activation_function": "swiglu",
        "architectures": ["NomicBertModel"],
        "attn_pdrop": 0.0,
        "auto_map": {
            "AutoConfig": "nomic-ai/nomic-bert-2048--configuration_hf_nomic_bert.NomicBertConfig",
            "AutoModel": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertModel",
            "AutoModelForMaskedLM": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertForPreTraining",
        },
        "bos_token_id": None,
        "causal": False,
        "dense_seq_output": True,
        "embd_pdrop": 0.0,
        "eos_token_id": None,
        "fused_bias_fc": True,
        "fused_dropout_add_ln": True,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-12,
        "max_trained_positions": 2048,
        "mlp_fc1_bias": False,
        "mlp_fc2_bias": False,
        "model_type": "nomic_bert",
        "n_embd": NOMIC_DIMS["n_embd"],
        "n_head": NOMIC_DIMS["n_head"],
        "n_inner": NOMIC_DIMS["n_inner"],
        "n_layer": NOMIC_DIMS["n_layer"],
        "n_positions": 8192,
        "pad_token_id": 0,
        "pad_vocab_size_multiple": VOCAB_MULTIPLE,
        "parallel_block": False,
        "parallel_block_tied_norm": False,
        "prenorm": False,
        "qkv_proj_bias": False,
        "reorder_and_upcast_attn": False,
        "resid_pdrop": 0.0,
        "rotary_emb_base": 1000,
        "rotary_emb_fraction": 1.0,
        "rotary_emb_interleaved": False,
        "rotary_emb_scale_base": None,
        "rotary_scaling_factor": None,
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "summary_activation": None,
        "summary_first_dropout": 0.0,
        "summary_proj_to_labels": True,
        "summary_type": "cls_index",
        "summary_use_proj": True,
        "torch_dtype": "float32",
        "transformers_version": "4.37.2",
        "type_vocab_size": 2,
        "use_cache": True,
        "use_flash_attn": True,
        "use_rms_norm": False,
        "use_xentropy": True,
        "vocab_size": vocab_size,
    }


def nomic_tensor_shapes(vocab_size):
    """Tensor names and shapes of an original nomic-bert checkpoint (what
    nomic-embed-text-v1.5's model.safetensors holds)."""
    d, f, n = NOMIC_DIMS["n_embd"], NOMIC_DIMS["n_inner"], NOMIC_DIMS["n_layer"]
    shapes = {
        "embeddings.word_embeddings.weight": (vocab_size, d),
        "embeddings.token_type_embeddings.weight": (2, d),
        "emb_ln.weight": (d,),
        "emb_ln.bias": (d,),
    }
    for i in range(n):
        p = f"encoder.layers.{i}."
        shapes[p + "attn.Wqkv.weight"] = (3 * d, d)      # rows: q, then k, then v
        shapes[p + "attn.out_proj.weight"] = (d, d)
        shapes[p + "mlp.fc11.weight"] = (f, d)            # up (the multiplied branch)
        shapes[p + "mlp.fc12.weight"] = (f, d)            # gate (goes through SiLU)
        shapes[p + "mlp.fc2.weight"] = (d, f)             # down
        shapes[p + "norm1.weight"] = (d,)                 # after attention + residual
        shapes[p + "norm1.bias"] = (d,)
        shapes[p + "norm2.weight"] = (d,)                 # after MLP + residual
        shapes[p + "norm2.bias"] = (d,)
    return shapes


def hf_nomic_config(vocab_size):
    """The same model as transformers' core NomicBertConfig, which does not
    read the original keys (n_embd, n_layer, ...): it would silently fall
    back to its nomic-embed-text-v1.5 defaults (768 wide, 12 layers)."""
    from transformers import NomicBertConfig
    return NomicBertConfig(
        vocab_size=vocab_size, hidden_size=NOMIC_DIMS["n_embd"], num_hidden_layers=NOMIC_DIMS["n_layer"],
        num_attention_heads=NOMIC_DIMS["n_head"], intermediate_size=NOMIC_DIMS["n_inner"], hidden_act="silu",
        max_position_embeddings=2048, type_vocab_size=2, layer_norm_eps=1e-12, pad_token_id=0,
        rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
    )


def load_hf_nomic(dst, vocab_size, path=None):
    """transformers' NomicBertModel from the original-layout safetensors,
    through transformers' own conversion mapping for nomic_bert."""
    import torch
    from transformers import NomicBertModel
    src = dst
    if path is not None:
        src = pathlib.Path(path)
    model, info = NomicBertModel.from_pretrained(
        str(src), config=hf_nomic_config(vocab_size), dtype=torch.float32, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    assert not problems, problems
    model.eval()
    return model


def make_nomic_tiny(corpus, tokens):
    import torch
    from safetensors.torch import save_file

    dst = OUT / "nomic-tiny"
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    vocab_size = padded(len(tokens))
    gen = torch.Generator().manual_seed(SEED_NOMIC)
    weights = {name: init_tensor(gen, name, shape).contiguous()
               for name, shape in sorted(nomic_tensor_shapes(vocab_size).items())}
    save_file(weights, str(dst / "model.safetensors"), metadata={"format": "pt"})
    write_json(dst / "config.json", nomic_config(vocab_size))
    write_tokenizer(dst, tokens, model_max_length=8192)
    st_files(dst, NOMIC_DIMS["n_embd"], NOMIC_TINY_MAX_SEQ, normalize=False)

    # The HF model must really be running on these weights: compare every
    # parameter with the saved tensors under the renaming, then perturb one
    # saved tensor in a copy and check the output moves.
    model = load_hf_nomic(dst, vocab_size)
    sd = model.state_dict()
    rename = {
        "embeddings.word_embeddings.weight": "embeddings.word_embeddings.weight",
        "embeddings.token_type_embeddings.weight": "embeddings.token_type_embeddings.weight",
        "emb_ln.weight": "embeddings.LayerNorm.weight",
        "emb_ln.bias": "embeddings.LayerNorm.bias",
    }
    d = NOMIC_DIMS["n_embd"]
    checked = 0
    for name, w in weights.items():
        if name in rename:
            assert torch.equal(sd[rename[name]], w), name
            checked += 1
            continue
        i = int(name.split(".")[2])
        p = f"layers.{i}."
        tail = name.split(".", 3)[3]
        if tail == "attn.Wqkv.weight":
            for j, proj in enumerate(("q_proj", "k_proj", "v_proj")):
                assert torch.equal(sd[p + f"self_attn.{proj}.weight"], w[j * d:(j + 1) * d]), name
        else:
            target = {"attn.out_proj.weight": "self_attn.o_proj.weight", "mlp.fc11.weight": "mlp.up_proj.weight",
                      "mlp.fc12.weight": "mlp.gate_proj.weight", "mlp.fc2.weight": "mlp.down_proj.weight",
                      "norm1.weight": "post_attention_layernorm.weight", "norm1.bias": "post_attention_layernorm.bias",
                      "norm2.weight": "post_mlp_layernorm.weight", "norm2.bias": "post_mlp_layernorm.bias"}[tail]
            assert torch.equal(sd[p + target], w), name
        checked += 1
    n_params = sum(1 for k in sd if not k.endswith("inv_freq"))
    assert checked == len(weights)
    assert n_params == len(weights) + 2 * NOMIC_DIMS["n_layer"], (n_params, len(weights))  # Wqkv -> 3 tensors

    probe = torch.tensor([[2, 10, 20, 30, 3]])
    with torch.inference_mode():
        base = model(input_ids=probe).last_hidden_state
    perturb = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("encoder.layers.1.mlp.fc12.weight", "encoder.layers.0.attn.Wqkv.weight", "emb_ln.bias"):
            w2 = dict(weights)
            w2[name] = weights[name] + 0.05
            save_file(w2, str(pathlib.Path(tmp) / "model.safetensors"), metadata={"format": "pt"})
            m2 = load_hf_nomic(dst, vocab_size, path=tmp)
            with torch.inference_mode():
                moved = float((m2(input_ids=probe).last_hidden_state - base).abs().max())
            assert moved > 1e-3, (name, moved)
            perturb[name] = round(moved, 4)
    return dst, vocab_size, model, weights, perturb


# ---------------------------------------------------------------------------
# Goldens for a tiny fixture
# ---------------------------------------------------------------------------

def tiny_goldens(name, dst, corpus, model, max_seq, full, trunc, extra):
    import torch
    import torch.nn.functional as F

    h32 = run_per_string(model, trunc, torch.float32)
    m64 = copy.deepcopy(model).to(torch.float64)
    h64 = run_per_string(m64, trunc, torch.float64)
    mean32 = pooled_embeddings(h32)
    mean64 = pooled_embeddings(h64)
    emb32 = l2n(mean32).numpy()
    emb64 = l2n(mean64).numpy()
    write_f32(dst / "embeddings.f32", emb32)
    write_f64(dst / "embeddings.f64", emb64)
    files = {
        "embeddings.f32": "n x dim little-endian f32: mean of the last hidden state over the (truncated) tokens, "
                          "then L2 normalization; float32 forward, one string at a time",
        "embeddings.f64": "n x dim little-endian f64: the same in float64 (a near-exact reference)",
    }
    figures = {
        "f32_vs_f64_max_abs": max_abs(emb32, emb64),
        "f32_vs_f64_max_abs_unnormalized_mean": max_abs(mean32.numpy(), mean64.numpy()),
    }
    if name == "nomic-tiny":
        def matryoshka(mean):
            x = F.layer_norm(mean, normalized_shape=(mean.shape[1],))
            return l2n(x[:, :MATRYOSHKA_DIM])
        d32 = matryoshka(mean32).numpy()
        d64 = matryoshka(mean64).numpy()
        write_f32(dst / "embeddings-dim64.f32", d32)
        files["embeddings-dim64.f32"] = (
            "n x 64 f32: nomic's Matryoshka procedure: mean pooling, F.layer_norm over the full width "
            "(no affine, eps 1e-5), keep the first 64, L2 normalization")
        figures["dim64_f32_vs_f64_max_abs"] = max_abs(d32, d64)
    goldens = {
        "fixture": name,
        "n": len(corpus),
        "dim": int(emb32.shape[1]),
        "max_seq_length": max_seq,
        "corpus_sha256": common.sha256_file(OUT / "corpus.json"),
        "files": files,
        "figures": figures,
        "stats": degeneracy_stats(emb64, trunc),
        **extra,
        "ids_note": "ids: this fixture's tokenizer.json (with [CLS]/[SEP]), truncated as sentence-transformers "
                    "truncates (first max_seq_length-1 tokens, then [SEP]); full_lengths: untruncated lengths",
        "full_lengths": [len(f) for f in full],
        "ids": trunc,
    }
    return goldens, {"h32": h32, "emb32": emb32, "emb64": emb64, "mean32": mean32}


def sensitivity(model, trunc, emb32, variants):
    """How far the goldens move under plausible implementation mistakes, on
    the first 40 corpus strings: shows the goldens can tell them apart from
    float32 noise."""
    import torch
    out = {}
    sel = list(range(40))
    for label, make in variants.items():
        m = make(copy.deepcopy(model))
        hs = run_per_string(m, [trunc[i] for i in sel], torch.float32)
        e = l2n(pooled_embeddings(hs)).numpy()
        out[label] = max_abs(e, emb32[sel])
    return out


# ---------------------------------------------------------------------------
# llama.cpp: converter (in a child process) and cross-check
# ---------------------------------------------------------------------------

def convert_main(src, dst):
    """Run llama.cpp's convert_hf_to_gguf.py on src with two patches, both
    inside this process only (the llama.cpp tree is not modified):

    1. Pre-tokenizer detection. The converter identifies tokenizers by
       hashing the ids it gets for a fixed text; the trimmed vocabulary gives
       ids no known model has, so it raises NotImplementedError. For a
       WordPiece ("bert") vocabulary llama.cpp ignores tokenizer.ggml.pre
       (only BPE vocabularies use it), so the patch answers "default"
       when, and only when, the original detection fails.
    2. Hyperparameters of nomic_bert. The converter reads config.json
       through AutoConfig. With the transformers it pins (4.57) there is no
       nomic_bert config class, AutoConfig fails and the converter falls back
       to the raw config.json. transformers >= 5.x has a core NomicBertConfig
       that ignores the original keys and adds its defaults (hidden_size 768,
       num_hidden_layers 12, intermediate_size 3072, ...), and the converter's
       find_hparam prefers those names over n_embd/n_layer/n_inner: a tiny
       model would be written with the metadata of nomic-embed-text-v1.5. The
       patch gives the converter the raw config.json for nomic_bert, which is
       what it gets with its pinned transformers."""
    common.use_llama_gguf_py()
    sys.path.insert(0, str(LLAMA))
    import convert_hf_to_gguf as conv
    from conversion.base import ModelBase, TextModel

    orig_pre = TextModel.get_vocab_base_pre

    def get_vocab_base_pre(self, tokenizer):
        try:
            return orig_pre(self, tokenizer)
        except NotImplementedError:
            print("EMBED-GOLDENS-PATCH: pre-tokenizer not recognized, using 'default'", file=sys.stderr)
            return "default"

    TextModel.get_vocab_base_pre = get_vocab_base_pre
    orig_hparams = ModelBase.load_hparams

    def load_hparams(dir_model, is_mistral_format):
        cfg = pathlib.Path(dir_model) / "config.json"
        if not is_mistral_format and cfg.is_file():
            raw = json.loads(cfg.read_text(encoding="utf-8"))
            if raw.get("model_type") == "nomic_bert":
                print("EMBED-GOLDENS-PATCH: nomic_bert hparams read from raw config.json", file=sys.stderr)
                return raw
        return orig_hparams(dir_model, is_mistral_format)

    ModelBase.load_hparams = staticmethod(load_hparams)
    sys.argv = ["convert_hf_to_gguf.py", str(src), "--outtype", "f32", "--outfile", str(dst)]
    conv.main()


def convert(src, dst):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(LLAMA / "gguf-py")
    env["HF_HUB_OFFLINE"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    run = subprocess.run([sys.executable, str(pathlib.Path(__file__).resolve()), "--convert", str(src), str(dst)],
                         capture_output=True, text=True, env=env)
    if run.returncode != 0:
        sys.exit(f"llama.cpp converter failed on {src}:\n{run.stdout}\n{run.stderr}")
    patches = sorted({l.split(":", 1)[1].strip() for l in run.stderr.splitlines() if l.startswith("EMBED-GOLDENS-PATCH:")})
    # Warnings other than the unrecognized-pre-tokenizer banner (patch 1).
    warnings = sorted({l.strip() for l in run.stderr.splitlines()
                       if l.startswith("WARNING") and "**" not in l and l.strip() != "WARNING:hf-to-gguf:"})
    return {"patches_used": patches, "converter_warnings": warnings}


def gguf_source_names(arch, n_layer):
    """GGUF tensor name -> the fixture's safetensors name, per llama.cpp's
    gguf-py tensor_mapping.py (checked tensor by tensor below)."""
    if arch == "bert":
        m = {"token_embd.weight": "embeddings.word_embeddings.weight",
             "position_embd.weight": "embeddings.position_embeddings.weight",
             "token_types.weight": "embeddings.token_type_embeddings.weight",
             "token_embd_norm.weight": "embeddings.LayerNorm.weight",
             "token_embd_norm.bias": "embeddings.LayerNorm.bias"}
        per = {"attn_q": "attention.self.query", "attn_k": "attention.self.key", "attn_v": "attention.self.value",
               "attn_output": "attention.output.dense", "attn_output_norm": "attention.output.LayerNorm",
               "ffn_up": "intermediate.dense", "ffn_down": "output.dense", "layer_output_norm": "output.LayerNorm"}
        prefix = "encoder.layer.{}."
    else:
        m = {"token_embd.weight": "embeddings.word_embeddings.weight",
             "token_types.weight": "embeddings.token_type_embeddings.weight",
             "token_embd_norm.weight": "emb_ln.weight", "token_embd_norm.bias": "emb_ln.bias"}
        per = {"attn_qkv": "attn.Wqkv", "attn_output": "attn.out_proj", "attn_output_norm": "norm1",
               "ffn_up": "mlp.fc11", "ffn_gate": "mlp.fc12", "ffn_down": "mlp.fc2", "layer_output_norm": "norm2"}
        prefix = "encoder.layers.{}."
    for i in range(n_layer):
        for g, h in per.items():
            for suffix in ("weight", "bias"):
                m[f"blk.{i}.{g}.{suffix}"] = prefix.format(i) + f"{h}.{suffix}"
    return m


def check_gguf_tensors(gguf_path, st_path, arch, n_layer):
    """Every GGUF tensor equals (bit for bit) the safetensors tensor it came
    from; returns the safetensors tensors the GGUF leaves out."""
    import numpy as np
    from gguf import GGUFReader
    from safetensors.numpy import load_file
    src = load_file(str(st_path))
    names = gguf_source_names(arch, n_layer)
    used = set()
    for t in GGUFReader(str(gguf_path)).tensors:
        s = names[t.name]
        a = np.asarray(t.data).reshape(src[s].shape)
        assert a.dtype == np.float32 and np.array_equal(a, src[s]), t.name
        assert [int(x) for x in t.shape] == list(src[s].shape)[::-1], t.name
        used.add(s)
    return sorted(set(src) - used)


def gguf_summary(path):
    from gguf import GGUFReader, GGUFValueType
    r = GGUFReader(str(path))
    meta = {}
    for f in r.fields.values():
        if f.name.startswith("GGUF."):
            continue
        t = f.types[0]
        if t == GGUFValueType.ARRAY:
            vals = f.contents()
            sub = f.types[-1].name
            entry = {"type": f"array[{sub}]", "len": len(vals)}
            if f.name == "tokenizer.ggml.tokens":
                entry["first_40"] = vals[:40]
                entry["some_later"] = vals[200:215]
                entry["last_5"] = vals[-5:]
            elif f.name == "tokenizer.ggml.token_type":
                entry["counts"] = {str(k): v for k, v in sorted(collections.Counter(vals).items())}
                entry["first_8"] = vals[:8]
            else:
                entry["first_8"] = vals[:8]
            meta[f.name] = entry
        else:
            v = f.contents()
            meta[f.name] = {"type": t.name, "value": v}
    tensors = [[t.name, [int(x) for x in t.shape], t.tensor_type.name] for t in r.tensors]
    return {"metadata": meta, "tensors": tensors}


def llama_env():
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    return env


def llama_tokenize(gguf, text):
    exe = LLAMA_BIN / "llama-tokenize"
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(text.encode("utf-8"))
        name = f.name
    try:
        run = subprocess.run([str(exe), "-m", str(gguf), "-f", name, "--ids", "--log-disable", "--no-escape"],
                             capture_output=True, env=llama_env())
    finally:
        os.unlink(name)
    if run.returncode != 0:
        raise RuntimeError(f"llama-tokenize failed ({run.returncode}): {run.stderr.decode(errors='replace')[-2000:]}")
    lines = [l for l in run.stdout.decode().splitlines() if l.startswith("[")]
    assert len(lines) == 1, run.stdout
    return json.loads(lines[0])


LLAMA_EMBED_TRIES = 25


def llama_embed(gguf, text, dim, extra=()):
    """One string's embedding from llama-embedding (mean pooling, L2
    normalization, printed with 7 decimals). llama.cpp's logger prints from a
    worker thread and is deliberately never shut down (common/log.cpp,
    common_log_main), so the end of stdout is sometimes lost when the
    program exits (about 1 run in 10 here, nearly always with many strings
    in one run). Hence one string per run, the JSON checked for completeness
    (one embedding of `dim` numbers), and the run repeated when truncated.
    Returns (embedding, number of runs)."""
    exe = LLAMA_BIN / "llama-embedding"
    cmd = [str(exe), "-m", str(gguf), "-p", text, "--pooling", "mean", "--embd-normalize", "2",
           "--embd-output-format", "json", "-c", "2048", "-b", "2048", "-ub", "2048", "-t", "1", "--no-warmup", "--no-escape", *extra]
    for attempt in range(1, LLAMA_EMBED_TRIES + 1):
        run = subprocess.run(cmd, capture_output=True, env=llama_env())
        if run.returncode != 0:
            raise RuntimeError(f"llama-embedding failed ({run.returncode}): {run.stderr.decode(errors='replace')[-3000:]}")
        out = run.stdout.decode()
        try:
            start = out.index('{\n  "object": "list"')
            end = out.index("\n}\n", start) + 2
            data = json.loads(out[start:end])["data"]
        except ValueError:
            continue
        if len(data) == 1 and len(data[0]["embedding"]) == dim:
            return data[0]["embedding"], attempt
    raise RuntimeError(f"llama-embedding output truncated {LLAMA_EMBED_TRIES} times for {text[:40]!r}")


def llama_source():
    sdists = sorted(LLAMA.parent.glob("llama_cpp_python-*.tar.gz"))
    return f"the `{sdists[-1].name[:-len('.tar.gz')]}` sdist" if sdists else "an unknown llama.cpp source"


def llama_version():
    exe = LLAMA_BIN / "llama-embedding"
    run = subprocess.run([str(exe), "--version"], capture_output=True, text=True, env=llama_env())
    lines = (run.stdout + run.stderr).strip().splitlines()
    return lines[0] if lines else "unknown"


def with_ggml_gelu(model):
    """A copy of the BERT model with ggml's CPU GELU (GGML_GELU_FP16): the
    tanh formula tabulated on f16, i.e. input rounded to f16, output rounded
    to f16, 0 below -10 and identity above 10."""
    import torch

    class GgmlGelu(torch.nn.Module):
        def forward(self, x):
            xh = x.to(torch.float16).to(torch.float32)
            y = 0.5 * xh * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * xh * (1.0 + 0.044715 * xh * xh)))
            y = y.to(torch.float16).to(torch.float32)
            return torch.where(x <= -10.0, torch.zeros_like(x), torch.where(x >= 10.0, x, y))

    m = copy.deepcopy(model)
    for layer in m.encoder.layer:
        layer.intermediate.intermediate_act_fn = GgmlGelu()
    return m


def cross_check(name, gguf, corpus, model, full, emb32, max_seq, emulated=None):
    import torch
    if not (LLAMA_BIN / "llama-embedding").is_file() or not (LLAMA_BIN / "llama-tokenize").is_file():
        return {"skipped": f"no llama-embedding/llama-tokenize in {LLAMA_BIN}"}
    idx = CROSS_CHECK[name]
    for i in idx:
        assert 0 < len(full[i]) <= max_seq, (name, i, len(full[i]))   # no truncation question
    rows = []
    llama_ids = {}
    for i in idx:
        llama_ids[i] = llama_tokenize(gguf, corpus[i])
    runs = 0
    modes = {"default": (), "fa_off": ("-fa", "off")}
    for i in idx:
        same_ids = llama_ids[i] == full[i]
        row = {"index": i, "text": corpus[i][:60], "hf_tokens": len(full[i]), "llama_tokens": len(llama_ids[i]),
               "same_ids": same_ids}
        if not same_ids:
            # Separate tokenizer from model: HF's model on llama.cpp's ids.
            h = run_per_string(model, [llama_ids[i]], torch.float32)[0]
            ref = l2n(h.mean(0, keepdim=True)).numpy()[0]
            row["hf_ids"] = full[i]
            row["llama_ids"] = llama_ids[i]
        else:
            ref = emb32[i]
        for mode, extra in modes.items():
            emb, n = llama_embed(gguf, corpus[i], emb32.shape[1], extra)
            runs += n
            key = "max_abs" + ("" if mode == "default" else "_" + mode)
            row[key + ("_vs_golden" if same_ids else "_vs_hf_on_llama_ids")] = max_abs(emb, ref)
            if not same_ids:
                row[key + "_vs_golden"] = max_abs(emb, emb32[i])
            if mode == "fa_off" and emulated is not None:
                h = run_per_string(emulated, [llama_ids[i]], torch.float32)[0]
                row["max_abs_fa_off_vs_hf_with_ggml_gelu"] = max_abs(emb, l2n(h.mean(0, keepdim=True)).numpy()[0])
        rows.append(row)
    print(f"  {name}: {runs} llama-embedding runs for {2 * len(rows)} embeddings (retries after truncated output)")

    def worst(mode):
        key = "max_abs" + ("" if mode == "default" else "_" + mode)
        return max(r[key + "_vs_golden"] if r["same_ids"] else r[key + "_vs_hf_on_llama_ids"] for r in rows)

    return {
        "llama_cpp": llama_version(),
        "llama_cpp_source": llama_source(),
        "command": "llama-embedding -m GGUF -p STRING --pooling mean --embd-normalize 2 --embd-output-format json "
                   "-c 2048 -b 2048 -ub 2048 -t 1 --no-warmup --no-escape [-fa off] (one string per run); "
                   "llama-tokenize -m GGUF -f FILE --ids --log-disable --no-escape",
        "strings": len(rows),
        "tokenizer_mismatches": sum(1 for r in rows if not r["same_ids"]),
        "note": "embeddings compared on identical token ids: the golden row when llama.cpp tokenizes like HF, "
                "otherwise HF's model run on llama.cpp's ids; default = llama.cpp's defaults (flash attention "
                "auto, i.e. on for this CPU build, with f16 K/V), fa_off = -fa off",
        "max_abs_embedding_diff_on_identical_ids": worst("default"),
        "max_abs_embedding_diff_on_identical_ids_fa_off": worst("fa_off"),
        **({"max_abs_fa_off_vs_hf_with_ggml_gelu": max(r["max_abs_fa_off_vs_hf_with_ggml_gelu"] for r in rows)}
           if emulated is not None else {}),
        "rows": rows,
    }


# ---------------------------------------------------------------------------
# Sentence-transformers round trip on the fixtures
# ---------------------------------------------------------------------------

def st_check_bert(dst, corpus, emb32):
    import torch
    from sentence_transformers import SentenceTransformer
    m = SentenceTransformer(str(dst), device="cpu")
    with torch.inference_mode():
        e = m.encode(corpus, batch_size=32, convert_to_numpy=True)
    return {"sentence_transformers_encode_vs_golden_max_abs": max_abs(e, emb32), "st_max_seq_length": m.max_seq_length}


def st_check_nomic(dst, corpus, emb32, vocab_size):
    """sentence-transformers on the nomic-tiny directory. transformers'
    core NomicBertConfig does not read the original keys, so the tiny
    dimensions are passed as config overrides; everything else (modules,
    pooling, tokenizer, max_seq_length, weights through the conversion
    mapping) comes from the directory."""
    import torch
    from sentence_transformers import SentenceTransformer
    hc = hf_nomic_config(vocab_size)
    overrides = {k: getattr(hc, k) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                              "intermediate_size", "hidden_act", "layer_norm_eps", "head_dim")}
    overrides["rope_parameters"] = {"rope_type": "default", "rope_theta": 1000.0}
    try:
        m = SentenceTransformer(str(dst), device="cpu", config_kwargs=overrides)
        with torch.inference_mode():
            e = m.encode(corpus, batch_size=32, convert_to_numpy=True, normalize_embeddings=True)
        return {"sentence_transformers_encode_vs_golden_max_abs": max_abs(e, emb32),
                "st_max_seq_length": m.max_seq_length,
                "st_note": "loaded with config_kwargs overrides for the core NomicBertConfig names; "
                           "normalize_embeddings=True because the pipeline has no Normalize module"}
    except Exception as exc:  # report, do not fail
        return {"sentence_transformers_error": f"{type(exc).__name__}: {exc}"[:500]}



# ---------------------------------------------------------------------------
# README
# ---------------------------------------------------------------------------

def fmt(x):
    return f"{x:.2g}"


def gguf_table(g):
    lines = ["| key | type | value |", "|---|---|---|"]
    for k, v in g["metadata"].items():
        if "value" in v:
            val = v["value"]
            if isinstance(val, float):
                val = f"{val:.6g}"
            lines.append(f"| `{k}` | {v['type']} | `{val}` |")
        else:
            shown = v.get("first_8", v.get("first_40", []))[:8]
            extra = ""
            if "counts" in v:
                extra = " (counts by type: " + ", ".join(f"{t}: {c}" for t, c in v["counts"].items()) + ")"
            lines.append(f"| `{k}` | {v['type']} × {v['len']} | `{json.dumps(shown, ensure_ascii=False)}`…{extra} |")
    arch = g["metadata"]["general.architecture"]["value"]
    src = gguf_source_names("bert" if arch == "bert" else "nomic", 2)
    lines += ["", "| tensor | shape (GGUF order, ne0 first) | type | from safetensors |", "|---|---|---|---|"]
    for name, shape, typ in g["tensors"]:
        lines.append(f"| `{name}` | {shape} | {typ} | `{src[name]}` |")
    lines += ["", "Every GGUF tensor equals its safetensors source bit for bit (checked). Not in the GGUF: "
              + (", ".join(f"`{x}`" for x in g["safetensors_tensors_not_in_gguf"]) or "nothing") + "."]
    return "\n".join(lines)


def visible(text):
    """The text with tabs and invisible characters written as escapes."""
    out = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch == "\t":
            out.append("\\t")
        elif ch != " " and (cat[0] == "C" or cat in ("Zs", "Zl", "Zp")):
            out.append("\\u%04x" % ord(ch) if ord(ch) <= 0xFFFF else "\\U%08x" % ord(ch))
        else:
            out.append(ch)
    return "".join(out)


def cross_check_text(name, cc):
    if "skipped" in cc:
        return f"{name}: skipped ({cc['skipped']})."
    out = [f"{name}: {cc['strings']} strings, llama.cpp `{cc['llama_cpp']}`; "
           f"llama-tokenize differs from HF on {cc['tokenizer_mismatches']} of them; on identical ids the "
           f"embeddings differ by at most {fmt(cc['max_abs_embedding_diff_on_identical_ids'])} with llama.cpp's "
           f"defaults and {fmt(cc['max_abs_embedding_diff_on_identical_ids_fa_off'])} with `-fa off`."]
    out.append("")
    out.append("| # | text | HF / llama tokens | max abs (default) | max abs (`-fa off`) |")
    out.append("|---|---|---|---|---|")
    for r in cc["rows"]:
        key = "_vs_golden" if r["same_ids"] else "_vs_hf_on_llama_ids"
        text = visible(r["text"]).replace("|", "\\|")
        note = "" if r["same_ids"] else " (ids differ; vs HF on llama's ids)"
        out.append(f"| {r['index']} | `{text}` | {r['hf_tokens']} / {r['llama_tokens']}{note} | "
                   f"{fmt(r['max_abs' + key])} | {fmt(r['max_abs_fa_off' + key])} |")
    return "\n".join(out)


def write_readme(corpus, mini_meta, vstats, report):
    b, n = report["bert-tiny"], report["nomic-tiny"]
    v = mini_meta["versions"]
    sizes = []
    total = 0
    for p in our_files():
        if p.name == "README.md" and p.parent == OUT:
            continue
        total += p.stat().st_size
        sizes.append(f"| `{p.relative_to(OUT)}` | {p.stat().st_size} |")
    nomic_names = "\n".join(
        f"| `{k}` | {list(sh)} |" for k, sh in n["model"]["safetensors_tensors"].items() if ".layers.1." not in k)
    cfg = nomic_config(n["model"]["vocab_size"])
    noise = max(b["figures"]["f32_vs_f64_max_abs"], n["figures"]["f32_vs_f64_max_abs"],
                b["sentence_transformers"]["sentence_transformers_encode_vs_golden_max_abs"])
    min_other = min([x for k, x in b["sensitivity_max_abs"].items() if k != "layer_norm_eps_1e-5"]
                    + list(n["sensitivity_max_abs"].values()))
    arch_keys = ["model_type", "architectures", "n_embd", "n_head", "n_layer", "n_inner", "n_positions",
                 "max_trained_positions", "vocab_size", "pad_vocab_size_multiple", "type_vocab_size",
                 "layer_norm_epsilon", "activation_function", "rotary_emb_base", "rotary_emb_fraction",
                 "rotary_emb_interleaved", "rotary_emb_scale_base", "rotary_scaling_factor", "qkv_proj_bias",
                 "mlp_fc1_bias", "mlp_fc2_bias", "prenorm", "causal", "pad_token_id"]
    cfg_lines = "\n".join(f"| `{k}` | `{json.dumps(cfg[k])}` |" for k in arch_keys)
    other_keys = ", ".join(f"`{k}`" for k in cfg if k not in arch_keys)
    text = f"""# Text-embedding fixtures and goldens

Everything here is written by `scripts/make-embed-goldens.py` (this README
included):

    {COMMAND}

(reference venv from `scripts/setup-refenv.sh`; all-MiniLM-L6-v2 from
`scripts/fetch-models.sh`; llama.cpp's source tree and build at
`$FERRITE_LLAMACPP`, scripts/env.sh).
The script is deterministic (fixed seeds, one torch thread): rerunning it
leaves these files byte-identical on the same machine.

Versions: torch {v['torch']}, transformers {v['transformers']},
sentence-transformers {v['sentence_transformers']}, tokenizers {v['tokenizers']},
safetensors {v['safetensors']}, numpy {v['numpy']}, Python {v['python']};
llama.cpp (converter, gguf-py and the binaries, which report
`{b['llama_cpp_cross_check'].get('llama_cpp', 'n/a')}`) is the one vendored in
{llama_source()}, built by `scripts/build-llamacpp.sh`.

Binary files (`*.f32`, `*.f64`) are raw little-endian floats, row-major
`n × dim`, no header; row `i` belongs to corpus string `i`; `n` =
{len(corpus)}.

## The corpus: `corpus.json`, `corpus.txt`

{len(corpus)} strings, written out in the script: the empty string and
whitespace-only strings, single words, short English sentences, mixed case,
French, German, Spanish, Portuguese, Russian, Greek, Chinese, Japanese,
Korean, Arabic, Hindi, Hebrew, Thai, Vietnamese, accents that NFD-strip and
letters that do not decompose (Ø, Ł, Đ, ligatures, fullwidth), combining
accents, emoji (skin tones, ZWJ sequences, flags), digits and punctuation,
URLs, code, runs of spaces and tabs, invisible characters (U+00A0, U+200B,
U+200C, U+200D, U+00AD, U+2060, U+FEFF, U+0007, U+001B, U+2009, U+2002,
U+3000), long paragraphs (with the bert-base-uncased vocabulary five are over
256 wordpieces, the longest 834), words of exactly 100 and 101 characters
(WordPiece's `max_input_chars_per_word` limit) and four strings of exactly
128, 129, 256 and 257 tokens with [CLS]/[SEP] (the truncation boundaries of
bert-tiny and all-MiniLM-L6-v2, in both vocabularies).

`corpus.json` is a JSON list (invisible characters escaped as `\\uXXXX`);
`corpus.txt` has the same strings as UTF-8, one per line, `\\n`-terminated (no
string contains any line break character, including U+2028/U+2029/U+0085).

## `minilm/`: sentence-transformers/all-MiniLM-L6-v2

- `ids.json`: `full`: token ids from the model's `tokenizer.json` with the
  `tokenizers` library (`Tokenizer.from_file`), [CLS]/[SEP] added, no
  truncation. Careful: that `tokenizer.json` carries its own settings,
  truncation to 128 and padding to a fixed 128
  (`{json.dumps(mini_meta['tokenizer_json_settings'])}`), which
  `Tokenizer.from_file` applies unless switched off (the script calls
  `no_truncation()` / `no_padding()`); sentence-transformers ignores them.
  `truncated`: the ids sentence-transformers feeds the model with
  `max_seq_length` {mini_meta['max_seq_length']}: the first 255 tokens then
  [SEP] when longer (checked against `SentenceTransformer.preprocess`).
- `embeddings.f32` ({len(corpus)} × 384): `SentenceTransformer(...).encode(corpus,
  batch_size=32)`: the model's own pipeline, Transformer → mean pooling →
  L2 normalization, float32 on CPU.
- `embeddings-unnormalized.f32`: the same through the Transformer and Pooling
  modules only (mean pooling over the attention mask, not normalized).
  Normalizing it reproduces `embeddings.f32` to
  {fmt(mini_meta['renormalized_unnormalized_vs_embeddings_max_abs'])}.
- `embeddings-cls.f32`: the last hidden state of the [CLS] token (position 0),
  not normalized.
- `meta.json`: sizes, sha256 of the model files used, versions, command.

These are batched (32 strings, padded, sorted by length as
sentence-transformers does). Recomputed with transformers' `BertModel` one
string at a time (no padding), mean pooling and L2 normalization, they agree
with `embeddings.f32` to {fmt(mini_meta['noise']['per_string_f32_vs_embeddings_max_abs'])} in
float32 and {fmt(mini_meta['noise']['per_string_f64_vs_embeddings_max_abs'])} in float64 (float32
vs float64 one string at a time: {fmt(mini_meta['noise']['per_string_f32_vs_f64_max_abs'])}).

## Tiny random-weight fixtures: `bert-tiny/`, `nomic-tiny/`

Both are complete model directories (weights, config, tokenizer,
sentence-transformers files) plus the llama.cpp GGUF of the same weights, so
both of ferrite's loaders can be tested on them, and a real model directory of
the same family has the same layout.

### The trimmed vocabulary (shared)

A WordPiece vocabulary cut from bert-base-uncased's (all-MiniLM-L6-v2's
`tokenizer.json`): [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4, then, in
bert-base-uncased id order, every character of the BERT-normalized corpus
and its `##` continuation form where bert-base-uncased has them
({vstats['char_tokens']} tokens), and the {vstats['frequent_wordpieces_kept']}
most frequent wordpieces of the corpus' full tokenization (of
{vstats['distinct_wordpieces_in_full_tokenization']} distinct):
{vstats['tokenizer_vocab']} tokens. {vstats['strings_tokenized_differently_from_full_vocab']}
of the {len(corpus)} strings tokenize differently than with the full
vocabulary (rarer words fall back to smaller pieces). Characters of the corpus
with no bert-base-uncased token become [UNK] as they do with the full
vocabulary: `{vstats['chars_without_a_bert_token']}`.

Files: `vocab.txt`; `tokenizer.json` / `tokenizer_config.json` saved by
transformers' `BertTokenizer(vocab=..., do_lower_case=True)` (strip_accents
unset, i.e. following lowercase; Chinese characters split; no truncation or
padding in `tokenizer.json`); `special_tokens_map.json`. The models'
`vocab_size` is padded to a multiple of 64 as nomic does:
{vstats['model_vocab_size']} (ids {vstats['tokenizer_vocab']}..{vstats['model_vocab_size'] - 1}
are never produced; llama.cpp's converter names them `▁[PAD<id>]`, type UNUSED).

### `bert-tiny/`

`transformers.BertModel` with the pooler (as real checkpoints have; encoders
ignore it): hidden 64, 2 layers, 4 heads, intermediate 128, 512 positions,
2 token types, exact (erf) GELU, layer-norm eps 1e-12; seed {SEED_BERT}.
`config.json` and `model.safetensors` (float32) from `save_pretrained`;
sentence-transformers files `modules.json` (Transformer, Pooling, Normalize),
`1_Pooling/config.json` (mean), `sentence_bert_config.json` (max_seq_length
{BERT_TINY_MAX_SEQ}). `bert-tiny.f32.gguf`: llama.cpp's
`convert_hf_to_gguf.py --outtype f32` on the directory.

Weights (both fixtures): embeddings N(0, 1) (so positions and token types
matter as much as words); layer-norm gains 1 + N(0, 0.1²) and biases
N(0, 0.1²) (so a dropped affine term or bias shows); linear weights
N(0, 1/fan_in), query weights doubled (attention scores with a standard
deviation near 2, far from uniform attention). On pairs of strings with
different ids, the cosine between embeddings ranges
{b['stats']['pairwise_cosine_min']}..{b['stats']['pairwise_cosine_max']}
(mean {b['stats']['pairwise_cosine_mean']}) for bert-tiny and
{n['stats']['pairwise_cosine_min']}..{n['stats']['pairwise_cosine_max']}
(mean {n['stats']['pairwise_cosine_mean']}) for nomic-tiny (the most similar
pairs are the near-identical truncation-boundary strings and the long English
paragraphs, whose means over hundreds of tokens converge).

### `nomic-tiny/`

A nomic-bert model laid out like the `nomic-ai/nomic-embed-text-v1.5`
repository, so that ferrite reads a real nomic directory the same way: hidden
128, 2 layers, 4 heads (head_dim 32), intermediate 256, SwiGLU, no biases in
QKV/output/MLP, post-norm, RoPE base 1000 (non-interleaved, full head_dim),
layer-norm eps 1e-12, 2 token types; seed {SEED_NOMIC}.

`config.json` uses the original nomic keys (the remote-code
`NomicBertConfig`, a GPT2Config subclass), not transformers' core names.
Architectural keys:

| key | value |
|---|---|
{cfg_lines}

Descriptive keys kept so the file looks like the real one: {other_keys}.
(`n_positions` 8192 with `max_trained_positions` 2048 is what v1.5 ships and
the only combination llama.cpp's converter accepts for a non-MoE nomic-bert;
it writes context_length 2048. `rotary_emb_base` is an integer in the real
file.)

`model.safetensors` uses the original nomic tensor names, no prefix (layer 1
is the same as layer 0):

| tensor | shape |
|---|---|
{nomic_names}

Meaning, from transformers' `conversion_mapping.py` entry for `nomic_bert`
(which maps these onto its own module names) and llama.cpp's
`gguf-py/gguf/tensor_mapping.py` (nomic-bert rows), which agree:
`emb_ln` = embedding LayerNorm (after word + token-type embeddings; no position
embeddings, RoPE instead); `attn.Wqkv` = q, k and v stacked on dim 0 (rows
0..127 q, 128..255 k, 256..383 v; llama.cpp's converter keeps it fused as
`attn_qkv`, transformers splits it into q/k/v_proj); `attn.out_proj` = attention output; `norm1` = LayerNorm after
attention + residual; `mlp.fc11` = **up** (the multiplied branch),
`mlp.fc12` = **gate** (through SiLU), `mlp.fc2` = down, i.e.
`fc2(silu(fc12(x)) * fc11(x))`; `norm2` = LayerNorm after MLP + residual.

sentence-transformers files: `modules.json` with Transformer and Pooling
only. To the best of my knowledge nomic-embed-text-v1.5's pipeline has no
Normalize module either (users normalize themselves, as its model card does),
so an encoder must normalize by default rather than rely on a Normalize
entry. `1_Pooling/config.json` (mean), `sentence_bert_config.json`
(max_seq_length {NOMIC_TINY_MAX_SEQ}; the longest corpus string has
{max(n['full_lengths'])} tokens, so nothing is truncated and the goldens cover
RoPE positions up to {max(n['full_lengths']) - 1}).

The HF reference is transformers' core `NomicBertModel` loading
`model.safetensors` through its `nomic_bert` conversion mapping, with the
dimensions given explicitly (`NomicBertConfig(hidden_size=128, ...)`):
transformers {v['transformers']}'s core `NomicBertConfig` does **not** read
the original keys (`n_embd`, `n_layer`, `n_inner`, `rotary_emb_base`, ...) and
silently keeps its defaults, which are nomic-embed-text-v1.5's (768 wide, 12
layers). The script checks that every parameter of the HF model equals the
saved tensor under the renaming (Wqkv split in three), and that perturbing a
saved tensor by 0.05 moves the output
(`{json.dumps(n['hf_model_checks']['output_max_abs_change_when_a_saved_tensor_is_perturbed_by_0.05'])}`).
sentence-transformers loads the directory too when given those dimensions as
`config_kwargs`; its `encode` (normalized) agrees with the goldens to
{fmt(n['sentence_transformers']['sentence_transformers_encode_vs_golden_max_abs']) if 'sentence_transformers_encode_vs_golden_max_abs' in n['sentence_transformers'] else 'n/a'}.

No dynamic-NTK variant (`rotary_scaling_factor`) is included: transformers'
dynamic RoPE is stateful (its frequencies only grow with the longest sequence
seen so far), it would need `max_position_embeddings` set to the trained
length, and llama.cpp's converter refuses such a config.

### Goldens of the tiny fixtures

In each fixture directory, computed with transformers, one string at a time
(no padding), on the ids truncated as sentence-transformers truncates:

- `embeddings.f32`: mean of the last hidden state over the tokens, then L2
  normalization (sentence-transformers' mean pooling + Normalize), float32.
- `embeddings.f64`: the same computed in float64 (the model cast to double):
  a near-exact reference for measuring an implementation's own error.
- `nomic-tiny/embeddings-dim64.f32` ({len(corpus)} × {MATRYOSHKA_DIM}): nomic's
  Matryoshka procedure from the nomic-embed-text-v1.5 model card: mean pooling
  → `F.layer_norm(x, (x.shape[1],))` (no affine, eps 1e-5, over all 128) →
  first 64 → L2 normalization.
- `goldens.json`: `ids` (the truncated ids, with [CLS]/[SEP]), `full_lengths`
  (untruncated lengths; for nomic-tiny `ids` are the full ids), the model
  description, the figures below, the GGUF metadata and tensor list, and the
  llama.cpp cross-check rows.

Figures:

| | bert-tiny | nomic-tiny |
|---|---|---|
| float32 vs float64, normalized embeddings, max abs | {fmt(b['figures']['f32_vs_f64_max_abs'])} | {fmt(n['figures']['f32_vs_f64_max_abs'])} |
| float32 vs float64, mean-pooled before normalization | {fmt(b['figures']['f32_vs_f64_max_abs_unnormalized_mean'])} | {fmt(n['figures']['f32_vs_f64_max_abs_unnormalized_mean'])} |
| float32 vs float64, dim-64 Matryoshka | | {fmt(n['figures']['dim64_f32_vs_f64_max_abs'])} |
| sentence-transformers `encode(batch_size=32)` vs `embeddings.f32` | {fmt(b['sentence_transformers']['sentence_transformers_encode_vs_golden_max_abs'])} | {fmt(n['sentence_transformers'].get('sentence_transformers_encode_vs_golden_max_abs', float('nan')))} |

How far plausible implementation mistakes move the embeddings (max abs over
the first 40 strings), to compare with the noise above:

| mistake | max abs |
|---|---|
""" + "\n".join(f"| bert-tiny: {k.replace('_', ' ')} | {fmt(x)} |" for k, x in b["sensitivity_max_abs"].items()) + "\n" + \
        "\n".join(f"| nomic-tiny: {k.replace('_', ' ')} | {fmt(x)} |" for k, x in n["sensitivity_max_abs"].items()) + f"""

Float32 noise is about {fmt(noise)}. Every mistake above except the layer-norm
epsilon moves the embeddings by at least {fmt(min_other)}, so a tolerance of
about 1e-5 on the normalized f32 embeddings tells them apart; the epsilon
(1e-12 vs 1e-5) moves them by only
{fmt(b['sensitivity_max_abs']['layer_norm_eps_1e-5'])}, because the activations
here are O(1), so it has to be read from the config correctly rather than be
caught by these goldens.

## The GGUFs and what llama.cpp's converter does

`bert-tiny.f32.gguf` and `nomic-tiny.f32.gguf` are made by llama.cpp's
`convert_hf_to_gguf.py --outtype f32` run on the fixture directory, in a child
process of the script with two patches applied in that process (the llama.cpp
tree is not modified):

1. Pre-tokenizer detection: the converter hashes the ids its tokenizer gives
   for a fixed text and refuses unknown hashes (`NotImplementedError`: "BPE
   pre-tokenizer was not recognized"). The trimmed vocabulary is unknown to it.
   When, and only when, the original detection raises, the patch returns
   `"default"`. llama.cpp ignores `tokenizer.ggml.pre` for WordPiece
   (`bert`) vocabularies (only BPE vocabularies have pre-tokenizers), so this
   changes nothing at run time. (A real bert-base-uncased vocabulary is
   recognized, as `bert-bge`.)
2. nomic_bert hyperparameters: the converter reads `config.json` through
   `AutoConfig`. With the transformers it pins (4.57.x) there is no
   `nomic_bert` config class, `AutoConfig` fails and the converter falls back
   to the raw `config.json`. With transformers >= 5 the core `NomicBertConfig`
   loads it, keeps its own defaults next to the original keys, and the
   converter's `find_hparam` prefers `hidden_size` (768) over `n_embd`,
   `num_hidden_layers` (12) over `n_layer`, `intermediate_size` (3072) over
   `n_inner`: a tiny model would be written with nomic-embed-text-v1.5's
   dimensions. The patch hands the converter the raw `config.json` for
   `model_type` `nomic_bert`, as it gets with its pinned transformers. (For the
   real v1.5 the defaults happen to equal its dimensions, which hides the
   problem.)

Patches that took effect: bert-tiny: {'; '.join(b['converter']['patches_used'])}.
nomic-tiny: {'; '.join(n['converter']['patches_used'])}. Other converter
warnings: {'; '.join('`' + w + '`' for w in sorted(set(b['converter']['converter_warnings']) | set(n['converter']['converter_warnings'])))}
(gguf-py has no key for a CLS id; llama.cpp uses the BOS id, 2, as [CLS]).

How the converter stores the WordPiece vocabulary (`tokenizer.ggml.model` =
`bert`): word-initial tokens get a `▁` (U+2581) prefix (`hello` → `▁hello`,
also punctuation and single characters: `▁!`, `▁中`), continuation tokens
lose their `##` (`##ing` → `ing`), and special tokens are kept as they are,
typed CONTROL (3), [UNK] included. The padding ids become `▁[PAD<id>]`
(`▁[PAD{vstats['tokenizer_vocab']}]` .. `▁[PAD{vstats['model_vocab_size'] - 1}]`: typed UNUSED
(5), not CONTROL, so they get the `▁` too). Note that `##{{` → `{{` and `{{` → `▁{{`
stay distinct. `tokenizer.ggml.add_bos_token` and `add_eos_token` are true and
`add_sep_token` false; BOS = [CLS] (2), EOS = SEP = [SEP] (3); llama-tokenize
produces `[CLS] ... [SEP]` like HF. The weights: llama.cpp's shapes are
listed ne0-first (the reverse of the PyTorch shape), the BERT pooler is
dropped, Q/K/V stay separate for BERT, nomic's `Wqkv` becomes `attn_qkv`
unchanged (q, k, v row blocks), `fc11` → `ffn_up`, `fc12` → `ffn_gate`.

### bert-tiny.f32.gguf

{gguf_table(b['gguf'])}

### nomic-tiny.f32.gguf

{gguf_table(n['gguf'])}

## Cross-check against llama.cpp

For the strings listed in `goldens.json` (`llama_cpp_cross_check`), the GGUF
was run through `llama-tokenize` and `llama-embedding --pooling mean
--embd-normalize 2` (one string per run; see below), and compared with HF.
Where llama.cpp's ids differ from HF's, the embedding is compared with HF's
model run on llama.cpp's ids, so the model math is judged separately from the
tokenizer.

{cross_check_text('bert-tiny', b['llama_cpp_cross_check'])}

{cross_check_text('nomic-tiny', n['llama_cpp_cross_check'])}

What the differences are:

- Model math, nomic-bert: with `-fa off` llama.cpp matches HF to the 7
  decimals `llama-embedding` prints. With its default (flash attention `auto`,
  on for this CPU build) it casts K and V to f16 (an embedding model has no KV
  cache; `llama-graph.cpp`), which costs about 1e-4.
- Model math, BERT: llama.cpp's CPU GELU is the tanh approximation read from
  an f16 lookup table (`ggml_vec_gelu_f32` with `GGML_GELU_FP16`), not
  transformers' exact erf GELU; with `-fa off` that leaves a few 1e-5. With
  that GELU emulated in the HF model (tanh formula, f16-rounded input and
  output) the difference with `-fa off` drops to
  {fmt(b['llama_cpp_cross_check'].get('max_abs_fa_off_vs_hf_with_ggml_gelu', float('nan')))} (the rest is f16
  rounding flipping differently on slightly different inputs). The goldens
  follow transformers (exact GELU).
- Tokenizer: llama.cpp's WordPiece differs from HF's on (a) Hangul: after
  NFD it drops the vowel and final-consonant jamo (U+1161.., U+11A8..) that
  HF keeps; (b) Devanagari vowel signs (category Mc, e.g. U+093E, U+093F,
  U+0940), which llama.cpp strips as accents while HF's accent stripping
  removes only Mn; (c) words longer than 100 characters, which HF turns into
  [UNK] (`max_input_chars_per_word`) and llama.cpp splits into pieces. The
  goldens follow HF.
- `llama-embedding` loses the end of its standard output now and then (its
  logger prints from a worker thread and is deliberately never shut down;
  `common/log.cpp`, `common_log_main`): with many strings per run the JSON is
  nearly always cut short; with one string per run, from one run in ten to more
  than half of them here, depending on the machine's load. The script runs one
  string at a time, checks the JSON is complete, and reruns if not.

## Sizes

| file | bytes |
|---|---|
""" + "\n".join(sizes) + f"""
| total (without this README) | {total} |
"""
    (OUT / "README.md").write_text(text, encoding="utf-8")

# ---------------------------------------------------------------------------

def main():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers
    torch.set_num_threads(1)
    torch.manual_seed(0)
    transformers.logging.set_verbosity_error()
    if not (MINILM_DIR / "model.safetensors").is_file():
        sys.exit(f"{MINILM_DIR} missing: run scripts/fetch-models.sh first")
    if not (LLAMA / "convert_hf_to_gguf.py").is_file():
        sys.exit(f"llama.cpp converter not found at {LLAMA} (set FERRITE_LLAMACPP)")
    OUT.mkdir(parents=True, exist_ok=True)

    corpus = build_corpus()
    write_corpus(corpus)
    print(f"corpus: {len(corpus)} strings")

    mini = minilm_goldens(corpus)
    boundary = list(range(len(corpus) - len(BOUNDARY_WORDS), len(corpus)))
    assert [len(mini["full"][i]) for i in boundary] == [128, 129, 256, 257]
    print("minilm: done")

    tokens, vstats = trimmed_vocab(corpus, mini["full"])
    vstats["model_vocab_size"] = padded(len(tokens))
    print(f"trimmed vocab: {len(tokens)} tokens, model vocab_size {padded(len(tokens))}")

    report = {}
    # --- bert-tiny
    dst, vocab_size = make_bert_tiny(corpus, tokens)
    from transformers import BertModel
    model = BertModel.from_pretrained(str(dst), dtype=torch.float32)
    model.eval()
    full, trunc = fixture_ids(dst, corpus, BERT_TINY_MAX_SEQ)
    assert [len(full[i]) for i in boundary] == [128, 129, 256, 257]
    from tokenizers import Tokenizer
    mt = Tokenizer.from_file(str(MINILM_DIR / "tokenizer.json"))
    vstats["strings_tokenized_differently_from_full_vocab"] = sum(
        1 for a, b in zip(full, mini["full"]) if [tokens[i] for i in a] != [mt.id_to_token(i) for i in b])
    conv_info = convert(dst, dst / "bert-tiny.f32.gguf")
    extra = {
        "model": {"class": "transformers.BertModel", "seed": SEED_BERT, "vocab_size": vocab_size,
                  "tokenizer_vocab": len(tokens), "hidden": 64, "layers": 2, "heads": 4, "intermediate": 128,
                  "max_position_embeddings": 512, "type_vocab_size": 2, "hidden_act": "gelu (erf)",
                  "layer_norm_eps": 1e-12},
        "vocab": vstats,
    }
    g, res = tiny_goldens("bert-tiny", dst, corpus, model, BERT_TINY_MAX_SEQ, full, trunc, extra)
    g["sentence_transformers"] = st_check_bert(dst, corpus, res["emb32"])

    def bert_act(m, act):
        for layer in m.encoder.layer:
            layer.intermediate.intermediate_act_fn = transformers.activations.ACT2FN[act]
        return m

    def bert_tt1(m):
        w = m.embeddings.token_type_embeddings.weight.data
        w[0] = w[1].clone()
        return m

    def bert_eps(m):
        for mod in m.modules():
            if isinstance(mod, torch.nn.LayerNorm):
                mod.eps = 1e-5
        return m

    g["sensitivity_max_abs"] = sensitivity(model, trunc, res["emb32"], {
        "gelu_tanh_approximation": lambda m: bert_act(m, "gelu_pytorch_tanh"),
        "token_type_1_instead_of_0": bert_tt1,
        "layer_norm_eps_1e-5": bert_eps,
    })
    g["converter"] = conv_info
    g["gguf"] = gguf_summary(dst / "bert-tiny.f32.gguf")
    g["gguf"]["tensors_equal_safetensors"] = True
    g["gguf"]["safetensors_tensors_not_in_gguf"] = check_gguf_tensors(
        dst / "bert-tiny.f32.gguf", dst / "model.safetensors", "bert", 2)
    g["llama_cpp_cross_check"] = cross_check("bert-tiny", dst / "bert-tiny.f32.gguf", corpus, model, full,
                                             res["emb32"], BERT_TINY_MAX_SEQ, emulated=with_ggml_gelu(model))
    g["versions"] = versions()
    g["command"] = COMMAND
    write_json(dst / "goldens.json", g)
    report["bert-tiny"] = g
    print("bert-tiny: done")

    # --- nomic-tiny
    dst, vocab_size, model, weights, perturb = make_nomic_tiny(corpus, tokens)
    full, trunc = fixture_ids(dst, corpus, NOMIC_TINY_MAX_SEQ)
    assert all(len(f) <= NOMIC_TINY_MAX_SEQ for f in full)
    conv_info = convert(dst, dst / "nomic-tiny.f32.gguf")
    extra = {
        "model": {"class": "transformers.NomicBertModel (core, via its nomic_bert conversion mapping)",
                  "seed": SEED_NOMIC, "vocab_size": vocab_size, "tokenizer_vocab": len(tokens),
                  "hidden": 128, "layers": 2, "heads": 4, "head_dim": 32, "intermediate": 256,
                  "activation": "swiglu: down(silu(fc12 x) * fc11 x)", "rope_theta": 1000.0,
                  "rope": "non-interleaved (rotate_half / NeoX), full head_dim", "layer_norm_eps": 1e-12,
                  "biases": "none in QKV/out/MLP; layer norms have weight and bias",
                  "safetensors_tensors": {k: list(v.shape) for k, v in weights.items()}},
        "hf_model_checks": {
            "every_hf_parameter_equals_the_saved_tensor_under_the_renaming": True,
            "output_max_abs_change_when_a_saved_tensor_is_perturbed_by_0.05": perturb,
        },
    }
    g, res = tiny_goldens("nomic-tiny", dst, corpus, model, NOMIC_TINY_MAX_SEQ, full, trunc, extra)
    g["sentence_transformers"] = st_check_nomic(dst, corpus, res["emb32"], vocab_size)

    def nomic_theta(m, theta):
        from transformers.models.nomic_bert.modeling_nomic_bert import NomicBertRotaryEmbedding
        m.config.rope_parameters = {"rope_type": "default", "rope_theta": theta}
        m.rotary_emb = NomicBertRotaryEmbedding(m.config)
        return m

    def nomic_swap_gate_up(m):
        for layer in m.layers:
            g_, u_ = layer.mlp.gate_proj.weight.data.clone(), layer.mlp.up_proj.weight.data.clone()
            layer.mlp.gate_proj.weight.data, layer.mlp.up_proj.weight.data = u_, g_
        return m

    def nomic_interleaved(m):
        # Interleaved (GPT-J) RoPE pairs (2i, 2i+1) instead of NeoX pairs
        # (i, i + head_dim/2): permuting the rows of q and k within each
        # head by the same permutation leaves q.k unchanged, and rotate_half
        # on the permuted head is exactly interleaved RoPE on the original.
        hd = 32
        perm = torch.cat([torch.arange(0, hd, 2), torch.arange(1, hd, 2)])
        for layer in m.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                w = proj.weight.data.view(NOMIC_DIMS["n_head"], hd, -1)
                proj.weight.data = w[:, perm, :].reshape(-1, w.shape[-1]).contiguous()
        return m

    g["sensitivity_max_abs"] = sensitivity(model, trunc, res["emb32"], {
        "rope_theta_10000_instead_of_1000": lambda m: nomic_theta(m, 10000.0),
        "gate_and_up_swapped": nomic_swap_gate_up,
        "interleaved_rope_pairs": nomic_interleaved,
    })
    g["converter"] = conv_info
    g["gguf"] = gguf_summary(dst / "nomic-tiny.f32.gguf")
    g["gguf"]["tensors_equal_safetensors"] = True
    g["gguf"]["safetensors_tensors_not_in_gguf"] = check_gguf_tensors(
        dst / "nomic-tiny.f32.gguf", dst / "model.safetensors", "nomic", 2)
    g["llama_cpp_cross_check"] = cross_check("nomic-tiny", dst / "nomic-tiny.f32.gguf", corpus, model, full,
                                             res["emb32"], NOMIC_TINY_MAX_SEQ)
    g["versions"] = versions()
    g["command"] = COMMAND
    write_json(dst / "goldens.json", g)
    report["nomic-tiny"] = g
    print("nomic-tiny: done")

    for name, g in report.items():
        cc = g["llama_cpp_cross_check"]
        print(f"{name}: f32 vs f64 max abs {g['figures']['f32_vs_f64_max_abs']:.3g}; ST {g['sentence_transformers']}")
        if "skipped" in cc:
            print(f"  llama.cpp cross-check skipped: {cc['skipped']}")
        else:
            print(f"  llama.cpp: {cc['tokenizer_mismatches']}/{cc['strings']} tokenizer mismatches, "
                  f"max abs embedding diff {cc['max_abs_embedding_diff_on_identical_ids']:.3g} "
                  f"(-fa off: {cc['max_abs_embedding_diff_on_identical_ids_fa_off']:.3g})")
    write_readme(corpus, mini["meta"], vstats, report)
    total = 0
    for p in our_files():
        total += p.stat().st_size
        print(f"{p.stat().st_size:>9}  {p.relative_to(ROOT)}")
    print(f"{total:>9}  total")


def our_files():
    """Every file this script writes (testdata/embed/ may hold other files)."""
    files = [OUT / "README.md", OUT / "corpus.json", OUT / "corpus.txt"]
    for sub in ("minilm", "bert-tiny", "nomic-tiny"):
        files += sorted(p for p in (OUT / sub).rglob("*") if p.is_file())
    return files


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--convert":
        convert_main(sys.argv[2], sys.argv[3])
    else:
        main()
