//! Messages API replies: the whole `message` object, or its stream of
//! named Server-Sent Events (`message_start`, then per content block
//! `content_block_start`, `content_block_delta` (`text_delta` or
//! `input_json_delta`), `content_block_stop`, a `ping` after the first
//! block opens, then `message_delta` with the stop reason and usage, and
//! `message_stop`); and the error shape of these routes.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::http::{header, HeaderValue};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::api::generation::response_id;
use crate::api::parts::{Ending, Part, Parts, Whole};
use crate::api::tools::{call_id, Call};
use crate::error::ApiError;
use crate::generate::request::{Event, FinishReason};
use crate::state::InFlight;

/// An error in Anthropic's shape: `{"type": "error", "error": {"type",
/// "message"}}`, with the status the OpenAI routes give.
#[derive(Debug)]
pub struct AnthropicError(pub ApiError);

impl From<ApiError> for AnthropicError {
    fn from(e: ApiError) -> Self {
        AnthropicError(e)
    }
}

/// Anthropic's error `type` for a status.
fn error_type(status: u16) -> &'static str {
    match status {
        400 | 408 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 => "overloaded_error",
        _ => "api_error",
    }
}

/// The JSON body of an error.
pub fn error_body(e: &ApiError) -> Value {
    json!({"type": "error",
           "error": {"type": error_type(e.status.as_u16()), "message": e.message}})
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        let e = self.0;
        let mut resp = (e.status, axum::Json(error_body(&e))).into_response();
        if matches!(e.status.as_u16(), 429 | 503) {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}

/// A fresh message id (`msg_...`).
pub fn message_id(started: u64) -> String {
    response_id("msg", started).replacen('-', "_", 1)
}

/// What a reply says besides its content.
pub struct Head {
    pub id: String,
    pub model: String,
    pub input_tokens: usize,
    /// The request's stop strings, as the scheduler has them (a
    /// `StopString(i)` ending names `stops[i]`).
    pub stops: Vec<String>,
}

/// A `tool_use` block of a call (`input` parsed; the call's arguments
/// always parse, see `tools::split`).
fn tool_use(c: &Call) -> Value {
    let input: Value = serde_json::from_str(&c.arguments).unwrap_or_else(|_| json!({}));
    json!({"type": "tool_use", "id": call_id().replacen("call", "toolu", 1),
           "name": c.name, "input": input})
}

impl Head {
    /// `stop_reason` and `stop_sequence` of an ending.
    fn stop(&self, e: &Ending) -> (&'static str, Value) {
        match e.reason {
            _ if e.calls => ("tool_use", Value::Null),
            FinishReason::Length => ("max_tokens", Value::Null),
            FinishReason::StopString(i) => ("stop_sequence", json!(self.stops.get(i))),
            _ => ("end_turn", Value::Null),
        }
    }

    fn usage(&self, e: &Ending) -> Value {
        json!({"input_tokens": self.input_tokens,
               "output_tokens": e.usage.completion_tokens,
               "cache_read_input_tokens": e.usage.cached_tokens,
               "cache_creation_input_tokens": 0})
    }

    /// The `message` object, with `content` and the ending (`None`: the
    /// opening of a stream).
    fn envelope(&self, content: Vec<Value>, ending: Option<&Ending>) -> Value {
        let (reason, sequence) = match ending {
            Some(e) => {
                let (r, s) = self.stop(e);
                (json!(r), s)
            }
            None => (Value::Null, Value::Null),
        };
        let usage = match ending {
            Some(e) => self.usage(e),
            None => json!({"input_tokens": self.input_tokens, "output_tokens": 0}),
        };
        json!({"id": self.id, "type": "message", "role": "assistant", "content": content,
               "model": self.model, "stop_reason": reason, "stop_sequence": sequence,
               "usage": usage})
    }

    /// The whole reply.
    pub fn message(&self, w: &Whole) -> Value {
        let mut content = Vec::new();
        if !w.text.is_empty() {
            content.push(json!({"type": "text", "text": w.text}));
        }
        content.extend(w.calls.iter().map(tool_use));
        self.envelope(content, Some(&w.ending))
    }
}

/// A named event.
fn named(name: &str, v: Value) -> SseEvent {
    SseEvent::default().event(name).data(v.to_string())
}

/// The state of a streamed reply.
struct Streaming {
    head: Head,
    rx: UnboundedReceiver<Event>,
    parts: Parts,
    frames: VecDeque<SseEvent>,
    /// Index of the next content block.
    next_block: usize,
    /// The text block open now, if one is.
    text_open: Option<usize>,
    pinged: bool,
    done: bool,
    _guard: InFlight,
}

impl Streaming {
    fn push(&mut self, name: &str, v: Value) {
        self.frames.push_back(named(name, v));
    }

    fn open_block(&mut self, block: Value) -> usize {
        let index = self.next_block;
        self.next_block += 1;
        self.push(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": block}),
        );
        if !self.pinged {
            self.pinged = true;
            self.push("ping", json!({"type": "ping"}));
        }
        index
    }

    fn close_text(&mut self) {
        if let Some(index) = self.text_open.take() {
            self.push(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            );
        }
    }

    /// The events of one part.
    fn part(&mut self, p: Part) {
        match p {
            Part::Text(t) => {
                let index = match self.text_open {
                    Some(i) => i,
                    None => {
                        let i = self.open_block(json!({"type": "text", "text": ""}));
                        self.text_open = Some(i);
                        i
                    }
                };
                self.push(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index,
                           "delta": {"type": "text_delta", "text": t}}),
                );
            }
            Part::Call(c) => {
                self.close_text();
                let mut block = tool_use(&c);
                block["input"] = json!({});
                let index = self.open_block(block);
                self.push(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index,
                           "delta": {"type": "input_json_delta", "partial_json": c.arguments}}),
                );
                self.push(
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": index}),
                );
            }
            Part::End(e) => {
                self.close_text();
                if !self.pinged {
                    self.pinged = true;
                    self.push("ping", json!({"type": "ping"}));
                }
                let (reason, sequence) = self.head.stop(&e);
                let usage = self.head.usage(&e);
                self.push(
                    "message_delta",
                    json!({"type": "message_delta",
                           "delta": {"stop_reason": reason, "stop_sequence": sequence},
                           "usage": usage}),
                );
                self.push("message_stop", json!({"type": "message_stop"}));
                self.done = true;
            }
            Part::Failed(e) => self.fail(&e),
        }
    }

    fn fail(&mut self, e: &ApiError) {
        self.push("error", error_body(e));
        self.done = true;
    }
}

/// The reply as a stream of named events.
pub fn stream(
    head: Head,
    rx: UnboundedReceiver<Event>,
    parts: Parts,
    guard: InFlight,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    let mut st = Streaming {
        rx,
        parts,
        frames: VecDeque::new(),
        next_block: 0,
        text_open: None,
        pinged: false,
        done: false,
        _guard: guard,
        head,
    };
    let start = json!({"type": "message_start", "message": st.head.envelope(Vec::new(), None)});
    st.push("message_start", start);
    Sse::new(stream::unfold(st, |mut st| async move {
        loop {
            if let Some(f) = st.frames.pop_front() {
                return Some((Ok(f), st));
            }
            if st.done {
                return None;
            }
            match st.rx.recv().await {
                Some(ev) => {
                    for p in st.parts.push(ev) {
                        st.part(p);
                    }
                }
                None => st.fail(&ApiError::internal("the scheduler dropped the request")),
            }
        }
    }))
}
