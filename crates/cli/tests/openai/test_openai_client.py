"""`ferrite serve` driven by the official `openai` Python package.

Starts the server (FERRITE_BIN, default target/debug/ferrite) on a free
port with smollm2 + minilm + nomic-embed-v1.5 + qwen2.5-0.5b and an API key, and checks what a real client
sees: models, chat and text completions (streamed == whole, usage), logprobs,
embeddings (the client's default base64 == float; token ids; `dimensions` on a
Matryoshka model, refused on another), json_schema output (keys in the
schema's order; nested Pydantic models through `.parse`), lists of prompts
and `echo`, tool calls (required, named, auto, parallel, streamed, a tool
result sent back, legacy `functions`), and the client's typed errors; then
LangChain (`langchain-openai`: `bind_tools`, `with_structured_output` by
function calling with a nested Pydantic model) and litellm (a completion and
a tool call) against the same server. Run by scripts/test-serve-openai.sh,
which makes the venv.
"""

import json
import math
import os
import socket
import subprocess
import sys
import time
import traceback
import urllib.request

import openai

KEY = "sk-ferrite-test"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(binary, models=("smollm2", "minilm", "nomic-embed-v1.5", "qwen2.5-0.5b")):
    port = free_port()
    proc = subprocess.Popen(
        [binary, "serve", *models, "--port", str(port),
         "--threads", "2",
         "--api-key", KEY],
        env={**os.environ, "FERRITE_LOG": "error"},
        stdout=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"ferrite serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server not ready after 120 s")


def test_models(c):
    ids = [m.id for m in c.models.list()]
    assert ids == ["smollm2", "minilm", "nomic-embed-v1.5", "qwen2.5-0.5b"], ids


def test_chat_stream_equals_whole(c):
    for extra in ({"temperature": 0}, {"temperature": 0.9, "seed": 11, "top_p": 0.9}):
        args = dict(model="smollm2", max_tokens=24,
                    messages=[{"role": "user", "content": "Name three colours."}], **extra)
        whole = c.chat.completions.create(**args)
        text = whole.choices[0].message.content
        assert whole.choices[0].finish_reason in ("stop", "length")
        assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens
        pieces, usage = [], None
        for chunk in c.chat.completions.create(stream=True, stream_options={"include_usage": True}, **args):
            if chunk.usage is not None:
                usage = chunk.usage
            for ch in chunk.choices:
                if ch.delta.content:
                    pieces.append(ch.delta.content)
        assert "".join(pieces) == text, ("".join(pieces), text)
        assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens


def test_completions_and_logprobs(c):
    r = c.completions.create(model="smollm2", prompt="The sky is", max_tokens=8, temperature=0, logprobs=2)
    ch = r.choices[0]
    assert ch.finish_reason == "length" and r.usage.completion_tokens == 8
    assert "".join(ch.logprobs.tokens) == ch.text
    assert all(lp <= 0 for lp in ch.logprobs.token_logprobs)
    r = c.chat.completions.create(model="smollm2", max_tokens=6, temperature=0, logprobs=True, top_logprobs=2,
                                  messages=[{"role": "user", "content": "Hi"}])
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    assert all(t.token == t.top_logprobs[0].token for t in content)


def test_embeddings_base64_equals_float(c):
    texts = ["a red apple", "the stock market fell"]
    default = c.embeddings.create(model="minilm", input=texts)  # the client asks for base64
    floats = c.embeddings.create(model="minilm", input=texts, encoding_format="float")
    for a, b in zip(default.data, floats.data):
        assert len(a.embedding) == 384
        assert a.embedding == b.embedding
    # Token ids (MiniLM's vocabulary, no [CLS]/[SEP]) as the client sends
    # them: "a red apple" is [1037, 2417, 6207].
    ids = c.embeddings.create(model="minilm", input=[[1037, 2417, 6207]], encoding_format="float")
    assert ids.data[0].embedding == floats.data[0].embedding
    try:
        c.embeddings.create(model="minilm", input=[[1037, 10**6]])
        raise AssertionError("an id past the vocabulary accepted")
    except openai.BadRequestError as e:
        assert "input 0: token 1: id 1000000 is not in the vocabulary" in str(e), e
    # nomic-embed-text v1.5 was trained for shortened vectors (64..768).
    cut = c.embeddings.create(model="nomic-embed-v1.5", input="hello", dimensions=256)
    cut_f = c.embeddings.create(model="nomic-embed-v1.5", input="hello", dimensions=256,
                                encoding_format="float")
    v = cut.data[0].embedding
    assert len(v) == 256 and abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-5
    assert v == cut_f.data[0].embedding
    # MiniLM was not: only its full width, as OpenAI refuses `dimensions`
    # for models without it.
    full = c.embeddings.create(model="minilm", input=texts, dimensions=384, encoding_format="float")
    assert [d.embedding for d in full.data] == [d.embedding for d in floats.data]
    try:
        c.embeddings.create(model="minilm", input="hello", dimensions=32)
        raise AssertionError("dimensions=32 accepted for minilm")
    except openai.BadRequestError as e:
        assert e.body["param"] == "dimensions", e.body
    assert default.usage.prompt_tokens > 0


def test_json_schema_output_validates(c):
    schema = {"type": "object", "properties": {
        "city": {"type": "string"}, "population": {"type": "integer"},
        "coastal": {"type": "boolean"}}, "required": ["city", "population", "coastal"]}
    r = c.chat.completions.create(
        model="smollm2", max_tokens=200, temperature=0,
        messages=[{"role": "user", "content": "Describe a city as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema}})
    assert r.choices[0].finish_reason == "stop", r
    v = json.loads(r.choices[0].message.content)
    assert list(v) == ["city", "population", "coastal"], v  # the schema's order
    assert isinstance(v["city"], str) and isinstance(v["coastal"], bool)
    assert isinstance(v["population"], int) and not isinstance(v["population"], bool)


def test_prompt_lists_and_echo(c):
    one = [c.completions.create(model="smollm2", prompt=p, max_tokens=6, temperature=0).choices[0].text
           for p in ("The sky is", "Two plus two is")]
    both = c.completions.create(model="smollm2", prompt=["The sky is", "Two plus two is"], max_tokens=6,
                                temperature=0)
    assert [ch.index for ch in both.choices] == [0, 1], both
    assert [ch.text for ch in both.choices] == one, (both, one)
    echoed = c.completions.create(model="smollm2", prompt="The sky is", max_tokens=6, temperature=0, echo=True)
    assert echoed.choices[0].text == "The sky is" + one[0], echoed


def test_pydantic_parse_nested(c):
    from pydantic import BaseModel

    class Address(BaseModel):
        city: str
        country: str

    class Person(BaseModel):
        name: str
        age: int
        address: Address

    r = c.beta.chat.completions.parse(
        model="qwen2.5-0.5b", max_tokens=120, temperature=0, response_format=Person,
        messages=[{"role": "user", "content": "Invent a person living in Paris, as JSON."}])
    p = r.choices[0].message.parsed
    assert isinstance(p, Person) and isinstance(p.address, Address), r
    assert list(json.loads(r.choices[0].message.content)) == ["name", "age", "address"]


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Get the current time in a time zone.",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}
ASK = [{"role": "user", "content": "What is the weather like in Paris today, in celsius?"}]


def check_call(call):
    """A call names a tool and its arguments parse and match its schema."""
    args = json.loads(call.function.arguments)
    assert call.id and call.type == "function", call
    if call.function.name == "get_weather":
        assert list(args) == ["city", "unit"] and isinstance(args["city"], str), args
        assert args["unit"] in ("celsius", "fahrenheit"), args
    else:
        assert call.function.name == "get_time" and list(args) == ["zone"], call
    return call.function.name, args


def streamed_calls(c, **args):
    calls, reason, content = {}, None, ""
    for chunk in c.chat.completions.create(stream=True, **args):
        for ch in chunk.choices:
            content += ch.delta.content or ""
            for tc in ch.delta.tool_calls or []:
                e = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                e["name"] += tc.function.name or ""
                e["arguments"] += tc.function.arguments or ""
            reason = ch.finish_reason or reason
    return [calls[i] for i in sorted(calls)], reason, content


def test_tool_calls(c):
    base = dict(model="qwen2.5-0.5b", messages=ASK, tools=[WEATHER, TIME], temperature=0, max_tokens=80)
    # required: the reply is calls only, each valid.
    r = c.chat.completions.create(tool_choice="required", **base)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.tool_calls, r
    for call in ch.message.tool_calls:
        check_call(call)
    # A named function: exactly one call of it.
    r = c.chat.completions.create(tool_choice={"type": "function", "function": {"name": "get_time"}}, **base)
    calls = r.choices[0].message.tool_calls
    assert len(calls) == 1 and check_call(calls[0])[0] == "get_time", r
    # auto: this question is answered with a call, streamed the same.
    r = c.chat.completions.create(**base)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls", r
    whole = [check_call(t) for t in ch.message.tool_calls]
    assert whole[0] == ("get_weather", {"city": "Paris", "unit": "celsius"}), whole
    calls, reason, content = streamed_calls(c, **base)
    assert reason == "tool_calls" and content == (ch.message.content or ""), (reason, content)
    assert [(t["name"], json.loads(t["arguments"])) for t in calls] == whole, calls
    # The tool's result goes back; the model answers in text.
    call = ch.message.tool_calls[0]
    follow = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 21, "sky": "sunny"}'}]
    r = c.chat.completions.create(model="qwen2.5-0.5b", messages=follow, tools=[WEATHER, TIME],
                                  temperature=0, max_tokens=60)
    ch = r.choices[0]
    assert ch.finish_reason in ("stop", "length") and not ch.message.tool_calls, r
    assert "21" in ch.message.content, ch.message.content
    # none: no calls.
    r = c.chat.completions.create(tool_choice="none", **{**base, "max_tokens": 20})
    assert not r.choices[0].message.tool_calls and r.choices[0].message.content, r
    # Two questions, parallel calls allowed: every call valid.
    two = [{"role": "user", "content": "What is the weather in Paris and in Tokyo, in celsius?"}]
    r = c.chat.completions.create(**{**base, "messages": two, "max_tokens": 120}, tool_choice="required")
    names = [check_call(t) for t in r.choices[0].message.tool_calls]
    assert len(names) >= 1, r
    r = c.chat.completions.create(**{**base, "messages": two}, tool_choice="required", parallel_tool_calls=False)
    assert len(r.choices[0].message.tool_calls) == 1, r
    # Legacy functions / function_call.
    r = c.chat.completions.create(model="qwen2.5-0.5b", messages=ASK, temperature=0, max_tokens=80,
                                  functions=[WEATHER["function"]], function_call={"name": "get_weather"})
    ch = r.choices[0]
    assert ch.finish_reason == "function_call" and ch.message.function_call.name == "get_weather", r
    json.loads(ch.message.function_call.arguments)
    # A model whose template has no tools refuses them.
    try:
        c.chat.completions.create(model="smollm2", messages=ASK, tools=[WEATHER], max_tokens=4)
        raise AssertionError("tools accepted by smollm2")
    except openai.BadRequestError as e:
        assert e.body["param"] == "tools", e.body


def test_langchain(port):
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel, Field

    llm = ChatOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, model="qwen2.5-0.5b",
                     temperature=0, max_tokens=120, max_retries=0, timeout=300)

    @tool
    def get_weather(city: str, unit: str) -> str:
        """Get the current weather in a city; unit is celsius or fahrenheit."""
        return "21"

    msg = llm.bind_tools([get_weather]).invoke("What is the weather like in Paris today, in celsius?")
    assert msg.tool_calls, msg
    call = msg.tool_calls[0]
    assert call["name"] == "get_weather" and isinstance(call["args"]["city"], str), call
    assert list(call["args"]) == ["city", "unit"], call
    # Forced: tool_choice names the tool.
    msg = llm.bind_tools([get_weather], tool_choice="get_weather").invoke("Hello!")
    assert msg.tool_calls and msg.tool_calls[0]["name"] == "get_weather", msg

    class Address(BaseModel):
        city: str
        country: str

    class Person(BaseModel):
        """A person."""
        name: str
        age: int = Field(ge=0, le=150)
        address: Address
        nickname: str | None = None

    structured = llm.with_structured_output(Person, method="function_calling")
    p = structured.invoke("Invent a person living in Paris.")
    assert isinstance(p, Person) and isinstance(p.address, Address), p
    assert 0 <= p.age <= 150, p


def test_litellm(port):
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    base = dict(model="openai/qwen2.5-0.5b", api_base=f"http://127.0.0.1:{port}/v1", api_key=KEY,
                temperature=0, max_tokens=80)
    r = litellm.completion(messages=[{"role": "user", "content": "Name three colours."}], **base)
    assert r.choices[0].message.content and r.usage.completion_tokens > 0, r
    r = litellm.completion(messages=ASK, tools=[WEATHER, TIME], tool_choice="required", **base)
    calls = r.choices[0].message.tool_calls
    assert calls and r.choices[0].finish_reason == "tool_calls", r
    for call in calls:
        check_call(call)
    # Streamed through litellm: the same call.
    chunks = list(litellm.completion(messages=ASK, tools=[WEATHER, TIME], tool_choice="required",
                                     stream=True, **base))
    whole = litellm.stream_chunk_builder(chunks, messages=ASK)
    assert [(t.function.name, json.loads(t.function.arguments)) for t in whole.choices[0].message.tool_calls] \
        == [(t.function.name, json.loads(t.function.arguments)) for t in calls], whole


def test_typed_errors(c, port):
    def raises(kind, fn):
        try:
            fn()
        except kind as e:
            return e
        raise AssertionError(f"expected {kind.__name__}")

    raises(openai.NotFoundError, lambda: c.chat.completions.create(
        model="gpt-9", messages=[{"role": "user", "content": "x"}]))
    raises(openai.BadRequestError, lambda: c.chat.completions.create(
        model="smollm2", max_tokens=0, messages=[{"role": "user", "content": "x"}]))
    raises(openai.BadRequestError, lambda: c.embeddings.create(model="minilm", input="x", dimensions=4096))
    raises(openai.BadRequestError, lambda: c.embeddings.create(model="nomic-embed-v1.5", input="x", dimensions=32))
    wrong = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-wrong", max_retries=0)
    raises(openai.AuthenticationError, lambda: wrong.models.list())


def main():
    binary = os.environ.get("FERRITE_BIN", "target/debug/ferrite")
    proc, port = start_server(binary)
    passed = failed = 0
    try:
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0, timeout=300)
        tests = [
            ("models", lambda: test_models(c)),
            ("chat_stream_equals_whole", lambda: test_chat_stream_equals_whole(c)),
            ("completions_and_logprobs", lambda: test_completions_and_logprobs(c)),
            ("embeddings_base64_equals_float", lambda: test_embeddings_base64_equals_float(c)),
            ("json_schema_output_validates", lambda: test_json_schema_output_validates(c)),
            ("prompt_lists_and_echo", lambda: test_prompt_lists_and_echo(c)),
            ("pydantic_parse_nested", lambda: test_pydantic_parse_nested(c)),
            ("tool_calls", lambda: test_tool_calls(c)),
            ("typed_errors", lambda: test_typed_errors(c, port)),
            ("langchain", lambda: test_langchain(port)),
            ("litellm", lambda: test_litellm(port)),
        ]
        for name, fn in tests:
            try:
                fn()
                print(f"openai client: {name} ok")
                passed += 1
            except Exception:
                print(f"openai client: {name} FAILED")
                traceback.print_exc()
                failed += 1
    finally:
        proc.terminate()
        code = proc.wait(timeout=60)
    if code != 0:
        print(f"ferrite serve exited {code} after SIGTERM")
        failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
