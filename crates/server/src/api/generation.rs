//! Hands a checked request to its model's scheduler and answers: the
//! whole JSON at the end, or Server-Sent Events (`data: {...}` frames
//! ending with `data: [DONE]`) as tokens come. Dropping the response (the
//! client went away) drops the event receiver, which the scheduler sees at
//! its next step and frees the request's sequences.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::render::{gather, ChoiceText, Reply, Shape};
use crate::error::ApiError;
use crate::generate::request::{Event, GenParams, GenRequest};
use crate::generate::GenModel;
use crate::queue::Refused;
use crate::state::{AppState, InFlight};

/// A fresh response id with `prefix` (`chatcmpl`, `cmpl`).
pub fn response_id(prefix: &str, started: u64) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{started:x}{:08x}",
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A checked generation request.
pub struct Job {
    pub model: Arc<GenModel>,
    pub prompt: Vec<u32>,
    pub params: GenParams,
    pub shape: Shape,
    pub stream: bool,
    pub include_usage: bool,
    pub arrived: Instant,
}

/// Queues `job` and answers it.
pub async fn respond(state: &Arc<AppState>, job: Job) -> Result<Response, ApiError> {
    let guard = state.begin();
    let (tx, rx) = unbounded_channel();
    let logprobs = job.params.logprobs.is_some();
    let reply = Reply {
        shape: job.shape,
        id: response_id(
            match job.shape {
                Shape::Chat => "chatcmpl",
                Shape::Text => "cmpl",
            },
            state.started,
        ),
        created: now_secs(),
        model: job.model.clone(),
        n: job.params.n,
        include_usage: job.include_usage,
    };
    let req = GenRequest {
        prompt: job.prompt,
        params: job.params,
        events: tx,
        arrived: job.arrived,
    };
    match job.model.queue.push(req) {
        Ok(waiting) => {
            job.model.metrics.queue.set(waiting as i64);
        }
        Err(Refused::Full) => return Err(ApiError::queue_full()),
        Err(Refused::Closed) => return Err(ApiError::unavailable("the server is shutting down")),
    }
    if job.stream {
        return Ok(stream_reply(reply, rx, guard).into_response());
    }
    let mut choices: Vec<ChoiceText> = (0..reply.n).map(|_| ChoiceText::default()).collect();
    let mut rx = rx;
    let usage = loop {
        match rx.recv().await {
            Some(Event::Done(u)) => break u,
            Some(Event::Failed(e)) => return Err(e),
            Some(ev) => gather(&mut choices, ev),
            None => return Err(ApiError::internal("the scheduler dropped the request")),
        }
    };
    drop(guard);
    Ok(Json(reply.full(&choices, usage, logprobs)).into_response())
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The state of an SSE reply.
struct Streaming {
    reply: Reply,
    rx: UnboundedReceiver<Event>,
    frames: VecDeque<SseEvent>,
    offsets: Vec<usize>,
    done: bool,
    _guard: InFlight,
}

fn data(v: &serde_json::Value) -> SseEvent {
    SseEvent::default().data(v.to_string())
}

fn stream_reply(
    reply: Reply,
    rx: UnboundedReceiver<Event>,
    guard: InFlight,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    let frames = reply.opening_chunks().iter().map(data).collect();
    let st = Streaming {
        offsets: vec![0; reply.n],
        reply,
        rx,
        frames,
        done: false,
        _guard: guard,
    };
    Sse::new(stream::unfold(st, |mut st| async move {
        loop {
            if let Some(f) = st.frames.pop_front() {
                return Some((Ok(f), st));
            }
            if st.done {
                return None;
            }
            let ev = st.rx.recv().await;
            let end = matches!(ev, None | Some(Event::Done(_)) | Some(Event::Failed(_)));
            match &ev {
                Some(Event::Failed(e)) => st.frames.push_back(data(&e.body())),
                None => st.frames.push_back(data(
                    &ApiError::internal("the scheduler dropped the request").body(),
                )),
                Some(ev) => {
                    if let Some(v) = st.reply.chunk(ev, &mut st.offsets) {
                        st.frames.push_back(data(&v));
                    }
                }
            }
            if end {
                st.frames.push_back(SseEvent::default().data("[DONE]"));
                st.done = true;
            }
        }
    }))
}
