"""ferrite.Embedder: the same bits as `ferrite embed`, sentence-transformers'
vectors (goldens in testdata/embed), threads and the GIL."""

import threading
import time

import numpy as np
import pytest

import ferrite
from conftest import TESTDATA, golden_rows, run_cli, same_bits


@pytest.fixture(scope="module")
def minilm():
    return ferrite.Embedder("minilm")


def cli_embed(ferrite_bin, tmp_path, model, texts, *flags):
    src = tmp_path / "texts.txt"
    src.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    out = tmp_path / "out.npy"
    run_cli(ferrite_bin, "embed", model, src, "--format", "npy", "-o", out, *flags)
    return np.load(out)


def test_minilm_bits_equal_cli(ferrite_bin, tmp_path, minilm, corpus, bench_sentences):
    texts = corpus + bench_sentences
    got = minilm.encode(texts)
    assert got.dtype == np.float32 and got.shape == (len(texts), 384)
    assert same_bits(got, cli_embed(ferrite_bin, tmp_path, "minilm", texts))


def test_minilm_options_bits_equal_cli(ferrite_bin, tmp_path, minilm, corpus):
    got = minilm.encode(corpus, batch_size=5, normalize=False, dim=100, pooling="cls")
    want = cli_embed(ferrite_bin, tmp_path, "minilm", corpus, "--batch-size", "5",
                     "--no-normalize", "--dim", "100", "--pooling", "cls")
    assert got.shape == (len(corpus), 100)
    assert same_bits(got, want)


def test_batch_size_and_order_do_not_change_bits(minilm, corpus):
    base = minilm.encode(corpus)
    assert same_bits(minilm.encode(corpus, batch_size=1), base)
    assert same_bits(minilm.encode(corpus[::-1])[::-1], base)
    assert same_bits(minilm.encode(corpus[7]), base[7])


def cosines(a, b):
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)


@pytest.mark.parametrize("model,golden,dim", [
    ("minilm", "minilm/embeddings.f32", 384),
    ("mpnet", "mpnet/embeddings.f32", 768),
])
def test_cosine_to_sentence_transformers(corpus, model, golden, dim):
    """Goldens: SentenceTransformer(...).encode(corpus) (scripts/make-embed-goldens.py,
    scripts/make-mpnet-goldens.py)."""
    want = golden_rows(TESTDATA / "embed" / golden, dim)
    got = ferrite.Embedder(model).encode(corpus)
    c = cosines(got.astype(np.float64), want.astype(np.float64))
    print(f"{model}: min cosine {c.min():.9f}")
    assert c.min() >= 0.99999, (c.argmin(), c.min())


def test_shapes(minilm):
    assert minilm.dim == 384
    assert minilm.encode("one text").shape == (384,)
    assert minilm.encode([]).shape == (0, 384)
    assert minilm.encode(("a", "b")).shape == (2, 384)
    assert minilm.encode(np.array(["a", "b"])).shape == (2, 384)
    assert same_bits(minilm.encode([b"caf\xc3\xa9"]), minilm.encode(["café"]))
    assert minilm.encode(["x"]).flags.writeable


def test_truncation_reported(minilm):
    long = "word " * 600
    arr, cut = minilm.encode(["short", long], return_truncated=True)
    assert cut == [1]
    with pytest.raises(ferrite.InputError, match="longer|tokens"):
        minilm.encode(["short", long], truncate=False)


def test_two_threads_share_one_embedder(minilm, corpus, bench_sentences):
    texts = bench_sentences
    want = minilm.encode(texts)
    results = {}

    def work(name, part):
        for _ in range(3):
            results.setdefault(name, []).append(minilm.encode(part))

    threads = [
        threading.Thread(target=work, args=("a", texts)),
        threading.Thread(target=work, args=("b", texts[::-1])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(same_bits(r, want) for r in results["a"])
    assert all(same_bits(r[::-1], want) for r in results["b"])


def test_gil_released_during_encode(bench_sentences):
    """A Python thread keeps running while the main thread encodes: it wakes
    every millisecond and notes the time, which it could not do if the call
    held the GIL."""
    embedder = ferrite.Embedder("minilm", threads=1)
    stop = threading.Event()
    stamps = []

    def tick():
        while not stop.is_set():
            stamps.append(time.perf_counter())
            time.sleep(0.001)

    t = threading.Thread(target=tick)
    t.start()
    time.sleep(0.05)
    start = time.perf_counter()
    embedder.encode(bench_sentences)
    end = time.perf_counter()
    stop.set()
    t.join()
    # The middle 80% of the call, away from its start and end.
    lo, hi = start + 0.1 * (end - start), end - 0.1 * (end - start)
    inside = sum(lo < s < hi for s in stamps)
    print(f"encode took {end - start:.2f} s; the other thread woke {inside} times meanwhile")
    assert end - start > 0.2, "the call was too short to tell"
    # Held GIL: 0. Free: about one wake-up per millisecond (fewer on a busy
    # machine); ask for a fortieth of that.
    assert inside >= (hi - lo) / 0.001 / 40, inside
