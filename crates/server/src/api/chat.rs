//! `POST /v1/chat/completions`: messages rendered by the model's chat
//! template, generation stopping at the template's turn end. Control-token
//! text inside a message stays text unless the server is started with
//! `--parse-special-in-messages` (trusted callers only).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::response::Response;
use ferrite::serving::{guarded_json_prompt_tokens, with_bos};
use ferrite::Message;
use serde::Deserialize;
use serde_json::{json, Value};

use super::extract::ApiJson;
use super::generation::{respond, Job};
use super::params::{Common, MAX_TOP_LOGPROBS};
use super::render::Shape;
use super::tools::{self, ToolMode};
use crate::error::ApiError;
use crate::generate::GenModel;
use crate::state::AppState;

/// A message's content: text, or a list of parts of which text is served.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize, Debug)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

#[derive(Deserialize, Debug)]
struct ChatMessage {
    role: String,
    content: Option<Content>,
    /// An assistant's calls (`[{id, type, function: {name, arguments}}]`).
    tool_calls: Option<Vec<Value>>,
    /// A tool message's call.
    tool_call_id: Option<String>,
    name: Option<String>,
    /// An assistant's legacy call (`{name, arguments}`).
    function_call: Option<Value>,
}

#[derive(Deserialize, Debug)]
pub struct ChatRequest {
    messages: Vec<ChatMessage>,
    logprobs: Option<bool>,
    top_logprobs: Option<i64>,
    tools: Option<Vec<Value>>,
    tool_choice: Option<Value>,
    parallel_tool_calls: Option<bool>,
    functions: Option<Vec<Value>>,
    function_call: Option<Value>,
    #[serde(flatten)]
    common: Common,
}

/// The roles templates know (`developer` is OpenAI's new name for system;
/// `function`, the legacy name for tool).
const ROLES: [&str; 6] = [
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
];

/// A call as templates take it: `arguments` as a JSON value (parsed from
/// OpenAI's string, as Hugging Face templates expect).
fn template_call(call: &Value) -> Value {
    let f = call.get("function").unwrap_or(call);
    let args = match f.get("arguments") {
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or_else(|_| json!(s)),
        Some(v) => v.clone(),
        None => json!({}),
    };
    let mut out = json!({"type": "function", "function": {
        "name": f.get("name").cloned().unwrap_or(Value::Null), "arguments": args}});
    if let Some(id) = call.get("id") {
        out["id"] = id.clone();
    }
    out
}

/// The messages as the template's JSON (see `ChatTemplate::render_json`).
fn json_messages(req: &ChatRequest, msgs: &[Message]) -> Vec<Value> {
    msgs.iter()
        .zip(&req.messages)
        .map(|(m, raw)| {
            let mut v = m.to_json();
            let calls: Vec<Value> = raw
                .tool_calls
                .iter()
                .flatten()
                .chain(raw.function_call.iter())
                .map(template_call)
                .collect();
            if !calls.is_empty() {
                v["tool_calls"] = Value::Array(calls);
            }
            if let Some(id) = &raw.tool_call_id {
                v["tool_call_id"] = json!(id);
            }
            if let Some(name) = &raw.name {
                v["name"] = json!(name);
            }
            v
        })
        .collect()
}

fn messages(req: &ChatRequest) -> Result<Vec<Message>, ApiError> {
    if req.messages.is_empty() {
        return Err(ApiError::bad_param(
            "messages",
            "messages must not be empty",
        ));
    }
    let mut out = Vec::with_capacity(req.messages.len());
    for (i, m) in req.messages.iter().enumerate() {
        if !ROLES.contains(&m.role.as_str()) {
            return Err(ApiError::bad_param(
                "messages",
                format!(
                    "messages[{i}]: unknown role '{}' (one of {})",
                    m.role,
                    ROLES.join(", ")
                ),
            ));
        }
        let content = match &m.content {
            None => String::new(),
            Some(Content::Text(t)) => t.clone(),
            Some(Content::Parts(parts)) => {
                let mut text = String::new();
                for p in parts {
                    match (p.kind.as_str(), &p.text) {
                        ("text", Some(t)) => text.push_str(t),
                        (kind, _) => {
                            return Err(ApiError::bad_param(
                                "messages",
                                format!(
                                "messages[{i}]: content part '{kind}' is not supported (text only)"
                            ),
                            ))
                        }
                    }
                }
                text
            }
        };
        let role = match m.role.as_str() {
            "developer" => "system",
            "function" => "tool",
            r => r,
        };
        out.push(Message::new(role, &content));
    }
    Ok(out)
}

pub async fn handle(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<ChatRequest>,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let prepared = prompt(&state, &req, "/v1/chat/completions").await?;
    let job = job(&state, &req, prepared, arrived)?;
    respond(&state, job).await
}

/// A chat request's model, prompt tokens and tools, checked (the part of
/// a chat the Anthropic and Responses routes share, and all that
/// `count_tokens` needs).
pub(crate) struct Prompt {
    pub model: Arc<GenModel>,
    pub tokens: Vec<u32>,
    pub tools: Option<tools::Tools>,
}

/// Renders `req`'s conversation (and tools) with its model's template
/// into prompt tokens; `endpoint` names the route in errors.
pub(crate) async fn prompt(
    state: &AppState,
    req: &ChatRequest,
    endpoint: &str,
) -> Result<Prompt, ApiError> {
    let model = state
        .models()?
        .generator(req.common.model.as_deref(), endpoint)?;
    let msgs = messages(req)?;
    let tools = tools::tools(
        req.tools.as_deref(),
        req.functions.as_deref(),
        req.tool_choice.as_ref(),
        req.function_call.as_ref(),
        req.parallel_tool_calls,
        &model.template,
    )?;
    if tools.is_some() && req.common.response_format.is_some() {
        return Err(ApiError::bad_param(
            "response_format",
            "response_format cannot be combined with tools",
        ));
    }
    let conversation = json_messages(req, &msgs);
    let rendered = tools.as_ref().map(|t| t.rendered.clone());
    let m = model.clone();
    let trusted = state.limits.parse_special_in_messages;
    let tokens = tokio::task::spawn_blocking(move || {
        let tools = rendered.as_ref();
        if trusted {
            m.template
                .render_json(&conversation, tools, true)
                .map(|text| with_bos(&m.tokenizer, m.tokenizer.encode(&text, false, true)))
        } else {
            guarded_json_prompt_tokens(&m.tokenizer, &m.template, &conversation, tools)
        }
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::bad_param("messages", e.to_string()))?;
    Ok(Prompt {
        model,
        tokens,
        tools,
    })
}

/// The generation job of a chat request whose prompt is `prepared`.
pub(crate) fn job(
    state: &AppState,
    req: &ChatRequest,
    prepared: Prompt,
    arrived: Instant,
) -> Result<Job, ApiError> {
    let logprobs = match (req.logprobs, req.top_logprobs) {
        (Some(true), top) => {
            let top = top.unwrap_or(0);
            if !(0..=MAX_TOP_LOGPROBS as i64).contains(&top) {
                return Err(ApiError::bad_param(
                    "top_logprobs",
                    format!("top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {top}"),
                ));
            }
            Some(top as usize)
        }
        (_, Some(_)) => {
            return Err(ApiError::bad_param(
                "top_logprobs",
                "top_logprobs needs logprobs: true",
            ))
        }
        _ => None,
    };
    let Prompt {
        model,
        tokens: prompt,
        tools,
    } = prepared;
    let mut params = req
        .common
        .params(&model, &state.limits, prompt.len(), None, logprobs)?;
    let legacy = tools.as_ref().is_some_and(|t| t.legacy);
    let tool_names = tools
        .as_ref()
        .map_or_else(|| Arc::from([]), |t| t.names.clone());
    let calls = tools.is_some();
    match tools.map(|t| t.mode) {
        Some(ToolMode::Auto(trigger, g)) => params.tool_calls = Some((trigger, g)),
        Some(ToolMode::Forced(g)) => params.json = Some(g),
        None => {}
    }
    Ok(Job {
        model,
        prompts: vec![(prompt, params)],
        echo: Vec::new(),
        shape: Shape::Chat,
        tools: calls.then_some(legacy),
        tool_names,
        stream: req.common.stream(),
        include_usage: req.common.include_usage(),
        arrived,
    })
}
