//! A draft model: a smaller (or more coarsely quantized) model with the
//! target's vocabulary guesses the next tokens greedily. It keeps its own
//! KV cache in step with the sequence, rolling back what the target
//! rejected.

use super::Drafter;
use crate::models::decoder::{DecoderState, Logits};
use crate::models::CausalLm;
use crate::parallel::Threads;
use crate::tokenize::Tokenizer;
use crate::Error;

/// Checks that `draft` numbers its tokens as `target` does (the same
/// vocabulary size and the same text for every id); the error says where
/// they differ.
pub fn check_same_vocab(target: &Tokenizer, draft: &Tokenizer) -> Result<(), Error> {
    let (n, m) = (target.vocab_size(), draft.vocab_size());
    if n != m {
        return Err(Error::Input(format!(
            "the draft model's vocabulary has {m} tokens and the model's {n}: a draft model \
             must use the same tokenizer"
        )));
    }
    for id in 0..n as u32 {
        let (a, b) = (target.token_bytes(id), draft.token_bytes(id));
        if a != b || target.is_control(id) != draft.is_control(id) {
            return Err(Error::Input(format!(
                "token {id} is {:?} in the model's vocabulary and {:?} in the draft model's: a \
                 draft model must use the same tokenizer",
                String::from_utf8_lossy(a),
                String::from_utf8_lossy(b)
            )));
        }
    }
    Ok(())
}

/// Greedy drafts from a second model. Its tokens are ids of the target's
/// vocabulary (check with [`check_same_vocab`] first).
pub struct DraftModel<'m> {
    model: &'m dyn CausalLm,
    state: DecoderState,
    /// The tokens whose keys and values the draft's cache holds.
    fed: Vec<u32>,
    /// The draft's logits after the last token of `fed`.
    logits: Vec<f32>,
}

impl<'m> DraftModel<'m> {
    /// A drafter running `model` in a context of `n_ctx` positions (capped
    /// at its training context) on `threads`.
    pub fn new(model: &'m dyn CausalLm, n_ctx: usize, threads: Threads) -> Result<Self, Error> {
        let n_ctx = n_ctx.min(model.n_ctx_train());
        Ok(DraftModel {
            model,
            state: model.new_state(n_ctx, threads)?,
            fed: Vec::new(),
            logits: Vec::new(),
        })
    }

    /// Makes the cache hold `context`, keeping the common prefix and
    /// recomputing the rest (at least the last token, for its logits).
    fn catch_up(&mut self, context: &[u32]) -> Result<(), Error> {
        let common = self
            .fed
            .iter()
            .zip(context)
            .take_while(|(a, b)| a == b)
            .count()
            .min(context.len() - 1);
        // A ring layer may refuse to go back that far: then fewer (maybe
        // none) are kept and the rest is recomputed.
        let kept = self.state.cache.truncate(common);
        self.fed.truncate(kept);
        self.model.forward(
            &context[kept..],
            &mut self.state,
            Logits::Last,
            &mut self.logits,
        )?;
        self.fed.extend_from_slice(&context[kept..]);
        Ok(())
    }
}

/// The index of the largest value (the first of equal ones).
fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

impl Drafter for DraftModel<'_> {
    fn propose(&mut self, context: &[u32], max: usize, out: &mut Vec<u32>) -> Result<(), Error> {
        let n_ctx = self.state.cache.n_ctx();
        // The draft stores the context and all but its last guess.
        if max == 0 || context.is_empty() || context.len() >= n_ctx {
            return Ok(());
        }
        let max = max.min(n_ctx + 1 - context.len());
        self.catch_up(context)?;
        for i in 0..max {
            let t = argmax(&self.logits);
            out.push(t);
            if i + 1 < max {
                self.model
                    .forward(&[t], &mut self.state, Logits::Last, &mut self.logits)?;
                self.fed.push(t);
            }
        }
        Ok(())
    }
}
