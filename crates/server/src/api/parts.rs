//! One chat reply's events as the parts the Anthropic and Responses APIs
//! are made of: text as it may be shown, the function calls (parsed as
//! the chat route parses them, by the same [`Splitter`]), and the end.
//! Whole and streamed replies are both built from these parts, so a
//! streamed reply holds exactly the whole reply's text and calls.

use std::sync::Arc;

use tokio::sync::mpsc::UnboundedReceiver;

use super::tools::{Call, Splitter};
use crate::error::ApiError;
use crate::generate::request::{Event, FinishReason, Usage};

/// A piece of a reply.
#[derive(Debug)]
pub enum Part {
    /// Text to show (never empty).
    Text(String),
    /// A function call, once the reply has ended.
    Call(Call),
    /// The reply ended.
    End(Ending),
    /// The scheduler failed the request.
    Failed(ApiError),
}

/// How a reply ended.
#[derive(Clone, Copy, Debug)]
pub struct Ending {
    /// Why the model stopped (`StopString(i)`: the request's stop string
    /// `i`).
    pub reason: FinishReason,
    /// The reply ended with function calls.
    pub calls: bool,
    pub usage: Usage,
}

/// Turns a one-choice request's events into [`Part`]s.
pub struct Parts {
    /// Present when the request declared functions.
    splitter: Option<Splitter>,
    reason: FinishReason,
    calls: bool,
}

impl Parts {
    /// Parts of a reply whose calls may name `declared` functions (`None`:
    /// the request has no tools, everything is text).
    pub fn new(declared: Option<Arc<[String]>>) -> Parts {
        Parts {
            splitter: declared.map(Splitter::new),
            reason: FinishReason::Stop,
            calls: false,
        }
    }

    /// The parts one event gives.
    pub fn push(&mut self, ev: Event) -> Vec<Part> {
        let text = |t: String| (!t.is_empty()).then_some(Part::Text(t));
        if ev_choice(&ev) != 0 {
            return Vec::new();
        }
        match ev {
            Event::Token { text: t, .. } => {
                let shown = match &mut self.splitter {
                    Some(s) => s.push(&t),
                    None => t,
                };
                text(shown).into_iter().collect()
            }
            Event::Finished { reason, .. } => {
                self.reason = reason;
                let Some(s) = &mut self.splitter else {
                    return Vec::new();
                };
                let (rest, calls) = s.finish();
                let mut out: Vec<Part> = text(rest).into_iter().collect();
                if let Some(calls) = calls {
                    self.calls = true;
                    out.extend(calls.into_iter().map(Part::Call));
                }
                out
            }
            Event::Done(usage) => vec![Part::End(Ending {
                reason: self.reason,
                calls: self.calls,
                usage,
            })],
            Event::Failed(e) => vec![Part::Failed(e)],
        }
    }
}

/// The choice an event is about (0 for request-wide events).
fn ev_choice(ev: &Event) -> usize {
    match ev {
        Event::Token { choice, .. } | Event::Finished { choice, .. } => *choice,
        _ => 0,
    }
}

/// A whole reply: its text, its calls and its end.
pub struct Whole {
    pub text: String,
    pub calls: Vec<Call>,
    pub ending: Ending,
}

/// Waits for the whole reply of `rx`.
pub async fn whole(mut rx: UnboundedReceiver<Event>, mut parts: Parts) -> Result<Whole, ApiError> {
    let mut text = String::new();
    let mut calls = Vec::new();
    loop {
        let Some(ev) = rx.recv().await else {
            return Err(ApiError::internal("the scheduler dropped the request"));
        };
        for p in parts.push(ev) {
            match p {
                Part::Text(t) => text.push_str(&t),
                Part::Call(c) => calls.push(c),
                Part::End(ending) => {
                    return Ok(Whole {
                        text,
                        calls,
                        ending,
                    })
                }
                Part::Failed(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(t: &str) -> Event {
        Event::Token {
            choice: 0,
            text: t.into(),
            logprob: None,
        }
    }

    #[test]
    fn calls_come_out_at_the_end_and_text_before_them() {
        let mut p = Parts::new(Some(Arc::from(["f".to_string()])));
        let mut text = String::new();
        let mut calls = Vec::new();
        let mut ending = None;
        for ev in [
            token("Let me look."),
            token("\n<tool_call>\n{\"name\": \"f\", "),
            token("\"arguments\": {\"a\": 1}}\n</tool_call>"),
            Event::Finished {
                choice: 0,
                reason: FinishReason::Stop,
            },
            Event::Done(Usage::default()),
        ] {
            for part in p.push(ev) {
                match part {
                    Part::Text(t) => text.push_str(&t),
                    Part::Call(c) => calls.push(c),
                    Part::End(e) => ending = Some(e),
                    Part::Failed(e) => panic!("{e:?}"),
                }
            }
        }
        assert_eq!(text, "Let me look.");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].arguments, "{\"a\":1}");
        assert!(ending.unwrap().calls);
        // Without tools the same text is all text.
        let mut p = Parts::new(None);
        let got: Vec<Part> = p.push(token("<tool_call>"));
        assert!(matches!(&got[..], [Part::Text(t)] if t == "<tool_call>"));
    }
}
