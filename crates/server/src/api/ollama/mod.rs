//! Ollama's API on the same server and port: `POST /api/chat`,
//! `/api/generate`, `/api/embed`, `/api/embeddings`, `/api/show`, `GET
//! /api/tags`, `/api/ps`, `/api/version`. One translation layer: each
//! request becomes the OpenAI request of the same meaning
//! (`request.rs`), served by the same route code and scheduler (so the
//! same conversation gives the same tokens), and the reply is rewritten
//! in Ollama's shape (`reply.rs`). Errors are `{"error": "..."}` with the
//! status the OpenAI route would give.

mod reply;
mod request;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::extract::ApiJson;
use crate::error::ApiError;
use crate::registry::{Kind, Served};
use crate::state::AppState;
use reply::Route;
use request::{ChatRequest, EmbedRequest, Generate, GenerateRequest};

/// An error in Ollama's shape: `{"error": "message"}`.
pub struct OllamaError(pub ApiError);

impl From<ApiError> for OllamaError {
    fn from(e: ApiError) -> Self {
        OllamaError(e)
    }
}

impl IntoResponse for OllamaError {
    fn into_response(self) -> Response {
        let e = self.0;
        let mut resp = (e.status, Json(json!({"error": e.message}))).into_response();
        // 429 and 503 say when to come back, as the OpenAI routes do.
        if let Some(after) = e
            .clone()
            .into_response()
            .headers()
            .get(axum::http::header::RETRY_AFTER)
        {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, after.clone());
        }
        resp
    }
}

/// A JSON request body, its errors (bad JSON, too slow, too large) in
/// Ollama's shape.
pub struct Body(Value);

impl axum::extract::FromRequest<Arc<AppState>> for Body {
    type Rejection = OllamaError;

    async fn from_request(
        req: axum::extract::Request,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let ApiJson(v) = ApiJson::<Value>::from_request(req, state).await?;
        Ok(Body(v))
    }
}

/// `body` parsed as `T`: a wrong type or a missing field is a 400 naming
/// it.
fn parse<T: DeserializeOwned>(body: Value) -> Result<T, OllamaError> {
    serde_json::from_value(body)
        .map_err(|e| ApiError::bad_request(format!("invalid request: {e}")).into())
}

/// The OpenAI request `v` as route `R`'s body.
fn openai<T: DeserializeOwned>(v: Value) -> Result<ApiJson<T>, OllamaError> {
    serde_json::from_value(v)
        .map(ApiJson)
        .map_err(|e| ApiError::bad_request(format!("invalid request: {e}")).into())
}

/// The served model `name` means: its own name, or with Ollama's default
/// tag `:latest`.
fn model_name(state: &AppState, name: &str) -> Result<String, OllamaError> {
    let reg = state.models()?;
    if let Some(m) = reg.models.iter().find(|m| m.answers_to(name)) {
        return Ok(m.name.clone());
    }
    if let Some(m) = name
        .strip_suffix(":latest")
        .and_then(|n| reg.models.iter().find(|m| m.answers_to(n)))
    {
        return Ok(m.name.clone());
    }
    let names: Vec<&str> = reg.models.iter().map(|m| m.name.as_str()).collect();
    Err(ApiError {
        message: format!("model '{name}' not found (served: {})", names.join(", ")),
        ..ApiError::model_not_found(name, &names)
    }
    .into())
}

/// Now, as Ollama writes times (RFC 3339, UTC).
pub fn created_at() -> String {
    rfc3339(super::generation::now_secs())
}

/// `secs` since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ`.
fn rfc3339(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The "loaded" answer to a request with nothing to generate.
fn loaded(route: Route, model: &str) -> Response {
    let mut v =
        json!({"model": model, "created_at": created_at(), "done": true, "done_reason": "load"});
    match route {
        Route::Chat => v["message"] = json!({"role": "assistant", "content": ""}),
        Route::Generate => v["response"] = json!(""),
    }
    Json(v).into_response()
}

/// `POST /api/chat`.
pub async fn chat(
    State(state): State<Arc<AppState>>,
    Body(body): Body,
) -> Result<Response, OllamaError> {
    let arrived = Instant::now();
    let req: ChatRequest = parse(body)?;
    let model = model_name(&state, &req.shared.model)?;
    let Some(v) = req.openai(&model)? else {
        state.models()?.generator(Some(&model), "/api/chat")?;
        return Ok(loaded(Route::Chat, &model));
    };
    let resp = super::chat::handle(State(state.clone()), openai(v)?).await?;
    Ok(reply::answer(resp, Route::Chat, &model, arrived, req.shared.stream()).await)
}

/// `POST /api/generate`.
pub async fn generate(
    State(state): State<Arc<AppState>>,
    Body(body): Body,
) -> Result<Response, OllamaError> {
    let arrived = Instant::now();
    let req: GenerateRequest = parse(body)?;
    let model = model_name(&state, &req.shared.model)?;
    let stream = req.shared.stream();
    let resp = match req.openai(&model)? {
        Generate::Load => {
            state.models()?.generator(Some(&model), "/api/generate")?;
            return Ok(loaded(Route::Generate, &model));
        }
        Generate::Chat(v) => super::chat::handle(State(state.clone()), openai(v)?).await?,
        Generate::Raw(v) => super::completions::handle(State(state.clone()), openai(v)?).await?,
    };
    Ok(reply::answer(resp, Route::Generate, &model, arrived, stream).await)
}

/// The vectors of an `/v1/embeddings` reply, with its token count.
async fn embeddings(
    state: Arc<AppState>,
    body: Value,
    legacy: bool,
) -> Result<(String, Vec<Value>, u64), OllamaError> {
    let req: EmbedRequest = parse(body)?;
    let model = model_name(&state, &req.model)?;
    let mut v = req.openai(legacy)?;
    v["model"] = json!(model);
    let resp = super::embeddings::handle(State(state), openai(v)?)
        .await?
        .into_response();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| ApiError::internal(e.to_string()))?;
    if !status.is_success() {
        let msg = v["error"]["message"]
            .as_str()
            .unwrap_or("request failed")
            .to_string();
        return Err(ApiError {
            status,
            message: msg,
            param: None,
            code: None,
        }
        .into());
    }
    let vectors = v["data"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| d["embedding"].clone())
        .collect();
    Ok((
        model,
        vectors,
        v["usage"]["prompt_tokens"].as_u64().unwrap_or(0),
    ))
}

/// `POST /api/embed`: `{"embeddings": [[...], ...]}`.
pub async fn embed(
    State(state): State<Arc<AppState>>,
    Body(body): Body,
) -> Result<Json<Value>, OllamaError> {
    let arrived = Instant::now();
    let (model, vectors, tokens) = embeddings(state, body, false).await?;
    Ok(Json(json!({"model": model, "embeddings": vectors,
        "total_duration": arrived.elapsed().as_nanos() as u64, "load_duration": 0,
        "prompt_eval_count": tokens})))
}

/// `POST /api/embeddings` (Ollama's older route): `{"embedding": [...]}`.
pub async fn embeddings_legacy(
    State(state): State<Arc<AppState>>,
    Body(body): Body,
) -> Result<Json<Value>, OllamaError> {
    let (_, mut vectors, _) = embeddings(state, body, true).await?;
    Ok(Json(
        json!({"embedding": vectors.pop().unwrap_or(json!([]))}),
    ))
}

/// A model as `/api/tags` and `/api/ps` list it (`None`: a translator or
/// a reranker, which Ollama's API has no use for).
fn model_entry(m: &Served, modified: &str) -> Option<Value> {
    let family = match &m.kind {
        Kind::Generate(_) => "decoder",
        Kind::Embed(_) => "embedder",
        Kind::Translate(_) | Kind::Rerank(_) => return None,
    };
    Some(
        json!({"name": m.name, "model": m.name, "modified_at": modified, "size": 0,
        "digest": "", "details": {"parent_model": "", "format": "gguf", "family": family,
        "families": [family], "parameter_size": "", "quantization_level": ""}}),
    )
}

/// `GET /api/tags`: the served models.
pub async fn tags(State(state): State<Arc<AppState>>) -> Result<Json<Value>, OllamaError> {
    let modified = rfc3339(state.started);
    let models: Vec<Value> = state
        .models()?
        .models
        .iter()
        .filter_map(|m| model_entry(m, &modified))
        .collect();
    Ok(Json(json!({"models": models})))
}

/// `GET /api/ps`: the loaded models (all served ones stay loaded).
pub async fn ps(State(state): State<Arc<AppState>>) -> Result<Json<Value>, OllamaError> {
    let modified = rfc3339(state.started);
    let models: Vec<Value> = state
        .models()?
        .models
        .iter()
        .filter_map(|m| model_entry(m, &modified))
        .map(|mut e| {
            e["expires_at"] = json!("2262-01-01T00:00:00Z");
            e["size_vram"] = json!(0);
            e
        })
        .collect();
    Ok(Json(json!({"models": models})))
}

/// `POST /api/show`: `{"model": name}` (or the older `name`).
pub async fn show(
    State(state): State<Arc<AppState>>,
    Body(body): Body,
) -> Result<Json<Value>, OllamaError> {
    let name = match body.get("model").or_else(|| body.get("name")) {
        Some(Value::String(n)) => n.clone(),
        Some(other) => {
            return Err(ApiError::bad_param(
                "model",
                format!("model must be a string, got {other}"),
            )
            .into())
        }
        None => return Err(ApiError::bad_param("model", "model is required").into()),
    };
    let name = model_name(&state, &name)?;
    let reg = state.models()?;
    let m = reg
        .models
        .iter()
        .find(|m| m.name == name)
        .ok_or_else(|| ApiError::internal("model vanished"))?;
    let modified = rfc3339(state.started);
    let entry = model_entry(m, &modified)
        .ok_or_else(|| ApiError::bad_param("model", format!("'{name}' is a translation model")))?;
    let (capabilities, info) = match &m.kind {
        Kind::Generate(g) => (
            json!(["completion", "tools"]),
            json!({"context_length": g.ctx}),
        ),
        _ => (json!(["embedding"]), json!({})),
    };
    Ok(Json(
        json!({"modelfile": "", "parameters": "", "template": "", "license": "",
        "details": entry["details"], "model_info": info, "capabilities": capabilities,
        "modified_at": modified}),
    ))
}

/// `GET /api/version`: ferrite's version.
pub async fn version() -> Json<Value> {
    Json(json!({"version": env!("CARGO_PKG_VERSION")}))
}
