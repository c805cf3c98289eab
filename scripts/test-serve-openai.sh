#!/usr/bin/env bash
# Drives `ferrite serve` with the official `openai` Python package, LangChain
# (`langchain-openai`) and litellm (crates/cli/tests/openai/test_openai_client.py),
# then with the official `ollama` package and LangChain's `ChatOllama`
# (`langchain-ollama`) on Ollama's routes (test_ollama_client.py),
# then the Anthropic Messages and OpenAI Responses routes with the official
# `anthropic` and `openai` packages and `langchain-anthropic`
# (crates/cli/tests/openai/test_anthropic_responses.py).
# Makes its own venv with those from PyPI (FERRITE_OPENAI_VENV, default
# $FERRITE_CACHE/ferrite-openai-venv, scripts/env.sh; a cold install takes about a minute) and uses
# the binary `cargo test` builds (test profile, target/debug/ferrite).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
venv=${FERRITE_OPENAI_VENV:-$FERRITE_CACHE/ferrite-openai-venv}
if ! "$venv/bin/python" -c 'import openai' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'openai>=1.40,<4'
fi
if ! "$venv/bin/python" -c 'import langchain_openai, litellm' 2>/dev/null; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'langchain-openai>=0.3,<2' 'litellm>=1.60,<2'
fi
if ! "$venv/bin/python" -c 'import ollama, langchain_ollama' 2>/dev/null; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'ollama>=0.4,<1' 'langchain-ollama>=0.3,<2'
fi
if ! "$venv/bin/python" -c 'import anthropic, langchain_anthropic' 2>/dev/null; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'anthropic>=0.40,<1' 'langchain-anthropic>=0.3,<2'
fi
# litellm would fetch its model price list from the internet at import.
export LITELLM_LOCAL_MODEL_COST_MAP=True
# Built alone, the binary sees the library without its feature `internals`
# (the workspace's tests turn it on): this build fails if the CLI or the
# server reach past the library's public interface (ARCHITECTURE.md).
cargo build --quiet --profile test -p ferrite-cli
scripts/fetch-models.sh smollm2 minilm nomic-embed-v1.5 qwen2.5-0.5b
FERRITE_BIN=target/debug/ferrite "$venv/bin/python" crates/cli/tests/openai/test_openai_client.py
FERRITE_BIN=target/debug/ferrite "$venv/bin/python" crates/cli/tests/openai/test_ollama_client.py
FERRITE_BIN=target/debug/ferrite exec "$venv/bin/python" crates/cli/tests/openai/test_anthropic_responses.py
