"""ferrite.Translator on the tiny Marian fixture: the same lines as
`ferrite translate`."""

import pytest

import ferrite
from conftest import TESTDATA, run_cli

MARIAN = TESTDATA / "translation" / "tiny-marian"


@pytest.fixture(scope="module")
def lines():
    text = (TESTDATA / "translation" / "corpus.en").read_text(encoding="utf-8")
    return text.split("\n")[:40]


@pytest.fixture(scope="module")
def translator():
    return ferrite.Translator(MARIAN)


@pytest.mark.parametrize("flags,kwargs", [
    ([], {}),
    (["--beams", "1"], {"beams": 1}),
    (["--beams", "3", "--max-length", "12"], {"beams": 3, "max_length": 12}),
])
def test_equals_cli(ferrite_bin, tmp_path, translator, lines, flags, kwargs):
    src = tmp_path / "in.txt"
    src.write_text("".join(l + "\n" for l in lines), encoding="utf-8")
    want = run_cli(ferrite_bin, "translate", MARIAN, src, *flags).split("\n")[:-1]
    got = translator.translate(lines, **kwargs)
    assert got == want
    assert translator.translate(lines[3], **kwargs) == want[3]


def test_blank_and_options(translator):
    assert translator.translate(["", "  "]) == ["", ""]
    with pytest.raises(ValueError, match="beams"):
        translator.translate(["x"], beams=0)
    with pytest.raises(ValueError, match="beams"):
        translator.translate(["x"], beams=17)
    with pytest.raises(TypeError):
        translator.translate([1])
    with pytest.raises(ValueError, match="weights"):
        ferrite.Translator(MARIAN, weights="q4")
