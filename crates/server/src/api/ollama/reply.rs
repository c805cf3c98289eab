//! An OpenAI reply (always streamed inside, as Server-Sent Events) turned
//! into Ollama's: newline-delimited JSON objects as tokens come, or one
//! object at the end (`stream: false`), the last with `done: true`,
//! `done_reason` and the timing fields (nanoseconds, measured here: the
//! prompt's from the request's arrival to the first token, queueing
//! included; the reply's from the first token to the last).

use std::collections::VecDeque;
use std::time::Instant;

use axum::body::{Body, BodyDataStream};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::{json, Value};

use super::{created_at, OllamaError};
use crate::error::ApiError;

/// Which Ollama route answers: `/api/chat` (`message`) or
/// `/api/generate` (`response`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Chat,
    Generate,
}

/// What one OpenAI chunk carried.
enum Piece {
    Text(String),
    /// Function calls (OpenAI's shape, arguments as JSON text).
    Calls(Vec<Value>),
    Finish(String),
    Usage {
        prompt: u64,
        completion: u64,
    },
    Failed(String),
}

/// The pieces of an OpenAI chunk (chat or text completion).
fn pieces(chunk: &Value) -> Vec<Piece> {
    if let Some(e) = chunk.get("error") {
        let msg = e
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("generation failed");
        return vec![Piece::Failed(msg.to_string())];
    }
    let mut out = Vec::new();
    for c in chunk["choices"].as_array().into_iter().flatten() {
        let text = c["delta"]["content"].as_str().or(c["text"].as_str());
        if let Some(t) = text.filter(|t| !t.is_empty()) {
            out.push(Piece::Text(t.to_string()));
        }
        if let Some(calls) = c["delta"]["tool_calls"].as_array() {
            out.push(Piece::Calls(calls.clone()));
        }
        if let Some(r) = c["finish_reason"].as_str() {
            out.push(Piece::Finish(r.to_string()));
        }
    }
    if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
        out.push(Piece::Usage {
            prompt: u["prompt_tokens"].as_u64().unwrap_or(0),
            completion: u["completion_tokens"].as_u64().unwrap_or(0),
        });
    }
    out
}

/// OpenAI's calls in Ollama's shape: `{function: {name, arguments}}`
/// with the arguments as an object.
fn ollama_calls(calls: &[Value]) -> Vec<Value> {
    calls
        .iter()
        .map(|c| {
            let f = &c["function"];
            let args = match &f["arguments"] {
                Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| json!(s)),
                v => v.clone(),
            };
            json!({"function": {"name": f["name"], "arguments": args}})
        })
        .collect()
}

/// The reply being built: its route, model and times.
struct Builder {
    route: Route,
    model: String,
    arrived: Instant,
    first: Option<Instant>,
    reason: String,
    prompt_tokens: u64,
    completion_tokens: u64,
}

impl Builder {
    /// An object carrying `text` (and `calls`), not the last.
    fn part(&self, text: &str, calls: Option<Vec<Value>>) -> Value {
        let mut v = json!({"model": self.model, "created_at": created_at()});
        match self.route {
            Route::Chat => {
                let mut m = json!({"role": "assistant", "content": text});
                if let Some(c) = calls {
                    m["tool_calls"] = Value::Array(c);
                }
                v["message"] = m;
            }
            Route::Generate => v["response"] = json!(text),
        }
        v["done"] = json!(false);
        v
    }

    /// The last object (with `text`, `calls` when not streamed).
    fn last(&self, text: &str, calls: Option<Vec<Value>>) -> Value {
        let end = Instant::now();
        let first = self.first.unwrap_or(end);
        let ns = |d: std::time::Duration| d.as_nanos() as u64;
        let mut v = self.part(text, calls);
        let reason = match self.reason.as_str() {
            "length" => "length",
            _ => "stop",
        };
        for (k, x) in [
            ("done", json!(true)),
            ("done_reason", json!(reason)),
            ("total_duration", json!(ns(end - self.arrived))),
            ("load_duration", json!(0)),
            ("prompt_eval_count", json!(self.prompt_tokens)),
            ("prompt_eval_duration", json!(ns(first - self.arrived))),
            ("eval_count", json!(self.completion_tokens)),
            ("eval_duration", json!(ns(end - first))),
        ] {
            v[k] = x;
        }
        v
    }

    fn take(&mut self, p: &Piece) {
        if matches!(p, Piece::Text(_) | Piece::Calls(_)) && self.first.is_none() {
            self.first = Some(Instant::now());
        }
        match p {
            Piece::Finish(r) => self.reason = r.clone(),
            Piece::Usage { prompt, completion } => {
                self.prompt_tokens = *prompt;
                self.completion_tokens = *completion;
            }
            _ => {}
        }
    }
}

/// The JSON payloads of a Server-Sent Events body, as they come.
struct Events {
    body: BodyDataStream,
    buf: Vec<u8>,
    ready: VecDeque<Value>,
}

impl Events {
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(v) = self.ready.pop_front() {
                return Some(v);
            }
            let bytes = self.body.next().await?.ok()?;
            self.buf.extend_from_slice(&bytes);
            while let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buf.drain(..end + 2).collect();
                for line in event.split(|&b| b == b'\n') {
                    if let Some(data) = line.strip_prefix(b"data: ") {
                        if let Ok(v) = serde_json::from_slice::<Value>(data) {
                            self.ready.push_back(v);
                        }
                    }
                }
            }
        }
    }
}

/// Ollama's answer to the OpenAI route's `resp` (an error as
/// `{"error": ...}`, with its status).
pub async fn answer(
    resp: Response,
    route: Route,
    model: &str,
    arrived: Instant,
    stream: bool,
) -> Response {
    if !resp.status().is_success() {
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap_or_default();
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let msg = v["error"]["message"]
            .as_str()
            .unwrap_or("request failed")
            .to_string();
        return OllamaError(ApiError {
            status,
            message: msg,
            param: None,
            code: None,
        })
        .into_response();
    }
    let mut b = Builder {
        route,
        model: model.to_string(),
        arrived,
        first: None,
        reason: String::new(),
        prompt_tokens: 0,
        completion_tokens: 0,
    };
    let mut events = Events {
        body: resp.into_body().into_data_stream(),
        buf: Vec::new(),
        ready: VecDeque::new(),
    };
    if !stream {
        let (mut text, mut calls) = (String::new(), None);
        while let Some(chunk) = events.next().await {
            for p in pieces(&chunk) {
                b.take(&p);
                match p {
                    Piece::Text(t) => text.push_str(&t),
                    Piece::Calls(c) => calls = Some(ollama_calls(&c)),
                    Piece::Failed(m) => return OllamaError(ApiError::internal(m)).into_response(),
                    _ => {}
                }
            }
        }
        return axum::Json(b.last(&text, calls)).into_response();
    }
    let lines = futures_util::stream::unfold(Some((events, b)), |st| async move {
        let (mut events, mut b) = st?;
        loop {
            let Some(chunk) = events.next().await else {
                let last = b.last("", None);
                return Some((line(&last), None));
            };
            let mut out = String::new();
            for p in pieces(&chunk) {
                b.take(&p);
                match p {
                    Piece::Text(t) => out.push_str(&line(&b.part(&t, None))),
                    Piece::Calls(c) => out.push_str(&line(&b.part("", Some(ollama_calls(&c))))),
                    Piece::Failed(m) => return Some((line(&json!({"error": m})), None)),
                    _ => {}
                }
            }
            if !out.is_empty() {
                return Some((out, Some((events, b))));
            }
        }
    });
    let body = Body::from_stream(lines.map(Ok::<_, std::convert::Infallible>));
    ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response()
}

fn line(v: &Value) -> String {
    format!("{v}\n")
}
