//! `POST /v1/embeddings`: one string or a list, `dimensions` (Matryoshka
//! cut, re-normalized, for models trained for it:
//! [`crate::embed::EmbedModel::cut`]), `encoding_format` `float` or `base64` (the
//! little-endian f32 bytes, as OpenAI's Python client asks for by default).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::extract::ApiJson;
use super::TextInput as Input;
use crate::embed::EmbedJob;
use crate::error::ApiError;
use crate::state::AppState;

#[derive(Deserialize, Debug)]
pub struct EmbeddingsRequest {
    model: Option<String>,
    input: Option<Input>,
    dimensions: Option<i64>,
    encoding_format: Option<String>,
}

/// How vectors are written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Float,
    Base64,
}

fn encode(v: &[f32], enc: Encoding) -> Value {
    match enc {
        Encoding::Float => json!(v),
        Encoding::Base64 => {
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            json!(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
    }
}

pub async fn handle(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<EmbeddingsRequest>,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let model = state.models()?.embedder(req.model.as_deref())?;
    let texts = match req.input {
        None => return Err(ApiError::bad_param("input", "input is required")),
        Some(Input::One(t)) => vec![t],
        Some(Input::Many(v)) => v,
        Some(Input::Other(_)) => {
            return Err(ApiError::bad_param(
                "input",
                "input must be a string or a list of strings (token ids are not supported)",
            ))
        }
    };
    let max_inputs = state.limits.max_embed_inputs;
    if texts.is_empty() || texts.len() > max_inputs {
        return Err(ApiError::bad_param(
            "input",
            format!(
                "input must hold 1 to {max_inputs} texts, got {}",
                texts.len()
            ),
        ));
    }
    let encoding = match req.encoding_format.as_deref() {
        None | Some("float") => Encoding::Float,
        Some("base64") => Encoding::Base64,
        Some(other) => {
            return Err(ApiError::bad_param(
                "encoding_format",
                format!("encoding_format must be 'float' or 'base64', got '{other}'"),
            ))
        }
    };
    let dims = match req.dimensions {
        None => None,
        Some(d) => model.cut(d)?,
    };
    // Count tokens (and refuse over-long inputs) off the async threads.
    let m = model.clone();
    let (texts, n_tokens) = tokio::task::spawn_blocking(move || {
        let max = m.max_tokens();
        let mut counts = Vec::with_capacity(texts.len());
        for (i, t) in texts.iter().enumerate() {
            let n = m
                .embedder
                .tokenizer
                .encode_untruncated(t)
                .map_err(|e| ApiError::bad_param("input", format!("input {i}: {e}")))?
                .len();
            if n > max {
                return Err(ApiError {
                    code: Some("context_length_exceeded"),
                    ..ApiError::bad_param(
                        "input",
                        format!("input {i} is {n} tokens, more than the model's maximum of {max}"),
                    )
                });
            }
            counts.push(n);
        }
        Ok((texts, counts))
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))??;
    let total: usize = n_tokens.iter().sum();
    let max_work = state.limits.max_embed_work;
    if total > max_work {
        return Err(ApiError {
            param: Some("input"),
            ..ApiError::too_much_work(format!(
                "this request's inputs hold {total} tokens in all; the limit per request is \
                 {max_work} tokens (--max-embed-tokens): split it into smaller requests"
            ))
        });
    }
    let _guard = state.begin();
    let (tx, rx) = oneshot::channel();
    let job = EmbedJob {
        texts,
        n_tokens,
        dims,
        reply: tx,
        arrived,
    };
    let waiting = model.queue.push(job)?;
    model.metrics.queue.set(waiting as i64);
    let vectors = rx
        .await
        .map_err(|_| ApiError::internal("the embedding worker dropped the request"))??;
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| json!({"object": "embedding", "index": i, "embedding": encode(v, encoding)}))
        .collect();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": model.name,
        "usage": {"prompt_tokens": total, "total_tokens": total},
    }))
    .into_response())
}
