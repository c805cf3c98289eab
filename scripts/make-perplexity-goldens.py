#!/usr/bin/env python3
"""Goldens for `ferrite perplexity`: what llama.cpp's `llama-perplexity`
reports on the committed text testdata/perplexity/text.txt (a frozen copy
of five pages of ferrite's book), for the real models.

For each model (SmolLM2 Q4_1, Gemma 3 270M Q4_K_M, Qwen2.5-Coder 0.5B
Q4_K_M):

    llama-perplexity -m MODEL -f text.txt -c 512 --chunks 4 -t 2 -b 512

and records the running perplexity after each chunk and the final
estimate with its uncertainty, twice: as llama.cpp runs by default
("default": f16 KV cache, flash attention as it decides), and with an f32
KV cache and flash attention off ("f32_attention": `-ctk f32 -ctv f32 -fa
off`). ggml multiplies an f16 cache by the queries (and the attention
weights by the values) after rounding those to f16 too; ferrite keeps its
cache in f16 but queries and weights in f32, so its figures are compared
with the second run, whose attention rounds less (see the Rust test).

KL divergence (f32 attention): SmolLM2's Q4_1 file is the base (`--kl-divergence-base`
saved from it), compared with the same file requantized to Q4_0 by
`llama-quantize --allow-requantize` (the Rust test makes the same file with
`ferrite quantize`, which writes the same bytes as llama-quantize, and
checks its sha256, recorded here). Recorded: every figure of
llama-perplexity's KL-divergence statistics.

IQ4 (the i-quant weights): llama-quantize writes its IQ4_XS mix of the
random-weight fixture testdata/hf-decoders/tiny-llama3.f32.gguf to
testdata/perplexity/tiny-llama3.iq4_nl.gguf (committed, 84 KB; every
matrix falls back to IQ4_NL, its rows being 64 or 128 values), and
llama-perplexity scores it with -c 64 --chunks 8 in both configurations
("iq4" in the goldens). `--only iq4` redoes just that part.

Written to testdata/perplexity/goldens.json. How to run (from the
repository root; needs a llama.cpp build, scripts/build-llamacpp.sh, and
the models, scripts/fetch-models.sh):

    scripts/refenv python scripts/make-perplexity-goldens.py
"""

import hashlib
import json
import re
import subprocess
import tempfile
from pathlib import Path

import common

ROOT = common.ROOT
TEXT = ROOT / "testdata/perplexity/text.txt"
OUT = ROOT / "testdata/perplexity/goldens.json"
MODELS = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
    "qwen2.5": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
}
N_CTX = 512
CHUNKS = 4


def models_dir():
    import os

    return Path(os.environ.get("FERRITE_MODELS", ROOT / "models"))


def run(args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{args[0]} failed:\n{r.stderr[-3000:]}")
    return r.stdout + r.stderr


CONFIGS = {"default": [], "f32_attention": ["-ctk", "f32", "-ctv", "f32", "-fa", "off"]}


def ppl_args(model, *extra):
    return [str(common.LLAMA_BIN / "llama-perplexity"), "-m", str(model), "-c", str(N_CTX),
            "--chunks", str(CHUNKS), "-t", "2", "-b", str(N_CTX), *extra]


def perplexity(model, config):
    out = run(ppl_args(model, "-f", str(TEXT), *CONFIGS[config]))
    chunks = [float(v) for v in re.findall(r"\[\d+\]([0-9.]+),", out)]
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
    return {"chunks": chunks, "ppl": float(m.group(1)), "uncertainty": float(m.group(2))}


def kld_stats(out):
    """Every `Name: value` line of llama-perplexity's closing statistics."""
    stats = {}
    for line in out.splitlines():
        m = re.match(r"^(Mean PPL\(Q\)|Mean PPL\(base\)|Mean    KLD|Maximum KLD|Median  KLD|"
                     r"99\.0%   KLD|RMS Δp|Same top p)\s*:\s*(-?[0-9.]+)", line)
        if m:
            stats[re.sub(r"\s+", " ", m.group(1)).strip()] = float(m.group(2))
    return stats


IQ4_FIXTURE = ROOT / "testdata/perplexity/tiny-llama3.iq4_nl.gguf"


def iq4_goldens():
    src = ROOT / "testdata/hf-decoders/tiny-llama3.f32.gguf"
    run([str(common.LLAMA_BIN / "llama-quantize"), str(src), str(IQ4_FIXTURE), "IQ4_XS", "2"])
    out = {"file": IQ4_FIXTURE.name, "n_ctx": 64, "chunks": 8}
    for config, extra in CONFIGS.items():
        args = [str(common.LLAMA_BIN / "llama-perplexity"), "-m", str(IQ4_FIXTURE), "-c", "64",
                "--chunks", "8", "-t", "2", "-b", "64", "-f", str(TEXT), *extra]
        text = run(args)
        m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", text)
        out[config] = {"ppl": float(m.group(1)), "uncertainty": float(m.group(2))}
    return out


def main():
    import sys

    if sys.argv[1:] == ["--only", "iq4"]:
        goldens = json.loads(OUT.read_text())
        goldens["iq4"] = iq4_goldens()
        OUT.write_text(json.dumps(goldens, indent=1, ensure_ascii=False) + "\n")
        print(goldens["iq4"])
        return
    md = models_dir()
    goldens = {"n_ctx": N_CTX, "chunks": CHUNKS, "text_sha256": hashlib.sha256(TEXT.read_bytes()).hexdigest(),
               "perplexity": {}}
    for name, file in MODELS.items():
        goldens["perplexity"][name] = {c: perplexity(md / file, c) for c in CONFIGS}
        print(name, goldens["perplexity"][name])
    with tempfile.TemporaryDirectory() as tmp:
        base = md / MODELS["smollm2"]
        q40 = Path(tmp) / "q4_0.gguf"
        run([str(common.LLAMA_BIN / "llama-quantize"), "--allow-requantize", str(base), str(q40), "Q4_0", "2"])
        logits = Path(tmp) / "base.kld"
        f32 = CONFIGS["f32_attention"]
        run(ppl_args(base, "-f", str(TEXT), "--kl-divergence-base", str(logits), *f32))
        out = run(ppl_args(q40, "--kl-divergence-base", str(logits), "--kl-divergence", *f32))
        goldens["kld"] = {
            "base": "smollm2",
            "quantized": "Q4_0",
            "quantized_sha256": hashlib.sha256(q40.read_bytes()).hexdigest(),
            "stats": kld_stats(out),
        }
        print(goldens["kld"])
    goldens["iq4"] = iq4_goldens()
    OUT.write_text(json.dumps(goldens, indent=1, ensure_ascii=False) + "\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
