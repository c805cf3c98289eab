//! `POST /v1/chat/completions`: messages rendered by the model's chat
//! template, generation stopping at the template's turn end.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::response::Response;
use ferrite::generate::chat::{prompt_tokens, Message};
use serde::Deserialize;

use super::extract::ApiJson;
use super::generation::{respond, Job};
use super::params::{Common, MAX_TOP_LOGPROBS};
use super::render::Shape;
use crate::error::ApiError;
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
}

#[derive(Deserialize, Debug)]
pub struct ChatRequest {
    messages: Vec<ChatMessage>,
    logprobs: Option<bool>,
    top_logprobs: Option<i64>,
    #[serde(flatten)]
    common: Common,
}

/// The roles templates know (`developer` is OpenAI's new name for system).
const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

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
        let role = if m.role == "developer" {
            "system"
        } else {
            &m.role
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
    let model = state
        .models()?
        .generator(req.common.model.as_deref(), "/v1/chat/completions")?;
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
    let msgs = messages(&req)?;
    let m = model.clone();
    let prompt =
        tokio::task::spawn_blocking(move || prompt_tokens(&m.tokenizer, &m.template, &msgs))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .map_err(|e| ApiError::bad_param("messages", e.to_string()))?;
    let params = req
        .common
        .params(&model, &state.limits, prompt.len(), None, logprobs)?;
    let job = Job {
        model,
        prompt,
        params,
        shape: Shape::Chat,
        stream: req.common.stream(),
        include_usage: req.common.include_usage(),
        arrived,
    };
    respond(&state, job).await
}
