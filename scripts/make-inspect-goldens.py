#!/usr/bin/env python3
"""Goldens for `ferrite inspect --json` from independent readers.

GGUF files are read with the `gguf` Python package (GGUFReader); the MiniLM
safetensors directory with the `safetensors` package. For each model this
writes testdata/inspect/<short-name>.json holding:
  architecture   general.architecture (GGUF) / config.json architectures[0]
  metadata       every key -> {"type": gguf value type name, "value": value}
                 (arrays longer than 16 are recorded as
                 {"len": n, "first": [..16 values..]})
  tensors        [{name, shape, type, bytes}] in file order (GGUF) / by name
  values         {tensor name: first 8 dequantized values as uint32 bit patterns}
                 for a few tensors of each type, for `--tensor NAME --values 8`

Run (after scripts/fetch-models.sh; venv from scripts/setup-refenv.sh):
    scripts/refenv python scripts/make-inspect-goldens.py
"""
import json
import os

import numpy as np
from gguf import GGUFReader, GGUFValueType
from gguf.quants import dequantize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.environ.get("FERRITE_MODELS", os.path.join(ROOT, "models"))
OUT = os.path.join(ROOT, "testdata", "inspect")
GGUF_FILES = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3-270m": "gemma-3-270m-q4_k_m.gguf",
}
SHOWN = 16
TYPE_NAMES = {
    GGUFValueType.UINT8: "u8", GGUFValueType.INT8: "i8", GGUFValueType.UINT16: "u16",
    GGUFValueType.INT16: "i16", GGUFValueType.UINT32: "u32", GGUFValueType.INT32: "i32",
    GGUFValueType.FLOAT32: "f32", GGUFValueType.BOOL: "bool", GGUFValueType.STRING: "string",
    GGUFValueType.ARRAY: "array", GGUFValueType.UINT64: "u64", GGUFValueType.INT64: "i64",
    GGUFValueType.FLOAT64: "f64",
}


def bits(values):
    return [int(b) for b in np.asarray(values, dtype="<f4").view("<u4")]


def plain(v):
    """A JSON-friendly value; floats as their float32 bit patterns."""
    if isinstance(v, float):
        return {"f32_bits": bits([v])[0]}
    return v


def gguf_golden(path):
    reader = GGUFReader(path)
    metadata = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue  # the reader's own pseudo-fields (version, counts)
        vtype = field.types[0]
        entry = {"type": TYPE_NAMES[vtype]}
        value = field.contents()
        if vtype == GGUFValueType.ARRAY:
            entry["elem"] = TYPE_NAMES[field.types[1]]
            entry["len"] = len(value)
            entry["first"] = [plain(x) for x in value[:SHOWN]]
        elif vtype in (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64):
            entry["value"] = plain(float(value))
        else:
            entry["value"] = value
        metadata[key] = entry
    tensors, values, seen_types = [], {}, {}
    for t in reader.tensors:
        tensors.append({
            "name": t.name,
            "shape": [int(d) for d in t.shape],
            "type": t.tensor_type.name,
            "bytes": int(t.n_bytes),
        })
        if seen_types.get(t.tensor_type.name, 0) < 2:
            seen_types[t.tensor_type.name] = seen_types.get(t.tensor_type.name, 0) + 1
            values[t.name] = bits(dequantize(t.data, t.tensor_type).reshape(-1)[:8])
    return {
        "architecture": reader.fields["general.architecture"].contents(),
        "version": int(reader.fields["GGUF.version"].contents()),
        "metadata": metadata,
        "tensors": tensors,
        "values": values,
    }


def minilm_golden(directory):
    from safetensors.numpy import load_file
    config = json.load(open(os.path.join(directory, "config.json")))
    weights = load_file(os.path.join(directory, "model.safetensors"))
    tensors, values = [], {}
    for name in sorted(weights):
        w = weights[name]
        tensors.append({
            "name": name,
            "shape": list(w.shape),
            "type": {"float32": "F32", "int64": "I64"}[str(w.dtype)],
            "bytes": int(w.nbytes),
        })
        if w.dtype == np.float32 and len(values) < 4:
            values[name] = bits(w.reshape(-1)[:8])
    return {"architecture": config["architectures"][0], "tensors": tensors, "values": values}


def main():
    os.makedirs(OUT, exist_ok=True)
    for short, name in GGUF_FILES.items():
        golden = gguf_golden(os.path.join(MODELS, name))
        with open(os.path.join(OUT, f"{short}.json"), "w") as f:
            json.dump(golden, f, indent=1)
    with open(os.path.join(OUT, "minilm.json"), "w") as f:
        json.dump(minilm_golden(os.path.join(MODELS, "all-MiniLM-L6-v2")), f, indent=1)


if __name__ == "__main__":
    main()
