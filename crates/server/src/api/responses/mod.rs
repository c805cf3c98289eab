//! OpenAI's Responses API, `POST /v1/responses`, as a translation onto
//! the chat route: `instructions` and `input` (a string, or message,
//! `function_call` and `function_call_output` items) become the chat
//! request of the same conversation, `tools` (the flat function shape)
//! and `tool_choice` the chat's, `text.format` the chat's
//! `response_format`; it is rendered, checked and scheduled exactly as
//! `/v1/chat/completions` would, and the reply is written as a
//! `response` object or its typed events ([`reply`]).
//!
//! Stateless unless the request says `store: true`: then its
//! conversation (input and output) is kept in memory under the
//! response's id, for a later request's `previous_response_id`. The
//! store holds the [`STORE_CAPACITY`] latest responses; older ones are
//! forgotten (an unknown id is a 404).
//! Reference: the OpenAI API's Responses documentation.

pub mod reply;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::chat::{self, ChatRequest};
use super::extract::ApiJson;
use super::generation::{now_secs, response_id, submit};
use super::parts::Parts;
use crate::error::ApiError;
use crate::state::AppState;

/// Most responses the store keeps (the oldest is forgotten first).
pub const STORE_CAPACITY: usize = 256;

/// A stored response's conversation: the chat messages of its input and
/// output.
type Conversation = Arc<Vec<Value>>;

/// Stored conversations by response id, and the ids oldest first.
#[derive(Default)]
pub struct Store {
    inner: Mutex<(HashMap<String, Conversation>, VecDeque<String>)>,
}

impl Store {
    fn get(&self, id: &str) -> Option<Conversation> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.0.get(id).cloned()
    }

    fn put(&self, id: String, messages: Vec<Value>) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (map, order) = &mut *g;
        while order.len() >= STORE_CAPACITY {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
        order.push_back(id.clone());
        map.insert(id, Arc::new(messages));
    }
}

/// A Responses request (fields ferrite does not use are ignored).
#[derive(Deserialize, Debug)]
pub struct ResponsesRequest {
    model: Option<String>,
    input: Value,
    instructions: Option<String>,
    tools: Option<Vec<Value>>,
    tool_choice: Option<Value>,
    parallel_tool_calls: Option<bool>,
    text: Option<TextOptions>,
    max_output_tokens: Option<i64>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    stream: Option<bool>,
    store: Option<bool>,
    previous_response_id: Option<String>,
}

#[derive(Deserialize, Debug)]
struct TextOptions {
    format: Option<Value>,
}

fn bad(param: &'static str, m: impl Into<String>) -> ApiError {
    ApiError::bad_param(param, m)
}

/// A message item's text: a string, or `input_text` / `output_text`
/// parts.
fn item_text(i: usize, content: &Value) -> Result<String, ApiError> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut text = String::new();
            for p in parts {
                let kind = p.get("type").and_then(Value::as_str).unwrap_or("?");
                match (kind, p.get("text")) {
                    ("input_text" | "output_text" | "text", Some(Value::String(t))) => {
                        text.push_str(t)
                    }
                    _ => {
                        return Err(bad(
                            "input",
                            format!(
                                "input[{i}]: content part '{kind}' is not supported (text only)"
                            ),
                        ))
                    }
                }
            }
            Ok(text)
        }
        _ => Err(bad(
            "input",
            format!("input[{i}].content must be a string or a list of parts"),
        )),
    }
}

/// The request's input items as chat messages (consecutive function calls
/// become one assistant message's calls).
fn input_messages(input: &Value, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let items = match input {
        Value::String(s) => {
            out.push(json!({"role": "user", "content": s}));
            return Ok(());
        }
        Value::Array(items) => items,
        _ => return Err(bad("input", "input must be a string or a list of items")),
    };
    for (i, item) in items.iter().enumerate() {
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        let field = |k: &str| item.get(k).and_then(Value::as_str);
        match kind {
            "message" => {
                let role = field("role").unwrap_or("");
                if !["user", "system", "developer", "assistant"].contains(&role) {
                    return Err(bad(
                        "input",
                        format!("input[{i}]: role must be user, system, developer or assistant"),
                    ));
                }
                let content = item_text(i, item.get("content").unwrap_or(&Value::Null))?;
                out.push(json!({"role": role, "content": content}));
            }
            "function_call" => {
                let (Some(id), Some(name)) = (field("call_id"), field("name")) else {
                    return Err(bad(
                        "input",
                        format!("input[{i}]: a function_call needs 'call_id' and 'name'"),
                    ));
                };
                let call = json!({"id": id, "type": "function", "function":
                    {"name": name, "arguments": field("arguments").unwrap_or("{}")}});
                match out.last_mut() {
                    Some(m) if m["role"] == "assistant" && m.get("tool_calls").is_some() => {
                        if let Some(Value::Array(calls)) = m.get_mut("tool_calls") {
                            calls.push(call);
                        }
                    }
                    _ => {
                        out.push(json!({"role": "assistant", "content": "", "tool_calls": [call]}))
                    }
                }
            }
            "function_call_output" => {
                let Some(id) = field("call_id") else {
                    return Err(bad(
                        "input",
                        format!("input[{i}]: a function_call_output needs 'call_id'"),
                    ));
                };
                let output = match item.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(v @ Value::Array(_)) => item_text(i, v)?,
                    _ => {
                        return Err(bad(
                            "input",
                            format!("input[{i}]: a function_call_output needs 'output'"),
                        ))
                    }
                };
                out.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
            }
            other => {
                return Err(bad(
                    "input",
                    format!(
                        "input[{i}]: item type '{other}' is not supported \
                         (message, function_call, function_call_output)"
                    ),
                ))
            }
        }
    }
    Ok(())
}

/// The chat request of the conversation `messages` with `req`'s settings.
fn chat_request(req: &ResponsesRequest, messages: Vec<Value>) -> Result<ChatRequest, ApiError> {
    let mut body = Map::new();
    body.insert("messages".into(), Value::Array(messages));
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            body.insert(k.into(), v);
        }
    };
    put("model", req.model.clone().map(Value::from));
    put("max_tokens", req.max_output_tokens.map(Value::from));
    put("temperature", req.temperature.map(Value::from));
    put("top_p", req.top_p.map(Value::from));
    put(
        "parallel_tool_calls",
        req.parallel_tool_calls.map(Value::from),
    );
    if let Some(tools) = &req.tools {
        let mut defs = Vec::with_capacity(tools.len());
        for t in tools {
            if t.get("type").and_then(Value::as_str) != Some("function") {
                return Err(bad("tools", "every tool must be of type 'function'"));
            }
            let mut f = Map::new();
            for k in ["name", "description", "parameters"] {
                if let Some(v) = t.get(k).filter(|v| !v.is_null()) {
                    f.insert(k.into(), v.clone());
                }
            }
            defs.push(json!({"type": "function", "function": f}));
        }
        body.insert("tools".into(), Value::Array(defs));
    }
    if let Some(c) = &req.tool_choice {
        let choice = match c {
            Value::String(_) => c.clone(),
            _ => match (c.get("type").and_then(Value::as_str), c.get("name")) {
                (Some("function"), Some(name)) => {
                    json!({"type": "function", "function": {"name": name}})
                }
                _ => {
                    return Err(bad(
                        "tool_choice",
                        "tool_choice must be 'auto', 'none', 'required' or \
                         {\"type\": \"function\", \"name\": ...}",
                    ))
                }
            },
        };
        body.insert("tool_choice".into(), choice);
    }
    if let Some(format) = req.text.as_ref().and_then(|t| t.format.as_ref()) {
        let rf = match format.get("type").and_then(Value::as_str) {
            Some("json_schema") => {
                let schema = format
                    .get("schema")
                    .ok_or_else(|| bad("text", "text.format json_schema needs a 'schema'"))?;
                json!({"type": "json_schema", "json_schema": {
                    "name": format.get("name").cloned().unwrap_or(json!("schema")),
                    "schema": schema}})
            }
            Some("text") => json!({"type": "text"}),
            Some("json_object") => json!({"type": "json_object"}),
            _ => {
                return Err(bad(
                    "text",
                    "text.format type must be text, json_object or json_schema",
                ))
            }
        };
        body.insert("response_format".into(), rf);
    }
    serde_json::from_value(Value::Object(body)).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// `POST /v1/responses`.
pub async fn handle(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<ResponsesRequest>,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    // The conversation kept (with `store`) leaves out the instructions: a
    // later request's own replace them.
    let mut convo = Vec::new();
    if let Some(prev) = &req.previous_response_id {
        let Some(earlier) = state.responses.get(prev) else {
            return Err(ApiError {
                status: StatusCode::NOT_FOUND,
                message: format!("no stored response with id '{prev}'"),
                param: Some("previous_response_id"),
                code: None,
            });
        };
        convo.extend(earlier.iter().cloned());
    }
    input_messages(&req.input, &mut convo)?;
    let mut messages = Vec::with_capacity(convo.len() + 1);
    if let Some(i) = &req.instructions {
        messages.push(json!({"role": "system", "content": i}));
    }
    messages.extend(convo.iter().cloned());
    let chat_req = chat_request(&req, messages)?;
    let prompt = chat::prompt(&state, &chat_req, "/v1/responses").await?;
    let input_tokens = prompt.tokens.len();
    let declared = prompt.tools.as_ref().map(|t| t.names.clone());
    let job = chat::job(&state, &chat_req, prompt, arrived)?;
    let model = job.model.name.clone();
    let (rx, guard) = submit(&state, job)?;
    let store = req.store == Some(true);
    let head = reply::Head {
        id: response_id("resp", state.started).replacen('-', "_", 1),
        created: now_secs(),
        model,
        input_tokens,
        echo: reply::echo(&req),
        kept: store.then(|| (state.clone(), convo)),
    };
    let parts = Parts::new(declared);
    if req.stream == Some(true) {
        return Ok(reply::stream(head, rx, parts, guard).into_response());
    }
    let whole = super::parts::whole(rx, parts).await?;
    drop(guard);
    Ok(Json(head.response(&whole)).into_response())
}

/// Keeps a stored response's conversation: `messages` then the reply's
/// text and calls.
pub(crate) fn keep(state: &AppState, id: &str, mut messages: Vec<Value>, output: &[Value]) {
    for item in output {
        match item["type"].as_str() {
            Some("message") => {
                let text = item["content"][0]["text"].as_str().unwrap_or("");
                messages.push(json!({"role": "assistant", "content": text}));
            }
            Some("function_call") => {
                let call = json!({"id": item["call_id"], "type": "function", "function":
                    {"name": item["name"], "arguments": item["arguments"]}});
                match messages.last_mut() {
                    Some(m) if m["role"] == "assistant" => match m.get_mut("tool_calls") {
                        Some(Value::Array(calls)) => calls.push(call),
                        _ => m["tool_calls"] = json!([call]),
                    },
                    _ => messages
                        .push(json!({"role": "assistant", "content": "", "tool_calls": [call]})),
                }
            }
            _ => {}
        }
    }
    state.responses.put(id.to_string(), messages);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_items_become_the_chat_routes_messages() {
        let mut out = Vec::new();
        input_messages(
            &json!([
                {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "18 C"},
            ]),
            &mut out,
        )
        .unwrap();
        assert_eq!(out.len(), 3);
        assert_eq!(out[0], json!({"role": "user", "content": "Weather?"}));
        assert_eq!(out[1]["tool_calls"].as_array().unwrap().len(), 2);
        assert_eq!(
            out[2],
            json!({"role": "tool", "tool_call_id": "c1", "content": "18 C"})
        );
        for bad in [
            json!(3),
            json!([{"type": "image"}]),
            json!([{"role": "wizard", "content": "x"}]),
        ] {
            assert!(input_messages(&bad, &mut Vec::new()).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_store_keeps_only_the_latest() {
        let store = Store::default();
        for i in 0..STORE_CAPACITY + 10 {
            store.put(format!("r{i}"), vec![json!(i)]);
        }
        assert!(store.get("r0").is_none());
        assert!(store.get("r9").is_none());
        assert!(store.get("r10").is_some());
        let last = format!("r{}", STORE_CAPACITY + 9);
        assert_eq!(*store.get(&last).unwrap(), vec![json!(STORE_CAPACITY + 9)]);
        assert_eq!(store.inner.lock().unwrap().0.len(), STORE_CAPACITY);
    }
}
