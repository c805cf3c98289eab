//! `POST /v1/completions`: continue a prompt (text or token ids), or each
//! of a list of prompts (choices numbered prompt by prompt), with `echo`.

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

/// Most prompts in one request.
const MAX_PROMPTS: usize = 16;

fn prompts(p: Option<Prompt>) -> Result<Vec<OnePrompt>, ApiError> {
    let list = match p {
        None => return Err(ApiError::bad_param("prompt", "prompt is required")),
        Some(Prompt::Text(t)) => vec![OnePrompt::Text(t)],
        Some(Prompt::Tokens(t)) => vec![OnePrompt::Tokens(t)],
        Some(Prompt::Texts(v)) => v.into_iter().map(OnePrompt::Text).collect(),
        Some(Prompt::TokenLists(v)) => v.into_iter().map(OnePrompt::Tokens).collect(),
    };
    if list.is_empty() || list.len() > MAX_PROMPTS {
        return Err(ApiError::bad_param(
            "prompt",
            format!(
                "a list of prompts must hold 1 to {MAX_PROMPTS}, got {}",
                list.len()
            ),
        ));
    }
    Ok(list)
}

pub async fn handle(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let model = state
        .models()?
        .generator(req.common.model.as_deref(), "/v1/completions")?;
    let echo = req.echo == Some(true);
    if echo && req.logprobs.is_some() {
        return Err(ApiError::bad_param(
            "echo",
            "echo with logprobs is not supported (the prompt's logprobs are not computed)",
        ));
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
    let n_vocab = model.lm.n_vocab();
    let mut parts = Vec::new();
    let mut echoed = Vec::new();
    for p in prompts(req.prompt)? {
        let prompt = match p {
            OnePrompt::Tokens(ids) => {
                if let Some(bad) = ids.iter().find(|&&t| t as usize >= n_vocab) {
                    return Err(ApiError::bad_param(
                        "prompt",
                        format!("token id {bad} is outside the vocabulary of {n_vocab}"),
                    ));
                }
                if echo {
                    echoed.push(model.tokenizer.decode(&ids, false));
                }
                ids
            }
            OnePrompt::Text(text) => {
                let m = model.clone();
                if echo {
                    echoed.push(text.clone());
                }
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
        parts.push((prompt, params));
    }
    let job = Job {
        model,
        prompts: parts,
        echo: echoed,
        shape: Shape::Text,
        tools: None,
        tool_names: Arc::from([]),
        stream: req.common.stream(),
        include_usage: req.common.include_usage(),
        arrived,
    };
    respond(&state, job).await
}
