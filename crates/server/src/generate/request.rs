//! What the HTTP side hands the scheduler (a tokenized prompt and its
//! options) and what the scheduler sends back, token by token.

use std::sync::Arc;
use std::time::Instant;

use ferrite::SamplerOptions;
use tokio::sync::mpsc::UnboundedSender;

use ferrite::serving::Trigger;
use ferrite::Grammar;

/// Options of one generation request, checked by the HTTP side.
#[derive(Clone, Debug)]
pub struct GenParams {
    /// Sampling options; choice `i` draws with seed `sampler.seed + i`.
    pub sampler: SamplerOptions,
    /// Most tokens each choice generates (at least 1).
    pub max_tokens: usize,
    /// Generation stops before any of these texts; they are not returned.
    pub stop: Vec<String>,
    /// Independent choices, all continuing the same prompt (at least 1).
    pub n: usize,
    /// `Some(k)`: report each token's log-probability and the `k` most
    /// likely alternatives.
    pub logprobs: Option<usize>,
    /// `response_format` JSON (or forced function calls): the grammar
    /// every token must follow.
    pub json: Option<Arc<Grammar>>,
    /// Function calls the reply may open (`<tool_call>`, or `{` first for
    /// Llama 3), whose grammar then governs the rest of it.
    pub tool_calls: Option<(Trigger, Arc<Grammar>)>,
    /// Whether the request may be decoded speculatively when the server
    /// does (`ferrite serve --lookup`); the output is the same either way.
    pub speculate: bool,
}

/// A request waiting for, or admitted to, the scheduler.
pub struct GenRequest {
    pub prompt: Vec<u32>,
    pub params: GenParams,
    /// Where events go; when the receiver is dropped (the client went
    /// away) the scheduler drops the request at its next step.
    pub events: UnboundedSender<Event>,
    pub arrived: Instant,
}

impl GenRequest {
    /// Positions each choice's KV cache holds: the prompt and the reply.
    pub fn positions(&self) -> usize {
        self.prompt.len() + self.params.max_tokens
    }
}

/// Why a choice ended, as OpenAI names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// End of generation token or end of turn.
    Stop,
    /// A stop string appeared (its index in `GenParams::stop`); OpenAI
    /// calls it `stop` too.
    StopString(usize),
    /// `max_tokens` reached.
    Length,
    /// The reply ended with function calls (set when the reply is
    /// rendered, never by the scheduler).
    ToolCalls,
    /// The same for the legacy `functions`.
    FunctionCall,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop | FinishReason::StopString(_) => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::FunctionCall => "function_call",
        }
    }
}

/// A generated token's log-probability and the most likely alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: u32,
    pub logprob: f32,
    /// `(token, logprob)`, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// Token counts of a finished request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    /// Generated tokens over every choice.
    pub completion_tokens: usize,
    /// Prompt tokens taken from the prefix cache.
    pub cached_tokens: usize,
}

/// What the scheduler reports about a request.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A choice generated a token: the text it completes (may be empty
    /// while a multi-byte character or a possible stop string is pending),
    /// and its log-probability if asked for. Text with no token (`None`)
    /// is held-back text released at the end.
    Token {
        choice: usize,
        text: String,
        logprob: Option<TokenLogprob>,
    },
    /// A choice ended.
    Finished { choice: usize, reason: FinishReason },
    /// Every choice ended.
    Done(Usage),
    /// The request failed inside the scheduler.
    Failed(crate::error::ApiError),
}
