#!/usr/bin/env python3
"""Goldens for `ferrite convert` (tests/convert.rs): what llama.cpp's
convert_hf_to_gguf.py (and llama-quantize, for the quantized targets) write
for each HF directory ferrite converts.

Run with the reference venv and a llama.cpp build (see
/work/shared/tools/setup-refenv.sh and build-llamacpp.sh):

    ~/.cache/ferrite-refenv/bin/python scripts/make-convert-goldens.py

$LLAMA_CPP (default ~/.cache/ferrite-reference/llama.cpp, as for
make-hf-decoder-fixtures.py): its convert_hf_to_gguf.py, gguf-py and
build/bin/llama-quantize. $FERRITE_MODELS: the real models (default models/).

Writes:

  crates/ferrite/src/convert/pre_tokenizers.tsv
      the converter's pre-tokenizer table, extracted from its source: a
      first line "check<TAB><JSON string>" (the text whose token ids are
      hashed) then "<sha256><TAB><name>" per entry, in the converter's order
      (it tests them all, so the last match wins).

  testdata/convert/goldens.json
      {"versions": {...},
       "cases": [{"dir": path relative to the repository or "$MODELS/...",
                  "outtype": "f32" | "f16" | "bf16" | "q8_0" | a quantize type,
                  "pre_tokenizer": null, or the name the converter was told
                                   (see below),
                  "sha256": of the whole file, "bytes": n,
                  "metadata": [[key, gguf type, short value], ...] in order,
                  "tensors": [[name, type, [dims], sha256 of data], ...]}]}

The random-weight fixtures' tokenizers are freshly trained, so the
converter does not know their pre-tokenizer hash and refuses them; as
scripts/make-hf-decoder-fixtures.py does, the converter is run through its
wrapper that answers "gpt-2" (their pre-tokenizer is GPT-2's byte-level
regex) only when the hash is unknown, and the case records
"pre_tokenizer": "gpt-2" so that the test passes `--pre-tokenizer gpt-2`.
Quantized targets: the converter's f32 file, then `llama-quantize IN OUT
TYPE 2`.

all-mpnet-base-v2 is not here: the converter has no MPNet class
("Model MPNetForMaskedLM is not supported"). No nomic-bert directory is
fetched by scripts/fetch-models.sh (only its GGUF file).
"""

import ast
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LLAMA = Path(os.path.expanduser(os.environ.get("LLAMA_CPP", "~/.cache/ferrite-reference/llama.cpp")))
MODELS = Path(os.environ.get("FERRITE_MODELS", ROOT / "models"))
OUT = ROOT / "testdata/convert"

FIXTURES = [
    "testdata/hf-decoders/tiny-llama",
    "testdata/hf-decoders/tiny-llama3",
    "testdata/hf-decoders/tiny-llama-yarn",
    "testdata/hf-decoders/tiny-mistral",
    "testdata/hf-decoders/tiny-qwen2",
    "testdata/hf-decoders/tiny-qwen2-bf16",
    "testdata/hf-decoders/tiny-qwen2-swa",
    "testdata/hf-decoders/tiny-qwen3",
    "testdata/gpt2/tiny-hf",
    "testdata/hf-decoders/tiny-gemma2",
    "testdata/hf-decoders/tiny-gemma3",
    "testdata/hf-decoders/tiny-phi3",
    "testdata/hf-decoders/tiny-olmo2",
    "testdata/hf-decoders/tiny-smollm3",
    "testdata/hf-moe/tiny-qwen2-moe",
    "testdata/hf-moe/tiny-qwen3-moe",
]
REAL = ["$MODELS/all-MiniLM-L6-v2"]
OUTTYPES = ["f32", "f16", "bf16", "q8_0"]
# Quantized targets: (directory, type).
QUANTIZED = [
    ("testdata/hf-decoders/tiny-llama3", "Q4_K_M"),
    ("testdata/hf-decoders/tiny-qwen3", "Q8_0"),
    ("testdata/gpt2/tiny-hf", "Q5_0"),
    ("testdata/hf-decoders/tiny-gemma2", "Q4_K_M"),
    ("testdata/hf-moe/tiny-qwen3-moe", "Q4_K_M"),
    ("$MODELS/all-MiniLM-L6-v2", "Q4_0"),
]

def _fixture_script():
    """scripts/make-hf-decoder-fixtures.py as a module (its converter wrapper)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fixtures", ROOT / "scripts/make-hf-decoder-fixtures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


KNOWN_HASHES = set()
CHECK_TEXT = []


def resolve(d):
    return Path(d.replace("$MODELS", str(MODELS))) if d.startswith("$MODELS") else ROOT / d


def pre_tokenizer_table():
    src = (LLAMA / "conversion/base.py").read_text()
    chk = ast.literal_eval(re.search(r"chktxt = ('.*')\n", src).group(1))
    pairs = re.findall(r'if chkhsh == "([0-9a-f]{64})":\s*\n(?:\s*#[^\n]*\n)*\s*res = "([^"]+)"', src)
    assert len(pairs) > 50, len(pairs)
    KNOWN_HASHES.update(h for h, _ in pairs)
    CHECK_TEXT.append(chk)
    path = ROOT / "crates/ferrite/src/convert/pre_tokenizers.tsv"
    with open(path, "w") as f:
        f.write("check\t" + json.dumps(chk) + "\n")
        for h, n in pairs:
            f.write(f"{h}\t{n}\n")
    print(f"{path}: {len(pairs)} entries", file=sys.stderr)


def fallback_used(directory):
    """Whether the converter would not know the directory's pre-tokenizer
    (so the wrapper answered "gpt-2"): the hash of the check text's ids, as
    the converter computes it, is not in its table."""
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(directory).encode(CHECK_TEXT[0])
    return hashlib.sha256(str(ids).encode()).hexdigest() not in KNOWN_HASHES


def convert(directory, outtype, out, tmp):
    """The converter's file (through make-hf-decoder-fixtures.py's wrapper)
    and the pre-tokenizer name the test must give ferrite."""
    _fixture_script().convert(directory, outtype, out)
    return "gpt-2" if fallback_used(directory) else None


def summary(path):
    sys.path.insert(0, str(LLAMA / "gguf-py"))
    import gguf

    reader = gguf.GGUFReader(path)
    metadata = []
    for field in reader.fields.values():
        if field.name.startswith("GGUF."):
            continue
        types = [gguf.GGUFValueType(t).name for t in field.types]
        v = field.contents()
        short = repr(v)
        if len(short) > 80:
            short = short[:80] + f"... ({len(v)} items)" if isinstance(v, list) else short[:80] + "..."
        metadata.append([field.name, "/".join(types), short])
    tensors = []
    for t in reader.tensors:
        tensors.append([t.name, t.tensor_type.name, [int(d) for d in t.shape],
                        hashlib.sha256(bytes(t.data.tobytes())).hexdigest()])
    data = Path(path).read_bytes()
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
            "metadata": metadata, "tensors": tensors}


def main():
    pre_tokenizer_table()
    OUT.mkdir(parents=True, exist_ok=True)
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        for d in FIXTURES + REAL:
            for t in OUTTYPES:
                out = os.path.join(tmp, "out.gguf")
                pre = convert(resolve(d), t, out, tmp)
                cases.append({"dir": d, "outtype": t, "pre_tokenizer": pre, **summary(out)})
                print(d, t, cases[-1]["sha256"][:16], file=sys.stderr)
        quantize = LLAMA / "build/bin/llama-quantize"
        for d, q in QUANTIZED:
            f32 = os.path.join(tmp, "f32.gguf")
            pre = convert(resolve(d), "f32", f32, tmp)
            out = os.path.join(tmp, "q.gguf")
            subprocess.run([str(quantize), f32, out, q, "2"], check=True, capture_output=True)
            cases.append({"dir": d, "outtype": q, "pre_tokenizer": pre, **summary(out)})
            print(d, q, cases[-1]["sha256"][:16], file=sys.stderr)
    import gguf
    import transformers
    import torch
    version = subprocess.run([str(LLAMA / "build/bin/llama-quantize"), "--version"],
                             capture_output=True, text=True)
    goldens = {
        "versions": {
            "python": sys.version.split()[0],
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "gguf-py": getattr(gguf, "__version__", "llama.cpp tree"),
            "llama.cpp": (version.stdout + version.stderr).strip().splitlines()[:1],
        },
        "cases": cases,
    }
    with open(OUT / "goldens.json", "w") as f:
        json.dump(goldens, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{OUT / 'goldens.json'}: {len(cases)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
