//! The generation loop with drafts (see the module above): the same steps
//! as `Session::generate`'s plain loop, in the same order, with the logits
//! taken from the rows of a verification pass instead of one forward pass
//! per token.

use std::time::Instant;

use super::Speculation;
use crate::generate::continuation::{Continuation, Pick};
use crate::generate::sampler::Sampler;
use crate::generate::session::{GenerateOptions, Session, StopReason};
use crate::models::decoder::Logits;
use crate::Error;

impl<'a> Session<'a> {
    /// `generate` with drafts from `spec`: the same text, tokens and stop
    /// reason as without, and the same cache at the end.
    pub(crate) fn generate_speculative(
        &mut self,
        spec: &mut Speculation<'_>,
        sampler: &mut Sampler,
        opts: &GenerateOptions,
        mut on_text: impl FnMut(&str) -> bool,
    ) -> Result<StopReason, Error> {
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
        let n_vocab = self.model.n_vocab();
        let start = Instant::now();
        // The rows of the last forward pass; row `row` holds the logits
        // after the last token of `self.tokens`. The cache also holds the
        // rows of `drafted[next..]`, guesses not yet confirmed.
        let mut rows = std::mem::take(&mut self.logits);
        let mut row = 0;
        let mut drafted: Vec<u32> = Vec::new();
        let mut next = 0;
        let result = loop {
            // From here to the pick's checks: plain decoding's steps.
            if opts.max_tokens.is_some_and(|m| cont.generated >= m) {
                break Ok(StopReason::MaxTokens);
            }
            let token = match cont.pick(&rows[row * n_vocab..(row + 1) * n_vocab]) {
                Pick::End => break Ok(StopReason::EndOfGeneration),
                Pick::Token(t) => t,
            };
            let piece = cont.push(token);
            if piece.stopped {
                on_text(&piece.text);
                break Ok(StopReason::StopString);
            }
            if !piece.text.is_empty() && !on_text(&piece.text) {
                break Ok(StopReason::Cancelled);
            }
            if self.tokens.len() >= self.n_ctx() {
                break Ok(StopReason::ContextFull);
            }
            // Plain decoding feeds `token` now. A confirmed guess is
            // already in the cache, with its logits in the next row.
            if drafted.get(next) == Some(&token) {
                next += 1;
                row += 1;
                self.tokens.push(token);
                self.stats.accepted += 1;
                continue;
            }
            if !drafted.is_empty() {
                spec.length.record(drafted.len(), next);
            }
            drafted.clear();
            next = 0;
            row = 0;
            if let Err(e) = self.drop_unconfirmed().and_then(|()| {
                self.verify_round(spec, token, &cont, opts, &mut drafted, &mut rows)
            }) {
                break Err(e);
            }
        };
        if !drafted.is_empty() {
            spec.length.record(drafted.len(), next);
        }
        // Keep only the confirmed tokens' rows, and their last logits.
        let dropped = self.drop_unconfirmed();
        self.logits = rows
            .get(row * n_vocab..(row + 1) * n_vocab)
            .map_or_else(Vec::new, <[f32]>::to_vec);
        let reason = result?;
        dropped?;
        let rest = cont.finish();
        if !rest.is_empty() {
            on_text(&rest);
        }
        self.stats.generated_tokens = cont.generated;
        self.stats.generation_time = start.elapsed();
        Ok(reason)
    }

    /// Feeds `token` and a draft of what follows it (as many tokens as the
    /// context and the token limit let be used) in one forward pass, its
    /// rows' logits into `rows`; `token` joins `self.tokens`, the draft is
    /// left in `drafted`. On an error the session is as before.
    fn verify_round<S: std::borrow::BorrowMut<Sampler>>(
        &mut self,
        spec: &mut Speculation<'_>,
        token: u32,
        cont: &Continuation<'_, S>,
        opts: &GenerateOptions,
        drafted: &mut Vec<u32>,
        rows: &mut Vec<f32>,
    ) -> Result<(), Error> {
        let n_vocab = self.model.n_vocab();
        self.tokens.push(token);
        let room = self.n_ctx() - self.tokens.len();
        let left = opts.max_tokens.map_or(usize::MAX, |m| m - cont.generated);
        let want = spec.length.next_len().min(room).min(left);
        if want > 0 {
            if let Err(e) = spec.drafter.propose(&self.tokens, want, drafted) {
                self.tokens.pop();
                drafted.clear();
                return Err(e);
            }
            drafted.truncate(want);
            // An id past the target's vocabulary ends the draft.
            if let Some(bad) = drafted.iter().position(|&t| t as usize >= n_vocab) {
                drafted.truncate(bad);
            }
        }
        let mut feed = Vec::with_capacity(1 + drafted.len());
        feed.push(token);
        feed.extend_from_slice(drafted);
        let which = if drafted.is_empty() {
            Logits::Last
        } else {
            Logits::All
        };
        if let Err(e) = self.model.forward(&feed, &mut self.state, which, rows) {
            self.tokens.pop();
            drafted.clear();
            // The pass may have stored some rows before failing.
            self.drop_unconfirmed()?;
            return Err(e);
        }
        self.stats.drafted += drafted.len();
        Ok(())
    }

    /// Truncates the cache to `self.tokens`, dropping the rows of
    /// unconfirmed guesses; when a ring layer cannot go back that far, the
    /// kept positions' tokens are fed again (the same bits).
    fn drop_unconfirmed(&mut self) -> Result<(), Error> {
        let want = self.tokens.len();
        if self.state.cache.len() == want {
            return Ok(());
        }
        let kept = self.state.cache.truncate(want);
        if kept < want {
            let mut scratch = Vec::new();
            self.model.forward(
                &self.tokens[kept..],
                &mut self.state,
                Logits::Last,
                &mut scratch,
            )?;
        }
        Ok(())
    }
}
