#!/usr/bin/env bash
# The main job in one command: fetches the models if missing, builds ferrite
# (release) and runs it. With no arguments it starts a chat with the default
# model (SmolLM2, the only model it then fetches); any arguments are passed to
# the `ferrite` binary (e.g. `inspect gemma3-270m --json`).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
  scripts/fetch-models.sh smollm2
  set -- chat smollm2
else
  scripts/fetch-models.sh
fi
cargo build --release --quiet -p ferrite-cli
exec target/release/ferrite "$@"
