#!/usr/bin/env python3
"""The Python binding's speed (not a test): ferrite.Embedder.encode against
the `ferrite` CLI and sentence-transformers on the 512-sentence corpus, and
ferrite.ray's throughput at concurrency 1 and 2 on a local Ray.

    python scripts/bench-python.py [--threads 1] [--rounds 5] [--ray]

Runs with the interpreter that has `ferrite` installed (scripts/test-python.sh's
venv; a release build for figures: `pip install ./python`, or PYTHONPATH to an
unpacked `maturin build --release` wheel). FERRITE_BIN: the CLI (default
target/release/ferrite); the reference venv ($FERRITE_REFENV,
scripts/env.sh) has sentence-transformers (skipped if missing).

Rounds alternate the engines; each round times one encode of the 512
sentences per engine right after a warm-up one, all at the same thread count, and the
medians are printed with the ratio. The CLI figure is `ferrite bench --texts`
(the same `Embedder::embed` call, timed inside the process, no loading), so
the ratio is the binding's own cost: converting the texts, releasing the GIL,
building the numpy array.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import common

REPO = Path(__file__).resolve().parents[1]
TEXTS = REPO / "testdata" / "embed" / "bench-sentences.txt"
MODELS = Path(os.environ.get("FERRITE_MODELS", REPO / "models"))
MODEL_DIR = MODELS / "all-MiniLM-L6-v2"

ST_SNIPPET = r"""
import sys, time, json, torch
from sentence_transformers import SentenceTransformer
threads, path, model = int(sys.argv[1]), sys.argv[2], sys.argv[3]
torch.set_num_threads(threads)
texts = open(path, encoding="utf-8").read().split("\n")[:-1]
m = SentenceTransformer(model, device="cpu")
m.encode(texts, batch_size=32)
t = time.perf_counter(); m.encode(texts, batch_size=32); s = time.perf_counter() - t
print(json.dumps(len(texts) / s))
"""


def cli_rate(binary, threads):
    out = subprocess.run(
        [binary, "bench", str(MODEL_DIR), "--texts", str(TEXTS), "-t", str(threads),
         "-r", "1", "--json"],
        capture_output=True, text=True, check=True,
    ).stdout
    return json.loads(out)["sent_per_s"]


def st_rate(python, threads):
    out = subprocess.run([python, "-c", ST_SNIPPET, str(threads), str(TEXTS), str(MODEL_DIR)],
                         capture_output=True, text=True, check=True,
                         env=dict(os.environ, HF_HUB_OFFLINE="1")).stdout
    return float(out.strip().splitlines()[-1])


def bench_encode(args):
    import ferrite

    texts = TEXTS.read_text(encoding="utf-8").split("\n")[:-1]
    emb = ferrite.Embedder(str(MODEL_DIR), threads=args.threads)
    emb.encode(texts)
    binary = os.environ.get("FERRITE_BIN", str(REPO / "target" / "release" / "ferrite"))
    refenv = common.REFENV
    st_python = refenv / "bin" / "python"
    have_st = st_python.exists() and not args.no_st
    rates = {"python": [], "cli": [], "st": []}
    for r in range(args.rounds):
        # A warm-up right before, as `ferrite bench` does in its process.
        emb.encode(texts)
        t = time.perf_counter()
        emb.encode(texts)
        rates["python"].append(len(texts) / (time.perf_counter() - t))
        rates["cli"].append(cli_rate(binary, args.threads))
        if have_st:
            rates["st"].append(st_rate(str(st_python), args.threads))
        print(f"round {r + 1}: " + ", ".join(
            f"{k} {v[-1]:.1f}" for k, v in rates.items() if v), flush=True)
    med = {k: statistics.median(v) for k, v in rates.items() if v}
    print(f"\nall-MiniLM-L6-v2, {len(texts)} sentences, {args.threads} thread(s), "
          f"medians of {args.rounds} (sentences/s):")
    print(f"  ferrite.Embedder.encode   {med['python']:8.1f}")
    ratios = [p / c for p, c in zip(rates["python"], rates["cli"])]
    print(f"  ferrite bench --texts     {med['cli']:8.1f}   "
          f"(binding / CLI: {med['python'] / med['cli']:.3f} of the medians, "
          f"{statistics.median(ratios):.3f} median of the per-round ratios)")
    if "st" in med:
        print(f"  sentence-transformers     {med['st']:8.1f}   "
              f"(ferrite.Embedder / s-t = {med['python'] / med['st']:.2f}x)")
    return med


def bench_ray(args):
    import ray

    import ferrite
    import ferrite.ray

    os.environ["RAY_AUTH_MODE"] = "disabled"
    base = TEXTS.read_text(encoding="utf-8").split("\n")[:-1]
    texts = [f"{base[i % len(base)]} [{i}]" for i in range(args.ray_texts)]
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning",
             _node_ip_address="127.0.0.1", object_store_memory=200 * 1024 * 1024)
    try:
        for c in (1, 2):
            times = []
            for _ in range(args.ray_rounds):
                ds = ray.data.from_items([{"text": t} for t in texts]).map_batches(
                    ferrite.ray.Embed, fn_constructor_kwargs={"model": str(MODEL_DIR)},
                    concurrency=c, num_cpus=1, batch_size=256, batch_format="numpy")
                t = time.perf_counter()
                n = sum(len(b["embedding"]) for b in ds.iter_batches(batch_size=1024))
                times.append(time.perf_counter() - t)
                assert n == len(texts)
            s = statistics.median(times)
            print(f"ray concurrency {c} (1 CPU each): {len(texts)} texts in {s:.1f} s, "
                  f"{len(texts) / s:.1f} texts/s (median of {args.ray_rounds}, actor start "
                  f"and model load included)", flush=True)
    finally:
        ray.shutdown()
    for t in (1, 2):
        emb = ferrite.Embedder(str(MODEL_DIR), threads=t)
        start = time.perf_counter()
        emb.encode(texts)
        s = time.perf_counter() - start
        print(f"one process, threads={t}: {len(texts) / s:.1f} texts/s")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--no-st", action="store_true", help="skip sentence-transformers")
    p.add_argument("--ray", action="store_true", help="also Ray at concurrency 1 and 2")
    p.add_argument("--ray-only", action="store_true")
    p.add_argument("--ray-texts", type=int, default=4096)
    p.add_argument("--ray-rounds", type=int, default=3)
    args = p.parse_args()
    import ferrite

    print(f"ferrite from {ferrite.__file__}", file=sys.stderr)
    if not args.ray_only:
        bench_encode(args)
    if args.ray or args.ray_only:
        bench_ray(args)


if __name__ == "__main__":
    main()
