//! `POST /v1/completions`: continue a prompt (text or token ids).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;

use super::extract::ApiJson;
use super::generation::{respond, Job};
use super::params::Common;
use super::render::Shape;
use crate::error::ApiError;
use crate::state::AppState;

/// OpenAI's default reply length for text completions.
const DEFAULT_MAX_TOKENS: usize = 16;
/// Most alternatives per token in the legacy `logprobs` field.
const MAX_LOGPROBS: i64 = 5;

#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}

#[derive(Deserialize, Debug)]
pub struct CompletionRequest {
    prompt: Option<Prompt>,
    logprobs: Option<i64>,
    echo: Option<bool>,
    suffix: Option<String>,
    #[serde(flatten)]
    common: Common,
}

/// One prompt, as text or token ids.
enum OnePrompt {
    Text(String),
    Tokens(Vec<u32>),
}

fn one_prompt(p: Option<Prompt>) -> Result<OnePrompt, ApiError> {
    let many = || {
        ApiError::bad_param(
            "prompt",
            "give one prompt per request (lists of prompts are not supported)",
        )
    };
    match p {
        None => Err(ApiError::bad_param("prompt", "prompt is required")),
        Some(Prompt::Text(t)) => Ok(OnePrompt::Text(t)),
        Some(Prompt::Tokens(t)) => Ok(OnePrompt::Tokens(t)),
        Some(Prompt::Texts(mut v)) if v.len() == 1 => Ok(OnePrompt::Text(v.remove(0))),
        Some(Prompt::TokenLists(mut v)) if v.len() == 1 => Ok(OnePrompt::Tokens(v.remove(0))),
        Some(_) => Err(many()),
    }
}

pub async fn handle(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let model = state
        .models()?
        .generator(req.common.model.as_deref(), "/v1/completions")?;
    if req.echo == Some(true) {
        return Err(ApiError::bad_param("echo", "echo is not supported"));
    }
    if req.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::bad_param("suffix", "suffix is not supported"));
    }
    let logprobs = match req.logprobs {
        None => None,
        Some(k) if (0..=MAX_LOGPROBS).contains(&k) => Some(k as usize),
        Some(k) => {
            return Err(ApiError::bad_param(
                "logprobs",
                format!("logprobs must be between 0 and {MAX_LOGPROBS}, got {k}"),
            ))
        }
    };
    let prompt = match one_prompt(req.prompt)? {
        OnePrompt::Tokens(ids) => {
            let n_vocab = model.decoder().shape.n_vocab;
            if let Some(bad) = ids.iter().find(|&&t| t as usize >= n_vocab) {
                return Err(ApiError::bad_param(
                    "prompt",
                    format!("token id {bad} is outside the vocabulary of {n_vocab}"),
                ));
            }
            ids
        }
        OnePrompt::Text(text) => {
            let m = model.clone();
            tokio::task::spawn_blocking(move || m.tokenizer.encode(&text, true, true))
                .await
                .map_err(|e| ApiError::internal(e.to_string()))?
        }
    };
    let params = req.common.params(
        &model,
        &state.limits,
        prompt.len(),
        Some(DEFAULT_MAX_TOKENS),
        logprobs,
    )?;
    let job = Job {
        model,
        prompt,
        params,
        shape: Shape::Text,
        stream: req.common.stream(),
        include_usage: req.common.include_usage(),
        arrived,
    };
    respond(&state, job).await
}
