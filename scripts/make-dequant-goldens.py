#!/usr/bin/env python3
"""Per-tensor dequantization goldens for the real GGUF models.

For every tensor of each real GGUF file, dequantizes it to float32 with the
`gguf` Python package (`gguf.quants.dequantize`, an independent numpy
implementation of ggml's block formats) and records the sha256 of the
little-endian float32 bytes. The Rust test `dequant_real` decodes the same
tensors with ferrite's scalar reference code and must match every hash bit
for bit.

Writes testdata/dequant/<short-name>.tsv with the columns
    name  type  n_elements  sha256

Run (after scripts/fetch-models.sh; the venv comes from
scripts/setup-refenv.sh):
    scripts/refenv python scripts/make-dequant-goldens.py
"""
import hashlib
import os
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.environ.get("FERRITE_MODELS", os.path.join(ROOT, "models"))
FILES = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3-270m": "gemma-3-270m-q4_k_m.gguf",
}


def main() -> None:
    out_dir = os.path.join(ROOT, "testdata", "dequant")
    os.makedirs(out_dir, exist_ok=True)
    for short, name in FILES.items():
        reader = GGUFReader(os.path.join(MODELS, name))
        rows = []
        for t in reader.tensors:
            values = dequantize(t.data, t.tensor_type).astype("<f4", copy=False)
            n = int(np.prod([int(d) for d in t.shape]))
            assert values.size == n, (t.name, values.size, n)
            digest = hashlib.sha256(np.ascontiguousarray(values).tobytes()).hexdigest()
            rows.append(f"{t.name}\t{t.tensor_type.name}\t{n}\t{digest}")
        path = os.path.join(out_dir, f"{short}.tsv")
        with open(path, "w") as f:
            f.write("# made by scripts/make-dequant-goldens.py from " + name + "\n")
            f.write("\n".join(rows) + "\n")
        print(f"{path}: {len(rows)} tensors", file=sys.stderr)


if __name__ == "__main__":
    main()
