//! The JSON of chat and text completions, whole or as stream chunks, from
//! the scheduler's events. Both forms are built from the same events, so a
//! streamed reply's text is exactly the non-streamed one.
//! Reference: the OpenAI API's chat completion and completion objects.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::tools;
use crate::generate::request::{Event, FinishReason, TokenLogprob, Usage};
use crate::generate::GenModel;

/// Which API the reply is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Text,
}

/// Logprobs below this are reported as this (JSON has no infinity).
const LOGPROB_FLOOR: f32 = -9999.0;

/// What a reply's JSON needs besides the events.
pub struct Reply {
    pub shape: Shape,
    pub id: String,
    pub created: u64,
    pub model: Arc<GenModel>,
    pub n: usize,
    pub include_usage: bool,
    /// Function calls are parsed out of the text (`Some(legacy)`).
    pub tools: Option<bool>,
    /// The functions the request declared: only these become calls.
    pub tool_names: Arc<[String]>,
}

/// One choice's text, logprobs and end, gathered from events.
#[derive(Default)]
pub struct ChoiceText {
    pub text: String,
    /// Each token's log-probability, with the text offset it starts at.
    pub logprobs: Vec<(usize, TokenLogprob)>,
    pub finish: Option<FinishReason>,
}

fn usage_json(u: Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    })
}

impl Reply {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.shape, chunk) {
            (Shape::Chat, false) => "chat.completion",
            (Shape::Chat, true) => "chat.completion.chunk",
            (Shape::Text, _) => "text_completion",
        }
    }

    fn envelope(&self, chunk: bool, choices: Vec<Value>) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("id".into(), json!(self.id));
        m.insert("object".into(), json!(self.object(chunk)));
        m.insert("created".into(), json!(self.created));
        m.insert("model".into(), json!(self.model.name));
        m.insert("system_fingerprint".into(), json!("ferrite"));
        m.insert("choices".into(), Value::Array(choices));
        m
    }

    fn token_text(&self, id: u32) -> (String, Vec<u8>) {
        let bytes = self.model.tokenizer.token_bytes(id).to_vec();
        (String::from_utf8_lossy(&bytes).into_owned(), bytes)
    }

    /// The logprobs object of some tokens (`None` when none was asked for).
    fn logprobs_json(&self, tokens: &[(usize, TokenLogprob)]) -> Value {
        let lp = |v: f32| v.max(LOGPROB_FLOOR);
        match self.shape {
            Shape::Chat => {
                let entry = |id: u32, logprob: f32| {
                    let (token, bytes) = self.token_text(id);
                    json!({"token": token, "logprob": lp(logprob), "bytes": bytes})
                };
                let content: Vec<Value> = tokens
                    .iter()
                    .map(|(_, t)| {
                        let mut e = entry(t.token, t.logprob);
                        e["top_logprobs"] = t.top.iter().map(|&(id, l)| entry(id, l)).collect();
                        e
                    })
                    .collect();
                json!({ "content": content })
            }
            Shape::Text => {
                let tokens_text: Vec<String> = tokens
                    .iter()
                    .map(|(_, t)| self.token_text(t.token).0)
                    .collect();
                let token_logprobs: Vec<f32> = tokens.iter().map(|(_, t)| lp(t.logprob)).collect();
                let top: Vec<Value> = tokens
                    .iter()
                    .map(|(_, t)| {
                        let mut m = Map::new();
                        for &(id, l) in &t.top {
                            m.insert(self.token_text(id).0, json!(lp(l)));
                        }
                        Value::Object(m)
                    })
                    .collect();
                let offsets: Vec<usize> = tokens.iter().map(|(o, _)| *o).collect();
                json!({
                    "tokens": tokens_text,
                    "token_logprobs": token_logprobs,
                    "top_logprobs": top,
                    "text_offset": offsets,
                })
            }
        }
    }

    fn choice_json(
        &self,
        index: usize,
        text: Option<&str>,
        logprobs: Option<Value>,
        finish: Option<FinishReason>,
        chunk: bool,
    ) -> Value {
        let finish = finish.map(FinishReason::as_str);
        let logprobs = logprobs.unwrap_or(Value::Null);
        match (self.shape, chunk) {
            (Shape::Chat, false) => json!({
                "index": index,
                "message": {"role": "assistant", "content": text.unwrap_or("")},
                "logprobs": logprobs,
                "finish_reason": finish,
            }),
            (Shape::Chat, true) => {
                let delta = match text {
                    Some(t) => json!({"content": t}),
                    None => json!({}),
                };
                json!({"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish})
            }
            (Shape::Text, _) => json!({
                "index": index,
                "text": text.unwrap_or(""),
                "logprobs": logprobs,
                "finish_reason": finish,
            }),
        }
    }

    /// The whole (non-streamed) response.
    pub fn full(&self, choices: &[ChoiceText], usage: Usage, logprobs: bool) -> Value {
        let cs = choices
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let lp = logprobs.then(|| self.logprobs_json(&c.logprobs));
                let mut v = self.choice_json(i, Some(&c.text), lp, c.finish, false);
                let split = self
                    .tools
                    .and_then(|legacy| Some((legacy, tools::split(&c.text, &self.tool_names)?)));
                if let Some((legacy, (content, calls))) = split {
                    let m = &mut v["message"];
                    m["content"] = if content.is_empty() {
                        Value::Null
                    } else {
                        json!(content)
                    };
                    if legacy {
                        m["function_call"] =
                            json!({"name": calls[0].name, "arguments": calls[0].arguments});
                        v["finish_reason"] = json!(FinishReason::FunctionCall.as_str());
                    } else {
                        m["tool_calls"] = Value::Array(tools::calls_json(&calls, false));
                        v["finish_reason"] = json!(FinishReason::ToolCalls.as_str());
                    }
                }
                v
            })
            .collect();
        let mut m = self.envelope(false, cs);
        m.insert("usage".into(), usage_json(usage));
        Value::Object(m)
    }

    /// The chunk of a choice's calls, and the reason its end then gives.
    pub fn calls_chunk(&self, choice: usize, calls: &[tools::Call]) -> (Value, FinishReason) {
        let (delta, reason) = if self.tools == Some(true) {
            (
                json!({"function_call": {"name": calls[0].name, "arguments": calls[0].arguments}}),
                FinishReason::FunctionCall,
            )
        } else {
            (
                json!({"tool_calls": tools::calls_json(calls, true)}),
                FinishReason::ToolCalls,
            )
        };
        let c = json!({"index": choice, "delta": delta, "logprobs": null, "finish_reason": null});
        (Value::Object(self.envelope(true, vec![c])), reason)
    }

    /// The chunks a stream starts with (chat: each choice's role).
    pub fn opening_chunks(&self) -> Vec<Value> {
        if self.shape != Shape::Chat {
            return Vec::new();
        }
        (0..self.n)
            .map(|i| {
                let c = json!({"index": i, "delta": {"role": "assistant", "content": ""},
                               "logprobs": null, "finish_reason": null});
                Value::Object(self.envelope(true, vec![c]))
            })
            .collect()
    }

    /// The chunk an event becomes, if any; `offsets[c]` tracks each
    /// choice's text length (for text-completion logprobs).
    pub fn chunk(&self, ev: &Event, offsets: &mut [usize]) -> Option<Value> {
        let one = |c: Value| Some(Value::Object(self.envelope(true, vec![c])));
        match ev {
            Event::Token {
                choice,
                text,
                logprob,
            } => {
                let at = offsets.get_mut(*choice)?;
                let lp = logprob
                    .as_ref()
                    .map(|t| self.logprobs_json(&[(*at, t.clone())]));
                *at += text.len();
                if text.is_empty() && lp.is_none() {
                    return None;
                }
                one(self.choice_json(*choice, Some(text), lp, None, true))
            }
            Event::Finished { choice, reason } => {
                let text = (self.shape == Shape::Text).then_some("");
                one(self.choice_json(*choice, text, None, Some(*reason), true))
            }
            Event::Done(usage) => self.include_usage.then(|| {
                let mut m = self.envelope(true, Vec::new());
                m.insert("usage".into(), usage_json(*usage));
                Value::Object(m)
            }),
            Event::Failed(_) => None,
        }
    }
}

/// Adds an event to the choices being gathered.
pub fn gather(choices: &mut [ChoiceText], ev: Event) {
    match ev {
        Event::Token {
            choice,
            text,
            logprob,
        } => {
            if let Some(c) = choices.get_mut(choice) {
                if let Some(t) = logprob {
                    c.logprobs.push((c.text.len(), t));
                }
                c.text.push_str(&text);
            }
        }
        Event::Finished { choice, reason } => {
            if let Some(c) = choices.get_mut(choice) {
                c.finish = Some(reason);
            }
        }
        Event::Done(_) | Event::Failed(_) => {}
    }
}
