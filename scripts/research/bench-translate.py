#!/usr/bin/env python3
"""Translation speed: ferrite vs CTranslate2 on the same random-weight
Marian model at opus-mt-en-hi's shape (6+6 layers, d_model 512, 8 heads,
FFN 2048, vocab 61,950), same threads, f32 and int8 (ferrite: Q8_0 at
load; CTranslate2: int8), greedy and beam 4, batch 1 and 32.

    scripts/make-translation-fixtures.py        # writes the model (once)
    cargo build --release -p ferrite-cli
    scripts/refenv pip install ctranslate2   # if missing
    scripts/refenv python scripts/research/bench-translate.py [--threads 2] [--runs 3]

The model is $FERRITE_TRANSLATION/opus-mt-en-hi-random (from
make-translation-fixtures.py); CTranslate2's copies are made from it with
its own converter (`ctranslate2.converters.TransformersConverter`) into
$FERRITE_TRANSLATION/ct2-{float32,int8}.

CTranslate2 picks its GEMM backend by CPU vendor; on this AMD EPYC its
default (oneDNN) runs float32 ~5x slower than with Intel MKL forced
(CT2_USE_MKL=1), while MKL runs int8 ~100x slower than oneDNN (measured
once each, 8 sentences greedy batch 32). Each format is therefore measured
with CTranslate2's faster backend: float32 with CT2_USE_MKL=1, int8 with
the default. Each CTranslate2 run is a fresh process (the variable is read
at start); its time is taken around translate_batch only.

Both engines translate the same sentences (the first lines of
testdata/translation/corpus.en), tokenized by the model's MarianTokenizer
for CTranslate2 and by ferrite itself, to at most MAX_NEW new tokens
(random weights rarely end a sentence, so both run to the limit). Times
exclude loading: ferrite's come from its own `--verbose` line (translation
time after load), CTranslate2's from timing translate_batch in Python.
Runs alternate between the engines so that noise on a shared machine hits
both; the figure is the median of --runs runs; the ratio is
CTranslate2 time / ferrite time (above 1: ferrite is faster).
"""

import argparse
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import common  # noqa: E402

CACHE = common.TRANSLATION
MODEL = CACHE / "opus-mt-en-hi-random"
FERRITE = ROOT / "target" / "release" / "ferrite"
MAX_NEW = 32


def convert(quant):
    import ctranslate2

    out = CACHE / f"ct2-{quant}"
    if not out.exists():
        conv = ctranslate2.converters.TransformersConverter(str(MODEL))
        conv.convert(str(out), quantization=quant, force=True)
    return out


def ferrite_time(path, weights, beams, batch, threads):
    cmd = [
        str(FERRITE), "translate", str(MODEL), str(path),
        "--weights", weights, "--beams", str(beams), "--max-length", str(MAX_NEW + 1),
        "--batch-size", str(batch), "-t", str(threads), "--verbose",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = re.search(r"translated \d+ lines in ([0-9.]+) s", p.stderr)
    return float(m.group(1)), p.stdout.splitlines()


def ct2_worker(quant, beams, batch, threads, text_path):
    """Runs in a child process: one timed translate_batch, seconds on stdout."""
    import ctranslate2
    from transformers import MarianTokenizer

    tok = MarianTokenizer.from_pretrained(MODEL)
    lines = pathlib.Path(text_path).read_text().splitlines()
    source = [tok.convert_ids_to_tokens(tok(l).input_ids) for l in lines]
    ct2 = ctranslate2.Translator(
        str(CACHE / f"ct2-{quant}"), device="cpu", compute_type=quant,
        intra_threads=threads, inter_threads=1,
    )
    start = time.perf_counter()
    ct2.translate_batch(
        source, beam_size=beams, max_batch_size=batch,
        max_decoding_length=MAX_NEW, return_scores=False,
    )
    print(time.perf_counter() - start)


def ct2_time(quant, beams, batch, threads, text_path):
    env = dict(os.environ, CT2_USE_MKL="1" if quant == "float32" else "0")
    p = subprocess.run(
        [sys.executable, __file__, "--ct2-worker", quant, str(beams), str(batch), str(threads), text_path],
        capture_output=True, text=True, check=True, env=env,
    )
    return float(p.stdout.strip().splitlines()[-1])


def main():
    if sys.argv[1:2] == ["--ct2-worker"]:
        q, b, bs, t, path = sys.argv[2:7]
        return ct2_worker(q, int(b), int(bs), int(t), path)
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sentences", type=int, default=16)
    args = ap.parse_args()

    lines = (ROOT / "testdata/translation/corpus.en").read_text().splitlines()[: args.sentences]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(lines) + "\n")
        text_path = f.name

    print(f"CPU: {open('/proc/cpuinfo').read().split('model name')[1].split(':')[1].splitlines()[0].strip()}")
    print(f"threads {args.threads}, {len(lines)} sentences, {MAX_NEW} new tokens max, "
          f"median of {args.runs} runs (machine shared with other jobs)")
    print(f"{'weights':8} {'search':7} {'batch':>5} {'ferrite s':>10} {'ct2 s':>8} {'ct2/ferrite':>12}")
    for weights, quant in [("f32", "float32"), ("q8_0", "int8")]:
        convert(quant)
        for beams in (1, 4):
            for batch in (1, 32):
                ours, theirs = [], []
                for _ in range(args.runs):
                    t, _out = ferrite_time(text_path, weights, beams, batch, args.threads)
                    ours.append(t)
                    theirs.append(ct2_time(quant, beams, batch, args.threads, text_path))
                o, c = statistics.median(ours), statistics.median(theirs)
                search = "greedy" if beams == 1 else f"beam{beams}"
                print(f"{weights:8} {search:7} {batch:5} {o:10.3f} {c:8.3f} {c / o:12.2f}", flush=True)
    os.unlink(text_path)


if __name__ == "__main__":
    sys.exit(main())
