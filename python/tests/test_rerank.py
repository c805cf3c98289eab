"""ferrite.Reranker: sentence-transformers' CrossEncoder names and shapes,
its scores (goldens in testdata/rerank, scripts/make-rerank-fixtures.py)
and the bits of `ferrite rerank`."""

import json

import numpy as np
import pytest

import ferrite
from conftest import TESTDATA, run_cli, same_bits

CE1 = TESTDATA / "rerank" / "bert-ce-1"
CE3 = TESTDATA / "rerank" / "bert-ce-3"


def goldens(d):
    return json.loads((d / "goldens.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def ce1():
    return ferrite.Reranker(CE1)


@pytest.mark.parametrize("path", [CE1, CE3])
def test_predict_matches_cross_encoder(path):
    g = goldens(path)
    model = ferrite.Reranker(path)
    pairs = [tuple(p) for p in g["pairs"]]
    scores = model.predict(pairs)
    raw = model.predict(pairs, raw_scores=True)
    want, want_raw = np.array(g["scores"], np.float32), np.array(g["raw"], np.float32)
    if model.num_labels == 1:
        want, want_raw = want[:, 0], want_raw[:, 0]
    assert scores.dtype == np.float32 and scores.shape == want.shape
    assert np.abs(scores - want).max() <= 1e-5
    assert np.abs(raw - want_raw).max() <= 1e-5
    # One pair: a scalar (one label) or (num_labels,).
    one = model.predict(list(pairs[0]))
    assert np.shape(one) == want.shape[1:]
    assert same_bits(np.atleast_1d(one), np.atleast_1d(scores[0]))
    # Batching changes no bit.
    assert same_bits(model.predict(pairs, batch_size=1), scores)


def test_softmax_over_labels():
    model = ferrite.Reranker(CE3)
    p = model.predict([("a", "b"), ("c", "d")], apply_softmax=True)
    assert p.shape == (2, 3)
    assert np.allclose(p.sum(axis=1), 1.0, atol=1e-6)


def test_rank_shape_and_bits_equal_cli(ferrite_bin, tmp_path, ce1):
    query = "how many people live in berlin?"
    docs = [p[1] for p in goldens(CE1)["pairs"]]
    ranked = ce1.rank(query, docs, return_documents=True)
    assert [set(r) for r in ranked] == [{"corpus_id", "score", "text"}] * len(docs)
    scores = [float(r["score"]) for r in ranked]
    assert scores == sorted(scores, reverse=True)
    assert all(r["text"] == docs[r["corpus_id"]] for r in ranked)
    assert len(ce1.rank(query, docs, top_k=3)) == 3
    src = tmp_path / "docs.txt"
    src.write_text("".join(d + "\n" for d in docs), encoding="utf-8")
    out = json.loads(run_cli(ferrite_bin, "rerank", CE1, "-q", query, "--format", "json", src))
    assert [r["index"] for r in out["results"]] == [r["corpus_id"] for r in ranked]
    cli = np.array([r["score"] for r in out["results"]], np.float32)
    assert same_bits(cli, np.array([r["score"] for r in ranked], np.float32))


def test_refusals():
    with pytest.raises(ferrite.ModelError, match="not a cross-encoder"):
        ferrite.Reranker("minilm")
    with pytest.raises(ferrite.InputError, match="3 labels"):
        ferrite.Reranker(CE3).rank("q", ["a"])
    model = ferrite.Reranker(CE1, threads=1)
    with pytest.raises(TypeError):
        model.predict([("q", 3)])
    with pytest.raises(ferrite.InputError, match="expected 2"):
        model.predict([("q", "a", "b")])
    with pytest.raises(ferrite.InputError, match="not UTF-8"):
        model.predict([("q", b"\xff")])
    assert model.predict([]).shape == (0,)
