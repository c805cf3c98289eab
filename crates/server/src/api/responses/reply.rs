//! Responses API replies: the whole `response` object, or its typed
//! Server-Sent Events, each with a `sequence_number`:
//! `response.created`, `response.in_progress`, then per output item
//! `response.output_item.added`, for a message
//! `response.content_part.added`, `response.output_text.delta`...,
//! `response.output_text.done`, `response.content_part.done`, for a
//! function call `response.function_call_arguments.delta` and `.done`,
//! then `response.output_item.done`; last `response.completed` (or
//! `response.incomplete` when `max_output_tokens` cut the reply, or
//! `response.failed`).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::response::sse::{Event as SseEvent, Sse};
use futures_util::stream;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::{keep, ResponsesRequest};
use crate::api::parts::{Ending, Part, Parts, Whole};
use crate::api::tools::{call_id, Call};
use crate::error::ApiError;
use crate::generate::request::{Event, FinishReason};
use crate::state::{AppState, InFlight};

/// The request's settings a `response` object repeats.
pub fn echo(req: &ResponsesRequest) -> Value {
    json!({
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "tool_choice": req.tool_choice.clone().unwrap_or(json!("auto")),
        "tools": req.tools.clone().unwrap_or_default(),
        "text": {"format": req.text.as_ref().and_then(|t| t.format.clone())
                     .unwrap_or(json!({"type": "text"}))},
        "previous_response_id": req.previous_response_id,
        "store": req.store == Some(true),
        "parallel_tool_calls": req.parallel_tool_calls.unwrap_or(true),
    })
}

/// What a reply says besides its output.
pub struct Head {
    pub id: String,
    /// Unix time the request arrived.
    pub created: u64,
    pub model: String,
    pub input_tokens: usize,
    /// See [`echo`].
    pub echo: Value,
    /// With `store: true`: where to keep the conversation, and its
    /// messages so far.
    pub kept: Option<(Arc<AppState>, Vec<Value>)>,
}

/// A fresh item id with `prefix` (`msg`, `fc`).
fn item_id(prefix: &str) -> String {
    call_id().replacen("call", prefix, 1)
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    let content = if status == "in_progress" {
        json!([])
    } else {
        json!([{"type": "output_text", "text": text, "annotations": []}])
    };
    json!({"type": "message", "id": id, "status": status, "role": "assistant",
           "content": content})
}

fn call_item(id: &str, call: &str, c: &Call, arguments: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": id, "call_id": call, "name": c.name,
           "arguments": arguments, "status": status})
}

impl Head {
    /// The `response` object: in progress (`ending` `None`) or finished
    /// with `output`. A finished stored response is kept.
    fn object(&self, output: Vec<Value>, ending: Option<&Ending>) -> Value {
        let (status, incomplete) = match ending {
            None => ("in_progress", Value::Null),
            Some(e) if e.reason == FinishReason::Length && !e.calls => {
                ("incomplete", json!({"reason": "max_output_tokens"}))
            }
            Some(_) => ("completed", Value::Null),
        };
        let usage = ending.map_or(Value::Null, |e| {
            json!({"input_tokens": self.input_tokens,
                   "input_tokens_details": {"cached_tokens": e.usage.cached_tokens},
                   "output_tokens": e.usage.completion_tokens,
                   "output_tokens_details": {"reasoning_tokens": 0},
                   "total_tokens": self.input_tokens + e.usage.completion_tokens})
        });
        if let (Some((state, messages)), Some(_)) = (&self.kept, ending) {
            keep(state, &self.id, messages.clone(), &output);
        }
        let mut v = json!({"id": self.id, "object": "response", "created_at": self.created,
            "status": status, "error": null, "incomplete_details": incomplete,
            "model": self.model, "output": output, "usage": usage, "metadata": {}});
        if let (Some(m), Some(e)) = (v.as_object_mut(), self.echo.as_object()) {
            m.extend(e.clone());
        }
        v
    }

    /// The whole reply.
    pub fn response(&self, w: &Whole) -> Value {
        let mut output = Vec::new();
        if !w.text.is_empty() {
            output.push(message_item(&item_id("msg"), &w.text, "completed"));
        }
        for c in &w.calls {
            output.push(call_item(
                &item_id("fc"),
                &call_id(),
                c,
                &c.arguments,
                "completed",
            ));
        }
        self.object(output, Some(&w.ending))
    }
}

/// The state of a streamed reply.
struct Streaming {
    head: Head,
    rx: UnboundedReceiver<Event>,
    parts: Parts,
    frames: VecDeque<SseEvent>,
    sequence: u64,
    /// Finished output items.
    output: Vec<Value>,
    /// The message item being written: its id and text so far.
    text: Option<(String, String)>,
    done: bool,
    _guard: InFlight,
}

impl Streaming {
    /// Queues the event `kind` with `fields` and the next sequence number.
    fn push(&mut self, kind: &str, mut fields: Value) {
        fields["type"] = json!(kind);
        fields["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        self.frames
            .push_back(SseEvent::default().event(kind).data(fields.to_string()));
    }

    fn close_text(&mut self) {
        let Some((id, text)) = self.text.take() else {
            return;
        };
        let index = self.output.len();
        let part = json!({"type": "output_text", "text": text, "annotations": []});
        self.push(
            "response.output_text.done",
            json!({"item_id": id, "output_index": index, "content_index": 0,
                   "text": text, "logprobs": []}),
        );
        self.push(
            "response.content_part.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
        );
        let item = message_item(&id, &text, "completed");
        self.push(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        self.output.push(item);
    }

    fn part(&mut self, p: Part) {
        match p {
            Part::Text(t) => {
                let index = self.output.len();
                if self.text.is_none() {
                    let id = item_id("msg");
                    self.push(
                        "response.output_item.added",
                        json!({"output_index": index,
                               "item": message_item(&id, "", "in_progress")}),
                    );
                    self.push(
                        "response.content_part.added",
                        json!({"item_id": id, "output_index": index, "content_index": 0,
                               "part": {"type": "output_text", "text": "", "annotations": []}}),
                    );
                    self.text = Some((id, String::new()));
                }
                let id = self.text.as_ref().map(|t| t.0.clone()).unwrap_or_default();
                self.push(
                    "response.output_text.delta",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                           "delta": t, "logprobs": []}),
                );
                if let Some((_, text)) = &mut self.text {
                    text.push_str(&t);
                }
            }
            Part::Call(c) => {
                self.close_text();
                let index = self.output.len();
                let (id, call) = (item_id("fc"), call_id());
                self.push(
                    "response.output_item.added",
                    json!({"output_index": index,
                           "item": call_item(&id, &call, &c, "", "in_progress")}),
                );
                self.push(
                    "response.function_call_arguments.delta",
                    json!({"item_id": id, "output_index": index, "delta": c.arguments}),
                );
                self.push(
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": index, "name": c.name,
                           "arguments": c.arguments}),
                );
                let item = call_item(&id, &call, &c, &c.arguments, "completed");
                self.push(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                );
                self.output.push(item);
            }
            Part::End(e) => {
                self.close_text();
                let output = std::mem::take(&mut self.output);
                let response = self.head.object(output, Some(&e));
                let kind = if response["status"] == "incomplete" {
                    "response.incomplete"
                } else {
                    "response.completed"
                };
                self.push(kind, json!({"response": response}));
                self.done = true;
            }
            Part::Failed(e) => self.fail(&e),
        }
    }

    fn fail(&mut self, e: &ApiError) {
        let mut response = self.head.object(Vec::new(), None);
        response["status"] = json!("failed");
        response["error"] = json!({"code": "server_error", "message": e.message});
        self.push("response.failed", json!({"response": response}));
        self.done = true;
    }
}

/// The reply as typed events.
pub fn stream(
    head: Head,
    rx: UnboundedReceiver<Event>,
    parts: Parts,
    guard: InFlight,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    let mut st = Streaming {
        head,
        rx,
        parts,
        frames: VecDeque::new(),
        sequence: 0,
        output: Vec::new(),
        text: None,
        done: false,
        _guard: guard,
    };
    let opening = st.head.object(Vec::new(), None);
    st.push("response.created", json!({"response": opening}));
    st.push("response.in_progress", json!({"response": opening}));
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
