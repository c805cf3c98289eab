//! The small endpoints: `/v1/models`, `/tokenize`, `/detokenize`,
//! `/health`, `/ready`, `/metrics`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::extract::ApiJson;
use crate::error::ApiError;
use crate::registry::{Kind, Served};
use crate::state::AppState;

fn model_json(m: &Served, created: u64) -> Value {
    let kind = match &m.kind {
        Kind::Generate(_) => "generation",
        Kind::Embed(_) => "embedding",
        Kind::Translate(_) => "translation",
        Kind::Rerank(_) => "rerank",
    };
    json!({"id": m.name, "object": "model", "created": created, "owned_by": "ferrite", "kind": kind})
}

/// `GET /v1/models`.
pub async fn list_models(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    let reg = state.models()?;
    let data: Vec<Value> = reg
        .models
        .iter()
        .map(|m| model_json(m, state.started))
        .collect();
    Ok(Json(json!({"object": "list", "data": data})))
}

/// `GET /v1/models/{id}`.
pub async fn get_model(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let reg = state.models()?;
    match reg.models.iter().find(|m| m.answers_to(&id)) {
        Some(m) => Ok(Json(model_json(m, state.started))),
        None => {
            let names: Vec<&str> = reg.models.iter().map(|m| m.name.as_str()).collect();
            Err(ApiError::model_not_found(&id, &names))
        }
    }
}

#[derive(Deserialize)]
pub struct TokenizeRequest {
    model: Option<String>,
    content: String,
    /// Add BOS/EOS as the vocabulary asks (default false, as llama-server).
    add_special: Option<bool>,
}

/// `POST /tokenize`: `{"content": text}` -> `{"tokens": [ids]}`
/// (special-token text is parsed).
pub async fn tokenize(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<TokenizeRequest>,
) -> Result<Json<Value>, ApiError> {
    let m = state
        .models()?
        .generator(req.model.as_deref(), "/tokenize")?;
    let add = req.add_special.unwrap_or(false);
    let tokens = tokio::task::spawn_blocking(move || m.tokenizer.encode(&req.content, add, true))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(Json(json!({"tokens": tokens})))
}

#[derive(Deserialize)]
pub struct DetokenizeRequest {
    model: Option<String>,
    tokens: Vec<u32>,
}

/// `POST /detokenize`: `{"tokens": [ids]}` -> `{"content": text}`.
pub async fn detokenize(
    State(state): State<Arc<AppState>>,
    ApiJson(req): ApiJson<DetokenizeRequest>,
) -> Result<Json<Value>, ApiError> {
    let m = state
        .models()?
        .generator(req.model.as_deref(), "/detokenize")?;
    let n_vocab = m.tokenizer.vocab_size();
    if let Some(bad) = req.tokens.iter().find(|&&t| t as usize >= n_vocab) {
        return Err(ApiError::bad_param(
            "tokens",
            format!("token id {bad} is outside the vocabulary of {n_vocab}"),
        ));
    }
    Ok(Json(
        json!({"content": m.tokenizer.decode(&req.tokens, false)}),
    ))
}

/// `GET /health`: the process is up.
pub async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /ready`: 200 once the models are loaded, 503 while loading and
/// while draining.
pub async fn ready(State(state): State<Arc<AppState>>) -> Response {
    let status = if state.draining.load(Ordering::SeqCst) {
        "draining"
    } else if state.registry.get().is_none() {
        "loading"
    } else {
        return Json(json!({"status": "ready"})).into_response();
    };
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({"status": status})),
    )
        .into_response()
}

/// `GET /metrics`: Prometheus text format.
pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response()
}
