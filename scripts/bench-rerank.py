#!/usr/bin/env python3
"""Cross-encoder reranking speed (issue 50): ferrite against
sentence-transformers' CrossEncoder on the same threads, for 1,000
(query, document) pairs at the real dimensions of ms-marco-MiniLM-L-6-v2
(BERT, 6 layers, hidden 384, 12 heads, FFN 1536, vocabulary 30522, 512
positions, one label) with random weights.

    scripts/refenv python scripts/bench-rerank.py [--threads 1,2] [--rounds 3]
        [--n 1000] [--batch-size 32] [--ferrite target/release/ferrite]

The model is made once (fixed seed, f32 safetensors, all-MiniLM-L6-v2's
tokenizer from models/) in $FERRITE_REFERENCE/rerank/minilm-l6-ce-random;
it is not part of the repository. The documents are the embedding
benchmark's sentences (testdata/embed/bench-sentences.txt), the i-th of
the 1,000 being sentence i % 512, followed for i >= 512 by sentence
(7 i) % 512 so that no two pairs are the same; one query for all of them.

ferrite: `ferrite rerank MODEL -q QUERY DOCS --format json -t T
--batch-size B`, wall time of the process; the same command over one
document is timed too and subtracted, so the figure is the scoring of the
pairs without process start and model load (both printed).
sentence-transformers: torch.set_num_threads(T), CrossEncoder.predict(
pairs, batch_size=B) after a warm-up pass (tokenization included, as a
user calls it). Each round runs both engines at every thread count; the
table gives the medians over the rounds, in pairs per second.

Before timing, the scores of the two engines are compared (max absolute
difference of the sigmoid scores, printed; they should be below 1e-5).
Timings are only meaningful on a quiet machine.
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import common

ROOT = common.ROOT
MODELS = pathlib.Path(os.environ.get("FERRITE_MODELS", ROOT / "models"))
MINILM = MODELS / "all-MiniLM-L6-v2"
QUERY = "what are the health benefits of drinking green tea every day?"


def model_dir():
    d = common.REFERENCE / "rerank" / "minilm-l6-ce-random"
    if (d / "model.safetensors").exists():
        return d
    import shutil

    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(20261129)
    cfg = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6,
                     num_attention_heads=12, intermediate_size=1536,
                     max_position_embeddings=512, type_vocab_size=2, num_labels=1)
    model = BertForSequenceClassification(cfg).eval()
    d.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    for f in ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"]:
        if (MINILM / f).exists():
            shutil.copy(MINILM / f, d / f)
    return d


def documents(n):
    lines = (ROOT / "testdata/embed/bench-sentences.txt").read_text(encoding="utf-8").split("\n")[:-1]
    m = len(lines)
    return [lines[i % m] + ("" if i < m else " " + lines[(7 * i) % m]) for i in range(n)]


def run_ferrite(binary, model, docs_file, threads, batch_size):
    t = time.perf_counter()
    out = subprocess.run([str(binary), "rerank", str(model), "-q", QUERY, str(docs_file),
                          "--format", "json", "-t", str(threads), "--batch-size", str(batch_size)],
                         check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - t, json.loads(out)["results"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--ferrite", default=str(ROOT / "target/release/ferrite"))
    args = ap.parse_args()
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    import torch
    from sentence_transformers import CrossEncoder

    model = model_dir()
    docs = documents(args.n)
    pairs = [(QUERY, d) for d in docs]
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-rerank-"))
    docs_file, one_file = tmp / "docs.txt", tmp / "one.txt"
    docs_file.write_text("".join(d + "\n" for d in docs), encoding="utf-8")
    one_file.write_text(docs[0] + "\n", encoding="utf-8")
    threads = [int(t) for t in args.threads.split(",")]
    ce = CrossEncoder(str(model), device="cpu")

    # Agreement first.
    _, results = run_ferrite(args.ferrite, model, docs_file, threads[-1], args.batch_size)
    ref = ce.predict(pairs, batch_size=args.batch_size)
    diff = max(abs(r["score"] - float(ref[r["index"]])) for r in results)
    print(f"agreement: max |ferrite - CrossEncoder| = {diff:.2e} over {len(pairs)} pairs")

    times = {(e, t): [] for e in ("ferrite", "st") for t in threads}
    overhead = {t: [] for t in threads}
    for rnd in range(args.rounds):
        for t in threads:
            whole, _ = run_ferrite(args.ferrite, model, docs_file, t, args.batch_size)
            base, _ = run_ferrite(args.ferrite, model, one_file, t, args.batch_size)
            times[("ferrite", t)].append(whole - base)
            overhead[t].append(base)
            torch.set_num_threads(t)
            ce.predict(pairs[: args.batch_size * 2], batch_size=args.batch_size)
            time.sleep(0.5)
            s = time.perf_counter()
            ce.predict(pairs, batch_size=args.batch_size)
            times[("st", t)].append(time.perf_counter() - s)
        print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr)
    print(f"\n{args.n} pairs, batch {args.batch_size}, medians of {args.rounds} rounds "
          f"(torch {torch.__version__})")
    print("| threads | ferrite pairs/s | sentence-transformers pairs/s | ratio | ferrite start+load s |")
    print("|---|---|---|---|---|")
    for t in threads:
        f = statistics.median(times[("ferrite", t)])
        st = statistics.median(times[("st", t)])
        print(f"| {t} | {args.n / f:.1f} | {args.n / st:.1f} | {st / f:.2f}x | "
              f"{statistics.median(overhead[t]):.2f} |")


if __name__ == "__main__":
    main()
