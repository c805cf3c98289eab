//! Llama 3.x JSON tool calls through `ferrite serve`: testdata's tiny
//! Llama 3 (random weights) served with a Llama 3.1-style template that
//! renders tools (testdata/chat/llama3-tools.jinja). Its replies are noise,
//! so what is checked is what constrained decoding guarantees: forced and
//! named calls, and an auto reply that starts a call, always parse into
//! `tool_calls` whose arguments validate against the function's schema,
//! streamed or not; the template renders tools and call turns.

mod serve_common;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use serve_common::Server;

fn testdata(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(p)
}

/// A copy of tiny-llama3's directory with the tools template, and room
/// for the tools' prompt (its 128 positions would not hold it; the weights
/// are random, so a longer context changes nothing checked here).
fn model_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferrite-llama3-tools-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = testdata("hf-decoders/tiny-llama3");
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    std::fs::copy(
        testdata("chat/llama3-tools.jinja"),
        dir.join("chat_template.jinja"),
    )
    .unwrap();
    let config = dir.join("config.json");
    let mut c: Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    c["max_position_embeddings"] = json!(2048);
    std::fs::write(&config, c.to_string()).unwrap();
    dir
}

fn weather() -> Value {
    json!({"type": "function", "function": {"name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "pattern": "^[A-Z][a-z]+$"},
            "unit": {"enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city", "unit"], "additionalProperties": false}}})
}

fn time() -> Value {
    json!({"type": "function", "function": {"name": "get_time",
        "parameters": {"type": "object", "properties": {
            "zone": {"type": "number", "minimum": -12, "maximum": 14}}, "required": ["zone"]}}})
}

/// Checks a call against its tool's schema; returns its name.
fn check_call(call: &Value) -> String {
    let name = call["function"]["name"].as_str().unwrap().to_string();
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {call}"));
    let tool = [weather(), time()]
        .into_iter()
        .find(|t| t["function"]["name"] == name.as_str())
        .unwrap_or_else(|| panic!("unknown function in {call}"));
    let v = jsonschema::validator_for(&tool["function"]["parameters"]).unwrap();
    assert!(v.is_valid(&args), "{call}");
    assert!(call["id"].as_str().is_some_and(|i| !i.is_empty()) && call["type"] == "function");
    name
}

fn ask(extra: Value) -> Value {
    let mut body = json!({"messages": [{"role": "user", "content": "Weather in Paris?"}],
                          "tools": [weather(), time()], "max_tokens": 1000, "temperature": 1.0});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// The streamed chunks' tool calls and finish reason.
fn streamed_calls(s: &Server, body: &Value) -> (Vec<Value>, String) {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let r = s.post("/v1/chat/completions", &body);
    assert_eq!(r.status, 200);
    let (mut calls, mut reason) = (Vec::new(), String::new());
    for line in r.text().lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            break;
        }
        let chunk: Value = serde_json::from_str(data).unwrap();
        let choice = &chunk["choices"][0];
        if let Some(tc) = choice["delta"]["tool_calls"].as_array() {
            calls.extend(tc.iter().cloned());
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            reason = f.to_string();
        }
    }
    (calls, reason)
}

#[test]
fn llama3_json_tool_calls() {
    let dir = model_dir();
    let s = Server::start(&[dir.to_str().unwrap()]);
    // Forced calls, at several seeds: one call, valid, streamed the same.
    for seed in 0..6 {
        let body = ask(json!({"tool_choice": "required", "seed": seed}));
        let r = s.post("/v1/chat/completions", &body).json();
        let ch = &r["choices"][0];
        assert_eq!(ch["finish_reason"], "tool_calls", "{r}");
        assert!(ch["message"]["content"].is_null(), "{r}");
        let calls = ch["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(
            calls.len(),
            1,
            "Llama 3 templates take one call a turn: {r}"
        );
        check_call(&calls[0]);
        let (streamed, reason) = streamed_calls(&s, &body);
        assert_eq!(reason, "tool_calls");
        assert_eq!(streamed.len(), 1);
        assert_eq!(streamed[0]["index"], 0);
        assert_eq!(
            streamed[0]["function"], calls[0]["function"],
            "{streamed:?}"
        );
    }
    // A named function.
    let named = json!({"type": "function", "function": {"name": "get_time"}});
    for seed in 0..3 {
        let r = s
            .post(
                "/v1/chat/completions",
                &ask(json!({"tool_choice": named, "seed": seed})),
            )
            .json();
        let calls = r["choices"][0]["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(check_call(&calls[0]), "get_time", "{r}");
    }
    // auto: a reply whose first token opens `{` is a call, constrained
    // from there (the bias makes this random model start so).
    let open = brace_token();
    for seed in 0..4 {
        let body = ask(json!({"seed": seed, "logit_bias": {open.to_string(): 100}}));
        let r = s.post("/v1/chat/completions", &body).json();
        let ch = &r["choices"][0];
        assert_eq!(ch["finish_reason"], "tool_calls", "{r}");
        check_call(&ch["message"]["tool_calls"][0]);
        let (streamed, _) = streamed_calls(&s, &body);
        assert_eq!(
            streamed[0]["function"],
            ch["message"]["tool_calls"][0]["function"]
        );
    }
    // auto, kept from `{`: text, no call.
    let body = ask(json!({"seed": 1, "max_tokens": 8, "logit_bias": {open.to_string(): -100}}));
    let r = s.post("/v1/chat/completions", &body).json();
    let ch = &r["choices"][0];
    assert!(ch["message"]["tool_calls"].is_null(), "{r}");
    assert_ne!(ch["finish_reason"], "tool_calls");
    // The template renders the tools (a longer prompt) and call turns; it
    // refuses two calls in one turn, as Llama 3's do.
    let plain = s
        .post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 1}),
        )
        .json();
    let with_tools = s
        .post("/v1/chat/completions", &ask(json!({"max_tokens": 1})))
        .json();
    assert!(
        with_tools["usage"]["prompt_tokens"].as_u64().unwrap()
            > plain["usage"]["prompt_tokens"].as_u64().unwrap() + 50
    );
    let call = |id: &str| {
        json!({"id": id, "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}})
    };
    let turns = |calls: Vec<Value>| {
        json!({"messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": calls},
            {"role": "tool", "tool_call_id": "c1", "content": "{\"temperature\": 21}"}],
            "tools": [weather()], "max_tokens": 4})
    };
    let r = s.post("/v1/chat/completions", &turns(vec![call("c1")]));
    assert_eq!(r.status, 200, "{}", r.text());
    let r = s.post("/v1/chat/completions", &turns(vec![call("c1"), call("c2")]));
    assert_eq!(r.status, 400);
    assert!(r.error_message().contains("one tool call per turn"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The id of `{` in tiny-llama3's vocabulary.
fn brace_token() -> u64 {
    let tok: Value = serde_json::from_str(
        &std::fs::read_to_string(testdata("hf-decoders/tiny-llama3/tokenizer.json")).unwrap(),
    )
    .unwrap();
    tok["model"]["vocab"]["{"]
        .as_u64()
        .expect("'{' in the vocabulary")
}
