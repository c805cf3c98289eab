#!/usr/bin/env python3
"""Goldens for all-mpnet-base-v2 (MPNet) in ferrite, written under
testdata/embed/mpnet/:

  ids.json        token ids of every corpus string (testdata/embed/corpus.json):
                  full (tokenizer.json, no truncation) and truncated (what
                  sentence-transformers feeds the model, max_seq_length 384)
  embeddings.f32  n x 768 little-endian f32: SentenceTransformer(dir).encode(
                  corpus, batch_size=32) in float32 on the CPU (mean pooling,
                  then the model's Normalize module)
  buckets.json    HF MPNetEncoder.relative_position_bucket (torch) for the
                  relative positions -600..600
  meta.json       sha256 of the model files, versions, noise figures, command

Run with the reference venv (scripts/setup-refenv.sh) after
`scripts/fetch-models.sh mpnet`:

    HF_HUB_OFFLINE=1 scripts/refenv python scripts/make-mpnet-goldens.py

Deterministic: one torch thread, no randomness; rerunning leaves the files
byte-identical on the same machine.
"""

import importlib.util
import json
import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "embed" / "mpnet"
CORPUS = ROOT / "testdata" / "embed" / "corpus.json"
MODELS = pathlib.Path(os.environ.get("FERRITE_MODELS", ROOT / "models"))
MODEL_DIR = MODELS / "all-mpnet-base-v2"
COMMAND = "HF_HUB_OFFLINE=1 scripts/refenv python scripts/make-mpnet-goldens.py"
REL_RANGE = 600


def embed_goldens_module():
    """scripts/make-embed-goldens.py, for its helpers (not run)."""
    spec = importlib.util.spec_from_file_location("embed_goldens", ROOT / "scripts" / "make-embed-goldens.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

    torch.set_num_threads(1)
    eg = embed_goldens_module()
    OUT.mkdir(parents=True, exist_ok=True)
    corpus = json.loads(CORPUS.read_text(encoding="utf-8"))

    model = SentenceTransformer(str(MODEL_DIR), device="cpu")
    model.eval()
    max_seq = model.max_seq_length
    assert max_seq == 384, max_seq
    full, truncated = eg.st_token_ids(model, MODEL_DIR, corpus, "</s>")
    eg.write_json(OUT / "ids.json", {
        "max_seq_length": max_seq,
        "note": "full: tokenizer.json with truncation and padding off, special tokens added; "
                "truncated: what sentence-transformers feeds the model",
        "full": full,
        "truncated": truncated,
    })

    with torch.inference_mode():
        emb = model.encode(corpus, batch_size=32, convert_to_numpy=True)
        assert emb.dtype == np.float32 and emb.shape == (len(corpus), 768)
        # The same strings one at a time (no padding): the size of the
        # batching noise in the goldens.
        alone = np.stack([model.encode([t], convert_to_numpy=True)[0] for t in corpus])
    cos = (alone * emb).sum(axis=1) / (np.linalg.norm(alone, axis=1) * np.linalg.norm(emb, axis=1))
    eg.write_f32(OUT / "embeddings.f32", emb)

    rel = torch.arange(-REL_RANGE, REL_RANGE + 1)
    buckets = MPNetEncoder.relative_position_bucket(rel, num_buckets=32).tolist()
    eg.write_json(OUT / "buckets.json", {
        "note": "MPNetEncoder.relative_position_bucket(arange(-R, R + 1), num_buckets=32): "
                "entry i is the bucket of relative position (key - query) i - R",
        "range": REL_RANGE,
        "num_buckets": 32,
        "buckets": buckets,
    })

    eg.write_json(OUT / "meta.json", {
        "model": "sentence-transformers/all-mpnet-base-v2",
        "model_files_sha256": {name: eg.sha256_file(MODEL_DIR / name)
                               for name in ("model.safetensors", "tokenizer.json", "config.json")},
        "n": len(corpus),
        "dim": 768,
        "max_seq_length": max_seq,
        "corpus_sha256": eg.sha256_file(CORPUS),
        "batched_vs_one_at_a_time_min_cosine": float(cos.min()),
        "torch_threads": torch.get_num_threads(),
        "versions": eg.versions(),
        "command": COMMAND,
    })
    print(f"mpnet goldens: {len(corpus)} strings, batched vs alone min cosine {cos.min():.9f}")


if __name__ == "__main__":
    main()
