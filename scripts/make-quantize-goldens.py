#!/usr/bin/env python3
"""Goldens for `ferrite quantize`: what llama.cpp's `llama-quantize` makes
of three F32 GGUF files, for every file type ferrite writes.

Inputs (each written to a temporary directory, never committed: the Rust
test, crates/ferrite/tests/quantize.rs, makes the same files itself and
checks their sha256 against the one recorded here):

  smollm2        models/SmolLM2-135M-Instruct.Q4_1.gguf dequantized to F32 by
                 the `gguf` Python package (gguf.quants.dequantize), metadata
                 kept in order with general.file_type = 0 (ALL_F32), written
                 by gguf.GGUFWriter. (The test dequantizes with ferrite's own
                 dequantizers and writes with ferrite's GGUF writer; the
                 recorded whole-file sha256 proves the two files are equal.)
  fixture-llama  a random-weight llama model, 8 layers, n_embd 256 (so the
                 k-quants apply to every matrix), GQA 2, untied output
  fixture-qwen2  a random-weight qwen2 model, 6 layers, GQA 4, tied
                 embeddings (token_embd stored as F16), Q/K/V biases, and an
                 FFN width of 272 (not whole 32-blocks: ffn_down falls back
                 to F16)

Random weights come from a counter-based splitmix64 (see `weights` below),
so that Rust can compute the same f32 values bit for bit.

For each input and each file type (the mixes, and with --pure the single
types) this runs `llama-quantize [--pure] IN OUT TYPE 2` and records, in
testdata/quantize/<input>.json: the input's sha256, the output's tensor
names (in file order; the same for every file type), and per file type the
output file's sha256 and per tensor its type and the first 12 hex digits of
the sha256 of its bytes.

How to run (from the repository root; needs the reference venv and a
llama.cpp build, scripts/build-llamacpp.sh):

  scripts/refenv python scripts/make-quantize-goldens.py [--llama-quantize PATH]
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import gguf
from gguf import GGUFReader, GGUFWriter, GGUFValueType, GGMLQuantizationType as T

import common

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata/quantize"
MODELS = Path(os.environ.get("FERRITE_MODELS", ROOT / "models"))

MIXES = ["Q4_K_M", "Q4_K_S", "Q5_K_M", "Q5_K_S", "Q6_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q2_K",
         "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "IQ4_XS", "F16", "BF16", "F32"]
PURE = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q6_K", "Q4_K", "Q5_K", "Q3_K", "Q2_K", "IQ4_NL", "IQ4_XS"]

M64 = (1 << 64) - 1
GAMMA = np.uint64(0x9E3779B97F4A7C15)


def mix64(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def weights(index: int, rows: int, cols: int, kind: str) -> np.ndarray:
    """Tensor number `index` (0-based, file order) of shape (rows, cols):
    h(j) = mix64((index + 1) << 32 + j * GAMMA) (wrapping); for value i,
    k = (h(2i) >> 40) + (h(2i + 1) >> 40) - 2^24 (exact in f32), times 16
    when the low 12 bits of h(2i) are zero (outliers), then
    v = f32(k) * f32(2^-29 * (1 + row % 5)) in one f32 multiply.
    Norm weights ("norm") are 1 + v, biases ("bias") v as is."""
    n = rows * cols
    with np.errstate(over="ignore"):
        base = np.uint64(((index + 1) << 32) & M64)
        j = np.arange(2 * n, dtype=np.uint64)
        h = mix64(base + j * GAMMA)
    h1, h2 = h[0::2], h[1::2]
    k = (h1 >> np.uint64(40)).astype(np.int64) + (h2 >> np.uint64(40)).astype(np.int64) - (1 << 24)
    k = np.where((h1 & np.uint64(0xFFF)) == 0, k * 16, k)
    row = np.arange(n, dtype=np.int64) // cols
    scale = (2.0 ** -29 * (1 + row % 5)).astype(np.float32)
    v = k.astype(np.float32) * scale
    if kind == "norm":
        v = np.float32(1.0) + v
    return v.astype(np.float32).reshape(rows, cols)


def fixture_tensors(arch: str) -> tuple[dict, list]:
    """(metadata, [(name, (rows, cols), kind, ggml type)]) of a fixture."""
    if arch == "llama":
        n_layer, n_embd, n_head, n_kv, n_ff, n_vocab, tied = 8, 256, 4, 2, 512, 320, False
    else:
        n_layer, n_embd, n_head, n_kv, n_ff, n_vocab, tied = 6, 256, 8, 2, 272, 300, True
    head_dim = n_embd // n_head
    md = {
        f"{arch}.block_count": n_layer,
        f"{arch}.context_length": 512,
        f"{arch}.embedding_length": n_embd,
        f"{arch}.feed_forward_length": n_ff,
        f"{arch}.attention.head_count": n_head,
        f"{arch}.attention.head_count_kv": n_kv,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-5,
        f"{arch}.vocab_size": n_vocab,
        "general.file_type": 0,
    }
    emb_type = T.F16 if arch == "qwen2" else T.F32
    ts = [("token_embd.weight", (n_vocab, n_embd), "w", emb_type),
          ("output_norm.weight", (1, n_embd), "norm", T.F32)]
    if not tied:
        ts.append(("output.weight", (n_vocab, n_embd), "w", T.F32))
    for i in range(n_layer):
        p = f"blk.{i}."
        ts += [(p + "attn_norm.weight", (1, n_embd), "norm", T.F32),
               (p + "attn_q.weight", (n_embd, n_embd), "w", T.F32),
               (p + "attn_k.weight", (n_kv * head_dim, n_embd), "w", T.F32),
               (p + "attn_v.weight", (n_kv * head_dim, n_embd), "w", T.F32)]
        if arch == "qwen2":
            ts += [(p + "attn_q.bias", (1, n_embd), "bias", T.F32),
                   (p + "attn_k.bias", (1, n_kv * head_dim), "bias", T.F32),
                   (p + "attn_v.bias", (1, n_kv * head_dim), "bias", T.F32)]
        ts += [(p + "attn_output.weight", (n_embd, n_embd), "w", T.F32),
               (p + "ffn_norm.weight", (1, n_embd), "norm", T.F32),
               (p + "ffn_gate.weight", (n_ff, n_embd), "w", T.F32),
               (p + "ffn_up.weight", (n_ff, n_embd), "w", T.F32),
               (p + "ffn_down.weight", (n_embd, n_ff), "w", T.F32)]
    return md, ts


def write_fixture(arch: str, path: Path) -> None:
    md, ts = fixture_tensors(arch)
    w = GGUFWriter(str(path), arch)
    for k, v in md.items():
        if isinstance(v, float):
            w.add_key_value(k, v, GGUFValueType.FLOAT32)
        else:
            w.add_key_value(k, v, GGUFValueType.UINT32)
    for index, (name, (rows, cols), kind, ty) in enumerate(ts):
        x = weights(index, rows, cols, kind)
        if rows == 1:
            x = x.reshape(cols)
        if ty == T.F16:
            x = x.astype(np.float16)
        w.add_tensor(name, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def field_value(f):
    """A reader field's (value, type, element type) for GGUFWriter."""
    vtype = f.types[0]
    if vtype == GGUFValueType.ARRAY:
        return f.contents(), vtype, f.types[-1]
    return f.contents(), vtype, None


def write_dequantized(src: Path, path: Path) -> None:
    r = GGUFReader(str(src))
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(str(path), arch)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        val, vtype, sub = field_value(f)
        if key == "general.file_type":
            val = 0
        w.add_key_value(key, val, vtype, sub)
    for t in r.tensors:
        x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        shape = [int(d) for d in reversed(t.shape.tolist())]
        w.add_tensor(t.name, x.reshape(shape))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tensor_list(path: Path) -> tuple[list, list, list]:
    """(names, types, first 12 hex digits of each tensor's sha256), in file order."""
    r = GGUFReader(str(path))
    names = [t.name for t in r.tensors]
    types = [t.tensor_type.name for t in r.tensors]
    hashes = [hashlib.sha256(t.data.tobytes()).hexdigest()[:12] for t in r.tensors]
    return names, types, hashes


def to_json(g: dict) -> str:
    """One line per file type, so that diffs show which outputs changed."""
    d = lambda v: json.dumps(v, separators=(",", ":"))
    lines = [f'{{"input":{d(g["input"])},"input_sha256":{d(g["input_sha256"])},',
             f'"tensors":{d(g["tensors"])},', '"outputs":{']
    items = list(g["outputs"].items())
    for i, (k, v) in enumerate(items):
        lines.append(f"{d(k)}:{d(v)}" + ("," if i + 1 < len(items) else ""))
    return "\n".join(lines) + "\n}}\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-quantize",
                    default=str(common.LLAMA_BIN / "llama-quantize"))
    ap.add_argument("--only", help="one input name")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    inputs = {
        "smollm2": lambda p: write_dequantized(MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf", p),
        "fixture-llama": lambda p: write_fixture("llama", p),
        "fixture-qwen2": lambda p: write_fixture("qwen2", p),
    }
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, make in inputs.items():
            if args.only and name != args.only:
                continue
            src = tmp / f"{name}.f32.gguf"
            make(src)
            golden = {"input": name, "input_sha256": common.sha256_file(src), "outputs": {}}
            runs = [(m, False) for m in MIXES] + [(t, True) for t in PURE]
            for ftype, pure in runs:
                out = tmp / f"{name}.{ftype}.gguf"
                cmd = [args.llama_quantize] + (["--pure"] if pure else []) + [str(src), str(out), ftype, "2"]
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                key = ("pure-" if pure else "") + ftype
                names, types, hashes = tensor_list(out)
                golden.setdefault("tensors", names)
                assert golden["tensors"] == names, (name, key)
                golden["outputs"][key] = {"sha256": common.sha256_file(out), "types": types, "tensor_sha256": hashes}
                out.unlink()
                print(f"{name} {key}", file=sys.stderr)
            (OUT / f"{name}.json").write_text(to_json(golden))
            src.unlink()


if __name__ == "__main__":
    main()
