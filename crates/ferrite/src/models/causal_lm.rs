//! The interface every decoder-only model offers its callers
//! ([`CausalLm`]), and its implementation for the one decoder stack
//! (`transformer/`).

use crate::models::decoder::{DecoderState, Logits};
use crate::models::transformer::{Decoder, SeqRows};
use crate::parallel::Threads;
use crate::Error;

/// A decoder-only language model.
pub trait CausalLm: Send + Sync {
    /// Tokens in the vocabulary (logits per position).
    fn n_vocab(&self) -> usize;
    /// The context length the model was trained with.
    fn n_ctx_train(&self) -> usize;
    /// A fresh sequence state with room for `n_ctx` positions.
    fn new_state(&self, n_ctx: usize, threads: Threads) -> Result<DecoderState, Error>;
    /// Feeds `tokens` at the next positions of `state` and writes the
    /// requested logits (`n_vocab` per row) into `logits`.
    fn forward(
        &self,
        tokens: &[u32],
        state: &mut DecoderState,
        which: Logits,
        logits: &mut Vec<f32>,
    ) -> Result<(), Error>;
    /// The decoder itself (its parts, caches and batched forward pass).
    fn decoder(&self) -> &Decoder;
}

impl CausalLm for Decoder {
    fn n_vocab(&self) -> usize {
        self.shape.n_vocab
    }

    fn n_ctx_train(&self) -> usize {
        self.shape.n_ctx_train
    }

    fn new_state(&self, n_ctx: usize, threads: Threads) -> Result<DecoderState, Error> {
        let cache = self.new_cache(n_ctx)?;
        let ws = self.new_workspace(n_ctx, threads.count());
        Ok(DecoderState::from_parts(cache, ws, threads))
    }

    fn forward(
        &self,
        tokens: &[u32],
        st: &mut DecoderState,
        which: Logits,
        logits: &mut Vec<f32>,
    ) -> Result<(), Error> {
        st.run_chunks(
            tokens,
            which,
            self.shape.n_vocab,
            logits,
            |chunk, st| {
                let n = chunk.len();
                let seqs = &mut [SeqRows {
                    cache: &mut st.cache,
                    n,
                }];
                self.forward_rows(chunk, seqs, &mut st.ws, &st.threads)
            },
            |rows, st, out| self.head_rows(rows, &mut st.ws, &st.threads, out),
        )
    }

    fn decoder(&self) -> &Decoder {
        self
    }
}
