#!/usr/bin/env bash
# Text-embedding speed of ferrite against onnxruntime and sentence-transformers
# (torch) on all-MiniLM-L6-v2 (or all-mpnet-base-v2 with BENCH_EMBED_MODEL=mpnet)
# and testdata/embed/bench-sentences.txt; see
# scripts/bench-embed.py for what is measured and how.
#
#   scripts/bench-embed.sh [--threads 1,2] [--rounds 3] [--n 512] [--batch-size 32] [--json OUT]
#   scripts/bench-embed.sh --check      # cosine agreement of the three engines, no timing
#   FERRITE_KERNELS=avx2 scripts/bench-embed.sh --ort-avx2   # both engines' AVX2 code on an AVX-512 CPU
#                                       # (onnxruntime: a patched copy made by scripts/ort-avx2.py)
#
# All options go to scripts/bench-embed.py (--help lists them). Before that,
# this sets up the Python reference environment if it is missing
# (scripts/setup-refenv.sh, or $SETUP_REFENV), fetches the model
# (scripts/fetch-models.sh minilm) and builds ferrite in release mode; a failed
# build stops here. FERRITE_BIN=path skips the build and uses that binary.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
. scripts/env.sh

env_dir=$FERRITE_REFENV
if ! "$env_dir/bin/python" -c 'import torch, transformers, sentence_transformers, onnxruntime, onnx, numpy' 2>/dev/null; then
  setup=${SETUP_REFENV:-$repo/scripts/setup-refenv.sh}
  echo "bench-embed: setting up the Python reference environment ($setup)" >&2
  env_dir=$("$setup" | tail -n 1)
fi
py=$env_dir/bin/python

# BENCH_EMBED_MODEL=minilm (default) or mpnet.
case ${BENCH_EMBED_MODEL:-minilm} in
  minilm) name=minilm; dir=all-MiniLM-L6-v2 ;;
  mpnet) name=mpnet; dir=all-mpnet-base-v2 ;;
  *) echo "bench-embed: BENCH_EMBED_MODEL must be minilm or mpnet" >&2; exit 2 ;;
esac
scripts/fetch-models.sh "$name" # silent when the model is already there
model=${FERRITE_MODELS:-$repo/models}/$dir

if [ -n "${FERRITE_BIN:-}" ]; then
  ferrite=$FERRITE_BIN
else
  if ! cargo build --release -p ferrite-cli --quiet; then
    echo "bench-embed: cargo build failed (FERRITE_BIN=target/release/ferrite uses the binary already built)" >&2
    exit 1
  fi
  ferrite=$repo/target/release/ferrite
fi

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
BENCH_EMBED_CMDLINE="$0${*:+ $*}" exec "$py" scripts/bench-embed.py --model "$model" --ferrite "$ferrite" "$@"
