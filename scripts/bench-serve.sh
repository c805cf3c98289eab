#!/usr/bin/env bash
# Load benchmark of `ferrite serve` against llama-server (same GGUF, same
# threads, -np N): scripts/bench-serve.py says what is measured.
#
#   scripts/bench-serve.sh [--streams 1,8,32,64] [--max-tokens 64] [--threads 2] [--json OUT]
#   scripts/bench-serve.sh --prefix [--prefix-tokens 1500] [--prefix-requests 8] [--turns 10] [--rounds 3]
#
# Builds ferrite (release) unless FERRITE_BIN is set, fetches smollm2 and
# minilm; llama-server comes from $FERRITE_LLAMACPP/build/bin (built by
# scripts/build-llamacpp.sh), or --llama-server PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-models.sh smollm2 minilm
if [ -z "${FERRITE_BIN:-}" ]; then
  cargo build --release --quiet -p ferrite-cli
  FERRITE_BIN=target/release/ferrite
fi
exec python3 scripts/bench-serve.py --ferrite "$FERRITE_BIN" "$@"
