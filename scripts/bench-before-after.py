#!/usr/bin/env python3
"""Speed of two ferrite binaries side by side, alternating in one run: the
"no speed regression" check of a refactor (before = BASE, after = NEW).

    cargo build --release -p ferrite-cli            # NEW
    git worktree add ../base REV && (cd ../base && cargo build --release -p ferrite-cli)
    scripts/bench-before-after.py ../base/target/release/ferrite target/release/ferrite \
        [--rounds 3] [--threads 1 2] [--only decode,embed,translate] [--kernels avx2]

Each round runs every test once with BASE, then once with NEW (the order
flips every round, so a slow drift of the machine's load falls on both);
the table gives the medians and NEW / BASE. The tests:

- decode: `ferrite bench MODEL -p 512 -n 128 -r 1 --json` on SmolLM2 Q4_1,
  Gemma 3 270M Q4_K_M and Qwen2.5-Coder-0.5B Q4_K_M (prompt and generation
  tokens per second), as scripts/bench-vs-llamacpp.sh runs them;
- embed: `ferrite bench minilm --texts testdata/embed/bench-sentences.txt`
  (sentences per second; the mean of its runs);
- translate: `ferrite translate` of the random-weight opus-mt-en-hi-shaped
  model ($FERRITE_TRANSLATION/opus-mt-en-hi-random, written by
  scripts/make-translation-fixtures.py), 32 lines, greedy and beam 4,
  f32 and q8_0 weights, time after load from `--verbose` (lines per
  second). Skipped if the model is missing.

Needs python3 (stdlib only) and the models (scripts/fetch-models.sh).
"""
import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile

import common

ROOT = pathlib.Path(__file__).resolve().parent.parent
DECODERS = ["smollm2", "gemma3-270m", "qwen2.5-0.5b"]
MARIAN = common.TRANSLATION / "opus-mt-en-hi-random"


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return p


def decode(binary, model, threads):
    out = run([binary, "bench", model, "-p", "512", "-n", "128", "-r", "1",
               "-t", str(threads), "--json"]).stdout
    r = json.loads(out.splitlines()[-1])
    return {"pp512": r["pp_tok_s"], "tg128": r["tg_tok_s"]}


def embed(binary, threads):
    r = json.loads(run([binary, "bench", "minilm", "--texts",
                        str(ROOT / "testdata/embed/bench-sentences.txt"),
                        "-t", str(threads), "-r", "1", "--json"]).stdout.splitlines()[-1])
    return {"minilm sent/s": r["sent_per_s"]}


def translate(binary, threads, lines_file, n):
    got = {}
    for weights in ("f32", "q8_0"):
        for beams in (1, 4):
            p = run([binary, "translate", str(MARIAN), str(lines_file), "--weights", weights,
                     "--beams", str(beams), "--max-length", "33", "-t", str(threads),
                     "--verbose"])
            secs = float(re.search(r"translated \d+ lines in ([0-9.]+) s", p.stderr).group(1))
            got[f"marian {weights} beam{beams} lines/s"] = n / secs
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--only", default="decode,embed,translate")
    ap.add_argument("--kernels", help="a kernel set both binaries use (FERRITE_KERNELS)")
    a = ap.parse_args()
    if a.kernels:
        os.environ["FERRITE_KERNELS"] = a.kernels
    parts = set(a.only.split(","))
    tmp = tempfile.TemporaryDirectory()
    lines = (ROOT / "testdata/translation/corpus.en").read_text().splitlines()[:32]
    lines_file = pathlib.Path(tmp.name) / "lines.en"
    lines_file.write_text("\n".join(lines) + "\n")
    if "translate" in parts and not MARIAN.exists():
        print(f"translate: skipped ({MARIAN} missing; scripts/make-translation-fixtures.py)")
        parts.discard("translate")

    results = {}  # (threads, test) -> {"base": [...], "new": [...]}

    def record(which, threads, got):
        for test, v in got.items():
            results.setdefault((threads, test), {"base": [], "new": []})[which].append(v)

    for rnd in range(a.rounds):
        order = [("base", a.base), ("new", a.new)]
        if rnd % 2:
            order.reverse()
        for threads in a.threads:
            for which, binary in order:
                if "decode" in parts:
                    for model in DECODERS:
                        got = decode(binary, model, threads)
                        record(which, threads, {f"{model} {k}": v for k, v in got.items()})
                if "embed" in parts:
                    record(which, threads, embed(binary, threads))
                if "translate" in parts:
                    record(which, threads, translate(binary, threads, lines_file, len(lines)))
        print(f"round {rnd + 1}/{a.rounds} done", file=sys.stderr)

    print(f"| t | test | base | new | new/base |")
    print(f"|---|---|---|---|---|")
    for (threads, test), v in results.items():
        b, n = statistics.median(v["base"]), statistics.median(v["new"])
        print(f"| {threads} | {test} | {b:.1f} | {n:.1f} | {n / b:.3f} |")


if __name__ == "__main__":
    main()
