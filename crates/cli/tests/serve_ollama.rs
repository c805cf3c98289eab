//! Issue 51: Ollama's API (`/api/chat`, `/api/generate`, `/api/embed`,
//! `/api/embeddings`, `/api/tags`, `/api/show`, `/api/ps`,
//! `/api/version`) on the real SmolLM2, Qwen2.5 and MiniLM: the same text
//! as `/v1/chat/completions` at temperature 0 (streamed as
//! newline-delimited JSON and not), the same embedding bits as
//! `/v1/embeddings`, a tool call in Ollama's shape, and hostile bodies
//! answered 400 with `{"error": "..."}` while the server keeps serving.

mod common;
mod serve_common;

use std::path::PathBuf;

use serde_json::{json, Value};
use serve_common::{Response, Server};

/// Qwen2.5-Coder 0.5B from `FERRITE_MODELS`.
fn qwen() -> String {
    let models = std::env::var_os("FERRITE_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models"));
    models
        .join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
        .display()
        .to_string()
}
const QWEN: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m";

/// The objects of a newline-delimited JSON body.
fn ndjson(r: &Response) -> Vec<Value> {
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/x-ndjson"));
    r.text()
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The `/v1/chat/completions` reply text for `messages`, greedy.
fn openai_text(s: &Server, model: &str, messages: &Value, max: u32) -> (String, String) {
    let r = s.post(
        "/v1/chat/completions",
        &json!({"model": model, "messages": messages, "temperature": 0, "max_tokens": max}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let c = &v["choices"][0];
    (
        c["message"]["content"].as_str().unwrap().to_string(),
        c["finish_reason"].as_str().unwrap().to_string(),
    )
}

/// The last object has Ollama's timing fields, consistent with each other.
fn check_last(v: &Value, reason: &str) {
    assert_eq!(v["done"], true, "{v}");
    assert_eq!(v["done_reason"], reason, "{v}");
    for k in [
        "total_duration",
        "load_duration",
        "prompt_eval_count",
        "prompt_eval_duration",
        "eval_count",
        "eval_duration",
    ] {
        assert!(v[k].is_u64(), "{k} in {v}");
    }
    assert!(
        v["prompt_eval_count"].as_u64().unwrap() > 0 && v["eval_count"].as_u64().unwrap() > 0,
        "{v}"
    );
    let total = v["total_duration"].as_u64().unwrap();
    assert!(
        v["prompt_eval_duration"].as_u64().unwrap() + v["eval_duration"].as_u64().unwrap() <= total,
        "{v}"
    );
    assert!(v["created_at"].as_str().unwrap().ends_with('Z'), "{v}");
}

fn chat_equals_openai(model_arg: &str, model: &str) {
    let s = Server::start(&[model_arg]);
    let messages = json!([{"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name three colours."}]);
    let (want, finish) = openai_text(&s, model, &messages, 24);
    let reason = if finish == "length" { "length" } else { "stop" };
    let body = json!({"model": model, "messages": messages, "stream": false,
        "options": {"temperature": 0, "num_predict": 24, "num_ctx": 4096}, "keep_alive": "5m"});
    let r = s.post("/api/chat", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["message"]["role"], "assistant");
    assert_eq!(v["message"]["content"], want.as_str(), "{v}");
    check_last(&v, reason);
    assert_eq!(v["eval_count"], 24.min(v["eval_count"].as_u64().unwrap()));
    // Streamed (the default): the pieces add up to the same text.
    let mut body = body;
    body.as_object_mut().unwrap().remove("stream");
    let lines = ndjson(&s.post("/api/chat", &body));
    let (last, parts) = lines.split_last().unwrap();
    assert!(parts
        .iter()
        .all(|p| p["done"] == false && p["message"]["role"] == "assistant"));
    let text: String = lines
        .iter()
        .map(|p| p["message"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(text, want);
    assert!(parts.len() > 1, "{} pieces", parts.len());
    check_last(last, reason);
    // `/api/generate`: the prompt through the chat template, as a user
    // turn after `system`.
    let r = s.post("/api/generate", &json!({"model": format!("{model}:latest"), "system": "You are terse.",
        "prompt": "Name three colours.", "stream": false, "options": {"temperature": 0, "num_predict": 24}}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["response"], want.as_str());
    let lines = ndjson(&s.post(
        "/api/generate",
        &json!({"model": model, "system": "You are terse.",
        "prompt": "Name three colours.", "options": {"temperature": 0, "num_predict": 24}}),
    ));
    let text: String = lines
        .iter()
        .map(|p| p["response"].as_str().unwrap())
        .collect();
    assert_eq!(text, want);
    check_last(lines.last().unwrap(), reason);
    // `raw`: the prompt as is, as /v1/completions.
    let r = s.post(
        "/v1/completions",
        &json!({"model": model, "prompt": "Once upon a time", "temperature": 0, "max_tokens": 8}),
    );
    let want_raw = r.json()["choices"][0]["text"].as_str().unwrap().to_string();
    let r = s.post(
        "/api/generate",
        &json!({"model": model, "prompt": "Once upon a time", "raw": true, "stream": false,
        "options": {"temperature": 0, "num_predict": 8}}),
    );
    assert_eq!(r.json()["response"], want_raw.as_str(), "{}", r.text());
    // `format`: "json" and a schema go through the constrained path.
    let r = s.post("/api/chat", &json!({"model": model, "stream": false, "format": {"type": "object",
        "properties": {"colour": {"type": "string", "maxLength": 12}}, "required": ["colour"]},
        "messages": [{"role": "user", "content": "A colour as JSON."}], "options": {"temperature": 0, "num_predict": 40}}));
    let v = r.json();
    let out: Value = serde_json::from_str(v["message"]["content"].as_str().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {v}"));
    assert!(
        out["colour"].as_str().unwrap().chars().count() <= 12,
        "{out}"
    );
    // Nothing to generate: Ollama's "load" answer.
    let r = s.post("/api/generate", &json!({"model": model}));
    assert_eq!(r.json()["done_reason"], "load", "{}", r.text());
    // The small routes.
    let tags = s.get("/api/tags").json();
    assert_eq!(tags["models"][0]["name"], model, "{tags}");
    assert_eq!(s.get("/api/ps").json()["models"][0]["model"], model);
    assert!(s.get("/api/version").json()["version"].is_string());
    let show = s.post("/api/show", &json!({"model": model})).json();
    assert!(
        show["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("completion")),
        "{show}"
    );
    let r = s.post("/api/show", &json!({"model": "nope"}));
    assert_eq!(r.status, 404);
    assert!(
        r.json()["error"].as_str().unwrap().contains("nope"),
        "{}",
        r.text()
    );
}

#[test]
fn smollm2_chat_and_generate_equal_chat_completions() {
    chat_equals_openai("smollm2", "smollm2");
}

#[test]
fn qwen_chat_and_generate_equal_chat_completions() {
    chat_equals_openai(&qwen(), QWEN);
}

/// A tool call comes back in Ollama's shape (arguments as an object),
/// streamed and not; a tool result in the next turn is taken.
#[test]
fn qwen_tool_call_in_ollama_shape() {
    let s = Server::start(&[&qwen()]);
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    let messages =
        json!([{"role": "user", "content": "What is the weather in Paris? Use the tool."}]);
    let want = s
        .post(
            "/v1/chat/completions",
            &json!({"model": QWEN, "messages": messages, "tools": tools,
        "temperature": 0, "max_tokens": 60}),
        )
        .json();
    let want_call = &want["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(want_call["name"], "get_weather", "{want}");
    let want_args: Value = serde_json::from_str(want_call["arguments"].as_str().unwrap()).unwrap();
    let body = json!({"model": QWEN, "messages": messages, "tools": tools, "stream": false,
        "options": {"temperature": 0, "num_predict": 60}});
    let v = s.post("/api/chat", &body).json();
    let call = &v["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_weather", "{v}");
    assert_eq!(call["arguments"], want_args, "{v}");
    assert_eq!(v["done_reason"], "stop");
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let lines = ndjson(&s.post("/api/chat", &streamed));
    let calls: Vec<&Value> = lines
        .iter()
        .filter_map(|l| l["message"]["tool_calls"].as_array())
        .flatten()
        .collect();
    assert_eq!(calls.len(), 1, "{lines:?}");
    assert_eq!(calls[0]["function"]["arguments"], want_args);
    // A tool schema that does not compile.
    let r = s.post(
        "/api/chat",
        &json!({"model": QWEN, "messages": messages, "tools": [{"type": "function",
        "function": {"name": "f", "parameters": {"type": "object",
            "properties": {"a": {"type": "string", "pattern": "(a)\\1"}}}}}]}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("backreferences"),
        "{}",
        r.text()
    );
    // The next turn: the call (arguments as an object) and its result.
    let r = s.post("/api/chat", &json!({"model": QWEN, "tools": tools, "stream": false,
        "options": {"temperature": 0, "num_predict": 20}, "messages": [messages[0].clone(),
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": want_args}}]},
        {"role": "tool", "content": "18 C and sunny", "tool_name": "get_weather"}]}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        !r.json()["message"]["content"].as_str().unwrap().is_empty(),
        "{}",
        r.text()
    );
}

/// `/api/embed` and `/api/embeddings` give `/v1/embeddings`' numbers.
#[test]
fn minilm_embed_equals_embeddings() {
    let s = Server::start(&["minilm"]);
    let inputs = json!(["The cat sat on the mat.", "Ünïcode and emoji 😀"]);
    let want = s
        .post(
            "/v1/embeddings",
            &json!({"model": "minilm", "input": inputs}),
        )
        .json();
    let bits = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| (x.as_f64().unwrap() as f32).to_bits())
            .collect()
    };
    let r = s.post(
        "/api/embed",
        &json!({"model": "minilm", "input": inputs, "truncate": true, "keep_alive": 0}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let got = r.json();
    for i in 0..2 {
        assert_eq!(
            bits(&got["embeddings"][i]),
            bits(&want["data"][i]["embedding"])
        );
    }
    assert_eq!(got["prompt_eval_count"], want["usage"]["prompt_tokens"]);
    let one = s
        .post(
            "/api/embed",
            &json!({"model": "minilm", "input": "The cat sat on the mat."}),
        )
        .json();
    assert_eq!(
        bits(&one["embeddings"][0]),
        bits(&want["data"][0]["embedding"])
    );
    let old = s
        .post(
            "/api/embeddings",
            &json!({"model": "minilm", "prompt": "The cat sat on the mat."}),
        )
        .json();
    assert_eq!(bits(&old["embedding"]), bits(&want["data"][0]["embedding"]));
    let r = s.post("/api/embed", &json!({"model": "minilm", "input": 3}));
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].is_string(), "{}", r.text());
    assert_eq!(s.get("/api/tags").json()["models"][0]["name"], "minilm");
}

/// Hostile bodies: 400 with `{"error": "..."}` (a string), and the server
/// still answers.
#[test]
fn hostile_ollama_requests_get_400_in_ollama_shape() {
    let s = Server::start(&["smollm2"]);
    let many: Vec<Value> = (0..10_000)
        .map(|i| json!({"role": "user", "content": format!("m{i}")}))
        .collect();
    let cases = [
        (
            "/api/chat",
            json!({"model": "smollm2", "messages": "hi"}),
            "invalid request",
        ),
        (
            "/api/chat",
            json!({"messages": [{"role": "user", "content": "hi"}]}),
            "model",
        ),
        (
            "/api/chat",
            json!({"model": "smollm2", "messages": [{"content": "hi"}]}),
            "role",
        ),
        (
            "/api/chat",
            json!({"model": "smollm2", "messages": [{"role": "user", "content": "hi"}],
            "options": {"num_predict": 1_000_000_000}}),
            "context",
        ),
        (
            "/api/chat",
            json!({"model": "smollm2", "messages": [{"role": "user", "content": "hi"}],
            "options": {"temperature": "hot"}}),
            "invalid request",
        ),
        (
            "/api/chat",
            json!({"model": "smollm2", "messages": [{"role": "user", "content": "hi"}],
            "options": {"mirostat": 2}}),
            "'mirostat' is not supported",
        ),
        (
            "/api/chat",
            json!({"model": "smollm2", "messages": [{"role": "user", "content": "hi"}],
            "options": {"num_ctx": -5}}),
            "num_ctx",
        ),
        (
            "/api/chat",
            json!({"model": "smollm2", "messages": many}),
            "",
        ),
        (
            "/api/chat",
            json!({"model": "smollm2", "messages": [{"role": "user", "content": "hi"}],
            "format": {"type": "object", "properties": {"a": {"type": "string", "format": "hostname"}}}}),
            "hostname",
        ),
        (
            "/api/chat",
            json!({"model": "smollm2", "messages": [{"role": "user", "content": "hi"}],
            "format": "yaml"}),
            "format",
        ),
        (
            "/api/chat",
            json!({"model": "smollm2", "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
                "properties": {"a": {"type": "string"}}}}}]}),
            "does not render tools",
        ),
        (
            "/api/chat",
            json!({"model": "smollm2", "messages": [{"role": "user", "content": "hi", "images": ["aGk="]}]}),
            "images",
        ),
        (
            "/api/generate",
            json!({"model": "smollm2", "prompt": 5}),
            "invalid request",
        ),
        (
            "/api/generate",
            json!({"model": "smollm2", "prompt": "x", "template": "{{ .Prompt }}"}),
            "template",
        ),
        (
            "/api/generate",
            json!({"model": "smollm2", "prompt": "x", "think": true}),
            "thinking",
        ),
        ("/api/embed", json!({"model": "smollm2", "input": "x"}), ""),
        ("/api/show", json!({"model": 3}), "model"),
    ];
    for (path, body, says) in cases {
        let r = s.post(path, &body);
        let shown = body.to_string().chars().take(200).collect::<String>();
        assert_eq!(r.status, 400, "{path} {shown}: {}", r.text());
        let v = r.json();
        let e = v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{path}: not Ollama's shape: {v}"));
        assert!(e.contains(says), "{path} {shown}: {e}");
    }
    assert_eq!(
        s.post("/api/chat", &json!({"model": "nope", "messages": []}))
            .status,
        404
    );
    // Bad JSON is Ollama-shaped too.
    let r = s.request(
        "POST",
        "/api/chat",
        &[("content-type", "application/json")],
        b"{nope",
    );
    assert_eq!(r.status, 400);
    let r = s.post(
        "/api/chat",
        &json!({"model": "smollm2", "stream": false,
        "messages": [{"role": "user", "content": "hi"}], "options": {"num_predict": 2}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["eval_count"], 2);
}
