"""Exceptions: a missing model, the wrong kind of model, bad options, bad
text; all ferrite.Error, with the library's message."""

import pytest

import ferrite


def test_missing_model():
    with pytest.raises(FileNotFoundError) as e:
        ferrite.Embedder("/no/such/model")
    assert isinstance(e.value, ferrite.Error)
    assert isinstance(e.value, ferrite.ModelNotFoundError)
    assert "/no/such/model" in str(e.value)
    with pytest.raises(ferrite.ModelNotFoundError):
        ferrite.Generator("no-such-short-name")
    with pytest.raises(ferrite.ModelNotFoundError):
        ferrite.Translator("/no/such/dir")


def test_wrong_kind_of_model():
    with pytest.raises(ferrite.Error, match="embedding model, not a text-generation"):
        ferrite.Generator("minilm")


def test_not_a_model(tmp_path):
    f = tmp_path / "junk.gguf"
    f.write_bytes(b"GGUF" + b"\x00" * 10)
    with pytest.raises(ferrite.ModelError):
        ferrite.Generator(f)


def test_bad_arguments():
    with pytest.raises(ValueError, match="threads"):
        ferrite.Embedder("minilm", threads=0)
    with pytest.raises(ValueError, match="threads"):
        ferrite.Embedder("minilm", threads=10_000)
    with pytest.raises(ValueError, match="precision"):
        ferrite.Embedder("minilm", precision="f8")
    with pytest.raises(TypeError):
        ferrite.Embedder(42)


def test_bad_texts():
    e = ferrite.Embedder("minilm", threads=1)
    with pytest.raises(TypeError, match="texts"):
        e.encode(123)
    with pytest.raises(TypeError, match=r"texts\[1\] is int"):
        e.encode(["a", 1])
    with pytest.raises(ValueError, match=r"texts\[1\] is not UTF-8.*0xff at byte offset 2"):
        e.encode([b"ok", b"ab\xffcd"])
    with pytest.raises(ferrite.InputError, match="Unicode"):
        e.encode(["a\udcffb"])
    with pytest.raises(ValueError, match="batch_size"):
        e.encode(["a"], batch_size=0)
    with pytest.raises(ValueError, match="dim"):
        e.encode(["a"], dim=385)
    with pytest.raises(ValueError, match="task"):
        e.encode(["a"], task="query")  # MiniLM has no task prefixes
    with pytest.raises(ValueError, match="task"):
        e.encode(["a"], task="search")
    with pytest.raises(ValueError, match="pooling"):
        e.encode(["a"], pooling="max")
