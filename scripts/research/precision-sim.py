#!/usr/bin/env python3
"""What integer GEMMs would cost in accuracy on all-MiniLM-L6-v2.

Fake-quantizes every nn.Linear of the sentence-transformers model: weights
per output row to W-bit symmetric integers, the Linear's input per token
row to A-bit symmetric integers (32 = left in f32), then prints the
smallest and mean cosine against the unmodified model on the first 256
sentences of testdata/embed/bench-sentences.txt. Issue 6 asks for cosine
>= 0.99999 against sentence-transformers.

    scripts/refenv python scripts/research/precision-sim.py [W A ...]

Default pairs: 8/32, 8/8, 12/32, 14/14, 16/16.
"""
import pathlib
import sys

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

ROOT = pathlib.Path(__file__).resolve().parents[2]


def fake_quant_rows(x, bits):
    q = 2 ** (bits - 1) - 1
    s = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / q
    return torch.round(x / s) * s


def run(texts, ref, bits_w, bits_a):
    m = SentenceTransformer(str(ROOT / "models" / "all-MiniLM-L6-v2"), device="cpu")
    for mod in m.modules():
        if isinstance(mod, torch.nn.Linear):
            with torch.no_grad():
                mod.weight.copy_(fake_quant_rows(mod.weight, bits_w))
            if bits_a < 32:
                mod.forward = (lambda f: lambda x: f(fake_quant_rows(x, bits_a)))(mod.forward)
    out = m.encode(texts, batch_size=32, convert_to_numpy=True)
    cos = (out * ref).sum(1) / np.linalg.norm(out, axis=1) / np.linalg.norm(ref, axis=1)
    print(f"weights {bits_w:2}-bit, activations {bits_a:2}-bit: min cosine {cos.min():.8f} "
          f"(1 - {1 - cos.min():.2e}), mean {cos.mean():.8f}")


def main():
    args = [int(a) for a in sys.argv[1:]]
    pairs = list(zip(args[::2], args[1::2])) or [(8, 32), (8, 8), (12, 32), (14, 14), (16, 16)]
    texts = (ROOT / "testdata" / "embed" / "bench-sentences.txt").read_text().splitlines()[:256]
    ref = SentenceTransformer(str(ROOT / "models" / "all-MiniLM-L6-v2"), device="cpu").encode(
        texts, batch_size=32, convert_to_numpy=True)
    for w, a in pairs:
        run(texts, ref, w, a)


if __name__ == "__main__":
    main()
