"""ferrite.Generator: the same text as `ferrite run` / `ferrite chat`
(greedy and seeded), streaming, chat, JSON schemas, options."""

import json
import threading

import pytest

import ferrite
from conftest import run_cli

MODEL = "smollm2"
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def gen():
    return ferrite.Generator(MODEL)


def cli_run(ferrite_bin, *args):
    out = run_cli(ferrite_bin, "run", MODEL, *args)
    assert out.endswith("\n")
    return out[:-1]


def test_greedy_equals_cli(ferrite_bin, gen):
    want = cli_run(ferrite_bin, "-p", PROMPT, "-n", "40", "--temp", "0")
    got = gen.complete(PROMPT, max_tokens=40, temperature=0)
    assert got == want and len(got) > 20


@pytest.mark.parametrize("seed", [7, 12345])
def test_seeded_sampling_equals_cli(ferrite_bin, gen, seed):
    want = cli_run(ferrite_bin, "-p", "Once upon a time", "-n", "40", "--temp", "0.9",
                   "--top-k", "50", "--top-p", "0.9", "--seed", str(seed))
    got = gen.complete("Once upon a time", max_tokens=40, temperature=0.9, top_k=50,
                       top_p=0.9, seed=seed)
    assert got == want
    # The same seed again gives the same text.
    assert gen.complete("Once upon a time", max_tokens=40, temperature=0.9, top_k=50,
                        top_p=0.9, seed=seed) == got


def test_stop_equals_cli(ferrite_bin, gen):
    want = cli_run(ferrite_bin, "-p", PROMPT, "-n", "40", "--temp", "0", "--stop", ".")
    got = gen.complete(PROMPT, max_tokens=40, temperature=0, stop=".")
    assert got == want and "." not in got


def test_stream_pieces_join_to_complete(gen):
    s = gen.stream(PROMPT, max_tokens=40, temperature=0.7, seed=3)
    assert s.stop_reason is None
    pieces = list(s)
    assert len(pieces) > 5
    assert "".join(pieces) == gen.complete(PROMPT, max_tokens=40, temperature=0.7, seed=3)
    assert s.stop_reason in ("max tokens", "end of generation")
    assert next(iter(s), None) is None  # exhausted stays exhausted


def test_dropped_stream_stops(gen):
    s = gen.stream(PROMPT, max_tokens=None, temperature=0)
    first = next(s)
    assert first
    del s
    assert gen.complete(PROMPT, max_tokens=4, temperature=0)


def cli_chat(ferrite_bin, lines, *args):
    out = run_cli(ferrite_bin, "chat", MODEL, *args, input="".join(l + "\n" for l in lines))
    return out


def test_chat_equals_cli(ferrite_bin, gen):
    q1, q2 = "What is the capital of France?", "And of Italy?"
    out = cli_chat(ferrite_bin, [q1, q2], "--temp", "0", "-n", "48",
                   "--system", "You are a helpful assistant.")
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": q1}]
    r1 = gen.chat(messages, max_tokens=48, temperature=0)
    # `ferrite chat` keeps the reply, trimmed, in the conversation.
    messages += [{"role": "assistant", "content": r1.strip()}, {"role": "user", "content": q2}]
    r2 = gen.chat(messages, max_tokens=48, temperature=0)
    assert out == r1 + "\n" + r2 + "\n"
    streamed = "".join(gen.chat(messages, max_tokens=48, temperature=0, stream=True))
    assert streamed == r2


def test_chat_seeded_equals_cli(ferrite_bin, gen):
    q = "Tell me a short story about a cat."
    out = cli_chat(ferrite_bin, [q], "--temp", "0.8", "--seed", "11", "-n", "40")
    got = gen.chat([{"role": "user", "content": q}], max_tokens=40, temperature=0.8, seed=11)
    assert out == got + "\n"


def test_json_schema_equals_cli(ferrite_bin, gen, tmp_path):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["city", "population"],
    }
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    prompt = "The largest city of France as JSON:"
    want = cli_run(ferrite_bin, "-p", prompt, "-n", "60", "--temp", "0", "--json-schema", path)
    got = gen.complete(prompt, max_tokens=60, temperature=0, json_schema=schema)
    assert got == want
    assert gen.complete(prompt, max_tokens=60, temperature=0,
                        json_schema=json.dumps(schema)) == got
    value = json.loads(got)
    assert set(value) == {"city", "population"}


def test_json_schema_refused(gen):
    with pytest.raises(ValueError, match="pattern"):
        gen.complete("x", json_schema={"type": "object", "properties": {
            "a": {"type": "string", "pattern": "(a)\\1"}}})
    with pytest.raises(ferrite.InputError, match="not JSON"):
        gen.complete("x", json_schema="{not json")


def test_bad_options(gen):
    with pytest.raises(ValueError, match="temperature"):
        gen.complete("x", temperature=-1)
    with pytest.raises(ValueError, match="top-p"):
        gen.complete("x", top_p=1.5)
    with pytest.raises(ValueError, match="max_tokens"):
        gen.complete("x", max_tokens=-2)
    with pytest.raises(ValueError, match="seed"):
        gen.complete("x", seed=-1)
    with pytest.raises(TypeError):
        gen.complete(12)
    with pytest.raises(TypeError):
        gen.chat("not a list of messages")
    with pytest.raises(TypeError, match=r"messages\[0\]"):
        gen.chat(["hello"])
    with pytest.raises(ValueError, match="role"):
        gen.chat([{"role": "robot", "content": "hi"}])
    with pytest.raises(ValueError, match="content"):
        gen.chat([{"role": "user"}])
    with pytest.raises(ValueError, match="UTF-8"):
        gen.complete(b"\xff\xfe")
    with pytest.raises(ValueError, match="Unicode"):
        gen.complete("lone \ud800 surrogate")


def test_context_too_small():
    small = ferrite.Generator(MODEL, ctx=8)
    assert small.ctx == 8
    with pytest.raises(ferrite.InputError, match="context"):
        small.complete("word " * 20)


def test_two_threads_share_one_generator(gen):
    want = gen.complete(PROMPT, max_tokens=24, temperature=0.8, seed=5)
    got = []

    def work():
        got.append(gen.complete(PROMPT, max_tokens=24, temperature=0.8, seed=5))

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [want, want]


@pytest.mark.parametrize("kw", [{"lookup": True}, {"lookup": True, "draft_max": 2},
                                {"draft": MODEL}])
def test_speculation_changes_no_text(ferrite_bin, gen, kw):
    """lookup=True / draft= (ferrite run --lookup / --draft): the text of
    plain decoding, greedy and seeded."""
    spec = ferrite.Generator(MODEL, **kw)
    prompt = "a = 1; b = 2; c = 3; a = 1; b = 2; c = 3; a = 1;"
    want = cli_run(ferrite_bin, "-p", prompt, "-n", "32", "--temp", "0")
    assert spec.complete(prompt, max_tokens=32, temperature=0) == want
    assert spec.complete(prompt, max_tokens=32, seed=5) == gen.complete(
        prompt, max_tokens=32, seed=5)


def test_speculation_bad_options():
    with pytest.raises(ferrite.InputError, match="not both"):
        ferrite.Generator(MODEL, lookup=True, draft=MODEL)
    with pytest.raises(ferrite.InputError, match="draft_max needs"):
        ferrite.Generator(MODEL, draft_max=3)
    with pytest.raises(ferrite.InputError, match="same tokenizer"):
        ferrite.Generator(MODEL, draft="gemma3-270m")
