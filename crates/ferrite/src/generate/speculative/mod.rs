//! Speculative decoding that never changes a token.
//!
//! A [`Drafter`] guesses the next few tokens; the target model scores the
//! token it must feed anyway plus the guesses in one forward pass (every
//! row the same bits as a one-token step: the determinism contract); then
//! the [`Continuation`](crate::generate::continuation::Continuation) picks
//! each next token from those rows exactly as plain decoding would (the
//! same sampler calls, hence the same random draws, penalties, logit bias,
//! JSON masks and stop strings). A guess is kept when it equals the pick;
//! at the first pick that differs, the pick is emitted and the remaining
//! guesses' rows are dropped from the KV cache. So the text, the tokens
//! and the stop reason are those of plain decoding, bit for bit; only the
//! number of forward passes changes. The loop is `verify.rs`
//! (`Session::generate` with a drafter set).
//!
//! Drafters: [`PromptLookup`] (copy what followed an earlier occurrence of
//! the last few tokens) and [`DraftModel`] (a smaller model with the same
//! vocabulary, greedy); [`DraftLength`] adapts how many tokens are asked
//! for.

mod draft_model;
mod lookup;
mod verify;

pub use draft_model::{check_same_vocab, DraftModel};
pub use lookup::PromptLookup;

use std::sync::Arc;

use crate::open::Generator;
use crate::parallel::Threads;
use crate::tokenize::Tokenizer;
use crate::Error;

/// Proposes tokens likely to follow a sequence. A wrong proposal costs
/// time, never a changed token.
pub trait Drafter {
    /// Appends to `out` at most `max` tokens guessed to follow `context`
    /// (the whole sequence so far: prompt, generated tokens, and the token
    /// about to be fed). Appending nothing is allowed (no guess).
    fn propose(&mut self, context: &[u32], max: usize, out: &mut Vec<u32>) -> Result<(), Error>;
}

/// How many tokens to draft next: grows while whole drafts are accepted,
/// shrinks after a rejection, and pauses drafting after a draft of which
/// nothing was accepted, for 2, 4, ... up to 32 tokens while such misses
/// follow each other (drafting then costs more than it saves).
#[derive(Clone, Debug)]
pub struct DraftLength {
    current: usize,
    max: usize,
    /// Drafts of which nothing was accepted, in a row.
    misses: u32,
    /// Rounds left without drafting.
    pause: usize,
}

/// Longest pause after repeated misses, in rounds (tokens).
const MAX_PAUSE: usize = 32;

impl DraftLength {
    /// At most `max` tokens per draft (at least 1), starting at up to 4.
    pub fn new(max: usize) -> DraftLength {
        let max = max.max(1);
        DraftLength {
            current: max.min(4),
            max,
            misses: 0,
            pause: 0,
        }
    }

    /// The most tokens a draft may have.
    pub fn max(&self) -> usize {
        self.max
    }

    /// How many tokens to ask for this round (0: do not draft this round).
    pub fn next_len(&mut self) -> usize {
        if self.pause > 0 {
            self.pause -= 1;
            return 0;
        }
        self.current
    }

    /// Records how a draft of `drafted` tokens went: `accepted` of them
    /// were kept.
    pub fn record(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        if accepted == drafted {
            self.misses = 0;
            if drafted >= self.current {
                self.current = (self.current * 2).min(self.max);
            }
        } else {
            self.current = (accepted + 1).min(self.max);
            if accepted == 0 {
                self.misses += 1;
                self.pause = (1usize << self.misses.min(5)).min(MAX_PAUSE);
            } else if accepted > 0 {
                self.misses = 0;
            }
        }
    }
}

/// A drafter and its draft length, what a session speculates with.
pub struct Speculation<'a> {
    /// Proposes the tokens.
    pub drafter: Box<dyn Drafter + 'a>,
    /// How many it is asked for.
    pub length: DraftLength,
}

impl<'a> Speculation<'a> {
    /// Speculation with `drafter`, at most `max` tokens per draft.
    pub fn new(drafter: Box<dyn Drafter + 'a>, max: usize) -> Speculation<'a> {
        Speculation {
            drafter,
            length: DraftLength::new(max),
        }
    }
}

/// Speculative decoding asked for in a call's options
/// ([`GenerateOptions::speculate`](crate::GenerateOptions::speculate)):
/// the output is the same as without, only the number of forward passes
/// changes.
#[derive(Clone)]
pub enum Speculate {
    /// Prompt lookup ([`PromptLookup`]), at most `max` tokens per draft.
    Lookup {
        /// Most tokens per draft (8 is a good start).
        max: usize,
    },
    /// A draft model with the same tokenizer ([`DraftModel`]; refused
    /// with an error otherwise), at most `max` tokens per draft.
    Draft {
        /// The draft model.
        model: Arc<Generator>,
        /// Most tokens per draft (4 is a good start).
        max: usize,
    },
}

impl std::fmt::Debug for Speculate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Speculate::Lookup { max } => write!(f, "Lookup {{ max: {max} }}"),
            Speculate::Draft { model, max } => {
                write!(f, "Draft {{ model: {:?}, max: {max} }}", model.path())
            }
        }
    }
}

impl Speculate {
    /// The speculation for a sequence of `n_ctx` positions of a model with
    /// the tokenizer `target`.
    pub(crate) fn build(
        &self,
        target: &Tokenizer,
        n_ctx: usize,
        threads: Threads,
    ) -> Result<Speculation<'_>, Error> {
        Ok(match self {
            Speculate::Lookup { max } => {
                Speculation::new(Box::new(PromptLookup::default()), *max)
            }
            Speculate::Draft { model, max } => {
                check_same_vocab(target, model.tokenizer())?;
                let drafter = DraftModel::new(model.model(), n_ctx, threads)?;
                Speculation::new(Box::new(drafter), *max)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draft_length_grows_shrinks_and_pauses() {
        let mut l = DraftLength::new(8);
        assert_eq!(l.next_len(), 4);
        l.record(4, 4);
        assert_eq!(l.next_len(), 8);
        l.record(8, 8);
        assert_eq!(l.next_len(), 8, "capped at the max");
        l.record(8, 2);
        assert_eq!(l.next_len(), 3, "shrinks to what was accepted + 1");
        l.record(3, 0);
        assert_eq!(l.next_len(), 0, "paused after a draft with nothing accepted");
        assert_eq!(l.next_len(), 0);
        assert_eq!(l.next_len(), 1, "then one token");
        l.record(1, 1);
        assert_eq!(l.next_len(), 2, "a hit ends the misses");
        l.record(2, 0);
        assert_eq!((0..2).map(|_| l.next_len()).collect::<Vec<_>>(), [0, 0]);
        assert_eq!(l.next_len(), 1, "drafts again after the pause");
        l.record(1, 0);
        assert_eq!((0..4).map(|_| l.next_len()).collect::<Vec<_>>(), [0, 0, 0, 0]);
        assert_eq!(l.next_len(), 1, "a longer pause after a second miss");
        l.record(1, 1);
        assert_eq!(l.next_len(), 2);
        assert_eq!(DraftLength::new(0).next_len(), 1, "at least one token");
    }
}
