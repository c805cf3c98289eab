#!/usr/bin/env bash
# The Python package's tests (python/tests): builds the package with
# maturin and installs it as a user would (`pip install ./python`) into a
# venv of its own (FERRITE_PY_VENV, default $FERRITE_CACHE/ferrite-py-venv, made
# here with maturin, numpy, pytest and Ray Data from PyPI when missing),
# then runs pytest, the two-node Ray test included. The tests compare with
# the `ferrite` binary `cargo test` builds (test profile, target/debug).
# The package is a release build, as users get it (the test profile cannot
# make a loadable module: cargo builds it as a test harness).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
export FERRITE_MODELS="${FERRITE_MODELS:-$PWD/models}"
venv=${FERRITE_PY_VENV:-$FERRITE_CACHE/ferrite-py-venv}
pip_quiet=(--quiet --disable-pip-version-check)
if ! "$venv/bin/python" -c 'import maturin, numpy, pytest' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install "${pip_quiet[@]}" 'maturin>=1.9,<2' 'numpy>=1.21' 'pytest>=7'
fi
if ! "$venv/bin/python" -c 'import ray.data' 2>/dev/null; then
  # The extra `ferrite[ray]`; where Ray has no wheel, the Ray tests skip
  # and say so.
  "$venv/bin/pip" install "${pip_quiet[@]}" 'ray[data]>=2.30' ||
    echo "test-python: Ray could not be installed; its tests will be skipped" >&2
fi
scripts/fetch-models.sh smollm2 minilm mpnet
cargo build --quiet --profile test -p ferrite-cli
# `pip install ./python` through maturin (the venv's, no build isolation:
# nothing to download).
PATH="$venv/bin:$PATH" "$venv/bin/pip" install "${pip_quiet[@]}" --no-build-isolation --force-reinstall --no-deps ./python
# From the repository's root: python/ferrite (the sources, without the
# native module) must not shadow the installed package.
FERRITE_BIN="$PWD/target/debug/ferrite" exec "$venv/bin/python" -m pytest python/tests -q -rs "$@"
