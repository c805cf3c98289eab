//! Attention layers. The decoders' causal multi-head attention with
//! grouped-query heads over a [`crate::kv_cache::LayerKv`] cache,
//! optionally restricted to a sliding window, optionally with soft-capped
//! scores (Gemma 2/3) or a learned sink logit per head (gpt-oss), is
//! [`tiled`]'s: blocks of queries against blocks of keys with an online
//! softmax, one fixed order of operations per row (so a token's output
//! does not depend on the batch it is in, the prompt's chunking, the
//! thread count or the kernel set). The encoder-decoders (T5's relative
//! position bias, cross-attention over an encoder's rows) use [`core`].

pub mod core;
pub mod tiled;

pub use tiled::{attention, attention_scratch_len};
/// Shape of an attention layer.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape<'a> {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Multiplies `q . k` before the softmax (usually `1/sqrt(head_dim)`).
    pub scale: f32,
    /// Attend only to the last `window` positions (including the current).
    pub window: Option<usize>,
    /// `cap * tanh(score / cap)` on the scaled scores before the softmax
    /// (Gemma 2's attention logit soft-capping).
    pub softcap: Option<f32>,
    /// One sink logit per query head (gpt-oss), added to the softmax's
    /// denominator (see the module notes).
    pub sinks: Option<&'a [f32]>,
}

/// The tokens of one forward pass: `n` tokens at positions `start..start+n`.
#[derive(Clone, Copy, Debug)]
pub struct Positions {
    pub start: usize,
    pub n: usize,
}


#[cfg(test)]
mod tests;
