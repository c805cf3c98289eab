#!/usr/bin/env python3
"""Golden files for ferrite's k-quant quantizers (Q2_K ... Q6_K), made by
ggml's own C reference quantizers.

The `gguf` Python package (the reference of make-quant-goldens.py) has no
k-quant quantizer, so this script calls ggml's `ggml_quantize_chunk` with no
importance matrix — the same call `llama-quantize` makes, which runs
`quantize_row_q*_K_ref` — from llama.cpp's libggml-base.so through ctypes.
ggml-base is compiled for baseline x86-64 (no -march, so no FMA
contraction), which makes its output independent of the CPU it runs on.

What it makes, under testdata/quant/quant/ (little-endian), in the format of
make-quant-goldens.py:

  <TYPE>.f32     f32 inputs: awkward super-blocks (zeros, +-0, constants, a
                 single non-zero, an offset, outliers, values where whole
                 groups are zero, tiny and huge magnitudes) and random ones
                 (normal, uniform, heavy-tailed, mixed group scales)
  <TYPE>.blocks  what ggml's reference quantizer makes of them

for TYPE in Q2_K Q3_K Q4_K Q5_K Q6_K. crates/kernels/tests/quant_goldens.rs
compares ferrite against them byte for byte.

How to run (from the repository root; needs numpy and a llama.cpp build,
scripts/build-llamacpp.sh or any build with libggml-base.so):

  scripts/refenv python scripts/make-kquant-goldens.py [LIBGGML_BASE_SO]
"""

import ctypes
import sys
from pathlib import Path

import common

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata/quant/quant"
SEED = 20261126
QK_K = 256
TYPES = {"Q2_K": (10, 84), "Q3_K": (11, 110), "Q4_K": (12, 144), "Q5_K": (13, 176), "Q6_K": (14, 210)}


def find_lib() -> Path:
    if len(sys.argv) > 1:
        return Path(sys.argv[1])
    base = common.LLAMA
    for d in ["build/bin", "build-avx2/bin"]:
        p = base / d / "libggml-base.so"
        if p.exists():
            return p
    sys.exit("libggml-base.so not found: build llama.cpp (scripts/build-llamacpp.sh) or pass its path")


def awkward(rng: np.random.Generator) -> list[np.ndarray]:
    n = QK_K
    i = np.arange(n)
    blocks = [
        np.zeros(n),
        np.where(i % 2 == 0, 0.0, -0.0),
        np.full(n, 1.5),
        np.full(n, -0.3),
        np.where(i == 17, -2.25, 0.0),
        np.where(i == 200, 3.0, 0.0),
        rng.normal(5.0, 0.1, n),  # all positive: min clamps to 0
        rng.normal(-5.0, 0.1, n),  # all negative
        np.concatenate([[50.0], rng.normal(0, 1, n - 1)]),  # one outlier
        np.where(i < 128, 0.0, rng.normal(0, 1, n)),  # half the groups zero
        np.where((i // 16) % 3 == 0, 0.0, rng.normal(0, 1, n)),  # some groups zero
        rng.normal(0, 1e-6, n),
        rng.normal(0, 1e-12, n),  # below ggml's GROUP_MAX_EPS in places
        rng.normal(0, 1e4, n),  # f16 overflow of the super-scales
        (i % 8 - 4) * 0.25,  # exact grid values: ties
        (i % 16 - 8) * 1.0,
        np.round(rng.normal(0, 4, n)) * 0.5,
    ]
    return [np.asarray(b, dtype=np.float32) for b in blocks]


def random_blocks(rng: np.random.Generator, count: int) -> list[np.ndarray]:
    out = []
    for k in range(count):
        scale = 10.0 ** rng.uniform(-4, 2)
        kind = k % 5
        if kind == 0:
            b = rng.normal(0, scale, QK_K)
        elif kind == 1:
            b = rng.uniform(-scale, scale, QK_K)
        elif kind == 2:
            b = rng.standard_t(3, QK_K) * scale  # heavy tails, like real weights
        elif kind == 3:
            b = rng.normal(0, 1, QK_K) * np.repeat(10.0 ** rng.uniform(-2, 1, 16), 16) * scale
        else:
            b = rng.normal(rng.uniform(-1, 1) * scale, scale, QK_K)
        out.append(b.astype(np.float32))
    return out


def main() -> None:
    lib = ctypes.CDLL(str(find_lib()))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [
        ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p
    ]
    rng = np.random.default_rng(SEED)
    for name, (tid, size) in TYPES.items():
        blocks = awkward(rng) + random_blocks(rng, 48)
        x = np.ascontiguousarray(np.concatenate(blocks).astype("<f4"))
        assert np.all(np.isfinite(x))
        # Quantized one super-block per row, as rows of any length are
        # quantized block by block.
        nrows = x.size // QK_K
        out = np.zeros(nrows * size, dtype=np.uint8)
        n = lib.ggml_quantize_chunk(tid, x.ctypes.data, out.ctypes.data, 0, nrows, QK_K, None)
        assert n == out.size, (name, n, out.size)
        (OUT / f"{name}.f32").write_bytes(x.tobytes())
        (OUT / f"{name}.blocks").write_bytes(out.tobytes())
        print(f"{name}: {nrows} super-blocks")


if __name__ == "__main__":
    main()
