"""`ferrite serve`'s Anthropic Messages and OpenAI Responses routes driven by
the official clients: `anthropic` (`messages.create`, `messages.stream` with
text and with a tool call, `count_tokens`), `openai` (`responses.create`
plain, streamed, with a function tool and with a JSON schema) and, when it
installs, LangChain's `ChatAnthropic` (`invoke`, `stream`, `bind_tools`).
Every reply is checked against `/v1/chat/completions` at temperature 0 for
the same conversation (the same text, the same call). Starts its own server
(FERRITE_BIN) with the real Qwen2.5 file and an API key (sent by the
Anthropic client as `x-api-key`). Run by scripts/test-serve-openai.sh.
"""

import json
import os
import socket
import subprocess
import sys
import time
import traceback
import urllib.request

import anthropic
import openai

KEY = "sk-ferrite-test"
MODEL = "qwen2.5-0.5b"
SYSTEM = "You are terse."
QUESTION = "Name three colours."
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
ASK_WEATHER = "What is the weather in Paris?"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(binary):
    port = free_port()
    proc = subprocess.Popen(
        [binary, "serve", MODEL, "--port", str(port), "--threads", "2", "--api-key", KEY],
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


def chat(oc, messages, **extra):
    """The chat route's reply at temperature 0."""
    return oc.chat.completions.create(model=MODEL, temperature=0, messages=messages, **extra)


def chat_text(oc, max_tokens=32):
    r = chat(oc, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}],
             max_tokens=max_tokens)
    return r.choices[0].message.content, r


def chat_call(oc):
    r = chat(oc, [{"role": "user", "content": ASK_WEATHER}], max_tokens=60,
             tools=[{"type": "function", "function": {
                 "name": "get_weather", "description": "Get the weather for a city",
                 "parameters": WEATHER}}])
    call = r.choices[0].message.tool_calls[0].function
    return call.name, json.loads(call.arguments)


ANTHROPIC_TOOL = {"name": "get_weather", "description": "Get the weather for a city",
                  "input_schema": WEATHER}


def test_messages_create(ac, oc):
    want, r = chat_text(oc)
    m = ac.messages.create(model=MODEL, max_tokens=32, temperature=0, system=SYSTEM,
                           messages=[{"role": "user", "content": QUESTION}])
    assert m.content[0].type == "text"
    assert m.content[0].text == want, (m.content[0].text, want)
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert m.usage.input_tokens == r.usage.prompt_tokens
    assert m.usage.output_tokens == r.usage.completion_tokens


def test_messages_stream_text(ac, oc):
    want, _ = chat_text(oc)
    with ac.messages.stream(model=MODEL, max_tokens=32, temperature=0, system=SYSTEM,
                            messages=[{"role": "user", "content": QUESTION}]) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == want, (text, want)
    assert final.content[0].text == want


def test_messages_stream_tool(ac, oc):
    name, args = chat_call(oc)
    with ac.messages.stream(model=MODEL, max_tokens=60, temperature=0, tools=[ANTHROPIC_TOOL],
                            messages=[{"role": "user", "content": ASK_WEATHER}]) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use", final
    use = [b for b in final.content if b.type == "tool_use"][0]
    assert use.name == name and use.input == args, (use, name, args)
    whole = ac.messages.create(model=MODEL, max_tokens=60, temperature=0, tools=[ANTHROPIC_TOOL],
                               messages=[{"role": "user", "content": ASK_WEATHER}])
    assert [b.input for b in whole.content if b.type == "tool_use"] == [args]


def test_count_tokens(ac, oc):
    _, r = chat_text(oc)
    n = ac.messages.count_tokens(model=MODEL, system=SYSTEM,
                                 messages=[{"role": "user", "content": QUESTION}])
    assert n.input_tokens == r.usage.prompt_tokens, (n, r.usage)


def test_responses_plain_and_streamed(oc):
    want, r = chat_text(oc)
    resp = oc.responses.create(model=MODEL, instructions=SYSTEM, input=QUESTION,
                               max_output_tokens=32, temperature=0)
    assert resp.output_text == want, (resp.output_text, want)
    assert resp.usage.input_tokens == r.usage.prompt_tokens
    deltas, kinds, done = [], [], None
    for ev in oc.responses.create(model=MODEL, instructions=SYSTEM, input=QUESTION,
                                  max_output_tokens=32, temperature=0, stream=True):
        kinds.append(ev.type)
        if ev.type == "response.output_text.delta":
            deltas.append(ev.delta)
        if ev.type in ("response.completed", "response.incomplete"):
            done = ev.response
    assert "".join(deltas) == want
    assert kinds[:2] == ["response.created", "response.in_progress"], kinds
    assert done is not None and done.output_text == want


def test_responses_function_tool(oc):
    name, args = chat_call(oc)
    tool = {"type": "function", "name": "get_weather", "description": "Get the weather for a city",
            "parameters": WEATHER}
    resp = oc.responses.create(model=MODEL, input=ASK_WEATHER, tools=[tool],
                               max_output_tokens=60, temperature=0)
    calls = [o for o in resp.output if o.type == "function_call"]
    assert calls and calls[0].name == name and json.loads(calls[0].arguments) == args, resp.output
    # Streamed: the arguments' events add up to the same call.
    pieces = []
    for ev in oc.responses.create(model=MODEL, input=ASK_WEATHER, tools=[tool],
                                  max_output_tokens=60, temperature=0, stream=True):
        if ev.type == "response.function_call_arguments.delta":
            pieces.append(ev.delta)
    assert json.loads("".join(pieces)) == args
    # The result sent back as items: the chat route's text for the same turns.
    back = chat(oc, [{"role": "user", "content": ASK_WEATHER},
                     {"role": "assistant", "content": "", "tool_calls": [{
                         "id": calls[0].call_id, "type": "function",
                         "function": {"name": name, "arguments": calls[0].arguments}}]},
                     {"role": "tool", "tool_call_id": calls[0].call_id, "content": "18 C"}],
                max_tokens=30, tools=[{"type": "function", "function": {
                    "name": "get_weather", "description": "Get the weather for a city",
                    "parameters": WEATHER}}])
    resp2 = oc.responses.create(
        model=MODEL, tools=[tool], max_output_tokens=30, temperature=0,
        input=[{"role": "user", "content": ASK_WEATHER},
               {"type": "function_call", "call_id": calls[0].call_id, "name": name,
                "arguments": calls[0].arguments},
               {"type": "function_call_output", "call_id": calls[0].call_id, "output": "18 C"}])
    assert resp2.output_text == (back.choices[0].message.content or ""), resp2


def test_responses_json_schema(oc):
    schema = {"type": "object", "properties": {"name": {"type": "string"},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    msgs = [{"role": "user", "content": "Invent a person."}]
    want = chat(oc, msgs, max_tokens=60, response_format={
        "type": "json_schema", "json_schema": {"name": "person", "schema": schema}})
    resp = oc.responses.create(model=MODEL, input=msgs, max_output_tokens=60, temperature=0,
                               text={"format": {"type": "json_schema", "name": "person",
                                                "schema": schema, "strict": True}})
    assert resp.output_text == want.choices[0].message.content, resp.output_text
    person = json.loads(resp.output_text)
    assert set(person) == {"name", "age"} and isinstance(person["age"], int)


def test_langchain_anthropic(port, oc):
    try:
        from langchain_anthropic import ChatAnthropic
    except ImportError:
        print("langchain-anthropic: not installed, skipped")
        return
    want, _ = chat_text(oc)
    llm = ChatAnthropic(model=MODEL, base_url=f"http://127.0.0.1:{port}", api_key=KEY,
                        max_tokens=32, temperature=0, max_retries=0)
    msgs = [("system", SYSTEM), ("human", QUESTION)]
    assert llm.invoke(msgs).content == want
    assert "".join(c.content if isinstance(c.content, str) else
                   "".join(p.get("text", "") for p in c.content)
                   for c in llm.stream(msgs)) == want
    name, args = chat_call(oc)

    def get_weather(city: str) -> str:
        """Get the weather for a city"""
        return "18 C"

    out = ChatAnthropic(model=MODEL, base_url=f"http://127.0.0.1:{port}", api_key=KEY,
                        max_tokens=60, temperature=0, max_retries=0) \
        .bind_tools([get_weather]).invoke(ASK_WEATHER)
    assert out.tool_calls and out.tool_calls[0]["name"] == name, out
    assert out.tool_calls[0]["args"] == args


def main():
    binary = os.environ.get("FERRITE_BIN", "target/debug/ferrite")
    proc, port = start_server(binary)
    passed = failed = 0
    try:
        ac = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key=KEY,
                                 max_retries=0, timeout=900)
        oc = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY,
                           max_retries=0, timeout=900)
        tests = [
            ("messages_create", lambda: test_messages_create(ac, oc)),
            ("messages_stream_text", lambda: test_messages_stream_text(ac, oc)),
            ("messages_stream_tool", lambda: test_messages_stream_tool(ac, oc)),
            ("count_tokens", lambda: test_count_tokens(ac, oc)),
            ("responses_plain_and_streamed", lambda: test_responses_plain_and_streamed(oc)),
            ("responses_function_tool", lambda: test_responses_function_tool(oc)),
            ("responses_json_schema", lambda: test_responses_json_schema(oc)),
            ("langchain_anthropic", lambda: test_langchain_anthropic(port, oc)),
        ]
        for name, fn in tests:
            try:
                fn()
                print(f"anthropic/responses client: {name} ok")
                passed += 1
            except Exception:
                print(f"anthropic/responses client: {name} FAILED")
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
