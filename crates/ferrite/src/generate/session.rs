//! A generation session: one sequence's KV cache kept across calls, the
//! prefill of a prompt (reusing whatever prefix the cache already holds),
//! and the decode loop with its stop conditions.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::dump::TensorDump;
use crate::generate::continuation::{Continuation, Pick};
use crate::generate::json::Grammar;
use crate::generate::sampler::Sampler;
use crate::generate::speculative::{Speculate, Speculation};
use crate::models::decoder::{DecoderState, Logits};
use crate::models::CausalLm;
use crate::parallel::Threads;
use crate::tokenize::Tokenizer;
use crate::Error;

/// Limits of one generation call.
#[derive(Clone, Debug, Default)]
pub struct GenerateOptions {
    /// Most tokens to generate (`None`: until end of generation or a full
    /// context).
    pub max_tokens: Option<usize>,
    /// Stop as soon as the text contains one of these; it is not returned.
    pub stop: Vec<String>,
    /// Tokens that end generation besides the tokenizer's end-of-generation
    /// set (e.g. a chat template's turn end, [`crate::generate::chat::turn_end_tokens`]).
    pub end_tokens: Vec<u32>,
    /// Constrain the text to one JSON value of this grammar (the
    /// `response_format` / `--json-schema` constraint).
    pub json: Option<Arc<Grammar>>,
    /// Speculative decoding for this call (`None`: plain decoding, unless
    /// the session has its own, [`Session::set_speculation`]). Changes no
    /// output.
    pub speculate: Option<Speculate>,
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-generation token (EOS, end of turn).
    EndOfGeneration,
    /// `max_tokens` were generated.
    MaxTokens,
    /// A stop string appeared.
    StopString,
    /// The context is full.
    ContextFull,
    /// The caller's callback asked to stop.
    Cancelled,
}

impl StopReason {
    /// Why generation ended, in a few words.
    pub fn describe(self) -> &'static str {
        match self {
            StopReason::EndOfGeneration => "end of generation",
            StopReason::MaxTokens => "max tokens",
            StopReason::StopString => "stop string",
            StopReason::ContextFull => "context full",
            StopReason::Cancelled => "cancelled",
        }
    }
}

/// Counts and timings of one prompt + generation.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens found in the cache already (not recomputed).
    pub reused_tokens: usize,
    /// Time spent on the prompt (prefill).
    pub prompt_time: Duration,
    /// Tokens generated.
    pub generated_tokens: usize,
    /// Time spent generating.
    pub generation_time: Duration,
    /// Tokens a drafter proposed (speculative decoding; 0 without).
    pub drafted: usize,
    /// Drafted tokens that were what the model picked, and so cost no
    /// forward pass of their own.
    pub accepted: usize,
}

impl Stats {
    fn rate(n: usize, t: Duration) -> f64 {
        if t.is_zero() {
            0.0
        } else {
            n as f64 / t.as_secs_f64()
        }
    }

    /// One line for stderr.
    pub fn summary(&self) -> String {
        let fed = self.prompt_tokens - self.reused_tokens;
        let mut line = format!(
            "prompt: {} tokens ({} new), {:.1} tok/s | generated: {} tokens, {:.1} tok/s",
            self.prompt_tokens,
            fed,
            Self::rate(fed, self.prompt_time),
            self.generated_tokens,
            Self::rate(
                self.generated_tokens.saturating_sub(1),
                self.generation_time
            ),
        );
        if self.drafted > 0 {
            line.push_str(&format!(
                " | drafted: {}, accepted: {} ({:.1}%)",
                self.drafted,
                self.accepted,
                100.0 * self.accepted as f64 / self.drafted as f64
            ));
        }
        line
    }
}

/// A model, its tokenizer and one sequence's state.
pub struct Session<'a> {
    pub(super) model: &'a dyn CausalLm,
    pub(super) tokenizer: &'a Tokenizer,
    pub(super) state: DecoderState,
    /// The tokens whose keys and values the cache holds, in order.
    pub(super) tokens: Vec<u32>,
    /// Logits after the last token of `tokens`.
    pub(super) logits: Vec<f32>,
    /// Drafts to verify instead of one forward pass per token (`None`:
    /// plain decoding).
    spec: Option<Speculation<'a>>,
    /// Counts and timings of the last prompt and generation.
    pub stats: Stats,
}

impl<'a> Session<'a> {
    /// A session with room for `n_ctx` positions (capped at the model's
    /// training context).
    pub fn new(
        model: &'a dyn CausalLm,
        tokenizer: &'a Tokenizer,
        n_ctx: Option<usize>,
        threads: Threads,
    ) -> Result<Session<'a>, Error> {
        let n_ctx = n_ctx
            .unwrap_or(model.n_ctx_train())
            .min(model.n_ctx_train());
        Ok(Session {
            model,
            tokenizer,
            state: model.new_state(n_ctx, threads)?,
            tokens: Vec::new(),
            logits: Vec::new(),
            spec: None,
            stats: Stats::default(),
        })
    }

    /// Speculative decoding from now on (`None`: plain decoding): each
    /// forward pass also scores the tokens `spec`'s drafter guesses, and
    /// keeps those the sampler would have picked. The text, the tokens,
    /// the stop reason and the cache are the same bits as without; only
    /// the number of forward passes changes.
    pub fn set_speculation(&mut self, spec: Option<Speculation<'a>>) {
        self.spec = spec;
    }

    /// The sequence's state (its KV cache; the library's own tests compare
    /// caches).
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn state(&self) -> &DecoderState {
        &self.state
    }

    /// The state, writable (the library's own tests limit how far the cache
    /// may rewind).
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn state_mut(&mut self) -> &mut DecoderState {
        &mut self.state
    }

    /// Positions the session has room for.
    pub fn n_ctx(&self) -> usize {
        self.state.cache.n_ctx
    }

    /// The tokens the cache holds.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// The logits after the last token fed.
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// Writes the named intermediates of every forward pass from now on
    /// into `dump` (`None`: stop). Dumping changes no value: the logits
    /// and the text are the same bits with and without it.
    pub fn set_dump(&mut self, dump: Option<Arc<TensorDump>>) {
        self.state.ws.dump = dump;
    }

    /// Makes the cache hold exactly `prompt`, recomputing only what differs
    /// from what it holds now (at least the last token, for its logits).
    pub fn set_prompt(&mut self, prompt: &[u32]) -> Result<(), Error> {
        if prompt.is_empty() {
            return Err(Error::Input("the prompt is empty (no tokens)".into()));
        }
        if prompt.len() > self.n_ctx() {
            return Err(Error::Input(format!(
                "the prompt is {} tokens, longer than the context of {} tokens",
                prompt.len(),
                self.n_ctx()
            )));
        }
        let common = self
            .tokens
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        let keep = self.state.cache.truncate(common.min(prompt.len() - 1));
        self.tokens.truncate(keep);
        let start = Instant::now();
        self.model.forward(
            &prompt[keep..],
            &mut self.state,
            Logits::Last,
            &mut self.logits,
        )?;
        self.tokens.extend_from_slice(&prompt[keep..]);
        self.stats = Stats {
            prompt_tokens: prompt.len(),
            reused_tokens: keep,
            prompt_time: start.elapsed(),
            ..Stats::default()
        };
        Ok(())
    }

    /// Generates after the current prompt, calling `on_text` with each piece
    /// of text as soon as it is complete UTF-8 and cannot be the start of a
    /// stop string. `on_text` returns false to stop.
    pub fn generate(
        &mut self,
        sampler: &mut Sampler,
        opts: &GenerateOptions,
        mut on_text: impl FnMut(&str) -> bool,
    ) -> Result<StopReason, Error> {
        if self.tokens.is_empty() {
            return Err(Error::Input("generate called before set_prompt".into()));
        }
        if let Some(mut spec) = self.spec.take() {
            let result = self.generate_speculative(&mut spec, sampler, opts, on_text);
            self.spec = Some(spec);
            return result;
        }
        if let Some(s) = &opts.speculate {
            let threads = self.state.threads.clone();
            let mut spec = s.build(self.tokenizer, self.n_ctx(), threads)?;
            return self.generate_speculative(&mut spec, sampler, opts, on_text);
        }
        let mut cont = Continuation::new(
            self.tokenizer,
            &mut *sampler,
            &opts.end_tokens,
            &opts.stop,
            opts.json.clone(),
        );
        for &t in &self.tokens {
            cont.accept_prompt_token(t);
        }
        let start = Instant::now();
        let reason = loop {
            if opts.max_tokens.is_some_and(|m| cont.generated >= m) {
                break StopReason::MaxTokens;
            }
            let token = match cont.pick(&self.logits) {
                Pick::End => break StopReason::EndOfGeneration,
                Pick::Token(t) => t,
            };
            let piece = cont.push(token);
            if piece.stopped {
                on_text(&piece.text);
                break StopReason::StopString;
            }
            if !piece.text.is_empty() && !on_text(&piece.text) {
                break StopReason::Cancelled;
            }
            if self.tokens.len() >= self.n_ctx() {
                break StopReason::ContextFull;
            }
            self.model
                .forward(&[token], &mut self.state, Logits::Last, &mut self.logits)?;
            self.tokens.push(token);
        };
        let rest = cont.finish();
        if !rest.is_empty() {
            on_text(&rest);
        }
        let generated = cont.generated;
        self.stats.generated_tokens = generated;
        self.stats.generation_time = start.elapsed();
        Ok(reason)
    }
}
