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
use futures_util::{stream, StreamExt};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::render::{gather, ChoiceText, Reply, Shape};
use super::tools::Splitter;
use crate::error::ApiError;
use crate::generate::request::{Event, GenParams, GenRequest, Usage};
use crate::generate::GenModel;
use crate::state::{AppState, InFlight};

/// A fresh response id with `prefix` (`chatcmpl`, `cmpl`).
pub fn response_id(prefix: &str, started: u64) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{started:x}{:08x}",
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A checked generation request: one prompt (chat), or several (a text
/// completion's list of prompts), each run as its own request; prompt
/// `p`'s choices are numbered from `p * n`.
pub struct Job {
    pub model: Arc<GenModel>,
    pub prompts: Vec<(Vec<u32>, GenParams)>,
    /// Text each choice of prompt `p` starts with (`echo`: the prompt's).
    pub echo: Vec<String>,
    pub shape: Shape,
    /// The reply's function calls are parsed (`Some(legacy)`: as
    /// `function_call` when the request used the legacy `functions`).
    pub tools: Option<bool>,
    /// The functions the request declared: only these become calls.
    pub tool_names: Arc<[String]>,
    pub stream: bool,
    pub include_usage: bool,
    pub arrived: Instant,
}

/// Queues `job` and answers it.
pub async fn respond(state: &Arc<AppState>, job: Job) -> Result<Response, ApiError> {
    let guard = state.begin();
    let Some((_, first)) = job.prompts.first() else {
        return Err(ApiError::bad_param("prompt", "prompt is required"));
    };
    let logprobs = first.logprobs.is_some();
    let n = first.n;
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
        n: n * job.prompts.len(),
        include_usage: job.include_usage,
        tools: job.tools,
        tool_names: job.tool_names,
    };
    let mut receivers = Vec::with_capacity(job.prompts.len());
    for (prompt, params) in job.prompts {
        let (tx, rx) = unbounded_channel();
        let req = GenRequest {
            prompt,
            params,
            events: tx,
            arrived: job.arrived,
        };
        let waiting = job.model.queue.push(req)?;
        job.model.metrics.queue.set(waiting as i64);
        receivers.push(rx);
    }
    let echo = |c: usize| job.echo.get(c / n).cloned().unwrap_or_default();
    if job.stream {
        let openers: Vec<Event> = (0..reply.n)
            .map(|c| Event::Token {
                choice: c,
                text: echo(c),
                logprob: None,
            })
            .filter(|e| matches!(e, Event::Token { text, .. } if !text.is_empty()))
            .collect();
        return Ok(stream_reply(reply, merged(receivers, n), openers, guard).into_response());
    }
    let mut choices: Vec<ChoiceText> = (0..reply.n)
        .map(|c| ChoiceText {
            text: echo(c),
            ..ChoiceText::default()
        })
        .collect();
    let mut usage = Usage::default();
    for (p, mut rx) in receivers.into_iter().enumerate() {
        let u = loop {
            match rx.recv().await {
                Some(Event::Done(u)) => break u,
                Some(Event::Failed(e)) => return Err(e),
                Some(ev) => gather(&mut choices, offset(ev, p * n)),
                None => return Err(ApiError::internal("the scheduler dropped the request")),
            }
        };
        usage.prompt_tokens += u.prompt_tokens;
        usage.completion_tokens += u.completion_tokens;
        usage.cached_tokens += u.cached_tokens;
    }
    drop(guard);
    Ok(Json(reply.full(&choices, usage, logprobs)).into_response())
}

/// Queues a one-prompt `job` (the Anthropic and Responses routes) and
/// hands back its events, with the guard that counts it in flight until
/// the answer is sent.
pub fn submit(
    state: &Arc<AppState>,
    job: Job,
) -> Result<(UnboundedReceiver<Event>, InFlight), ApiError> {
    let guard = state.begin();
    let Some((prompt, params)) = job.prompts.into_iter().next() else {
        return Err(ApiError::bad_param("prompt", "prompt is required"));
    };
    let (tx, rx) = unbounded_channel();
    let req = GenRequest {
        prompt,
        params,
        events: tx,
        arrived: job.arrived,
    };
    let waiting = job.model.queue.push(req)?;
    job.model.metrics.queue.set(waiting as i64);
    Ok((rx, guard))
}

/// `ev` with its choice numbered `by` more.
fn offset(ev: Event, by: usize) -> Event {
    match ev {
        Event::Token {
            choice,
            text,
            logprob,
        } => Event::Token {
            choice: choice + by,
            text,
            logprob,
        },
        Event::Finished { choice, reason } => Event::Finished {
            choice: choice + by,
            reason,
        },
        other => other,
    }
}

/// The events of several requests as one: choices renumbered (request
/// `p`'s from `p * n`), and one `Done` with the summed usage once all are
/// done. (A failure ends the reply where it comes.)
fn merged(
    receivers: Vec<UnboundedReceiver<Event>>,
    n: usize,
) -> impl futures_util::Stream<Item = Event> + Send + 'static {
    let total = receivers.len();
    let streams = receivers.into_iter().enumerate().map(|(p, rx)| {
        Box::pin(
            stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|ev| (ev, rx)) },
            )
            .map(move |ev| offset(ev, p * n)),
        )
    });
    let mut done = 0;
    let mut usage = Usage::default();
    stream::select_all(streams).filter_map(move |ev| {
        let out = match ev {
            Event::Done(u) => {
                done += 1;
                usage.prompt_tokens += u.prompt_tokens;
                usage.completion_tokens += u.completion_tokens;
                usage.cached_tokens += u.cached_tokens;
                (done == total).then_some(Event::Done(usage))
            }
            ev => Some(ev),
        };
        std::future::ready(out)
    })
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The events of a reply.
type Events = std::pin::Pin<Box<dyn futures_util::Stream<Item = Event> + Send>>;

/// The state of an SSE reply.
struct Streaming {
    reply: Reply,
    rx: Events,
    frames: VecDeque<SseEvent>,
    offsets: Vec<usize>,
    /// Per choice, when calls are parsed: its text so far.
    splitters: Vec<Splitter>,
    done: bool,
    _guard: InFlight,
}

fn data(v: &serde_json::Value) -> SseEvent {
    SseEvent::default().data(v.to_string())
}

/// What an event becomes in a stream: events, or a chunk made already.
enum Out {
    Ev(Event),
    Chunk(serde_json::Value),
}

impl Streaming {
    /// With calls parsed: text before a call as content, the calls as one
    /// chunk when the choice ends (then its reason is the calls').
    fn split_calls(&mut self, ev: Event) -> Vec<Out> {
        if self.splitters.is_empty() {
            return vec![Out::Ev(ev)];
        }
        match ev {
            Event::Token {
                choice,
                text,
                logprob,
            } => match self.splitters.get_mut(choice) {
                Some(s) => vec![Out::Ev(Event::Token {
                    choice,
                    text: s.push(&text),
                    logprob,
                })],
                None => Vec::new(),
            },
            Event::Finished { choice, mut reason } => {
                let mut out = Vec::new();
                if let Some(s) = self.splitters.get_mut(choice) {
                    let (rest, calls) = s.finish();
                    if !rest.is_empty() {
                        out.push(Out::Ev(Event::Token {
                            choice,
                            text: rest,
                            logprob: None,
                        }));
                    }
                    if let Some(calls) = calls {
                        let (chunk, r) = self.reply.calls_chunk(choice, &calls);
                        out.push(Out::Chunk(chunk));
                        reason = r;
                    }
                }
                out.push(Out::Ev(Event::Finished { choice, reason }));
                out
            }
            other => vec![Out::Ev(other)],
        }
    }
}

fn stream_reply(
    reply: Reply,
    rx: impl futures_util::Stream<Item = Event> + Send + 'static,
    openers: Vec<Event>,
    guard: InFlight,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    let mut frames: VecDeque<SseEvent> = reply.opening_chunks().iter().map(data).collect();
    let mut offsets = vec![0; reply.n];
    for ev in &openers {
        if let Some(v) = reply.chunk(ev, &mut offsets) {
            frames.push_back(data(&v));
        }
    }
    let splitters = match reply.tools {
        Some(_) => (0..reply.n)
            .map(|_| Splitter::new(reply.tool_names.clone()))
            .collect(),
        None => Vec::new(),
    };
    let st = Streaming {
        splitters,
        offsets,
        reply,
        rx: Box::pin(rx),
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
            let ev = st.rx.next().await;
            let end = matches!(ev, None | Some(Event::Done(_)) | Some(Event::Failed(_)));
            match &ev {
                Some(Event::Failed(e)) => st.frames.push_back(data(&e.body())),
                None => st.frames.push_back(data(
                    &ApiError::internal("the scheduler dropped the request").body(),
                )),
                Some(ev) => {
                    for out in st.split_calls(ev.clone()) {
                        match out {
                            Out::Ev(ev) => {
                                if let Some(v) = st.reply.chunk(&ev, &mut st.offsets) {
                                    st.frames.push_back(data(&v));
                                }
                            }
                            Out::Chunk(v) => st.frames.push_back(data(&v)),
                        }
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
