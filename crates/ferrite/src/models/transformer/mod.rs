//! One decoder-only transformer for every architecture, described as data.
//!
//! An architecture file (`llama.rs`, `gemma3.rs`, `qwen2.rs`, `gpt2.rs`,
//! ...) reads its hyper-parameters and fills a [`Decoder`]: token input
//! (optional scale, optional learned positions), a list of [`Block`]s whose
//! parts are enums (norm kind, split or fused Q/K/V, optional Q/K norms,
//! optional post-norms, gated or plain MLP, RoPE table or none, window,
//! score scale), and an output [`Head`] (final norm, output matrix,
//! optional soft-cap). `forward.rs` runs any such decoder; this file holds
//! the parts and what a decoder's shape implies (its KV cache's size and
//! kind, its scratch buffers).
//!
//! The forward pass takes the rows of several sequences at once
//! ([`SeqRows`]): the matrix products treat every row alike (one dot product
//! per output value, whatever the batch), and attention reads each row's own
//! sequence cache, so a row's result is bit-identical to running its
//! sequence alone.

use ferrite_kernels::math::Activation;
use ferrite_kernels::GgmlType;

use crate::kv_cache::{KvCache, KvPool, KvType, KV_BLOCK};
use crate::layers::moe::Moe;
pub use crate::layers::norm::Norm;
use crate::layers::rope::Rope;
use crate::models::decoder::{DecoderDims, Logits, Workspace, MAX_CHUNK};
use crate::tensor::{Embedding, Linear};
use crate::Error;

mod forward;

/// The query, key and value projections.
pub enum Qkv {
    /// Three matrices: `(q_dim, dim)`, `(kv_dim, dim)`, `(kv_dim, dim)`
    /// (boxed: an enum is as large as its largest variant).
    Split(Box<[Linear; 3]>),
    /// One matrix `(q_dim + 2 kv_dim, dim)`, rows `q | k | v` (GPT-2).
    Fused(Linear),
}

/// The feed-forward network of a block.
pub enum Mlp {
    /// `down(act(gate(x)) * up(x))`: SwiGLU or GeGLU.
    Gated {
        gate: Linear, // (ffn_dim, dim)
        up: Linear,   // (ffn_dim, dim)
        down: Linear, // (dim, ffn_dim)
        act: GatedAct,
    },
    /// `down(act(up(x)))` (GPT-2).
    Plain {
        up: Linear,   // (ffn_dim, dim)
        down: Linear, // (dim, ffn_dim)
        act: Activation,
    },
    /// Mixture of experts (`crate::layers::moe`); the decoder's `ffn_dim`
    /// is at least its widest expert's.
    Moe(Box<Moe>),
}

/// The activation of a gated MLP's gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GatedAct {
    /// SiLU (SwiGLU: Llama, Qwen).
    Silu,
    /// Tanh-approximated GELU (GeGLU: Gemma).
    GeluTanh,
}

/// The attention half of a block.
pub struct Attention {
    pub qkv: Qkv,
    /// Per-head norms of queries and keys before RoPE (Gemma 3, Qwen 3).
    pub q_norm: Option<Norm>,
    pub k_norm: Option<Norm>,
    pub out: Linear, // (dim, q_dim)
    /// Index into [`Decoder::ropes`] of the rotation applied to queries and
    /// keys; `None`: keys are cached as projected (learned positions).
    pub rope: Option<usize>,
    /// Attend only to the last `window` positions (sliding-window layers).
    pub window: Option<usize>,
    /// Multiplies `q . k` before the softmax.
    pub scale: f32,
    /// `cap * tanh(score / cap)` on the scaled scores (Gemma 2).
    pub softcap: Option<f32>,
    /// A learned sink logit per query head in each softmax's denominator
    /// (gpt-oss; `crate::layers::attention`).
    pub sinks: Option<Vec<f32>>,
}

/// One transformer block.
pub struct Block {
    pub attn_norm: Norm,
    pub attn: Attention,
    /// Norm of the attention output before the residual add (Gemma 2/3).
    pub post_attn_norm: Option<Norm>,
    pub ffn_norm: Norm,
    pub mlp: Mlp,
    /// Norm of the MLP output before the residual add (Gemma 2/3).
    pub post_ffn_norm: Option<Norm>,
}

/// How token ids become the first residual stream.
pub struct TokenInput {
    pub table: Embedding, // (n_vocab, dim)
    /// Every embedding value is multiplied by this (Gemma: `sqrt(dim)`).
    pub scale: Option<f32>,
    /// Learned absolute positions added to the embedding (GPT-2):
    /// `(n_positions, dim)`.
    pub positions: Option<Embedding>,
}

/// Final norm and output projection.
pub struct Head {
    pub norm: Norm,
    pub output: Linear, // (n_vocab, dim)
    /// `cap * tanh(logit / cap)` on the logits (Gemma 2/3 when set).
    pub softcap: Option<f32>,
}

/// Sizes of a decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub n_vocab: usize,
    pub dim: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn_dim: usize,
    /// The context length the model was trained with.
    pub n_ctx_train: usize,
}

impl Shape {
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}

/// A decoder-only language model of any supported architecture.
pub struct Decoder {
    /// The architecture name (`general.architecture`), for messages.
    pub(crate) arch: String,
    /// Sizes: layers, heads, widths, vocabulary, context.
    pub(crate) shape: Shape,
    /// How a token id becomes the first layer's input row.
    pub(crate) input: TokenInput,
    /// The RoPE rotations blocks refer to by index (Gemma 3 has two:
    /// global and local layers).
    pub(crate) ropes: Vec<Rope>,
    /// The transformer layers, in order.
    pub(crate) blocks: Vec<Block>,
    /// The final norm and the output projection to the vocabulary.
    pub(crate) head: Head,
}

/// The rows of one sequence in a batched forward pass: the next `n` rows
/// of the batch's tokens go at positions `cache.len..` of `cache`.
pub struct SeqRows<'a> {
    /// The sequence's cache; its length is where the rows start.
    pub cache: &'a mut KvCache,
    /// How many rows of the batch belong to this sequence.
    pub n: usize,
}

/// One sequence's part of a [`Decoder::forward_batch`] call.
pub struct BatchItem<'a> {
    /// The sequence's new tokens, stored after what its cache holds.
    pub tokens: &'a [u32],
    /// The sequence's cache.
    pub cache: &'a mut KvCache,
    /// Which rows' logits the call returns.
    pub logits: Logits,
}

impl Decoder {
    fn dims(&self) -> DecoderDims {
        let s = &self.shape;
        let fused = self
            .blocks
            .iter()
            .any(|b| matches!(b.attn.qkv, Qkv::Fused(_)));
        DecoderDims {
            dim: s.dim,
            q_dim: s.q_dim(),
            kv_dim: s.kv_dim(),
            ffn_dim: s.ffn_dim,
            head_dim: s.head_dim,
            rope_pairs: self.ropes.iter().map(|r| r.dims / 2).max().unwrap_or(0),
            fused_qkv_dim: if fused { s.q_dim() + 2 * s.kv_dim() } else { 0 },
            n_layers: self.blocks.len(),
        }
    }

    /// The RoPE rotations, for the library's own tests.
    #[cfg(any(test, feature = "internals"))]
    #[doc(hidden)]
    pub fn ropes(&self) -> &[Rope] {
        &self.ropes
    }

    /// Cache slots block `l` needs for a context of `n_ctx` positions: all
    /// of them, or for a sliding-window block the window plus room for a
    /// whole chunk, so that storing a chunk's keys never overwrites a key an
    /// earlier token of the chunk still attends to (position `p` lives in
    /// slot `p % capacity`).
    pub fn cache_capacity(&self, l: usize, n_ctx: usize) -> usize {
        match self.blocks[l].attn.window {
            Some(w) => n_ctx.min(w + MAX_CHUNK - 1),
            None => n_ctx,
        }
    }

    /// Bytes of the key/value blocks a sequence allocates (or copies on
    /// write) to store positions `positions`: in each layer, the blocks
    /// they span, at most the layer's ring.
    pub fn kv_block_bytes(&self, positions: std::ops::Range<usize>, n_ctx: usize) -> usize {
        if positions.is_empty() {
            return 0;
        }
        let per_value = match self.kv_type() {
            KvType::F16 => 2,
            KvType::F32 => 4,
        };
        let spanned = positions.end.div_ceil(KV_BLOCK) - positions.start / KV_BLOCK;
        let block = KV_BLOCK * self.shape.kv_dim() * 2 * per_value;
        (0..self.blocks.len())
            .map(|l| spanned.min(self.cache_capacity(l, n_ctx).div_ceil(KV_BLOCK)) * block)
            .sum()
    }

    /// Bytes of the key/value cache of one sequence of `n_ctx` positions
    /// (what [`Decoder::new_cache`] allocates once every position is
    /// stored): whole blocks, a ring layer's included.
    pub fn kv_bytes(&self, n_ctx: usize) -> usize {
        self.kv_block_bytes(0..n_ctx, n_ctx)
    }

    /// How far back a cache of `n_ctx` positions can be truncated: ring
    /// layers keep `capacity - window + 1` positions of slack; `None` when
    /// no layer's ring wraps.
    pub fn max_rewind(&self, n_ctx: usize) -> Option<usize> {
        (0..self.blocks.len())
            .filter_map(|l| Some((self.blocks[l].attn.window?, self.cache_capacity(l, n_ctx))))
            .filter(|&(_, cap)| cap < n_ctx)
            .map(|(w, cap)| cap + 1 - w)
            .min()
    }

    /// f32 keys and values when every attention projection is stored in
    /// f32 (a full-precision file: the f16 cache would be its largest
    /// error), else f16 as llama.cpp keeps them.
    pub fn kv_type(&self) -> KvType {
        let f32_weights = |w: &Linear| w.ty == GgmlType::F32;
        let all_f32 = self.blocks.iter().all(|b| match &b.attn.qkv {
            Qkv::Split(split) => split.iter().all(f32_weights),
            Qkv::Fused(w) => f32_weights(w),
        });
        if all_f32 {
            KvType::F32
        } else {
            KvType::F16
        }
    }

    /// An empty KV cache for `n_ctx` positions (one per sequence; it can be
    /// cloned to fork a sequence).
    pub fn new_cache(&self, n_ctx: usize) -> Result<KvCache, Error> {
        self.new_cache_in(n_ctx, &KvPool::new())
    }

    /// As [`Decoder::new_cache`], its blocks counted in `pool`.
    pub fn new_cache_in(&self, n_ctx: usize, pool: &KvPool) -> Result<KvCache, Error> {
        if n_ctx == 0 {
            return Err(Error::Input("the context size must be at least 1".into()));
        }
        if let Some(pos) = &self.input.positions {
            if n_ctx > pos.n_vocab {
                return Err(Error::Input(format!(
                    "a context of {n_ctx} positions exceeds the {} positions {} learned",
                    pos.n_vocab, self.arch
                )));
            }
        }
        if let Some(max) = self.ropes.iter().filter_map(|r| r.max_positions).min() {
            if n_ctx > max {
                return Err(Error::Input(format!(
                    "a context of {n_ctx} positions exceeds the {max} that {}'s dynamic NTK RoPE \
                     scaling is computed for (rope.scaling.original_context_length; longer \
                     contexts are not supported yet)",
                    self.arch
                )));
            }
        }
        let capacities: Vec<usize> = (0..self.blocks.len())
            .map(|l| self.cache_capacity(l, n_ctx))
            .collect();
        let mut cache = KvCache::in_pool(
            self.shape.kv_dim(),
            n_ctx,
            &capacities,
            self.kv_type(),
            pool,
        );
        if let Some(rewind) = self.max_rewind(n_ctx) {
            cache.set_max_rewind(rewind);
        }
        Ok(cache)
    }

    /// Scratch buffers for forward passes of up to [`MAX_CHUNK`] rows (one
    /// per thread running batches, shared by all the sequences of a
    /// batch). Their size does not depend on the context (`_n_ctx`, kept
    /// for the callers): attention holds no row of scores per position.
    pub fn new_workspace(&self, _n_ctx: usize, threads: usize) -> Workspace {
        Workspace::new(self.dims(), threads)
    }
}
