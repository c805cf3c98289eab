//! Anthropic's Messages API (`/v1/messages`, `/v1/messages/count_tokens`)
//! and OpenAI's Responses API (`/v1/responses`) on `ferrite serve` with
//! the real SmolLM2 and Qwen2.5-Coder files, over raw HTTP: the same text
//! as `/v1/chat/completions` at temperature 0 for the same conversation
//! (whole, streamed, and a tool call), the exact event sequences, token
//! counts, the store of `previous_response_id`, and hostile bodies (400
//! in each API's own error shape, the server serving after).

mod common;
mod serve_common;

use std::path::PathBuf;

use serde_json::{json, Value};
use serve_common::{full_texts, Server};

/// Qwen2.5-Coder 0.5B (Hermes `<tool_call>` format) from `FERRITE_MODELS`.
fn qwen_coder() -> String {
    let models = std::env::var_os("FERRITE_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models"));
    models
        .join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
        .display()
        .to_string()
}

/// The `(event, data)` pairs of an SSE body with named events.
fn named_events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|f| !f.trim().is_empty())
        .map(|frame| {
            let mut name = String::new();
            let mut data = String::new();
            for l in frame.lines() {
                if let Some(n) = l.strip_prefix("event: ").or(l.strip_prefix("event:")) {
                    name = n.to_string();
                } else if let Some(d) = l.strip_prefix("data: ").or(l.strip_prefix("data:")) {
                    data.push_str(d);
                }
            }
            let v = serde_json::from_str(&data).unwrap_or_else(|e| panic!("{e}: {frame}"));
            (name, v)
        })
        .collect()
}

/// A chat completion's text at temperature 0.
fn chat_text(s: &Server, messages: Value, max_tokens: u64) -> (String, Value) {
    let r = s.post(
        "/v1/chat/completions",
        &json!({"messages": messages, "max_tokens": max_tokens, "temperature": 0}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    (full_texts(&v)[0].clone(), v)
}

/// An Anthropic error body, checked for its shape; its message.
fn anthropic_error(r: &serve_common::Response) -> String {
    let v = r.json();
    assert_eq!(v["type"], "error", "not an Anthropic error: {v}");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    v["error"]["message"].as_str().expect("message").to_string()
}

#[test]
fn messages_equal_chat_completions_whole_and_streamed() {
    let s = Server::start(&["smollm2"]);
    let system = "You are terse.";
    let user = "Name three colours.";
    let (want, chat) = chat_text(
        &s,
        json!([{"role": "system", "content": system}, {"role": "user", "content": user}]),
        24,
    );
    assert!(!want.is_empty());
    // System as text blocks, user content as blocks: the same conversation.
    let body = json!({"model": "smollm2", "max_tokens": 24, "temperature": 0,
        "system": [{"type": "text", "text": system}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": user}]}]});
    let r = s.post("/v1/messages", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert_eq!(v["content"][0]["type"], "text");
    assert_eq!(v["content"][0]["text"], want.as_str(), "{v}");
    let finish = chat["choices"][0]["finish_reason"].as_str().unwrap();
    let want_reason = if finish == "length" {
        "max_tokens"
    } else {
        "end_turn"
    };
    assert_eq!(v["stop_reason"], want_reason);
    assert_eq!(
        v["usage"]["input_tokens"], chat["usage"]["prompt_tokens"],
        "{v}"
    );
    assert_eq!(
        v["usage"]["output_tokens"],
        chat["usage"]["completion_tokens"]
    );

    // count_tokens: the chat route's prompt tokens.
    let mut count_body = body.clone();
    count_body.as_object_mut().unwrap().remove("max_tokens");
    let c = s.post("/v1/messages/count_tokens", &count_body);
    assert_eq!(c.status, 200, "{}", c.text());
    assert_eq!(
        c.json(),
        json!({"input_tokens": chat["usage"]["prompt_tokens"]})
    );

    // Streamed: the exact event sequence, and the same text.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let r = s.post("/v1/messages", &streamed);
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/event-stream")));
    let events = named_events(&r.text());
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    for (n, v) in &events {
        assert_eq!(v["type"], n.as_str(), "the data's type is the event's name");
    }
    let deltas = names.len() - 6;
    let mut expected = vec!["message_start", "content_block_start", "ping"];
    expected.extend(std::iter::repeat_n("content_block_delta", deltas));
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(names, expected);
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, v)| {
            assert_eq!(v["delta"]["type"], "text_delta");
            v["delta"]["text"].as_str().unwrap()
        })
        .collect();
    assert_eq!(text, want);
    let start = &events[0].1["message"];
    assert_eq!(
        start["usage"]["input_tokens"],
        chat["usage"]["prompt_tokens"]
    );
    let delta = &events[events.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], want_reason);
    assert_eq!(
        delta["usage"]["output_tokens"],
        chat["usage"]["completion_tokens"]
    );

    // A stop sequence: which one matched is reported.
    let cut: String = want.chars().skip(3).take(4).collect();
    let mut stop = body.clone();
    stop["stop_sequences"] = json!(["\u{1}never", cut]);
    let v = s.post("/v1/messages", &stop).json();
    assert_eq!(v["stop_reason"], "stop_sequence", "{v}");
    assert_eq!(v["stop_sequence"], cut.as_str());
    let text = v["content"][0]["text"].as_str().unwrap();
    assert!(want.starts_with(text) && text.len() < want.len(), "{v}");
}

#[test]
fn responses_equal_chat_completions_and_the_store_keeps_turns() {
    let s = Server::start(&["smollm2"]);
    let instructions = "You are terse.";
    let user = "Name three colours.";
    let (want, chat) = chat_text(
        &s,
        json!([{"role": "system", "content": instructions}, {"role": "user", "content": user}]),
        24,
    );
    let body = json!({"max_output_tokens": 24, "temperature": 0, "instructions": instructions,
        "input": [{"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": user}]}]});
    let v = s.post("/v1/responses", &body).json();
    assert_eq!(v["object"], "response", "{v}");
    assert_eq!(v["output"][0]["type"], "message");
    assert_eq!(v["output"][0]["content"][0]["type"], "output_text");
    assert_eq!(v["output"][0]["content"][0]["text"], want.as_str(), "{v}");
    assert_eq!(v["usage"]["input_tokens"], chat["usage"]["prompt_tokens"]);
    let finish = chat["choices"][0]["finish_reason"].as_str().unwrap();
    assert_eq!(
        v["status"],
        if finish == "length" {
            "incomplete"
        } else {
            "completed"
        }
    );

    // Streamed: typed events with consecutive sequence numbers.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let events = named_events(&s.post("/v1/responses", &streamed).text());
    for (i, (n, v)) in events.iter().enumerate() {
        assert_eq!(v["type"], n.as_str());
        assert_eq!(v["sequence_number"], i as u64);
    }
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    let deltas = names.len() - 8;
    let mut expected = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ];
    expected.extend(std::iter::repeat_n("response.output_text.delta", deltas));
    let last = if finish == "length" {
        "response.incomplete"
    } else {
        "response.completed"
    };
    expected.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        last,
    ]);
    assert_eq!(names, expected);
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, v)| v["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, want);

    // store + previous_response_id: the second turn is the chat route's
    // three-message conversation.
    let mut first = body.clone();
    first["store"] = json!(true);
    let id = s.post("/v1/responses", &first).json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let follow = "And three more?";
    let (want2, _) = chat_text(
        &s,
        json!([{"role": "system", "content": instructions}, {"role": "user", "content": user},
               {"role": "assistant", "content": want}, {"role": "user", "content": follow}]),
        24,
    );
    let v = s
        .post(
            "/v1/responses",
            &json!({"max_output_tokens": 24, "temperature": 0, "instructions": instructions,
                "previous_response_id": id, "input": follow}),
        )
        .json();
    assert_eq!(v["output"][0]["content"][0]["text"], want2.as_str(), "{v}");
    let r = s.post(
        "/v1/responses",
        &json!({"input": "x", "previous_response_id": "resp_unknown"}),
    );
    assert_eq!(r.status, 404);
    assert!(r.error_message().contains("resp_unknown"));
}

/// The Qwen2.5 tool-call conversation of the chat route, and the same
/// in the other two APIs: the same call, whole and streamed.
#[test]
fn tool_calls_match_the_chat_route_on_qwen() {
    let s = Server::start(&[&qwen_coder()]);
    let params = json!({"type": "object", "properties": {"city": {"type": "string"}},
                        "required": ["city"]});
    let question = "What is the weather in Paris?";
    let chat = s
        .post(
            "/v1/chat/completions",
            &json!({"temperature": 0, "max_tokens": 60,
                "messages": [{"role": "user", "content": question}],
                "tools": [{"type": "function", "function": {"name": "get_weather",
                    "description": "Get the weather for a city", "parameters": params}}]}),
        )
        .json();
    let call = &chat["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_weather", "{chat}");
    let want_args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();

    let body = json!({"max_tokens": 60, "temperature": 0,
        "messages": [{"role": "user", "content": question}],
        "tools": [{"name": "get_weather", "description": "Get the weather for a city",
                   "input_schema": params}]});
    let v = s.post("/v1/messages", &body).json();
    assert_eq!(v["stop_reason"], "tool_use", "{v}");
    let block = v["content"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(block["type"], "tool_use");
    assert_eq!(block["name"], "get_weather");
    assert_eq!(block["input"], want_args);
    assert!(block["id"].as_str().unwrap().starts_with("toolu_"));

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let events = named_events(&s.post("/v1/messages", &streamed).text());
    let json_delta: String = events
        .iter()
        .filter(|(_, v)| v["delta"]["type"] == "input_json_delta")
        .map(|(_, v)| v["delta"]["partial_json"].as_str().unwrap())
        .collect();
    let got: Value = serde_json::from_str(&json_delta).unwrap();
    assert_eq!(got, want_args);
    assert!(events.iter().any(|(n, v)| n == "content_block_start"
        && v["content_block"]["type"] == "tool_use"
        && v["content_block"]["name"] == "get_weather"));
    assert_eq!(
        events[events.len() - 2].1["delta"]["stop_reason"],
        "tool_use"
    );

    // The conversation goes on with the tool's result: the chat route's
    // text for the same turns.
    let chat2 = s
        .post(
            "/v1/chat/completions",
            &json!({"temperature": 0, "max_tokens": 30, "messages": [
                {"role": "user", "content": question},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "get_weather", "arguments": want_args.to_string()}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "18 C, sunny"}],
                "tools": [{"type": "function", "function": {"name": "get_weather",
                    "description": "Get the weather for a city", "parameters": params}}]}),
        )
        .json();
    let v = s
        .post(
            "/v1/messages",
            &json!({"max_tokens": 30, "temperature": 0, "tools": body["tools"], "messages": [
                {"role": "user", "content": question},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "c1",
                    "name": "get_weather", "input": want_args}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                    "content": "18 C, sunny"}]}]}),
        )
        .json();
    let text = |blocks: &Value| -> String {
        blocks
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["type"] == "text")
            .map(|b| b["text"].as_str().unwrap().to_string())
            .collect()
    };
    let chat2_text = chat2["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert_eq!(text(&v["content"]), chat2_text, "{v} vs {chat2}");
    assert!(!chat2_text.is_empty(), "{chat2}");

    // Responses: the flat function tool.
    let r = s
        .post(
            "/v1/responses",
            &json!({"max_output_tokens": 60, "temperature": 0, "input": question,
                "tools": [{"type": "function", "name": "get_weather",
                    "description": "Get the weather for a city", "parameters": params}]}),
        )
        .json();
    let item = r["output"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(item["type"], "function_call", "{r}");
    assert_eq!(item["name"], "get_weather");
    let args: Value = serde_json::from_str(item["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, want_args);
}

#[test]
fn hostile_bodies_get_each_apis_errors_and_the_server_serves_after() {
    let s = Server::start(&["smollm2"]);
    let user = json!([{"role": "user", "content": "hi"}]);
    let many: Vec<Value> = (0..10_000)
        .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": "hi"}))
        .collect();
    let bad_schema = json!([{"name": "f", "input_schema": {"type": "object",
        "properties": {"a": {"type": "frobnicate"}}}}]);
    let cases = [
        (json!({"messages": user}), "max_tokens"),
        (
            json!({"max_tokens": "ten", "messages": user}),
            "invalid type",
        ),
        (json!({"max_tokens": 5, "messages": "hi"}), "invalid type"),
        (json!({"max_tokens": 5, "messages": []}), "empty"),
        (
            json!({"max_tokens": 5, "messages": [{"role": "user", "content": [
                {"type": "image", "source": {}}]}]}),
            "image",
        ),
        (
            json!({"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}),
            "role",
        ),
        (
            json!({"max_tokens": 1u64 << 40, "messages": user}),
            "context",
        ),
        (json!({"max_tokens": 0, "messages": user}), "max_tokens"),
        (json!({"max_tokens": 5, "messages": many}), "context"),
        (
            json!({"max_tokens": 5, "messages": user, "tools": bad_schema}),
            "tool",
        ),
        (
            json!({"max_tokens": 5, "messages": user, "tool_choice": {"type": "sometimes"}}),
            "tool_choice",
        ),
        (
            json!({"max_tokens": 5, "messages": user, "temperature": 9}),
            "temperature",
        ),
    ];
    for (body, needle) in &cases {
        let r = s.post("/v1/messages", body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        let m = anthropic_error(&r);
        assert!(m.contains(needle), "{needle} not in {m}");
    }
    let r = s.request("POST", "/v1/messages", &[], b"{not json");
    assert_eq!(r.status, 400);
    anthropic_error(&r);
    let r = s.post("/v1/messages/count_tokens", &json!({"messages": 3}));
    assert_eq!(r.status, 400);
    anthropic_error(&r);

    let responses = [
        json!({"input": 3}),
        json!({"input": [{"type": "image"}]}),
        json!({"input": [{"role": "wizard", "content": "x"}]}),
        json!({"input": "hi", "max_output_tokens": 1u64 << 40}),
        json!({"input": "hi", "tools": [{"type": "web_search"}]}),
        json!({"input": "hi", "text": {"format": {"type": "json_schema",
            "schema": {"type": "frobnicate"}}}}),
        json!({"input": [{"type": "function_call_output"}]}),
    ];
    for body in &responses {
        let r = s.post("/v1/responses", body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        r.error_message();
    }

    // Still serving.
    let v = s
        .post(
            "/v1/messages",
            &json!({"max_tokens": 3, "messages": user, "temperature": 0}),
        )
        .json();
    assert_eq!(v["type"], "message", "{v}");
}

#[test]
fn x_api_key_is_accepted_like_the_bearer_key() {
    let mut s = Server::spawn(
        &["smollm2"],
        &[("FERRITE_API_KEY", "sk-test")],
        std::process::Stdio::inherit(),
    );
    s.wait_ready();
    let body = json!({"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
        .to_string()
        .into_bytes();
    let r = s.request("POST", "/v1/messages", &[], &body);
    assert_eq!(r.status, 401);
    let v = r.json();
    assert_eq!(v["error"]["type"], "authentication_error", "{v}");
    let r = s.request("POST", "/v1/messages", &[("x-api-key", "sk-wrong")], &body);
    assert_eq!(r.status, 401);
    let r = s.request("POST", "/v1/messages", &[("x-api-key", "sk-test")], &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let r = s.request(
        "POST",
        "/v1/messages",
        &[("authorization", "Bearer sk-test")],
        &body,
    );
    assert_eq!(r.status, 200);
}
