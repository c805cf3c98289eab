"""Shared fixtures: the repository, the `ferrite` binary to compare with,
the models (FERRITE_MODELS, default <repo>/models; fetched by
scripts/fetch-models.sh), and helpers to run the CLI."""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
TESTDATA = REPO / "testdata"
os.environ.setdefault("FERRITE_MODELS", str(REPO / "models"))


def _binary():
    path = os.environ.get("FERRITE_BIN")
    if path:
        return Path(path)
    for profile in ("debug", "release"):
        p = REPO / "target" / profile / "ferrite"
        if p.exists():
            return p
    return REPO / "target" / "debug" / "ferrite"


@pytest.fixture(scope="session")
def ferrite_bin():
    path = _binary()
    if not path.exists():
        pytest.fail(
            f"no ferrite binary at {path}: build it (cargo build --profile test -p ferrite-cli) "
            "or set FERRITE_BIN; scripts/test-python.sh does both"
        )
    return path


def run_cli(ferrite_bin, *args, input=None):
    """Runs `ferrite ARGS...`; returns stdout (str). Fails on a non-zero exit."""
    p = subprocess.run(
        [str(ferrite_bin), *map(str, args)],
        input=input,
        capture_output=True,
        text=True,
        encoding="utf-8",
    )
    assert p.returncode == 0, f"ferrite {' '.join(map(str, args))}: {p.stderr}"
    return p.stdout


@pytest.fixture(scope="session")
def corpus():
    """The 134-string embedding test corpus (testdata/embed/corpus.json)."""
    return json.loads((TESTDATA / "embed" / "corpus.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def bench_sentences():
    """The 512-sentence benchmark corpus."""
    text = (TESTDATA / "embed" / "bench-sentences.txt").read_text(encoding="utf-8")
    return text.split("\n")[:-1]


def golden_rows(path, dim):
    return np.fromfile(path, dtype="<f4").reshape(-1, dim)


def same_bits(a, b):
    """Whether two float32 arrays hold the same bits (shape included)."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    b = np.ascontiguousarray(b, dtype=np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))
