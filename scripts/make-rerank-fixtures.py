#!/usr/bin/env python3
"""Test fixtures and golden scores for ferrite's cross-encoder rerankers
(issue 50), written under testdata/rerank/.

Run from anywhere, with the reference venv (scripts/setup-refenv.sh:
torch, transformers, sentence-transformers), after scripts/fetch-models.sh
has put all-MiniLM-L6-v2 in models/ (its tokenizer is the fixtures'):

    HF_HUB_OFFLINE=1 scripts/refenv python scripts/make-rerank-fixtures.py

It never touches the network. What it writes:

  bert-ce-1/    random-weight BertForSequenceClassification, num_labels=1
  bert-ce-3/    the same shape with num_labels=3
  each with     config.json, model.safetensors (f16 weights, to keep the
                files small; the reference loads them into float32),
                tokenizer.json, tokenizer_config.json, vocab.txt,
                special_tokens_map.json (all-MiniLM-L6-v2's), and
                goldens.json: the pairs, sentence-transformers'
                CrossEncoder.predict scores with the model's default
                activation ("scores") and without ("raw"), the token ids
                and types of each pair, and the versions used.

Determinism: fixed seeds, one torch thread; rerunning leaves the files
byte-identical.
"""

import json
import os
import pathlib
import shutil

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "rerank"
MODELS = pathlib.Path(os.environ.get("FERRITE_MODELS", ROOT / "models"))
MINILM = MODELS / "all-MiniLM-L6-v2"
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"]

LONG = " ".join(f"word{i} and some ordinary text about topic {i % 7}." for i in range(160))
PAIRS = [
    ["how many people live in berlin?", "Berlin has a population of 3,520,031 registered inhabitants."],
    ["how many people live in berlin?", "New York City is famous for the Metropolitan Museum of Art."],
    ["what is the capital of france", "Paris is the capital and most populous city of France."],
    ["what is the capital of france", ""],
    ["", "A document with an empty query before it."],
    ["Überraschung! Café crème?", "東京は日本の首都です。 naïve façade — 🙂"],
    ["short query", LONG],
    [LONG, "short document"],
    [LONG, LONG + " tail"],
    ["x", "y"],
]


def make(name, num_labels, seed):
    from transformers import BertConfig, BertForSequenceClassification

    d = OUT / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    torch.manual_seed(seed)
    cfg = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=512,
        type_vocab_size=2,
        num_labels=num_labels,
    )
    model = BertForSequenceClassification(cfg).eval()
    # Random weights larger than the init's, so the pairs' scores spread
    # out (std 0.1; LayerNorms near 1 and 0; the classifier std 1, its
    # one-label bias 0).
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "LayerNorm.weight" in n:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif n.startswith("classifier."):
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
        if num_labels == 1:
            model.classifier.bias.fill_(0.0)
    model.half().save_pretrained(d, safe_serialization=True)
    for f in TOKENIZER_FILES:
        if (MINILM / f).exists():
            shutil.copy(MINILM / f, d / f)
    return d


def goldens(d):
    import sentence_transformers
    import transformers
    from sentence_transformers import CrossEncoder

    ce = CrossEncoder(str(d), device="cpu", model_kwargs={"torch_dtype": torch.float32})
    assert next(ce.model.parameters()).dtype == torch.float32
    scores = ce.predict(PAIRS, batch_size=4, convert_to_numpy=True)
    raw = ce.predict(PAIRS, batch_size=4, convert_to_numpy=True,
                     activation_fn=torch.nn.Identity())
    enc = ce.tokenizer([p[0] for p in PAIRS], [p[1] for p in PAIRS], truncation=True,
                       max_length=ce.max_seq_length)
    out = {
        "generator": "scripts/make-rerank-fixtures.py",
        "versions": {"sentence_transformers": sentence_transformers.__version__,
                     "transformers": transformers.__version__, "torch": torch.__version__},
        "max_length": ce.max_seq_length,
        "activation": type(ce.activation_fn).__name__,
        "pairs": PAIRS,
        "ids": enc["input_ids"],
        "types": enc["token_type_ids"],
        "scores": [[float(x) for x in (row if row.ndim else [row])] for row in scores],
        "raw": [[float(x) for x in (row if row.ndim else [row])] for row in raw],
    }
    (d / "goldens.json").write_text(json.dumps(out, indent=1) + "\n")
    print(d.name, out["activation"], out["max_length"], out["scores"][:3])


def main():
    torch.set_num_threads(1)
    goldens(make("bert-ce-1", 1, 5001))
    goldens(make("bert-ce-3", 3, 5003))


if __name__ == "__main__":
    main()
