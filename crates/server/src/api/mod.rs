//! The HTTP routes and the layers around them: API-key check, body limit
//! (413 as an OpenAI error), CORS, request ids, tracing and panic catching
//! (500 as an OpenAI error).

pub mod anthropic;
pub mod chat;
pub mod completions;
pub mod embeddings;
pub mod extract;
pub mod generation;
pub mod misc;
pub mod ollama;
pub mod params;
pub mod parts;
pub mod render;
pub mod rerank;
pub mod responses;
pub mod tools;
pub mod translations;

use std::any::Any;
use std::sync::Arc;

/// The `input` of /v1/embeddings and /v1/translations: one text or a list
/// of texts; anything else (token ids, objects) is kept only to be refused
/// with a clear error.
#[derive(serde::Deserialize, Debug)]
#[serde(untagged)]
pub(crate) enum TextInput {
    One(String),
    Many(Vec<String>),
    Other(serde::de::IgnoredAny),
}

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderName, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::cors::CorsLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::{DefaultOnFailure, TraceLayer};

use crate::auth::key_matches;
use crate::error::ApiError;
use crate::state::AppState;

/// The request-id header set on every request and response.
const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The whole application.
pub fn router(state: Arc<AppState>) -> Router {
    let protected = Router::new()
        .route("/v1/chat/completions", post(chat::handle))
        .route("/v1/messages", post(anthropic::handle))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/v1/responses", post(responses::handle))
        .route("/v1/completions", post(completions::handle))
        .route("/v1/embeddings", post(embeddings::handle))
        .route("/v1/translations", post(translations::handle))
        .route("/v1/rerank", post(rerank::handle))
        .route("/rerank", post(rerank::handle))
        .route("/v1/models", get(misc::list_models))
        .route("/v1/models/{id}", get(misc::get_model))
        .route("/tokenize", post(misc::tokenize))
        .route("/detokenize", post(misc::detokenize))
        .route("/metrics", get(misc::metrics))
        .route("/api/chat", post(ollama::chat))
        .route("/api/generate", post(ollama::generate))
        .route("/api/embed", post(ollama::embed))
        .route("/api/embeddings", post(ollama::embeddings_legacy))
        .route("/api/show", post(ollama::show))
        .route("/api/tags", get(ollama::tags))
        .route("/api/ps", get(ollama::ps))
        .route("/api/version", get(ollama::version));
    let routes = Router::new()
        .route("/health", get(misc::health))
        .route("/ready", get(misc::ready))
        .merge(protected)
        .fallback(no_route);
    with_layers(routes, state)
}

/// The routes `/metrics` counts responses of (any other path counts as
/// `other`, so clients cannot grow the label set).
const ROUTES: [&str; 25] = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/translations",
    "/v1/rerank",
    "/rerank",
    "/v1/models",
    "/tokenize",
    "/detokenize",
    "/metrics",
    "/health",
    "/ready",
    "/v1/models/{id}",
    "/api/chat",
    "/api/generate",
    "/api/embed",
    "/api/embeddings",
    "/api/show",
    "/api/tags",
    "/api/ps",
    "/api/version",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/responses",
    "other",
];

/// The paths anyone may ask for without the API key.
const OPEN_PATHS: [&str; 2] = ["/health", "/ready"];

/// The layers every route runs under. The key is checked before the body
/// limit (a client without the key learns nothing, not even the limit).
fn with_layers(routes: Router<Arc<AppState>>, state: Arc<AppState>) -> Router {
    let limit = state.limits.body_bytes;
    routes
        .layer(DefaultBodyLimit::max(limit))
        .layer(RequestBodyLimitLayer::new(limit))
        .layer(middleware::map_response_with_state(
            limit,
            openai_body_limit_error,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), require_key))
        .layer(CorsLayer::permissive())
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            count_response,
        ))
        .layer(
            TraceLayer::new_for_http()
                .on_failure(DefaultOnFailure::new().level(tracing::Level::WARN)),
        )
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
        .with_state(state)
}

async fn no_route(req: Request) -> ApiError {
    ApiError::no_route(req.method().as_str(), req.uri().path())
}

/// The route label of `path` (see [`ROUTES`]).
fn route_label(path: &str) -> &'static str {
    if let Some(r) = ROUTES.iter().find(|r| **r == path) {
        return r;
    }
    if path.starts_with("/v1/models/") {
        return "/v1/models/{id}";
    }
    "other"
}

/// Counts every response by route and status.
async fn count_response(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let route = route_label(req.uri().path());
    let resp = next.run(req).await;
    state.metrics.response(route, resp.status().as_u16());
    resp
}

/// The token of an `Authorization: Bearer TOKEN` header (the scheme in
/// any case, as RFC 9110 has it).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start())
}

/// Bearer-token check (constant time) when the server has a key; every
/// path but `/health` and `/ready` needs it. The key may come as
/// Anthropic's `x-api-key` header too.
async fn require_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(want) = &state.api_key_hash {
        if OPEN_PATHS.contains(&req.uri().path()) || req.method() == axum::http::Method::OPTIONS {
            return next.run(req).await;
        }
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token)
            .or_else(|| req.headers().get("x-api-key").and_then(|v| v.to_str().ok()))
            .unwrap_or("");
        if !key_matches(given, want) {
            if anthropic::PATHS.contains(&req.uri().path()) {
                return anthropic::reply::AnthropicError(ApiError::unauthorized()).into_response();
            }
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(req).await
}

/// The body-limit layer answers 413 in plain text; make it OpenAI JSON.
async fn openai_body_limit_error(State(limit): State<usize>, resp: Response) -> Response {
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if resp.status() == StatusCode::PAYLOAD_TOO_LARGE && !is_json {
        return ApiError::too_large(limit).into_response();
    }
    resp
}

fn panic_response(_panic: Box<dyn Any + Send + 'static>) -> Response {
    ApiError::internal("internal error: the request handler panicked").into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Limits;
    use axum::body::Body;
    use tower::ServiceExt;

    async fn boom() -> &'static str {
        panic!("a handler bug")
    }

    #[test]
    fn bearer_scheme_in_any_case() {
        assert_eq!(bearer_token("Bearer sk-1"), Some("sk-1"));
        assert_eq!(bearer_token("bearer sk-1"), Some("sk-1"));
        assert_eq!(bearer_token("BEARER  sk-1"), Some("sk-1"));
        assert_eq!(bearer_token("Basic sk-1"), None);
        assert_eq!(bearer_token("Bearersk-1"), None);
        assert_eq!(route_label("/v1/models/x"), "/v1/models/{id}");
        assert_eq!(route_label("/v1/embeddings"), "/v1/embeddings");
        assert_eq!(route_label("/wat"), "other");
    }

    #[test]
    fn a_panicking_handler_answers_500_in_openai_shape() {
        let state = Arc::new(AppState::new(Limits::default(), None, 0));
        let app = with_layers(Router::new().route("/boom", get(boom)), state);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (status, request_id, body) = rt.block_on(async {
            let req = Request::get("/boom").body(Body::empty()).unwrap();
            let resp = app.oneshot(req).await.unwrap();
            let status = resp.status();
            let id = resp.headers().get(&REQUEST_ID).cloned();
            let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
                .await
                .unwrap();
            (status, id, body)
        });
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(request_id.is_some());
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["type"], "server_error", "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("panicked"));
    }
}
