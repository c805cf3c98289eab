//! What every decoder-only model needs around its layers: the per-sequence
//! state (KV cache, scratch buffers, threads), and the loop that feeds a
//! prompt through in chunks and computes the logits that were asked for.
//!
//! Buffers are sized once for the largest chunk, so decoding allocates
//! nothing per token.

use std::ops::Range;
use std::sync::Arc;

use crate::dump::TensorDump;
use crate::kv_cache::KvCache;
use crate::layers::attention::attention_scratch_len;
use crate::layers::rope::Rope;
use crate::parallel::Threads;
use crate::tensor::QuantizedActs;
use crate::Error;

/// Most tokens processed in one forward chunk (prompts are split into
/// chunks of this size; results do not depend on it).
pub const MAX_CHUNK: usize = 256;

/// Which logits a forward pass produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// Only the last token's (generation).
    Last,
    /// Every token's, in order (evaluation).
    All,
}

/// Sizes that fix the buffers of a decoder model.
#[derive(Clone, Copy, Debug)]
pub struct DecoderDims {
    pub dim: usize,
    pub q_dim: usize,
    pub kv_dim: usize,
    pub ffn_dim: usize,
    pub head_dim: usize,
    /// Rotated pairs per head (`rope dims / 2`).
    pub rope_pairs: usize,
    /// Width of a fused Q/K/V projection's output (0: none).
    pub fused_qkv_dim: usize,
    pub n_layers: usize,
}

/// Scratch buffers for one chunk of up to [`MAX_CHUNK`] tokens.
pub struct Workspace {
    pub(crate) x: Vec<f32>,            // (chunk, dim) residual stream
    pub(crate) xn: Vec<f32>,           // (chunk, dim) normed input of a block
    pub(crate) qkv: Vec<f32>,          // (chunk, fused_qkv_dim) fused projections
    pub(crate) q: Vec<f32>,            // (chunk, q_dim)
    pub(crate) k: Vec<f32>,            // (chunk, kv_dim)
    pub(crate) v: Vec<f32>,            // (chunk, kv_dim)
    pub(crate) att: Vec<f32>,          // (chunk, q_dim) attention output
    pub(crate) proj: Vec<f32>,         // (chunk, dim) block output before the residual add
    pub(crate) gate: Vec<f32>,         // (chunk, ffn_dim)
    pub(crate) up: Vec<f32>,           // (chunk, ffn_dim)
    pub(crate) attn_scratch: Vec<f32>, // (threads, attention_scratch_len)
    pub(crate) acts: QuantizedActs,
    pub(crate) rope: RopeTable,
    pub(crate) pos: Vec<usize>, // (chunk) position of each row in its sequence
    /// Where the forward passes write their named intermediates
    /// (`None`: nowhere, the default).
    pub(crate) dump: Option<Arc<TensorDump>>,
}

/// RoPE angles of the tokens of a chunk.
pub struct RopeTable {
    cos: Vec<f32>, // (chunk, pairs)
    sin: Vec<f32>, // (chunk, pairs)
    pairs: usize,
}

impl RopeTable {
    fn new(pairs: usize) -> RopeTable {
        RopeTable {
            cos: vec![0.0; MAX_CHUNK * pairs],
            sin: vec![0.0; MAX_CHUNK * pairs],
            pairs,
        }
    }

    /// Fills the (cos, sin) table of rows at positions `positions` (the
    /// rotation's `dims / 2` pairs each).
    pub fn fill_positions(&mut self, rope: &Rope, positions: &[usize]) {
        let p = self.pairs;
        let used = rope.dims / 2;
        for (t, &pos) in positions.iter().enumerate() {
            let (c, s) = (t * p, t * p + used);
            rope.cos_sin(pos, &mut self.cos[c..s], &mut self.sin[c..s]);
        }
    }

    /// The (cos, sin) rows of token `t` of the chunk.
    pub fn at(&self, t: usize) -> (&[f32], &[f32]) {
        let p = self.pairs;
        (&self.cos[t * p..(t + 1) * p], &self.sin[t * p..(t + 1) * p])
    }
}

impl Workspace {
    /// Buffers for a model of dimensions `d` and `threads` threads (none
    /// grows with the context).
    pub fn new(d: DecoderDims, threads: usize) -> Workspace {
        let c = MAX_CHUNK;
        Workspace {
            x: vec![0.0; c * d.dim],
            xn: vec![0.0; c * d.dim],
            qkv: vec![0.0; c * d.fused_qkv_dim],
            q: vec![0.0; c * d.q_dim],
            k: vec![0.0; c * d.kv_dim],
            v: vec![0.0; c * d.kv_dim],
            att: vec![0.0; c * d.q_dim],
            proj: vec![0.0; c * d.dim],
            gate: vec![0.0; c * d.ffn_dim],
            up: vec![0.0; c * d.ffn_dim],
            attn_scratch: vec![
                0.0;
                threads
                    * attention_scratch_len(d.head_dim, d.q_dim / d.kv_dim.max(1))
            ],
            acts: QuantizedActs::default(),
            rope: RopeTable::new(d.rope_pairs),
            pos: vec![0; c],
            dump: None,
        }
    }
}

/// One sequence's state: its KV cache, scratch buffers and threads.
pub struct DecoderState {
    /// The sequence's KV cache.
    pub cache: KvCache,
    /// Scratch buffers of a forward pass.
    pub ws: Workspace,
    /// Threads a forward pass runs on.
    pub threads: Threads,
    chunk_size: usize,
}

impl DecoderState {
    /// A state from a cache and a workspace made for it.
    pub fn from_parts(cache: KvCache, ws: Workspace, threads: Threads) -> DecoderState {
        DecoderState {
            cache,
            ws,
            threads,
            chunk_size: MAX_CHUNK,
        }
    }

    /// Processes prompts in chunks of `n` tokens (1..=[`MAX_CHUNK`]).
    /// Results are identical for every chunk size; this exists to test that.
    pub fn set_chunk_size(&mut self, n: usize) {
        self.chunk_size = n.clamp(1, MAX_CHUNK);
    }

    /// Positions used so far.
    pub fn len(&self) -> usize {
        self.cache.len
    }

    /// Whether no position is used yet.
    pub fn is_empty(&self) -> bool {
        self.cache.len == 0
    }

    /// Runs `tokens` through the model in chunks: `body(chunk, state)`
    /// (at positions `state.cache.len..`) leaves the chunk's final hidden states in `ws.x`; `head(rows, state,
    /// out)` turns the hidden states of chunk rows `rows` into logits.
    /// `logits` receives one row of `n_vocab` per token (`All`) or one row
    /// (`Last`).
    pub fn run_chunks<B, H>(
        &mut self,
        tokens: &[u32],
        which: Logits,
        n_vocab: usize,
        logits: &mut Vec<f32>,
        mut body: B,
        mut head: H,
    ) -> Result<(), Error>
    where
        B: FnMut(&[u32], &mut DecoderState) -> Result<(), Error>,
        H: FnMut(Range<usize>, &mut DecoderState, &mut [f32]) -> Result<(), Error>,
    {
        if tokens.is_empty() {
            return Err(Error::Input("no tokens to process".into()));
        }
        check_room(&self.cache, tokens.len())?;
        let rows_out = match which {
            Logits::All => tokens.len(),
            Logits::Last => 1,
        };
        logits.clear();
        logits.resize(rows_out * n_vocab, 0.0);
        let size = self.chunk_size;
        let n_chunks = tokens.len().div_ceil(size);
        for (i, chunk) in tokens.chunks(size).enumerate() {
            body(chunk, self)?;
            self.cache.len += chunk.len();
            match which {
                Logits::All => {
                    let out = &mut logits[i * size * n_vocab..][..chunk.len() * n_vocab];
                    head(0..chunk.len(), self, out)?;
                }
                Logits::Last if i + 1 == n_chunks => {
                    head(chunk.len() - 1..chunk.len(), self, logits)?
                }
                Logits::Last => {}
            }
        }
        Ok(())
    }
}

/// `x += y`.
pub fn add_in_place(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// An error unless `cache` has room for `n` more positions.
pub fn check_room(cache: &KvCache, n: usize) -> Result<(), Error> {
    let room = cache.n_ctx - cache.len;
    if n > room {
        return Err(Error::ContextFull {
            needed: n,
            used: cache.len,
            n_ctx: cache.n_ctx,
        });
    }
    Ok(())
}
