#!/usr/bin/env bash
# The main job in one command: fetches the models if missing, builds ferrite
# (release) and runs it. With no arguments it shows the default model; any
# arguments are passed to the `ferrite` binary (e.g. `inspect gemma3-270m --json`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-models.sh
cargo build --release --quiet -p ferrite-cli
if [ $# -eq 0 ]; then set -- inspect smollm2; fi
exec target/release/ferrite "$@"
