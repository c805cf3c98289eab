"""`ferrite serve` driven by the official `ollama` Python package (issue 51).

Starts the server (FERRITE_BIN, default target/debug/ferrite) on a free port
with smollm2 + minilm + qwen2.5-0.5b and an API key, and checks what the
client sees on Ollama's routes, on the same port as the OpenAI ones: chat
(streamed and not) and generate give the text /v1/chat/completions gives at
temperature 0; embed gives /v1/embeddings' numbers; list, show, ps, version;
a tool call with its arguments as an object; an error as the client's
ResponseError. Then LangChain's ChatOllama (`langchain-ollama`): invoke,
stream and bind_tools. Run by scripts/test-serve-openai.sh, which makes the
venv.
"""

import json
import os
import sys
import traceback
import urllib.request

import ollama

from test_openai_client import KEY, start_server

AUTH = {"Authorization": f"Bearer {KEY}"}
ASK = [{"role": "system", "content": "You are terse."},
       {"role": "user", "content": "Name three colours."}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def openai_chat(port, model, messages, max_tokens, **extra):
    """The /v1/chat/completions reply (raw HTTP), greedy."""
    body = json.dumps({"model": model, "messages": messages, "temperature": 0,
                       "max_tokens": max_tokens, **extra}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json", **AUTH})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)["choices"][0]["message"]


def test_chat_and_generate(c, port):
    for model in ("smollm2", "qwen2.5-0.5b"):
        want = openai_chat(port, model, ASK, 24)["content"]
        opts = {"temperature": 0, "num_predict": 24}
        r = c.chat(model=model, messages=ASK, options=opts)
        assert r.message.content == want, (model, r.message.content, want)
        assert r.done and r.done_reason in ("stop", "length") and r.eval_count > 0 and r.prompt_eval_count > 0
        assert r.total_duration >= r.eval_duration
        pieces = list(c.chat(model=model, messages=ASK, options=opts, stream=True))
        assert "".join(p.message.content for p in pieces) == want
        assert pieces[-1].done and not any(p.done for p in pieces[:-1])
        g = c.generate(model=model, system=ASK[0]["content"], prompt=ASK[1]["content"], options=opts)
        assert g.response == want, (g.response, want)
        streamed = "".join(p.response for p in c.generate(model=model, system=ASK[0]["content"],
                                                          prompt=ASK[1]["content"], options=opts, stream=True))
        assert streamed == want
    # format: a schema through the constrained path.
    r = c.chat(model="smollm2", messages=[{"role": "user", "content": "A colour as JSON."}], keep_alive="5m",
               format={"type": "object", "properties": {"colour": {"type": "string", "maxLength": 12}},
                       "required": ["colour"]}, options={"temperature": 0, "num_predict": 40})
    assert len(json.loads(r.message.content)["colour"]) <= 12


def test_embed(c, port):
    texts = ["a red apple", "the stock market fell"]
    body = json.dumps({"model": "minilm", "input": texts, "encoding_format": "float"}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/embeddings", data=body,
                                 headers={"Content-Type": "application/json", **AUTH})
    with urllib.request.urlopen(req, timeout=300) as r:
        want = [d["embedding"] for d in json.load(r)["data"]]
    got = c.embed(model="minilm", input=texts)
    assert [list(e) for e in got.embeddings] == want
    assert list(c.embeddings(model="minilm", prompt=texts[0]).embedding) == want[0]


def test_list_show_ps(c):
    names = [m.model for m in c.list().models]
    assert names == ["smollm2", "minilm", "qwen2.5-0.5b"], names
    s = c.show("qwen2.5-0.5b")
    assert "tools" in s.capabilities and s.details.format == "gguf"
    assert [m.model for m in c.ps().models] == names
    try:
        c.show("nope")
        raise AssertionError("an unknown model accepted")
    except ollama.ResponseError as e:
        assert e.status_code == 404 and "nope" in e.error, e


def test_tool_call(c, port):
    want = openai_chat(port, "qwen2.5-0.5b", [{"role": "user", "content": "Weather in Paris?"}], 60,
                       tools=[WEATHER])["tool_calls"][0]["function"]
    r = c.chat(model="qwen2.5-0.5b", messages=[{"role": "user", "content": "Weather in Paris?"}],
               tools=[WEATHER], options={"temperature": 0, "num_predict": 60})
    call = r.message.tool_calls[0].function
    assert call.name == want["name"] == "get_weather"
    assert dict(call.arguments) == json.loads(want["arguments"]), (call.arguments, want)


def test_langchain(port):
    from langchain_core.tools import tool
    from langchain_ollama import ChatOllama

    want = openai_chat(port, "smollm2", ASK, 24)["content"]
    llm = ChatOllama(model="smollm2", base_url=f"http://127.0.0.1:{port}", temperature=0, num_predict=24,
                     client_kwargs={"headers": AUTH})
    assert llm.invoke(ASK).content == want
    assert "".join(ch.content for ch in llm.stream(ASK)) == want

    @tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        return "sunny"

    q = ChatOllama(model="qwen2.5-0.5b", base_url=f"http://127.0.0.1:{port}", temperature=0, num_predict=60,
                   client_kwargs={"headers": AUTH}).bind_tools([get_weather])
    msg = q.invoke("Weather in Paris?")
    assert msg.tool_calls and msg.tool_calls[0]["name"] == "get_weather", msg


def main():
    binary = os.environ.get("FERRITE_BIN", "target/debug/ferrite")
    proc, port = start_server(binary, models=("smollm2", "minilm", "qwen2.5-0.5b"))
    passed = failed = 0
    try:
        c = ollama.Client(host=f"http://127.0.0.1:{port}", headers=AUTH, timeout=300)
        tests = [
            ("chat_and_generate", lambda: test_chat_and_generate(c, port)),
            ("embed", lambda: test_embed(c, port)),
            ("list_show_ps", lambda: test_list_show_ps(c)),
            ("tool_call", lambda: test_tool_call(c, port)),
            ("langchain_ollama", lambda: test_langchain(port)),
        ]
        assert c._client.get("/api/version").json()["version"]
        for name, fn in tests:
            try:
                fn()
                print(f"ollama client: {name} ok")
                passed += 1
            except Exception:
                print(f"ollama client: {name} FAILED")
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
