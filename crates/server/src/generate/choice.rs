//! One choice of a request after its prompt: its KV cache (forked from the
//! prompt's), its own seeded sampler, and the text it has produced, cut at
//! stop strings and released only as whole UTF-8 characters that cannot
//! be the start of a stop string (as `Session::generate` does).

use std::time::Instant;

use ferrite::generate::kv_cache::KvCache;
use ferrite::generate::sampler::Sampler;
use ferrite::generate::session::{find_stop, held_back};
use ferrite::tokenize::{StreamDecoder, Tokenizer};

use super::json::{mask_logits, JsonState};
use super::request::{Event, FinishReason, GenParams, TokenLogprob};

/// A choice being decoded.
pub struct Choice<'t> {
    pub index: usize,
    /// `None` once the choice has ended (its memory is freed at once).
    pub cache: Option<KvCache>,
    sampler: Sampler,
    decoder: Option<StreamDecoder<'t>>,
    /// Text not yet released (a possible stop string's start).
    pending: String,
    /// The token to feed at the next step.
    pub next: Option<u32>,
    pub generated: usize,
    pub last_token_at: Option<Instant>,
    /// Where the reply is in its JSON value (`response_format` JSON only).
    json: Option<JsonState>,
    /// The logits after the JSON mask (reused).
    masked: Vec<f32>,
}

/// What the model and request say about ending a choice.
pub struct Ends<'a> {
    pub tokenizer: &'a Tokenizer,
    /// Extra end tokens (the chat template's turn end).
    pub end_tokens: &'a [u32],
    pub params: &'a GenParams,
}

impl<'t> Choice<'t> {
    pub fn new(index: usize, cache: KvCache, params: &GenParams, tok: &'t Tokenizer) -> Self {
        let mut opts = params.sampler.clone();
        opts.seed = opts.seed.wrapping_add(index as u64);
        Choice {
            index,
            cache: Some(cache),
            sampler: Sampler::new(opts),
            decoder: Some(tok.stream_decoder(true).continuing()),
            pending: String::new(),
            next: None,
            generated: 0,
            last_token_at: None,
            json: params.json.as_deref().map(JsonState::new),
            masked: Vec::new(),
        }
    }

    pub fn is_finished(&self) -> bool {
        self.cache.is_none()
    }

    /// Picks the next token from `logits` and reports it through `emit`;
    /// returns why the choice ended, if it did (then its cache is freed).
    pub fn advance(
        &mut self,
        logits: &[f32],
        ends: &Ends,
        emit: &mut dyn FnMut(Event),
    ) -> Option<FinishReason> {
        let is_end =
            |t: u32| ends.tokenizer.is_end_of_generation(t) || ends.end_tokens.contains(&t);
        let token = match (&mut self.json, &ends.params.json) {
            (Some(state), Some(g)) => {
                self.masked.clear();
                self.masked.extend_from_slice(logits);
                if !mask_logits(g, state, ends.tokenizer, &is_end, &mut self.masked) {
                    // No token may follow (cannot happen with a real
                    // vocabulary): end rather than break the JSON.
                    return Some(self.finish(FinishReason::Stop, emit));
                }
                let token = self.sampler.sample(&self.masked);
                if !is_end(token) {
                    state.feed_all(g, ends.tokenizer.token_bytes(token));
                }
                token
            }
            _ => self.sampler.sample(logits),
        };
        if is_end(token) {
            return Some(self.finish(FinishReason::Stop, emit));
        }
        let logprob = ends
            .params
            .logprobs
            .map(|top| token_logprob(logits, token, top));
        self.sampler.accept(token);
        self.generated += 1;
        if let Some(d) = &mut self.decoder {
            self.pending.push_str(&d.push(token));
        }
        let stops = &ends.params.stop;
        if let Some(cut) = find_stop(&self.pending, stops) {
            self.pending.truncate(cut);
            let text = std::mem::take(&mut self.pending);
            self.decoder = None;
            emit(self.token_event(text, logprob));
            return Some(self.finish(FinishReason::Stop, emit));
        }
        let safe = self.pending.len() - held_back(&self.pending, stops);
        let text: String = self.pending.drain(..safe).collect();
        emit(self.token_event(text, logprob));
        let cache = self.cache.as_ref()?;
        if self.generated >= ends.params.max_tokens || cache.len >= cache.n_ctx {
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
    /// it), reports the reason and frees the cache.
    fn finish(&mut self, reason: FinishReason, emit: &mut dyn FnMut(Event)) -> FinishReason {
        if let Some(d) = self.decoder.take() {
            let mut text = std::mem::take(&mut self.pending);
            text.push_str(&d.finish());
            if !text.is_empty() {
                emit(self.token_event(text, None));
            }
        }
        self.cache = None;
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
