#!/usr/bin/env python3
"""Goldens for nomic-embed-text-v1.5 (f16 GGUF) in ferrite, from llama.cpp's
`llama-embedding` on the same file, written under testdata/embed/nomic-v1.5/:

  texts.json               the texts: the embedding corpus
                           (testdata/embed/corpus.json) where llama.cpp
                           tokenizes as HF's bert-base-uncased tokenizer does,
                           short sentences with each task prefix, and long
                           English texts of about 600 to 2000 tokens
  ids.json                 llama-tokenize's ids of every text
  embeddings.f32           n x 768 little-endian f32: llama-embedding's mean
                           pooled output (--embd-normalize -1), L2-normalized
  embeddings-dim256.f32    n x 256: nomic's Matryoshka recipe on the same
                           output: layer_norm over 768 (no weights, eps 1e-5),
                           first 256 values, L2-normalized
  meta.json                what was dropped and why, versions, command

llama-embedding runs with the model's own pooling (mean), `-fa off` (with
flash attention on, llama.cpp rounds K and V to f16 for encoders, which costs
about 1e-4), context 2048 (the file's nomic-bert.context_length), two threads,
one text per run (its logger may lose the end of stdout; see
make-embed-goldens.py, llama_embed).

Run with the reference venv after `scripts/fetch-models.sh nomic-embed-v1.5
minilm` and the llama.cpp build (scripts/build-llamacpp.sh):

    HF_HUB_OFFLINE=1 scripts/refenv python scripts/make-nomic-goldens.py
"""

import importlib.util
import json
import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "embed" / "nomic-v1.5"
MODELS = pathlib.Path(os.environ.get("FERRITE_MODELS", ROOT / "models"))
GGUF = MODELS / "nomic-embed-text-v1.5.f16.gguf"
# The bert-base-uncased tokenizer (checked against the GGUF's vocabulary).
HF_TOKENIZER = MODELS / "all-MiniLM-L6-v2" / "tokenizer.json"
COMMAND = "HF_HUB_OFFLINE=1 scripts/refenv python scripts/make-nomic-goldens.py"
DIM = 768
MATRYOSHKA_DIM = 256
CTX = 2048
PREFIXES = ["search_query: ", "search_document: ", "classification: ", "clustering: "]
# Long texts: about this many tokens each (with [CLS] and [SEP]).
LONG_TOKENS = [600, 900, 1300, 1700, 2040]


def embed_goldens_module():
    """scripts/make-embed-goldens.py, for its corpus and helpers (not run)."""
    spec = importlib.util.spec_from_file_location("embed_goldens", ROOT / "scripts" / "make-embed-goldens.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gguf_vocab_as_wordpiece():
    """The GGUF's tokens in WordPiece form (llama.cpp's converter writes a
    word-initial piece with a leading U+2581 and drops `##`)."""
    from gguf import GGUFReader
    r = GGUFReader(str(GGUF))
    f = r.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    out = []
    for t in tokens:
        if t.startswith("\u2581"):
            out.append(t[1:])
        elif t.startswith("[") and t.endswith("]"):
            out.append(t)
        else:
            out.append("##" + t)
    return out


def long_texts(eg, tok):
    """English texts of about LONG_TOKENS tokens, from the corpus phrases."""
    out = []
    for i, target in enumerate(LONG_TOKENS):
        words = []
        j = 0
        while True:
            phrase = eg.PHRASES[(3 * i + 7 * j) % len(eg.PHRASES)]
            n = len(tok.encode(" ".join(words + [phrase])).ids)
            if n > target:
                break
            words.append(phrase)
            j += 1
        out.append(" ".join(words))
    return out


def matryoshka(raw, dim):
    import numpy as np
    x = raw.astype(np.float64)
    x = (x - x.mean(axis=1, keepdims=True)) / np.sqrt(x.var(axis=1, keepdims=True) + 1e-5)
    x = x[:, :dim]
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def main():
    import numpy as np
    from tokenizers import Tokenizer

    eg = embed_goldens_module()
    OUT.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer.from_file(str(HF_TOKENIZER))
    tok.no_truncation()
    tok.no_padding()
    vocab = tok.get_vocab()
    hf_vocab = sorted(vocab, key=vocab.get)
    assert hf_vocab == gguf_vocab_as_wordpiece(), "the GGUF vocabulary is not bert-base-uncased's"

    corpus = json.loads((ROOT / "testdata" / "embed" / "corpus.json").read_text(encoding="utf-8"))
    candidates = [("corpus", t) for t in corpus]
    for i, t in enumerate(corpus[18:38]):
        candidates.append(("prefixed", PREFIXES[i % len(PREFIXES)] + t))
    candidates += [("long", t) for t in long_texts(eg, tok)]

    texts, ids, raws, dropped = [], [], [], []
    for kind, text in candidates:
        hf = tok.encode(text).ids
        if len(hf) > CTX:
            dropped.append({"text": text[:60], "why": f"{len(hf)} tokens > {CTX}"})
            continue
        llama = eg.llama_tokenize(GGUF, text)
        if llama != hf:
            dropped.append({"text": text[:60], "why": f"llama.cpp ids differ from HF's ({len(llama)} vs {len(hf)})"})
            continue
        emb, _ = eg.llama_embed(GGUF, text, DIM, extra=("--embd-normalize", "-1", "-fa", "off", "-t", "2"))
        texts.append(text)
        ids.append(llama)
        raws.append(emb)
        print(f"{kind:8} {len(llama):5} tokens  {text[:50]!r}", flush=True)
    raw = np.array(raws, dtype=np.float64)
    normalized = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    eg.write_json(OUT / "texts.json", texts)
    eg.write_json(OUT / "ids.json", ids)
    eg.write_f32(OUT / "embeddings.f32", normalized)
    eg.write_f32(OUT / "embeddings-dim256.f32", matryoshka(raw, MATRYOSHKA_DIM))
    lengths = [len(i) for i in ids]
    eg.write_json(OUT / "meta.json", {
        "model": "nomic-embed-text-v1.5 f16 GGUF (gpt4all's nomic-embed-text-v1.5.f16.gguf)",
        "gguf_sha256": eg.sha256_file(GGUF),
        "n": len(texts),
        "tokens": {"min": min(lengths), "max": max(lengths), "over_512": sum(n > 512 for n in lengths)},
        "dropped": dropped,
        "llama_cpp": {"version": eg.llama_version(), "source": eg.llama_source(),
                      "args": "--pooling mean --embd-normalize -1 -fa off -c 2048 -b 2048 -ub 2048 -t 2 "
                              "--no-warmup, one text per run"},
        "matryoshka": f"layer_norm(raw, eps 1e-5, no weights), first {MATRYOSHKA_DIM}, L2-normalized (f64)",
        "versions": eg.versions(),
        "command": COMMAND,
    })
    print(f"nomic goldens: {len(texts)} texts ({sum(n > 512 for n in lengths)} over 512 tokens), "
          f"{len(dropped)} dropped")


if __name__ == "__main__":
    main()
