//! Errors as OpenAI's API returns them: an HTTP status and a JSON body
//! `{"error": {"message", "type", "param", "code"}}`.
//! Reference: the OpenAI API's error object.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ferrite::ErrorKind;
use serde_json::json;

/// 499 (nginx's "client closed request"): the answer to a request its
/// client abandoned.
const CLIENT_CLOSED_REQUEST: StatusCode = match StatusCode::from_u16(499) {
    Ok(s) => s,
    Err(_) => StatusCode::BAD_REQUEST,
};

/// Why the server could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A model did not load.
    #[error(transparent)]
    Model(#[from] ferrite::Error),
    /// The system refused something the server needs (a socket, a thread).
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The configuration is inconsistent.
    #[error("{0}")]
    Config(String),
}

impl ServeError {
    pub fn io(what: impl Into<String>, source: std::io::Error) -> ServeError {
        ServeError::Io {
            what: what.into(),
            source,
        }
    }
}

/// An error response.
#[derive(Debug, Clone, PartialEq)]
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

    /// 413: the request asks for more work than one request may.
    pub fn too_much_work(message: impl Into<String>) -> ApiError {
        ApiError {
            code: Some("request_too_large"),
            ..Self::new(StatusCode::PAYLOAD_TOO_LARGE, message)
        }
    }

    /// 408: the body did not arrive in time.
    pub fn body_timeout(limit: std::time::Duration) -> ApiError {
        ApiError {
            code: Some("request_timeout"),
            ..Self::new(
                StatusCode::REQUEST_TIMEOUT,
                format!("the request body did not arrive within {limit:?}"),
            )
        }
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

    /// The one mapping from a library error to a response, by its kind: a
    /// bad input is a 400 naming `param` (`context_length_exceeded` when
    /// it does not fit), a model that does not exist a 404, a cancelled
    /// request a 499 (the client closed it; nobody reads the answer), and
    /// anything else (a model that fails, I/O, a worker gone) a 500 with
    /// the library's message.
    pub fn from_lib(e: &ferrite::Error, param: &'static str) -> ApiError {
        let message = e.to_string();
        match e.kind() {
            ErrorKind::BadInput => ApiError {
                code: matches!(e, ferrite::Error::ContextFull { .. })
                    .then_some("context_length_exceeded"),
                ..Self::bad_param(param, message)
            },
            ErrorKind::NotFound => Self::new(StatusCode::NOT_FOUND, message),
            ErrorKind::Cancelled => ApiError {
                code: Some("cancelled"),
                ..Self::new(CLIENT_CLOSED_REQUEST, message)
            },
            ErrorKind::BadModel | ErrorKind::Internal => Self::internal(message),
        }
    }

    /// OpenAI's error `type` for the status.
    fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "authentication_error",
            404 => "not_found_error",
            413 | 408 | 400 => "invalid_request_error",
            499 => "cancelled",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_errors_map_by_kind() {
        let bad = ApiError::from_lib(&ferrite::Error::Input("too many beams".into()), "beams");
        assert_eq!(bad.status, StatusCode::BAD_REQUEST);
        assert_eq!(bad.param, Some("beams"));
        let full = ferrite::Error::ContextFull {
            needed: 9,
            used: 0,
            n_ctx: 8,
        };
        assert_eq!(
            ApiError::from_lib(&full, "prompt").code,
            Some("context_length_exceeded")
        );
        let cancelled = ApiError::from_lib(&ferrite::Error::Cancelled, "input");
        assert_eq!(cancelled.status.as_u16(), 499);
        let model = ApiError::from_lib(&ferrite::Error::model("m.gguf", "bad tensor"), "input");
        assert_eq!(model.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(model.message, "m.gguf: bad tensor");
        let gone = ApiError::from_lib(&ferrite::Error::NotFound("no model 'x'".into()), "model");
        assert_eq!(gone.status, StatusCode::NOT_FOUND);
    }
}
