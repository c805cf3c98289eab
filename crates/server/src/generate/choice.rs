//! One choice of a request after its prompt: its KV cache (forked from the
//! prompt's) and its [`Continuation`] (its own seeded sampler, end tokens,
//! stop strings, JSON constraint and text: the library's generation loop,
//! the one `Session::generate` drives), reported as events.
//!
//! With speculation (`ferrite serve --lookup`) a choice feeds its next
//! token plus a draft of what may follow ([`Choice::prepare_feed`]); the
//! pass returns a row of logits for each, and [`Choice::advance_rows`]
//! picks from them one by one exactly as it would from one-token steps
//! (the rows have the same bits), keeping a drafted token only while it
//! equals the pick. The rows of the drafted tokens after the first
//! mismatch are dropped from the cache. So the tokens, text and finish
//! reason are those of plain decoding.

use std::time::Instant;

use ferrite::serving::KvCache;
use ferrite::serving::Sampler;
use ferrite::serving::{Continuation, Pick};
use ferrite::serving::{DraftLength, Drafter, PromptLookup};
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
    /// The tokens the next step feeds: `next`, then a draft if any.
    pub feed: Vec<u32>,
    /// Prompt-lookup speculation, when on.
    spec: Option<Lookup>,
}

/// A choice's prompt-lookup speculation.
struct Lookup {
    drafter: PromptLookup,
    length: DraftLength,
    /// The sequence so far: the prompt, then every token picked.
    context: Vec<u32>,
}

/// Counts of one step's speculation, for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drafted {
    /// Tokens drafted (fed after the next token).
    pub drafted: usize,
    /// Of those, the ones the picks confirmed.
    pub accepted: usize,
}

/// What the model and request say about ending a choice.
pub struct Ends<'a> {
    pub tokenizer: &'a Tokenizer,
    /// Extra end tokens (the chat template's turn end).
    pub end_tokens: &'a [u32],
    pub params: &'a GenParams,
}

impl<'t> Choice<'t> {
    /// Choice `index` of a request whose prompt is `prompt` and whose
    /// cache after it is `cache`; `lookup`: speculation by prompt lookup,
    /// at most that many tokens per draft.
    pub fn new(
        index: usize,
        cache: KvCache,
        params: &GenParams,
        tok: &'t Tokenizer,
        end_tokens: &[u32],
        prompt: &[u32],
        lookup: Option<usize>,
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
            feed: Vec::new(),
            spec: lookup.map(|max| Lookup {
                drafter: PromptLookup::default(),
                length: DraftLength::new(max),
                context: prompt.to_vec(),
            }),
        }
    }

    pub fn is_finished(&self) -> bool {
        self.cache.is_none()
    }

    /// Tokens generated so far.
    pub fn generated(&self) -> usize {
        self.cont.generated
    }

    /// Sets [`Choice::feed`] for the next step: the next token, then (with
    /// speculation) a draft of at most `room` tokens. Returns how many
    /// tokens it holds (0 once the choice has ended).
    pub fn prepare_feed(&mut self, room: usize, params: &GenParams) -> usize {
        self.feed.clear();
        let (Some(next), Some(cache)) = (self.next, &self.cache) else {
            return 0;
        };
        self.feed.push(next);
        if let Some(spec) = &mut self.spec {
            // A draft needs room in the cache after `next`, must not reach
            // past the reply's length, and must be short enough for the
            // cache to drop it again (a ring layer's rewind limit).
            let in_cache = cache.n_ctx().saturating_sub(cache.len() + 1);
            let left = params.max_tokens.saturating_sub(self.cont.generated);
            let limit = room.min(in_cache).min(left).min(cache.max_rewind());
            if limit > 0 {
                let want = spec.length.next_len().min(limit);
                if want > 0 {
                    // Prompt lookup cannot fail; a failure only means no draft.
                    if spec
                        .drafter
                        .propose(&spec.context, want, &mut self.feed)
                        .is_err()
                    {
                        self.feed.truncate(1);
                    }
                    self.feed.truncate(1 + want);
                }
            }
        }
        self.feed.len()
    }

    /// Picks the next tokens from the rows of logits (`n_vocab` each) the
    /// step computed for [`Choice::feed`], as one-token steps would, and
    /// reports them through `emit`; returns why the choice ended, if it
    /// did (then its cache is freed), and the step's draft counts.
    pub fn advance_rows(
        &mut self,
        rows: &[f32],
        n_vocab: usize,
        ends: &Ends,
        emit: &mut dyn FnMut(Event),
    ) -> (Option<FinishReason>, Drafted) {
        let drafted = self.feed.len().saturating_sub(1);
        // The positions confirmed before the first pick: all the cache
        // holds but the draft (the prompt's after prefill, whose feed is
        // empty).
        let base = self
            .cache
            .as_ref()
            .map_or(0, |c| c.len().saturating_sub(drafted));
        let mut accepted = 0;
        let mut finished = None;
        for (j, logits) in rows.chunks_exact(n_vocab).enumerate() {
            // The first `j` drafted tokens are confirmed by now.
            finished = self.advance(logits, base + j, ends, emit);
            if finished.is_some() {
                break;
            }
            match (self.next, self.feed.get(j + 1)) {
                (Some(picked), Some(&guess)) if picked == guess => accepted += 1,
                _ => break,
            }
        }
        if let Some(spec) = &mut self.spec {
            spec.length.record(drafted, accepted);
        }
        if finished.is_none() {
            if let Some(cache) = &mut self.cache {
                // The draft never reaches past the rewind limit, so the
                // confirmed rows are all kept.
                cache.truncate(base + accepted);
            }
        }
        (finished, Drafted { drafted, accepted })
    }

    /// Picks the next token from `logits` and reports it through `emit`;
    /// returns why the choice ended, if it did (then its cache, cut to its
    /// first `confirmed` positions, is freed).
    fn advance(
        &mut self,
        logits: &[f32],
        confirmed: usize,
        ends: &Ends,
        emit: &mut dyn FnMut(Event),
    ) -> Option<FinishReason> {
        let token = match self.cont.pick(logits) {
            Pick::End => return Some(self.finish(FinishReason::Stop, confirmed, emit)),
            Pick::Token(t) => t,
        };
        self.tokens.push(token);
        if let Some(spec) = &mut self.spec {
            spec.context.push(token);
        }
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
            return Some(self.finish(reason, confirmed, emit));
        }
        let cache = self.cache.as_ref()?;
        if self.cont.generated >= ends.params.max_tokens || confirmed >= cache.n_ctx() {
            return Some(self.finish(FinishReason::Length, confirmed, emit));
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
    /// it), reports the reason and hands the cache, cut to its first
    /// `confirmed` positions, over (`ended_cache`).
    fn finish(
        &mut self,
        reason: FinishReason,
        confirmed: usize,
        emit: &mut dyn FnMut(Event),
    ) -> FinishReason {
        let text = self.cont.finish();
        if !text.is_empty() {
            emit(self.token_event(text, None));
        }
        if let Some(cache) = &mut self.cache {
            cache.truncate(confirmed);
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
