//! One choice of a request after its prompt: its KV cache (forked from the
//! prompt's) and its [`Continuation`] (its own seeded sampler, end tokens,
//! stop strings, JSON constraint and text: the library's generation loop,
//! the one `Session::generate` drives), reported as events.

use std::time::Instant;

use ferrite::serving::KvCache;
use ferrite::serving::Sampler;
use ferrite::serving::{Continuation, Pick};
use ferrite::tools::Tokenizer;

use super::request::{Event, FinishReason, GenParams, TokenLogprob};

/// A choice being decoded.
pub struct Choice<'t> {
    pub index: usize,
    /// `None` once the choice has ended (its memory is freed at once).
    pub cache: Option<KvCache>,
    /// Its sampler, end tokens, stop strings, JSON constraint and text.
    cont: Continuation<'t>,
    /// The token to feed at the next step.
    pub next: Option<u32>,
    pub last_token_at: Option<Instant>,
    /// Tokens picked so far, in order.
    pub tokens: Vec<u32>,
    /// The cache of the choice that just ended, for the scheduler to take
    /// (its prompt and reply may go to the prefix cache) and drop.
    pub ended_cache: Option<KvCache>,
}

/// What the model and request say about ending a choice.
pub struct Ends<'a> {
    pub tokenizer: &'a Tokenizer,
    /// Extra end tokens (the chat template's turn end).
    pub end_tokens: &'a [u32],
    pub params: &'a GenParams,
}

impl<'t> Choice<'t> {
    pub fn new(
        index: usize,
        cache: KvCache,
        params: &GenParams,
        tok: &'t Tokenizer,
        end_tokens: &[u32],
    ) -> Self {
        let mut opts = params.sampler.clone();
        opts.seed = opts.seed.wrapping_add(index as u64);
        Choice {
            index,
            cache: Some(cache),
            cont: {
                let c = Continuation::new(
                    tok,
                    Sampler::new(opts),
                    end_tokens,
                    &params.stop,
                    params.json.clone(),
                );
                match &params.tool_calls {
                    Some((trigger, g)) => c.with_trigger(trigger.clone(), g.clone()),
                    None => c,
                }
            },
            next: None,
            last_token_at: None,
            tokens: Vec::new(),
            ended_cache: None,
        }
    }

    pub fn is_finished(&self) -> bool {
        self.cache.is_none()
    }

    /// Tokens generated so far.
    pub fn generated(&self) -> usize {
        self.cont.generated
    }

    /// Picks the next token from `logits` and reports it through `emit`;
    /// returns why the choice ended, if it did (then its cache is freed).
    pub fn advance(
        &mut self,
        logits: &[f32],
        ends: &Ends,
        emit: &mut dyn FnMut(Event),
    ) -> Option<FinishReason> {
        let token = match self.cont.pick(logits) {
            Pick::End => return Some(self.finish(FinishReason::Stop, emit)),
            Pick::Token(t) => t,
        };
        self.tokens.push(token);
        let logprob = ends
            .params
            .logprobs
            .map(|top| token_logprob(logits, token, top));
        let piece = self.cont.push(token);
        emit(self.token_event(piece.text, logprob));
        if piece.stopped {
            let reason = piece
                .stop
                .map_or(FinishReason::Stop, FinishReason::StopString);
            return Some(self.finish(reason, emit));
        }
        let cache = self.cache.as_ref()?;
        if self.cont.generated >= ends.params.max_tokens || cache.len() >= cache.n_ctx() {
            return Some(self.finish(FinishReason::Length, emit));
        }
        self.next = Some(token);
        None
    }

    fn token_event(&self, text: String, logprob: Option<TokenLogprob>) -> Event {
        Event::Token {
            choice: self.index,
            text,
            logprob,
        }
    }

    /// Ends the choice: releases held-back text (unless a stop string cut
    /// it), reports the reason and hands the cache over (`ended_cache`).
    fn finish(&mut self, reason: FinishReason, emit: &mut dyn FnMut(Event)) -> FinishReason {
        let text = self.cont.finish();
        if !text.is_empty() {
            emit(self.token_event(text, None));
        }
        self.ended_cache = self.cache.take();
        self.next = None;
        emit(Event::Finished {
            choice: self.index,
            reason,
        });
        reason
    }
}

/// The log-softmax of `logits` at `token`, and the `top` most likely
/// tokens (ties by lower id), from the model's own distribution (before
/// penalties, bias and temperature).
pub fn token_logprob(logits: &[f32], token: u32, top: usize) -> TokenLogprob {
    let max = logits
        .iter()
        .copied()
        .filter(|v| !v.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits
        .iter()
        .filter(|v| !v.is_nan())
        .map(|&v| f64::from(v - max).exp())
        .sum();
    let log_z = f64::from(max) + sum.ln();
    let lp = |v: f32| (f64::from(v) - log_z) as f32;
    let mut best: Vec<(u32, f32)> = Vec::with_capacity(top + 1);
    if top > 0 {
        for (i, &v) in logits.iter().enumerate() {
            if v.is_nan() {
                continue;
            }
            if best.len() == top && v <= best[top - 1].1 {
                continue;
            }
            let at = best.partition_point(|&(_, b)| b >= v);
            best.insert(at, (i as u32, v));
            best.truncate(top);
        }
    }
    TokenLogprob {
        token,
        logprob: logits
            .get(token as usize)
            .map_or(f32::NEG_INFINITY, |&v| lp(v)),
        top: best.into_iter().map(|(id, v)| (id, lp(v))).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_are_a_log_softmax() {
        let lp = token_logprob(&[0.0, 1.0, 1.0, -2.0], 1, 2);
        let z = (1.0f64 + 2.0 * 1f64.exp() + (-2f64).exp()).ln();
        assert!((f64::from(lp.logprob) - (1.0 - z)).abs() < 1e-6);
        assert_eq!(lp.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 2]);
        assert!(token_logprob(&[0.0, 1.0], 0, 0).top.is_empty());
    }
}
