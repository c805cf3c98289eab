#!/usr/bin/env bash
# The main job in one command: fetches the models it needs if missing,
# builds ferrite (release) and runs it.
#
#   scripts/run.sh                 chat with the default model, qwen2.5-0.5b
#                                  (Qwen2.5-Coder-0.5B-Instruct, the only model
#                                  it then fetches): on a terminal a one-line
#                                  banner, then one message a line, Ctrl-D quits;
#                                  with piped input it answers each line and exits
#   scripts/run.sh ARGS...         runs `ferrite ARGS...` (e.g. `chat smollm2`,
#                                  `inspect gemma3-270m --json`), after fetching
#                                  the models ARGS name by short name (the default
#                                  model if they name none; `serve` with no model
#                                  serves and fetches the default model and minilm)
set -euo pipefail
cd "$(dirname "$0")/.."
DEFAULT_MODEL=qwen2.5-0.5b
if [ $# -eq 0 ]; then
  set -- chat "$DEFAULT_MODEL"
fi
want=()
for arg in "$@"; do
  case $arg in
    smollm2 | gemma3-270m | minilm | qwen2.5-0.5b | nomic-embed-v1.5 | mpnet) want+=("$arg") ;;
  esac
done
if [ ${#want[@]} -eq 0 ]; then
  want=("$DEFAULT_MODEL")
  [ "$1" = serve ] && want+=(minilm)
fi
scripts/fetch-models.sh "${want[@]}"
cargo build --release --quiet -p ferrite-cli
exec target/release/ferrite "$@"
