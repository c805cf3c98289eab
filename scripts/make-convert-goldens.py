#!/usr/bin/env python3
"""Goldens for `ferrite convert` (tests/convert.rs): what llama.cpp's
convert_hf_to_gguf.py (and llama-quantize, for the quantized targets) write
for each HF directory ferrite converts.

Run with the reference venv and a llama.cpp build (see
scripts/setup-refenv.sh and build-llamacpp.sh):

    scripts/refenv python scripts/make-convert-goldens.py

$FERRITE_LLAMACPP (scripts/env.sh, as for
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
fetched by scripts/fetch-models.sh (only its GGUF file), so nomic-bert is
converted from testdata/convert/tiny-nomic-bert: a random-weight
`NomicBertModel` directory this script writes (make_nomic_fixture) with the
config keys, tensor names and sentence-transformers pooling of
nomic-ai/nomic-embed-text-v1.5 at small sizes, and the first 2500 tokens of
all-MiniLM-L6-v2's WordPiece vocabulary (bert-base-uncased's, as nomic's).
Its config.json names remote code (`auto_map`) as the real one does; the
converter does not run it, so no Python file is needed. With transformers 5
(the reference venv: 5.24) AutoConfig loads config.json into transformers'
own NomicBertConfig, which ignores the remote code's names (n_embd, n_layer,
n_head, n_inner) and keeps its defaults (hidden_size 768, 12 layers, 12
heads, intermediate_size 3072: nomic-embed-text-v1.5's sizes, so the real
model converts right) and derives head_dim (written as key_length and
value_length). The fixture's config.json therefore also has hidden_size,
num_hidden_layers, num_attention_heads and intermediate_size, equal to the
n_* values, so that the converter writes the fixture's real sizes; ferrite
reads either spelling.

    scripts/refenv python scripts/make-convert-goldens.py --only testdata/convert/tiny-nomic-bert

rewrites that fixture and only its cases in goldens.json (the other cases
are kept as they are).
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

import common

ROOT = Path(__file__).resolve().parent.parent
LLAMA = common.LLAMA
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
    "testdata/convert/tiny-nomic-bert",
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
    ("testdata/convert/tiny-nomic-bert", "Q8_0"),
]

NOMIC = ROOT / "testdata/convert/tiny-nomic-bert"


def make_nomic_fixture():
    """testdata/convert/tiny-nomic-bert: nomic-embed-text-v1.5's layout at
    n_embd 32, 4 heads, n_inner 48, 2 layers, vocabulary 2500 tokens padded
    to 2560 rows (as 30522 to 30528 in the real one), random f32 weights."""
    import shutil

    import torch
    from safetensors.torch import save_file

    minilm = MODELS / "all-MiniLM-L6-v2"
    if NOMIC.exists():
        shutil.rmtree(NOMIC)
    (NOMIC / "1_Pooling").mkdir(parents=True)
    n_tok, n_vocab, n_embd, n_head, n_inner, n_layer = 2500, 2560, 32, 4, 48, 2
    config = {
        "_name_or_path": "nomic-ai/nomic-bert-2048",
        "activation_function": "swiglu",
        "architectures": ["NomicBertModel"],
        "attn_pdrop": 0.0,
        "auto_map": {
            "AutoConfig": "nomic-ai/nomic-bert-2048--configuration_hf_nomic_bert.NomicBertConfig",
            "AutoModel": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertModel",
        },
        "bos_token_id": None, "causal": False, "dense_seq_output": True, "embd_pdrop": 0.0,
        "eos_token_id": None, "fused_bias_fc": True, "fused_dropout_add_ln": True,
        "initializer_range": 0.02, "layer_norm_epsilon": 1e-12, "max_trained_positions": 2048,
        "mlp_fc1_bias": False, "mlp_fc2_bias": False, "model_type": "nomic_bert",
        "n_embd": n_embd, "n_head": n_head, "n_inner": n_inner, "n_layer": n_layer,
        "n_positions": 8192, "pad_vocab_size_multiple": 64, "parallel_block": False,
        "parallel_block_tied_norm": False, "prenorm": False, "qkv_proj_bias": False,
        "reorder_and_upcast_attn": False, "resid_pdrop": 0.0, "rotary_emb_base": 1000,
        "rotary_emb_fraction": 1.0, "rotary_emb_interleaved": False,
        "rotary_emb_scale_base": None, "rotary_scaling_factor": None,
        "scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True,
        "summary_activation": None, "summary_first_dropout": 0.0,
        "summary_proj_to_labels": True, "summary_type": "cls_index", "summary_use_proj": True,
        "torch_dtype": "float32", "transformers_version": "4.37.2", "type_vocab_size": 2,
        "use_cache": True, "use_flash_attn": True, "use_rms_norm": False, "use_xentropy": True,
        "vocab_size": n_vocab,
        # transformers' own NomicBertConfig names (see the docstring).
        "hidden_size": n_embd, "num_hidden_layers": n_layer, "num_attention_heads": n_head,
        "intermediate_size": n_inner,
    }
    (NOMIC / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    tok = json.loads((minilm / "tokenizer.json").read_text())
    tok["model"]["vocab"] = {t: i for t, i in tok["model"]["vocab"].items() if i < n_tok}
    tok["truncation"] = None
    (NOMIC / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False) + "\n")
    tc = json.loads((minilm / "tokenizer_config.json").read_text())
    tc["model_max_length"] = 8192
    tc["name_or_path"] = "nomic-ai/nomic-embed-text-v1.5"
    (NOMIC / "tokenizer_config.json").write_text(json.dumps(tc, indent=2) + "\n")
    shutil.copy(minilm / "special_tokens_map.json", NOMIC)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    (NOMIC / "modules.json").write_text(json.dumps(modules, indent=2) + "\n")
    pooling = {"word_embedding_dimension": n_embd, "pooling_mode_cls_token": False,
               "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
               "pooling_mode_mean_sqrt_len_tokens": False}
    (NOMIC / "1_Pooling/config.json").write_text(json.dumps(pooling, indent=2) + "\n")
    g = torch.Generator().manual_seed(30)

    def rand(*shape, mean=0.0):
        return (mean + 0.2 * torch.randn(*shape, generator=g)).contiguous()

    tensors = {
        "embeddings.word_embeddings.weight": rand(n_vocab, n_embd),
        "embeddings.token_type_embeddings.weight": rand(2, n_embd),
        "emb_ln.weight": rand(n_embd, mean=1.0),
        "emb_ln.bias": rand(n_embd),
    }
    for l in range(n_layer):
        p = f"encoder.layers.{l}."
        tensors.update({
            p + "attn.Wqkv.weight": rand(3 * n_embd, n_embd),
            p + "attn.out_proj.weight": rand(n_embd, n_embd),
            p + "mlp.fc11.weight": rand(n_inner, n_embd),
            p + "mlp.fc12.weight": rand(n_inner, n_embd),
            p + "mlp.fc2.weight": rand(n_embd, n_inner),
            p + "norm1.weight": rand(n_embd, mean=1.0),
            p + "norm1.bias": rand(n_embd),
            p + "norm2.weight": rand(n_embd, mean=1.0),
            p + "norm2.bias": rand(n_embd),
        })
    save_file(tensors, NOMIC / "model.safetensors", metadata={"format": "pt"})
    print(f"{NOMIC}: written", file=sys.stderr)


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
    common.use_llama_gguf_py()
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
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    pre_tokenizer_table()
    OUT.mkdir(parents=True, exist_ok=True)
    if only in (None, str(NOMIC.relative_to(ROOT))):
        make_nomic_fixture()
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        for d in FIXTURES + REAL:
            if only is not None and d != only:
                continue
            for t in OUTTYPES:
                out = os.path.join(tmp, "out.gguf")
                pre = convert(resolve(d), t, out, tmp)
                cases.append({"dir": d, "outtype": t, "pre_tokenizer": pre, **summary(out)})
                print(d, t, cases[-1]["sha256"][:16], file=sys.stderr)
        quantize = LLAMA / "build/bin/llama-quantize"
        for d, q in QUANTIZED:
            if only is not None and d != only:
                continue
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
    if only is not None:
        old = json.loads((OUT / "goldens.json").read_text())["cases"]
        cases = [c for c in old if c["dir"] != only] + cases
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
