//! `POST /v1/embeddings`: one string or a list, or token ids (a list of
//! ints, or a list of lists: a text's tokens in the model's own vocabulary,
//! without special tokens, which are added as for text), `dimensions` (Matryoshka
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
use crate::embed::EmbedJob;
use crate::error::ApiError;
use crate::state::AppState;

#[derive(Deserialize, Debug)]
pub struct EmbeddingsRequest {
    model: Option<String>,
    input: Option<Value>,
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

/// One input: a text, or a text's token ids.
enum Input {
    Text(String),
    Ids(Vec<u32>),
}

/// The inputs of `input`: a string, a list of strings, a list of token
/// ids, or a list of lists of token ids (a 400 naming the first bad item).
fn inputs(input: Option<Value>) -> Result<Vec<Input>, ApiError> {
    const SHAPES: &str =
        "input must be a string, a list of strings, a list of token ids or a list of lists of token ids";
    let bad = |m: String| ApiError::bad_param("input", m);
    let ids = |v: &[Value], at: &str| -> Result<Vec<u32>, ApiError> {
        v.iter()
            .enumerate()
            .map(|(j, x)| {
                x.as_u64()
                    .and_then(|id| u32::try_from(id).ok())
                    .ok_or_else(|| {
                        bad(format!(
                            "input{at}[{j}] must be a token id (an integer 0..2^32), got {x}"
                        ))
                    })
            })
            .collect()
    };
    match input {
        None | Some(Value::Null) => Err(bad("input is required".into())),
        Some(Value::String(t)) => Ok(vec![Input::Text(t)]),
        Some(Value::Array(items)) => {
            if items.first().is_some_and(Value::is_number) {
                return Ok(vec![Input::Ids(ids(&items, "")?)]);
            }
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::String(t) => Ok(Input::Text(t)),
                    Value::Array(v) => Ok(Input::Ids(ids(&v, &format!("[{i}]"))?)),
                    other => Err(bad(format!("{SHAPES}; input[{i}] is {other}"))),
                })
                .collect()
        }
        Some(_) => Err(bad(SHAPES.into())),
    }
}

pub async fn handle(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<EmbeddingsRequest>,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let model = state.models()?.embedder(req.model.as_deref())?;
    let texts = inputs(req.input)?;
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
    // Tokenize (and refuse over-long inputs) off the async threads.
    let m = model.clone();
    let (texts, n_tokens) = tokio::task::spawn_blocking(move || {
        let max = m.max_tokens();
        let tok = m.embedder.tokenizer();
        let mut counts = Vec::with_capacity(texts.len());
        let mut ids = Vec::with_capacity(texts.len());
        for (i, t) in texts.iter().enumerate() {
            let t = match t {
                Input::Text(t) => tok.encode_untruncated(t),
                Input::Ids(t) => tok.with_special_tokens(t),
            }
            .map_err(|e| ApiError::bad_param("input", format!("input {i}: {e}")))?;
            let n = t.len();
            ids.push(t);
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
        Ok((ids, counts))
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
