//! A JSON body extractor whose failures are OpenAI-shaped errors: 413 over
//! the body limit, 408 when the body does not arrive within the body timeout, 400 for bad JSON (invalid UTF-8 included) or a field of
//! the wrong type.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::state::AppState;

/// The request body parsed as `T`.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<std::sync::Arc<AppState>> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(
        req: Request,
        state: &std::sync::Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let limit = state.limits.body_bytes;
        let body = tokio::time::timeout(state.limits.body_timeout, Bytes::from_request(req, state))
            .await
            .map_err(|_| ApiError::body_timeout(state.limits.body_timeout))?;
        let bytes = body.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::too_large(limit)
            } else {
                ApiError::bad_request(format!("cannot read the request body: {}", e.body_text()))
            }
        })?;
        serde_json::from_slice(&bytes)
            .map(ApiJson)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
    }
}
