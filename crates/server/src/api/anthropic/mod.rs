//! Anthropic's Messages API, `POST /v1/messages` and `POST
//! /v1/messages/count_tokens`, as a translation onto the chat route: the
//! request becomes the OpenAI chat request of the same conversation
//! (system text, user and assistant turns, `tool_use` blocks as the
//! assistant's calls, `tool_result` blocks as tool messages), which is
//! rendered, checked and scheduled exactly as `/v1/chat/completions`
//! would; the reply is written in Anthropic's shapes ([`reply`]).
//! Errors on these routes are Anthropic's `{"type": "error", "error":
//! {"type", "message"}}`.
//! Reference: Anthropic's Messages API documentation.

pub mod reply;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::chat::{self, ChatRequest};
use super::extract::ApiJson;
use super::generation::submit;
use super::parts::Parts;
use crate::error::ApiError;
use crate::state::AppState;
use reply::AnthropicError;

/// The routes' paths (their errors are in Anthropic's shape).
pub const PATHS: [&str; 2] = ["/v1/messages", "/v1/messages/count_tokens"];

/// A Messages request. Fields Anthropic defines that ferrite does not
/// use (`metadata`, `service_tier`, ...) are ignored.
#[derive(Deserialize, Debug)]
pub struct MessagesRequest {
    model: Option<String>,
    /// Required on `/v1/messages` (as Anthropic requires it); not read by
    /// `count_tokens`.
    max_tokens: Option<i64>,
    messages: Vec<InMessage>,
    system: Option<Value>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<i64>,
    stop_sequences: Option<Vec<String>>,
    stream: Option<bool>,
    tools: Option<Vec<InTool>>,
    tool_choice: Option<InToolChoice>,
}

#[derive(Deserialize, Debug)]
struct InMessage {
    role: String,
    /// A string, or a list of blocks.
    content: Value,
}

#[derive(Deserialize, Debug)]
struct InTool {
    name: String,
    description: Option<String>,
    input_schema: Option<Value>,
    /// Server tools (`web_search_...`, `bash_...`) have a type; custom
    /// tools have none or `custom`.
    #[serde(rename = "type")]
    kind: Option<String>,
}

#[derive(Deserialize, Debug)]
struct InToolChoice {
    #[serde(rename = "type")]
    kind: String,
    name: Option<String>,
    disable_parallel_tool_use: Option<bool>,
}

fn bad(param: &'static str, m: impl Into<String>) -> ApiError {
    ApiError::bad_param(param, m)
}

/// The text of a `system` or `tool_result` content: a string, or text
/// blocks (joined by newlines).
fn plain_text(v: &Value, what: &str) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let mut parts = Vec::with_capacity(blocks.len());
            for b in blocks {
                match (block_type(b), b.get("text")) {
                    (Some("text"), Some(Value::String(t))) => parts.push(t.as_str()),
                    (kind, _) => {
                        return Err(bad(
                            "messages",
                            format!(
                                "{what}: a block of type '{}' is not supported here (text only)",
                                kind.unwrap_or("?")
                            ),
                        ))
                    }
                }
            }
            Ok(parts.join("\n"))
        }
        _ => Err(bad(
            "messages",
            format!("{what} must be a string or a list of text blocks"),
        )),
    }
}

fn block_type(b: &Value) -> Option<&str> {
    b.get("type").and_then(Value::as_str)
}

/// One Anthropic message as OpenAI chat messages (a user turn's tool
/// results each become a tool message, before the turn's text).
fn chat_messages(i: usize, m: &InMessage, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let role = m.role.as_str();
    if role != "user" && role != "assistant" {
        return Err(bad(
            "messages",
            format!("messages[{i}]: role must be 'user' or 'assistant', got '{role}'"),
        ));
    }
    let blocks = match &m.content {
        Value::String(s) => {
            out.push(json!({"role": role, "content": s}));
            return Ok(());
        }
        Value::Array(b) => b,
        _ => {
            return Err(bad(
                "messages",
                format!("messages[{i}].content must be a string or a list of blocks"),
            ))
        }
    };
    let mut text = String::new();
    let mut calls = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("messages[{i}].content[{j}]");
        match (role, block_type(b)) {
            (_, Some("text")) => match b.get("text") {
                Some(Value::String(t)) => text.push_str(t),
                _ => return Err(bad("messages", format!("{at}: a text block needs 'text'"))),
            },
            ("assistant", Some("tool_use")) => {
                let (Some(id), Some(name)) = (
                    b.get("id").and_then(Value::as_str),
                    b.get("name").and_then(Value::as_str),
                ) else {
                    return Err(bad(
                        "messages",
                        format!("{at}: a tool_use block needs 'id' and 'name'"),
                    ));
                };
                let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                if !input.is_object() {
                    return Err(bad(
                        "messages",
                        format!("{at}: tool_use 'input' must be an object"),
                    ));
                }
                calls.push(json!({"id": id, "type": "function",
                    "function": {"name": name, "arguments": input.to_string()}}));
            }
            ("user", Some("tool_result")) => {
                let Some(id) = b.get("tool_use_id").and_then(Value::as_str) else {
                    return Err(bad(
                        "messages",
                        format!("{at}: a tool_result block needs 'tool_use_id'"),
                    ));
                };
                let content = match b.get("content") {
                    None | Some(Value::Null) => String::new(),
                    Some(c) => plain_text(c, &at)?,
                };
                out.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
            }
            (_, kind) => {
                return Err(bad(
                    "messages",
                    format!(
                        "{at}: a block of type '{}' is not supported in a {role} message \
                         (text, and tool_use from the assistant or tool_result from the user)",
                        kind.unwrap_or("?")
                    ),
                ))
            }
        }
    }
    if role == "assistant" {
        let mut msg = json!({"role": "assistant", "content": text});
        if !calls.is_empty() {
            msg["tool_calls"] = Value::Array(calls);
        }
        out.push(msg);
    } else if !text.is_empty() || out.last().is_none_or(|m| m["role"] != "tool") {
        out.push(json!({"role": "user", "content": text}));
    }
    Ok(())
}

/// The OpenAI chat request of the same conversation and settings.
fn chat_request(req: &MessagesRequest, max_tokens: Option<i64>) -> Result<ChatRequest, ApiError> {
    if req.messages.is_empty() {
        return Err(bad("messages", "messages must not be empty"));
    }
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    if let Some(system) = &req.system {
        messages.push(json!({"role": "system", "content": plain_text(system, "system")?}));
    }
    for (i, m) in req.messages.iter().enumerate() {
        chat_messages(i, m, &mut messages)?;
    }
    let mut body = Map::new();
    body.insert("messages".into(), Value::Array(messages));
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            body.insert(k.into(), v);
        }
    };
    put("model", req.model.clone().map(Value::from));
    put("max_tokens", max_tokens.map(Value::from));
    put("temperature", req.temperature.map(Value::from));
    put("top_p", req.top_p.map(Value::from));
    put("top_k", req.top_k.map(Value::from));
    put("stop", req.stop_sequences.clone().map(Value::from));
    if let Some(tools) = &req.tools {
        let mut defs = Vec::with_capacity(tools.len());
        for t in tools {
            if t.kind.as_deref().is_some_and(|k| k != "custom") {
                return Err(bad(
                    "tools",
                    format!(
                        "tool '{}': server tools (type '{}') are not supported",
                        t.name,
                        t.kind.as_deref().unwrap_or("")
                    ),
                ));
            }
            let mut f = json!({"name": t.name});
            if let Some(d) = &t.description {
                f["description"] = json!(d);
            }
            if let Some(s) = &t.input_schema {
                f["parameters"] = s.clone();
            }
            defs.push(json!({"type": "function", "function": f}));
        }
        body.insert("tools".into(), Value::Array(defs));
    }
    if let Some(c) = &req.tool_choice {
        let choice = match (c.kind.as_str(), &c.name) {
            ("auto", _) => json!("auto"),
            ("any", _) => json!("required"),
            ("none", _) => json!("none"),
            ("tool", Some(name)) => json!({"type": "function", "function": {"name": name}}),
            ("tool", None) => return Err(bad("tool_choice", "tool_choice 'tool' needs a 'name'")),
            (other, _) => {
                return Err(bad(
                    "tool_choice",
                    format!("tool_choice type '{other}' is not one of auto, any, tool, none"),
                ))
            }
        };
        body.insert("tool_choice".into(), choice);
        if c.disable_parallel_tool_use == Some(true) {
            body.insert("parallel_tool_calls".into(), json!(false));
        }
    }
    serde_json::from_value(Value::Object(body)).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// `POST /v1/messages`.
pub async fn handle(
    State(state): State<Arc<AppState>>,
    body: Result<ApiJson<MessagesRequest>, ApiError>,
) -> Result<Response, AnthropicError> {
    let arrived = Instant::now();
    let ApiJson(req) = body?;
    let Some(max_tokens) = req.max_tokens else {
        return Err(bad("max_tokens", "max_tokens: field required").into());
    };
    let chat_req = chat_request(&req, Some(max_tokens))?;
    let prompt = chat::prompt(&state, &chat_req, "/v1/messages").await?;
    let input_tokens = prompt.tokens.len();
    let declared = prompt.tools.as_ref().map(|t| t.names.clone());
    let job = chat::job(&state, &chat_req, prompt, arrived)?;
    let stops = job.prompts[0].1.stop.clone();
    let model = job.model.name.clone();
    let (rx, guard) = submit(&state, job)?;
    let head = reply::Head {
        id: reply::message_id(state.started),
        model,
        input_tokens,
        stops,
    };
    let parts = Parts::new(declared);
    if req.stream == Some(true) {
        return Ok(reply::stream(head, rx, parts, guard).into_response());
    }
    let whole = super::parts::whole(rx, parts).await?;
    drop(guard);
    Ok(Json(head.message(&whole)).into_response())
}

/// `POST /v1/messages/count_tokens`: `{"input_tokens": N}`, the prompt
/// tokens `/v1/messages` would take for the same body.
pub async fn count_tokens(
    State(state): State<Arc<AppState>>,
    body: Result<ApiJson<MessagesRequest>, ApiError>,
) -> Result<Response, AnthropicError> {
    let ApiJson(req) = body?;
    let chat_req = chat_request(&req, None)?;
    let prompt = chat::prompt(&state, &chat_req, "/v1/messages/count_tokens").await?;
    Ok(Json(json!({"input_tokens": prompt.tokens.len()})).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn translated(content: Value, role: &str) -> Result<Vec<Value>, ApiError> {
        let mut out = Vec::new();
        let m = InMessage {
            role: role.into(),
            content,
        };
        chat_messages(0, &m, &mut out).map(|_| out)
    }

    #[test]
    fn blocks_become_the_chat_routes_messages() {
        let calls = translated(
            json!([{"type": "text", "text": "Let me look."},
                   {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}]),
            "assistant",
        )
        .unwrap();
        assert_eq!(
            calls,
            [
                json!({"role": "assistant", "content": "Let me look.", "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]})
            ]
        );
        let results = translated(
            json!([{"type": "tool_result", "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "18 C"}]}]),
            "user",
        )
        .unwrap();
        assert_eq!(
            results,
            [json!({"role": "tool", "tool_call_id": "t1", "content": "18 C"})]
        );
        // A tool_use from the user, an image, a bad role: refused.
        for (content, role) in [
            (
                json!([{"type": "tool_use", "id": "x", "name": "f"}]),
                "user",
            ),
            (json!([{"type": "image", "source": {}}]), "user"),
            (json!("hi"), "system"),
            (json!(7), "user"),
        ] {
            let e = translated(content, role).unwrap_err();
            assert_eq!(e.status.as_u16(), 400, "{e:?}");
        }
    }

    #[test]
    fn errors_are_in_anthropics_shape() {
        let body = reply::error_body(&ApiError::bad_request("nope"));
        assert_eq!(
            body,
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "nope"}})
        );
        let body = reply::error_body(&ApiError::unauthorized());
        assert_eq!(body["error"]["type"], "authentication_error");
    }
}
