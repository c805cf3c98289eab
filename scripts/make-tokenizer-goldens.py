#!/usr/bin/env python3
"""Token-id goldens from llama.cpp's `llama-tokenize` for the tokenizer parity tests.

Run from the repository root (needs python3 >= 3.8, no packages):

    python3 scripts/make-tokenizer-goldens.py

It reads `testdata/tokenizer/corpus.json` (a JSON array of strings) and, for
each real model (scripts/fetch-models.sh puts them in models/ or
$FERRITE_MODELS), runs `llama-tokenize` once per string and per mode, and
writes `testdata/tokenizer/<short name>.json`:

    {"model": file name, "llama_cpp": version line, "corpus_sha256": ...,
     "parse_special": [[ids of string 0], ...],     # llama-tokenize's default
     "no_parse_special": [[...], ...]}               # with --no-parse-special

How llama-tokenize is driven, byte-exactly: each string is written as UTF-8
to a temporary file passed with `-f` (llama-tokenize reads that file verbatim,
keeping a trailing newline), `--no-escape` stops it turning a backslash-n in
the text into a newline, `--ids` prints one `[1, 2, 3]` line and
`--log-disable` silences the loader. BOS/EOS are added as the model asks
(llama-tokenize's default, no `--no-bos`).

llama-tokenize is found at $LLAMA_TOKENIZE, else in
$FERRITE_LLAMACPP/build/bin/ (scripts/build-llamacpp.sh).
A build made on a CPU with AVX-512 dies of SIGILL in ggml_cpu_init on a CPU
without it, before tokenizing anything; the tokenizer itself lives in
libllama and is CPU-independent, so an AVX2 build of just the CPU backend
from the same source fixes it:

    . scripts/env.sh
    cmake -S $FERRITE_LLAMACPP -B $FERRITE_LLAMACPP/build-cpu-avx2 -G Ninja \\
        -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF -DGGML_AVX2=ON \\
        -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF
    ninja -C $FERRITE_LLAMACPP/build-cpu-avx2 ggml-cpu
    LD_LIBRARY_PATH=$FERRITE_LLAMACPP/build-cpu-avx2/bin python3 scripts/make-tokenizer-goldens.py
"""

import concurrent.futures
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import common

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "testdata" / "tokenizer" / "corpus.json"
MODELS = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3-270m": "gemma-3-270m-q4_k_m.gguf",
    "qwen2.5-0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
}


def llama_tokenize_path() -> pathlib.Path:
    env = os.environ.get("LLAMA_TOKENIZE")
    path = pathlib.Path(env) if env else (
        common.LLAMA_BIN / "llama-tokenize")
    if not path.is_file():
        sys.exit(f"llama-tokenize not found at {path} (set LLAMA_TOKENIZE)")
    return path


def models_dir() -> pathlib.Path:
    env = os.environ.get("FERRITE_MODELS")
    return pathlib.Path(env) if env else ROOT / "models"


def tokenize(exe: pathlib.Path, model: pathlib.Path, text: str, parse_special: bool) -> list:
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(text.encode("utf-8"))
        name = f.name
    try:
        cmd = [str(exe), "-m", str(model), "-f", name, "--ids", "--log-disable", "--no-escape"]
        if not parse_special:
            cmd.append("--no-parse-special")
        run = subprocess.run(cmd, capture_output=True, check=False)
    finally:
        os.unlink(name)
    if run.returncode == -4:
        sys.exit(f"{exe} died of SIGILL: it was built for CPU features this machine lacks "
                 "(e.g. AVX-512); point LD_LIBRARY_PATH at a libggml-cpu.so.0 built for this CPU")
    if run.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stderr.decode(errors='replace')}")
    lines = [l for l in run.stdout.decode().splitlines() if l.startswith("[")]
    if len(lines) != 1:
        sys.exit(f"unexpected llama-tokenize output for {text!r}:\n{run.stdout!r}")
    return json.loads(lines[0])


def main() -> None:
    exe = llama_tokenize_path()
    corpus_bytes = CORPUS.read_bytes()
    corpus = json.loads(corpus_bytes)
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True)
    version_line = (version.stdout + version.stderr).strip().splitlines()[0]
    # scripts/build-llamacpp.sh builds the llama.cpp vendored in a
    # llama-cpp-python sdist, whose version says more than "commit unknown".
    sdists = sorted(exe.resolve().parents[3].glob("llama_cpp_python-*.tar.gz"))
    if sdists:
        version_line += f"; vendored in {sdists[-1].name[:-len('.tar.gz')]}"
    for short, file in MODELS.items():
        model = models_dir() / file
        if not model.is_file():
            sys.exit(f"{model} is missing: run scripts/fetch-models.sh {short}")
        golden = {
            "model": file,
            "llama_cpp": version_line,
            "command": "llama-tokenize -m MODEL -f FILE --ids --log-disable --no-escape [--no-parse-special]",
            "corpus_sha256": hashlib.sha256(corpus_bytes).hexdigest(),
        }
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            for key, parse in (("parse_special", True), ("no_parse_special", False)):
                golden[key] = list(pool.map(lambda s: tokenize(exe, model, s, parse), corpus))
        out = ROOT / "testdata" / "tokenizer" / f"{short}.json"
        with open(out, "w", encoding="utf-8") as f:
            f.write("{\n")
            items = list(golden.items())
            for i, (k, v) in enumerate(items):
                sep = "," if i + 1 < len(items) else ""
                if isinstance(v, list):
                    rows = ",\n".join("  " + json.dumps(r) for r in v)
                    f.write(f"{json.dumps(k)}: [\n{rows}\n]{sep}\n")
                else:
                    f.write(f"{json.dumps(k)}: {json.dumps(v)}{sep}\n")
            f.write("}\n")
        print(f"wrote {out.relative_to(ROOT)} ({len(corpus)} strings)")


if __name__ == "__main__":
    main()
