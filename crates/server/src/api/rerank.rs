//! `POST /v1/rerank` and `/rerank`: a query and documents scored by a
//! cross-encoder, in the two shapes clients use.
//!
//! - Cohere / Jina (and llama.cpp): `{"query", "documents": [string or
//!   {"text"}], "top_n", "return_documents"}` answers `{"model", "object":
//!   "list", "results": [{"index", "relevance_score", "document"?:
//!   {"text"}}], "usage"}`;
//! - text-embeddings-inference: `{"query", "texts", "raw_scores",
//!   "return_text"}` answers a bare array `[{"index", "score", "text"?}]`.
//!
//! Results are sorted by score, best first, ties by index; `top_n` (either
//! shape) keeps the first N. `raw_scores` (either shape) gives the logits
//! without the model's activation. A pair longer than the model is cut,
//! the longer text first (TEI truncates by default too); an empty query
//! is a 400, more documents than an embeddings request's inputs (2,048)
//! or more tokens than `--max-embed-tokens` a 413.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::extract::ApiJson;
use crate::error::ApiError;
use crate::rerank::RerankJob;
use crate::state::AppState;

#[derive(Deserialize, Debug)]
pub struct RerankRequest {
    model: Option<String>,
    query: Option<Value>,
    /// Cohere / Jina: strings or `{"text": ...}` objects.
    documents: Option<Vec<Value>>,
    /// TEI: strings.
    texts: Option<Vec<Value>>,
    top_n: Option<i64>,
    return_documents: Option<bool>,
    raw_scores: Option<bool>,
    return_text: Option<bool>,
}

/// The texts of `documents` or `texts` (a 400 naming the first bad item).
fn texts_of(items: Vec<Value>, param: &'static str) -> Result<Vec<String>, ApiError> {
    items
        .into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::String(t) => Ok(t),
            Value::Object(mut o) if param == "documents" => match o.remove("text") {
                Some(Value::String(t)) => Ok(t),
                _ => Err(ApiError::bad_param(
                    param,
                    format!("documents[{i}] must be a string or {{\"text\": string}}"),
                )),
            },
            other => Err(ApiError::bad_param(
                param,
                format!("{param}[{i}] must be a string, got {other}"),
            )),
        })
        .collect()
}

pub async fn handle(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<RerankRequest>,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let model = state.models()?.reranker(req.model.as_deref())?;
    let query = match req.query {
        Some(Value::String(q)) if !q.trim().is_empty() => q,
        Some(Value::String(_)) => return Err(ApiError::bad_param("query", "query is empty")),
        _ => return Err(ApiError::bad_param("query", "query must be a string")),
    };
    let (tei, param, docs) = match (req.documents, req.texts) {
        (Some(d), None) => (false, "documents", texts_of(d, "documents")?),
        (None, Some(t)) => (true, "texts", texts_of(t, "texts")?),
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_param(
                "documents",
                "give documents (Cohere, Jina) or texts (TEI), not both",
            ))
        }
        (None, None) => {
            return Err(ApiError::bad_param(
                "documents",
                "documents (or TEI's texts) is required",
            ))
        }
    };
    let max_inputs = state.limits.max_embed_inputs;
    if docs.is_empty() {
        return Err(ApiError::bad_param(param, format!("{param} is empty")));
    }
    if docs.len() > max_inputs {
        return Err(ApiError {
            param: Some(param),
            ..ApiError::too_much_work(format!(
                "{} documents; the limit per request is {max_inputs}: split it into smaller requests",
                docs.len()
            ))
        });
    }
    let top_n = match req.top_n {
        None => None,
        Some(n) if n >= 1 => Some(n as usize),
        Some(n) => {
            return Err(ApiError::bad_param(
                "top_n",
                format!("top_n must be at least 1, got {n}"),
            ))
        }
    };
    // Tokenize (cutting over-long pairs) off the async threads.
    let m = model.clone();
    let (pairs, docs) = tokio::task::spawn_blocking(move || {
        let pairs = docs
            .iter()
            .enumerate()
            .map(|(i, d)| {
                m.reranker
                    .tokenize_pair(&query, d)
                    .map_err(|e| ApiError::bad_param(param, format!("{param}[{i}]: {e}")))
            })
            .collect::<Result<Vec<_>, ApiError>>()?;
        Ok::<_, ApiError>((pairs, docs))
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))??;
    let total: usize = pairs.iter().map(|p| p.ids.len()).sum();
    let max_work = state.limits.max_embed_work;
    if total > max_work {
        return Err(ApiError {
            param: Some(param),
            ..ApiError::too_much_work(format!(
                "this request's pairs hold {total} tokens in all; the limit per request is \
                 {max_work} tokens (--max-embed-tokens): split it into smaller requests"
            ))
        });
    }
    let _guard = state.begin();
    let (tx, rx) = oneshot::channel();
    let job = RerankJob {
        pairs,
        raw: req.raw_scores.unwrap_or(false),
        reply: tx,
        arrived,
    };
    let waiting = model.queue.push(job)?;
    model.metrics.queue.set(waiting as i64);
    let scores = rx
        .await
        .map_err(|_| ApiError::internal("the rerank worker dropped the request"))??;
    let ranked = ferrite::rank_scores(scores.into_iter(), top_n);
    if tei {
        let with_text = req.return_text.unwrap_or(false);
        let out: Vec<Value> = ranked
            .iter()
            .map(|r| {
                let mut v = json!({"index": r.index, "score": r.score});
                if with_text {
                    v["text"] = json!(docs[r.index]);
                }
                v
            })
            .collect();
        return Ok(Json(Value::Array(out)).into_response());
    }
    let with_docs = req.return_documents.unwrap_or(false);
    let results: Vec<Value> = ranked
        .iter()
        .map(|r| {
            let mut v = json!({"index": r.index, "relevance_score": r.score});
            if with_docs {
                v["document"] = json!({"text": docs[r.index]});
            }
            v
        })
        .collect();
    Ok(Json(json!({
        "model": model.name,
        "object": "list",
        "results": results,
        "usage": {"prompt_tokens": total, "total_tokens": total},
    }))
    .into_response())
}
