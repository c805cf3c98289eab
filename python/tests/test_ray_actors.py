"""ferrite.ray's callable classes called directly on batches (what Ray Data
does in each actor), numpy-dict and pandas formats; no cluster needed."""

import numpy as np
import pytest

import ferrite
import ferrite.ray as fray
from conftest import TESTDATA, same_bits

MARIAN = str(TESTDATA / "translation" / "tiny-marian")


def test_embed_numpy_batch(bench_sentences):
    texts = bench_sentences[:50]
    batch = {"id": np.arange(50), "text": np.array(texts)}
    out = fray.Embed(model="minilm", threads=1)(batch)
    assert out["embedding"].shape == (50, 384)
    assert same_bits(out["embedding"], ferrite.Embedder("minilm").encode(texts))
    assert (out["id"] == np.arange(50)).all()


def test_embed_pandas_batch_and_options(bench_sentences):
    pd = pytest.importorskip("pandas")
    texts = bench_sentences[:10]
    df = pd.DataFrame({"sentence": texts})
    out = fray.Embed(model="minilm", column="sentence", output_column="v", dim=64)(df)
    want = ferrite.Embedder("minilm").encode(texts, dim=64)
    assert same_bits(np.stack(out["v"].to_list()), want)


def test_missing_column():
    with pytest.raises(ferrite.InputError, match="no column 'text'"):
        fray.Embed(model="minilm")({"body": np.array(["x"])})


def test_translate_batch():
    lines = (TESTDATA / "translation" / "corpus.en").read_text().split("\n")[:8]
    out = fray.Translate(model=MARIAN, beams=2)({"text": np.array(lines)})
    assert list(out["translation"]) == ferrite.Translator(MARIAN).translate(lines, beams=2)


def test_complete_batch():
    prompts = ["The capital of France is", "Once upon a time"]
    kw = dict(max_tokens=12, temperature=0.8, seed=9)
    out = fray.Complete(model="smollm2", **kw)({"prompt": np.array(prompts)})
    g = ferrite.Generator("smollm2")
    assert list(out["completion"]) == [g.complete(p, **kw) for p in prompts]
    chat = fray.Complete(model="smollm2", chat=True, system="Be brief.", max_tokens=12,
                         temperature=0)({"prompt": np.array(prompts[:1])})
    want = g.chat([{"role": "system", "content": "Be brief."},
                   {"role": "user", "content": prompts[0]}], max_tokens=12, temperature=0)
    assert list(chat["completion"]) == [want]
