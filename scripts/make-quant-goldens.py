#!/usr/bin/env python3
"""Golden files for ferrite's scalar block formats (crates/kernels/src/quant).

What it makes, under testdata/quant/ (every number little-endian):

  dequant/<TYPE>.blocks  random blocks of <TYPE> (random bytes, with the f16 /
                         f32 scale fields set to finite values of many
                         magnitudes, including 0 and f16 subnormals)
  dequant/<TYPE>.f32     what the reference dequantizer makes of them
  quant/<TYPE>.f32       f32 inputs: random data plus awkward blocks (zeros,
                         +-0, all-equal values, a single non-zero, exact
                         rounding ties, tiny and huge magnitudes)
  quant/<TYPE>.blocks    what the reference quantizer makes of them

for TYPE in F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q8_1 Q2_K Q3_K Q4_K Q5_K
Q6_K Q8_K MXFP4 IQ4_NL IQ4_XS (dequant) and F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q8_1 Q8_K MXFP4
(quant). MXFP4 (gpt-oss's expert format) comes from a random generator of its
own, seeded separately, so that adding it left the other files unchanged: its
dequant blocks are random bytes (every E8M0 exponent, 0, 1 and 255 included:
f32 subnormal scales and 2^127), and its quantizer inputs the awkward and
random blocks the other types get, plus blocks of exact E2M1 values, exact
midpoints between neighbouring values (ties keep the first code), and values
just below and above powers of two (where floor(log2(amax)) changes).
Counts are implied by the file sizes. crates/kernels/tests/quant_goldens.rs
compares ferrite against these bit for bit.

The reference is the `gguf` Python package (gguf.quants, numpy), an
implementation independent of ggml's C code that mirrors it. Where gguf-py
has no implementation this script computes the expected values itself, with
numpy float32 arithmetic in the same operation order as ggml-quants.c:

  Q8_1  gguf-py has no Q8_1 and its size table says 40 bytes per block; ggml's
        block_q8_1 is 36 (f16 d, f16 s = d * sum(qs), 32 x i8). ggml has no
        dequantize_row_q8_1 either; the expected values are y = f32(d) * q
        (the Q8_0 formula, s ignored). Quantized blocks: d and qs from gguf's
        Q8_0 quantizer (ggml's quantize_row_q8_1_ref computes them the same
        way) and s = f16(f32(sum(qs)) * (amax / 127)), as ggml does.
  Q8_K  gguf-py has no Q8_K. Dequant: y = d * q (f32 d). Quant: ggml's
        quantize_row_q8_K_ref: iscale = -127 / x[argmax |x|], q = min(127,
        round_half_even(iscale * x)), bsums = sums of 16, d = 1 / iscale.

One known difference is kept in the goldens on purpose: Q4_1 and Q5_1 quant
block 1 alternates +0.0 and -0.0. numpy's min() returns -0.0, so gguf-py
stores m = -0.0 (bytes 00 80); ggml's loop (`if (v < min) min = v`) keeps
the first zero, +0.0 (bytes 00 00). ferrite follows ggml, and
quant_goldens.rs lists exactly this byte as an expected difference.

Inputs avoid two places where numpy, and so gguf-py, differs from ggml:
signalling f16 NaNs (numpy widens them to signalling f32 NaNs, ggml quiets
them) and f32 NaNs with a payload going to f16 (numpy keeps payload bits,
ggml writes 0x7e00). Quantizer inputs also avoid f32 subnormals and NaN/inf,
for which ggml's C reference relies on undefined float-to-int conversions.

How to run (from the repository root; the venv has gguf 0.19.0 + numpy):

  scripts/refenv python scripts/make-quant-goldens.py

The seed is fixed: running it again must reproduce the files byte for byte
(`git status testdata/quant` stays clean).
"""

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

SEED = 0x5EED_F3
OUT = Path(__file__).resolve().parent.parent / "testdata" / "quant"

QK = 32
QK_K = 256

# type name -> (gguf type, values per block, bytes per block, scale fields)
# A scale field is (byte offset, "f16" | "f32").
BLOCKS = {
    "Q4_0": (T.Q4_0, QK, 18, [(0, "f16")]),
    "Q4_1": (T.Q4_1, QK, 20, [(0, "f16"), (2, "f16")]),
    "Q5_0": (T.Q5_0, QK, 22, [(0, "f16")]),
    "Q5_1": (T.Q5_1, QK, 24, [(0, "f16"), (2, "f16")]),
    "Q8_0": (T.Q8_0, QK, 34, [(0, "f16")]),
    "Q8_1": (T.Q8_1, QK, 36, [(0, "f16"), (2, "f16")]),
    "Q2_K": (T.Q2_K, QK_K, 84, [(80, "f16"), (82, "f16")]),
    "Q3_K": (T.Q3_K, QK_K, 110, [(108, "f16")]),
    "Q4_K": (T.Q4_K, QK_K, 144, [(0, "f16"), (2, "f16")]),
    "Q5_K": (T.Q5_K, QK_K, 176, [(0, "f16"), (2, "f16")]),
    "Q6_K": (T.Q6_K, QK_K, 210, [(208, "f16")]),
    "Q8_K": (T.Q8_K, QK_K, 292, [(0, "f32")]),
}


def write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def scale_values(rng: np.random.Generator, n: int, kind: str) -> np.ndarray:
    """n finite scales of both signs over many magnitudes; the first few are
    the edge cases 0, the smallest f16 subnormal, -1 and the largest f16."""
    lo, hi = (-16, 3) if kind == "f16" else (-20, 4)
    v = rng.choice([-1.0, 1.0], n) * 2.0 ** rng.uniform(lo, hi, n)
    edge = [0.0, 2.0**-24, -1.0, 65504.0]
    v[: min(n, len(edge))] = edge[: min(n, len(edge))]
    return v


def random_blocks(rng: np.random.Generator, name: str, n_blocks: int) -> np.ndarray:
    _, _, size, fields = BLOCKS[name]
    raw = rng.integers(0, 256, (n_blocks, size), dtype=np.uint8)
    for off, kind in fields:
        vals = scale_values(rng, n_blocks, kind)
        rng.shuffle(vals)  # spread the edge cases over the file
        dt = np.float16 if kind == "f16" else np.float32
        width = np.dtype(dt).itemsize
        raw[:, off : off + width] = vals.astype(dt).view(np.uint8).reshape(n_blocks, width)
    return raw


def dequant_reference(name: str, raw: np.ndarray) -> np.ndarray:
    if name == "Q8_1":
        d = raw[:, 0:2].copy().view(np.float16).astype(np.float32)
        q = raw[:, 4:36].copy().view(np.int8).astype(np.float32)
        return (q * d).reshape(-1)
    if name == "Q8_K":
        d = raw[:, 0:4].copy().view(np.float32)
        q = raw[:, 4:260].copy().view(np.int8).astype(np.float32)
        return (d * q).reshape(-1)
    return quants.dequantize(raw, BLOCKS[name][0]).reshape(-1)


def make_dequant(rng: np.random.Generator) -> None:
    n = 1024
    # F32: any bits at all (the conversion is a copy).
    f32 = rng.integers(0, 2**32, n, dtype=np.uint32)
    write(OUT / "dequant/F32.blocks", f32.astype("<u4").tobytes())
    write(OUT / "dequant/F32.f32", quants.dequantize(f32.view(np.uint8), T.F32).tobytes())
    # F16: any bits but signalling NaNs (see the module docstring).
    h = rng.integers(0, 2**16, n, dtype=np.uint16)
    snan = ((h & 0x7C00) == 0x7C00) & ((h & 0x03FF) != 0) & ((h & 0x0200) == 0)
    h[snan] |= 0x0200
    h[:6] = [0x0000, 0x8000, 0x0001, 0x7BFF, 0x7C00, 0xFE00]
    write(OUT / "dequant/F16.blocks", h.astype("<u2").tobytes())
    write(OUT / "dequant/F16.f32", quants.dequantize(h.view(np.uint8), T.F16).astype("<f4").tobytes())
    # BF16: any bits, NaNs included (a shift, exact for every pattern).
    b = rng.integers(0, 2**16, n, dtype=np.uint16)
    write(OUT / "dequant/BF16.blocks", b.astype("<u2").tobytes())
    write(OUT / "dequant/BF16.f32", quants.dequantize(b.view(np.uint8), T.BF16).astype("<f4").tobytes())

    for name, (_, bs, _, _) in BLOCKS.items():
        raw = random_blocks(rng, name, 32 if bs == QK else 16)
        y = dequant_reference(name, raw).astype("<f4")
        assert y.size == raw.shape[0] * bs
        write(OUT / f"dequant/{name}.blocks", raw.tobytes())
        write(OUT / f"dequant/{name}.f32", y.tobytes())


def awkward_blocks(rng: np.random.Generator, bs: int) -> list[np.ndarray]:
    """Edge-case blocks of bs values each."""
    blocks = [
        np.zeros(bs),
        np.where(np.arange(bs) % 2 == 0, 0.0, -0.0),
        np.full(bs, 1.5),
        np.full(bs, -0.3),
        np.where(np.arange(bs) == 17, -2.25, 0.0),
        # Q4_0 / Q5_0 ties: max = -8 gives d = 1 (Q4_0), halves everywhere.
        -8.0 + 0.5 * (np.arange(bs) % 32),
        # Q8_0 ties: amax = 127 gives d = 1, so x / d hits .5 exactly.
        np.concatenate([[127.0], (np.arange(1, bs) % 120) - 60.5]),
        # Q8_K ties: max = -127 gives iscale = 1.
        np.concatenate([[-127.0], (np.arange(1, bs) % 100) - 49.5]),
        rng.normal(0, 1e5, bs),  # f16 overflow of min / d
        rng.normal(0, 1e30, bs),  # f16 overflow of d
        rng.normal(0, 1e-6, bs),  # f16 underflow of d
        rng.normal(5.0, 0.1, bs),  # offset: exercises Q4_1 / Q5_1 min
        np.concatenate([[50.0], rng.normal(0, 1, bs - 1)]),  # one outlier
    ]
    return [np.asarray(b, dtype=np.float32) for b in blocks]


def random_input(rng: np.random.Generator, bs: int, n_blocks: int) -> np.ndarray:
    blocks = awkward_blocks(rng, bs)
    while len(blocks) < n_blocks:
        scale = 10.0 ** rng.uniform(-3, 3)
        kind = rng.integers(0, 3)
        if kind == 0:
            b = rng.normal(0, scale, bs)
        elif kind == 1:
            b = rng.uniform(-scale, scale, bs)
        else:
            b = 0.1 + 2 * np.cos(np.arange(bs) + rng.uniform(0, 100))
        blocks.append(b.astype(np.float32))
    x = np.concatenate(blocks).astype(np.float32)
    assert np.all(np.isfinite(x))
    assert not np.any((x != 0) & (np.abs(x) < np.finfo(np.float32).tiny))
    return x


def q8_1_reference(x: np.ndarray) -> np.ndarray:
    q8_0 = quants.quantize(x, T.Q8_0).reshape(-1, 34)
    qs = q8_0[:, 2:].copy().view(np.int8)
    amax = np.abs(x.reshape(-1, QK)).max(axis=1).astype(np.float32)
    d = amax / np.float32(127)
    s = (qs.astype(np.int32).sum(axis=1).astype(np.float32) * d).astype(np.float16)
    return np.concatenate([q8_0[:, :2], s.view(np.uint8).reshape(-1, 2), q8_0[:, 2:]], axis=1)


def q8_k_reference(x: np.ndarray) -> np.ndarray:
    out = []
    for b in x.reshape(-1, QK_K):
        i = int(np.argmax(np.abs(b)))  # first index of the largest |x|
        if b[i] == 0:
            out.append(np.zeros(292, dtype=np.uint8))
            continue
        iscale = np.float32(-127) / b[i]
        q = np.minimum(np.rint(iscale * b), 127).astype(np.int8)
        bsums = q.astype(np.int32).reshape(16, 16).sum(axis=1).astype("<i2")
        d = np.array([np.float32(1) / iscale], dtype="<f4")
        out.append(np.concatenate([d.view(np.uint8), q.view(np.uint8), bsums.view(np.uint8)]))
    return np.stack(out)


def make_quant(rng: np.random.Generator) -> None:
    # F16 / BF16: random values of every magnitude plus exact edge cases.
    special = np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 65504.0, 65519.0, 65520.0, 65536.0,
         -65520.0, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 2.0**-14, 1e-40, -1e-45,
         np.finfo(np.float32).max, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, 1.0 + 2.0**-8,
         1.0 + 3 * 2.0**-8, 3.0e38, -1.2345678],
        dtype=np.float32,
    )
    mags = 10.0 ** rng.uniform(-9, 6, 1000)
    x = np.concatenate([special, rng.choice([-1.0, 1.0], 1000) * mags]).astype(np.float32)
    with np.errstate(all="ignore"):
        write(OUT / "quant/F16.f32", x.astype("<f4").tobytes())
        write(OUT / "quant/F16.blocks", quants.quantize(x, T.F16).astype("<f2").tobytes())
    # BF16 also gets random bit patterns, NaNs with payloads included
    # (gguf-py follows ggml's ggml_compute_fp32_to_bf16 exactly).
    xb = np.concatenate([x, rng.integers(0, 2**32, 1000, dtype=np.uint32).view(np.float32)])
    write(OUT / "quant/BF16.f32", xb.astype("<f4").tobytes())
    write(OUT / "quant/BF16.blocks", quants.quantize(xb, T.BF16).tobytes())

    for name in ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q8_K"]:
        _, bs, size, _ = BLOCKS[name]
        x = random_input(rng, bs, 40 if bs == QK else 16)
        with np.errstate(all="ignore"):
            if name == "Q8_1":
                q = q8_1_reference(x)
            elif name == "Q8_K":
                q = q8_k_reference(x)
            else:
                q = quants.quantize(x, BLOCKS[name][0])
        q = np.asarray(q, dtype=np.uint8).reshape(-1)
        assert q.size == x.size // bs * size, name
        write(OUT / f"quant/{name}.f32", x.astype("<f4").tobytes())
        write(OUT / f"quant/{name}.blocks", q.tobytes())


def make_mxfp4() -> None:
    rng = np.random.default_rng(SEED + 39)
    raw = rng.integers(0, 256, (64, 17), dtype=np.uint8)
    raw[:4, 0] = [0, 1, 2, 255]
    y = quants.dequantize(raw, T.MXFP4).reshape(-1).astype("<f4")
    assert y.size == 64 * 32
    write(OUT / "dequant/MXFP4.blocks", raw.tobytes())
    write(OUT / "dequant/MXFP4.f32", y.tobytes())

    e2m1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float32)
    mids = (e2m1[1:] + e2m1[:-1]) / 2
    extra = [
        np.resize(np.concatenate([e2m1, -e2m1]), QK) * 4.0,
        np.resize(np.concatenate([mids, -mids]), QK) * 0.25,
        np.resize(np.concatenate([mids, -mids]), QK) * 1024.0,
        np.concatenate([[np.nextafter(np.float32(8.0), np.float32(0))], rng.normal(0, 1, QK - 1)]),
        np.concatenate([[np.nextafter(np.float32(8.0), np.float32(16))], rng.normal(0, 1, QK - 1)]),
        np.concatenate([[np.float32(2.0**-120)], rng.normal(0, 2.0**-123, QK - 1)]),
        np.concatenate([[np.float32(3.0e38)], rng.normal(0, 1e37, QK - 1)]),
    ]
    x = np.concatenate([random_input(rng, QK, 40)] + [np.asarray(b, np.float32) for b in extra])
    x = x.astype(np.float32)
    # ggml's uint8_t conversion of the exponent is undefined below 2^-125.
    amax = np.abs(x.reshape(-1, QK)).max(axis=1)
    assert np.all((amax == 0) | (amax >= 2.0**-125)) and np.all(np.isfinite(x))
    with np.errstate(all="ignore"):
        q = np.asarray(quants.quantize(x, T.MXFP4), dtype=np.uint8).reshape(-1)
    assert q.size == x.size // QK * 17
    write(OUT / "quant/MXFP4.f32", x.astype("<f4").tobytes())
    write(OUT / "quant/MXFP4.blocks", q.tobytes())


def make_iq4() -> None:
    """IQ4_NL and IQ4_XS (read only: dequantization goldens), from a
    generator of their own so that the other files stay unchanged: random
    bytes with the f16 scale `d` set to finite values of many magnitudes
    (0 and f16 subnormals included), plus, for IQ4_XS, blocks whose 6-bit
    run scales are all 0 (-32) or all 63 (+31)."""
    rng = np.random.default_rng(SEED + 48)
    for name, t, size, n in [("IQ4_NL", T.IQ4_NL, 18, 64), ("IQ4_XS", T.IQ4_XS, 136, 24)]:
        raw = rng.integers(0, 256, (n, size), dtype=np.uint8)
        d = scale_values(rng, n, "f16")
        rng.shuffle(d)
        raw[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(n, 2)
        if name == "IQ4_XS":
            raw[0, 2:8] = 0x00
            raw[1, 2:8] = 0xFF
        y = quants.dequantize(raw, t).reshape(-1).astype("<f4")
        assert y.size == n * (32 if name == "IQ4_NL" else 256)
        write(OUT / f"dequant/{name}.blocks", raw.tobytes())
        write(OUT / f"dequant/{name}.f32", y.tobytes())


def main() -> None:
    rng = np.random.default_rng(SEED)
    make_dequant(rng)
    make_quant(rng)
    make_mxfp4()
    make_iq4()
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT} ({total} bytes)")


if __name__ == "__main__":
    main()
