//! Errors as OpenAI's API returns them: an HTTP status and a JSON body
//! `{"error": {"message", "type", "param", "code"}}`.
//! Reference: the OpenAI API's error object.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error response.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// The parameter at fault, if one is.
    pub param: Option<&'static str>,
    /// A short machine-readable code (`model_not_found`, ...).
    pub code: Option<&'static str>,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            param: None,
            code: None,
        }
    }

    /// 400: the request is malformed or a parameter is out of range.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 400 naming the parameter at fault.
    pub fn bad_param(param: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param),
            ..Self::bad_request(message)
        }
    }

    /// 401: missing or wrong API key.
    pub fn unauthorized() -> ApiError {
        ApiError {
            code: Some("invalid_api_key"),
            ..Self::new(
                StatusCode::UNAUTHORIZED,
                "invalid or missing API key (send `Authorization: Bearer KEY`)",
            )
        }
    }

    /// 404: no such model.
    pub fn model_not_found(name: &str, known: &[&str]) -> ApiError {
        ApiError {
            param: Some("model"),
            code: Some("model_not_found"),
            ..Self::new(
                StatusCode::NOT_FOUND,
                format!(
                    "the model '{name}' does not exist (served: {})",
                    known.join(", ")
                ),
            )
        }
    }

    /// 404: no such route.
    pub fn no_route(method: &str, path: &str) -> ApiError {
        Self::new(
            StatusCode::NOT_FOUND,
            format!("no endpoint {method} {path}"),
        )
    }

    /// 413: the body is over the limit.
    pub fn too_large(limit: usize) -> ApiError {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is larger than the limit of {limit} bytes"),
        )
    }

    /// 429: the queue is full.
    pub fn queue_full() -> ApiError {
        ApiError {
            code: Some("queue_full"),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "the server's queue is full; retry later",
            )
        }
    }

    /// 503: loading models, or shutting down.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }

    /// 500: an error inside the server.
    pub fn internal(message: impl Into<String>) -> ApiError {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// OpenAI's error `type` for the status.
    fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "authentication_error",
            404 => "not_found_error",
            413 | 400 => "invalid_request_error",
            429 => "rate_limit_error",
            503 => "unavailable_error",
            _ => "server_error",
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind(),
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, axum::Json(self.body())).into_response();
        if self.status == StatusCode::TOO_MANY_REQUESTS
            || self.status == StatusCode::SERVICE_UNAVAILABLE
        {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}
