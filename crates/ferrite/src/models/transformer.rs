//! One decoder-only transformer for every architecture, described as data.
//!
//! An architecture file (`llama.rs`, `gemma3.rs`, `qwen2.rs`, `gpt2.rs`,
//! ...) reads its hyper-parameters and fills a [`Decoder`]: token input
//! (optional scale, optional learned positions), a list of [`Block`]s whose
//! parts are enums (norm kind, split or fused Q/K/V, optional Q/K norms,
//! optional post-norms, gated or plain MLP, RoPE table or none, window,
//! score scale), and an output [`Head`] (final norm, output matrix,
//! optional soft-cap). This file runs any such decoder.
//!
//! The forward pass takes the rows of several sequences at once
//! ([`SeqRows`]): the matrix products treat every row alike (one dot product
//! per output value, whatever the batch), and attention reads each row's own
//! sequence cache, so a row's result is bit-identical to running its
//! sequence alone.
//!
//! Per block, with `x` the residual stream of every row:
//! ```text
//! xn = attn_norm(x); q,k,v = qkv(xn) (+ biases); q,k = q_norm/k_norm per head;
//! q,k = rope(q,k); cache <- k,v; a = attention(q, cache); p = out(a);
//! x += post_attn_norm(p) or p
//! xn = ffn_norm(x); p = mlp(xn); x += post_ffn_norm(p) or p
//! ```
//! Reference: llama.cpp `src/models/*.cpp` over `llm_graph_context`'s
//! builders (`build_norm`, `build_attn`, `build_ffn`).

use std::ops::Range;

use ferrite_kernels::math::{activate, silu_mul, Activation};
use ferrite_kernels::GgmlType;

use crate::generate::kv_cache::{KvCache, KvPool, KvType, KV_BLOCK};
use crate::layers::activation::geglu_in_place;
use crate::layers::attention::{attention, AttnShape, Positions};
use crate::layers::moe::Moe;
pub use crate::layers::norm::Norm;
use crate::layers::rope::Rope;
use crate::models::decoder::{add_in_place, check_room, DecoderDims, Logits, Workspace, MAX_CHUNK};
use crate::parallel::Threads;
use crate::tensor::{matmul_many, Embedding, Linear, MatmulJob};
use crate::Error;

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
    pub arch: String,
    /// Sizes: layers, heads, widths, vocabulary, context.
    pub shape: Shape,
    /// How a token id becomes the first layer's input row.
    pub input: TokenInput,
    /// The RoPE rotations blocks refer to by index (Gemma 3 has two:
    /// global and local layers).
    pub ropes: Vec<Rope>,
    /// The transformer layers, in order.
    pub blocks: Vec<Block>,
    /// The final norm and the output projection to the vocabulary.
    pub head: Head,
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

    /// Scratch buffers for forward passes of up to [`MAX_CHUNK`] rows over
    /// caches of at most `n_ctx` positions (one per thread running
    /// batches, shared by all the sequences of a batch).
    pub fn new_workspace(&self, n_ctx: usize, threads: usize) -> Workspace {
        Workspace::new(self.dims(), n_ctx, threads)
    }

    /// Writes the token input of `tokens` (at positions `pos[t]`) into `x`.
    fn embed(&self, tokens: &[u32], pos: &[usize], ws: &mut Workspace) -> Result<(), Error> {
        let dim = self.shape.dim;
        let n = tokens.len();
        let x = &mut ws.x[..n * dim];
        for (t, &tok) in tokens.iter().enumerate() {
            let row = &mut x[t * dim..(t + 1) * dim];
            self.input.table.lookup(tok, row)?;
            if let Some(scale) = self.input.scale {
                for v in row.iter_mut() {
                    *v *= scale;
                }
            }
            if let Some(table) = &self.input.positions {
                let p = u32::try_from(pos[t]).unwrap_or(u32::MAX);
                let tmp = &mut ws.xn[..dim];
                table.lookup(p, tmp).map_err(|_| {
                    Error::Input(format!(
                        "position {} is past the {} positions {} learned",
                        pos[t], table.n_vocab, self.arch
                    ))
                })?;
                add_in_place(row, tmp);
            }
        }
        Ok(())
    }

    /// Runs the rows of `tokens` through every block: the first
    /// `seqs[0].n` rows belong to the first sequence, and so on. Leaves the
    /// final hidden states (before the output norm) in `ws.x`; stores keys
    /// and values in each sequence's cache but does not advance its length.
    pub fn forward_rows(
        &self,
        tokens: &[u32],
        seqs: &mut [SeqRows],
        ws: &mut Workspace,
        threads: &Threads,
    ) -> Result<(), Error> {
        let s = self.shape;
        let n = tokens.len();
        let (dim, hd, ffn) = (s.dim, s.head_dim, s.ffn_dim);
        let (q_dim, kv_dim) = (s.q_dim(), s.kv_dim());
        if n > MAX_CHUNK || seqs.iter().map(|q| q.n).sum::<usize>() != n {
            return Err(Error::Input(format!(
                "a forward pass takes at most {MAX_CHUNK} rows, each of one sequence"
            )));
        }
        // Each row's position.
        let mut row = 0;
        for seq in seqs.iter() {
            for i in 0..seq.n {
                ws.pos[row + i] = seq.cache.len + i;
            }
            row += seq.n;
        }
        let pos = std::mem::take(&mut ws.pos);
        let embedded = self.embed(tokens, &pos[..n], ws);
        ws.pos = pos;
        embedded?;
        // One table of RoPE angles, refilled when a block uses another
        // rotation than the previous one.
        let mut table_of = None;
        // The context size picks a LongRoPE model's rotation: one for the
        // whole batch.
        let n_ctx = seqs.first().map_or(0, |q| q.cache.n_ctx);
        let long = |n: usize| {
            self.ropes
                .iter()
                .any(|r| !std::ptr::eq(r.for_context(n), r))
        };
        if seqs.iter().any(|q| long(q.cache.n_ctx) != long(n_ctx)) {
            return Err(Error::Input(
                "a batch mixes contexts on both sides of the model's LongRoPE original context"
                    .into(),
            ));
        }

        for (l, block) in self.blocks.iter().enumerate() {
            let a = &block.attn;
            let x = &mut ws.x[..n * dim];
            let xn = &mut ws.xn[..n * dim];
            block.attn_norm.apply(x, xn);
            let (q, k, v) = (
                &mut ws.q[..n * q_dim],
                &mut ws.k[..n * kv_dim],
                &mut ws.v[..n * kv_dim],
            );
            match &a.qkv {
                Qkv::Split(split) => {
                    let [wq, wk, wv] = &**split;
                    let jobs = &mut [
                        MatmulJob::new(wq, &mut *q),
                        MatmulJob::new(wk, &mut *k),
                        MatmulJob::new(wv, &mut *v),
                    ];
                    matmul_many(jobs, xn, &mut ws.acts, threads)?;
                }
                Qkv::Fused(w) => {
                    let width = q_dim + 2 * kv_dim;
                    let qkv = &mut ws.qkv[..n * width];
                    w.matmul(xn, qkv, &mut ws.acts, threads)?;
                    for (t, r) in qkv.chunks_exact(width).enumerate() {
                        q[t * q_dim..(t + 1) * q_dim].copy_from_slice(&r[..q_dim]);
                        k[t * kv_dim..(t + 1) * kv_dim].copy_from_slice(&r[q_dim..q_dim + kv_dim]);
                        v[t * kv_dim..(t + 1) * kv_dim].copy_from_slice(&r[q_dim + kv_dim..]);
                    }
                }
            }
            if let Some(norm) = &a.q_norm {
                norm.apply_in_place(q);
            }
            if let Some(norm) = &a.k_norm {
                norm.apply_in_place(k);
            }
            let rope = a.rope.map(|i| self.ropes[i].for_context(n_ctx));
            if let (Some(i), Some(rope)) = (a.rope, rope) {
                if table_of != Some(i) {
                    ws.rope.fill_positions(rope, &ws.pos[..n]);
                    table_of = Some(i);
                }
            }
            // Rotate, store, attend: sequence by sequence.
            let att = &mut ws.att[..n * q_dim];
            let shape = AttnShape {
                n_heads: s.n_heads,
                n_kv_heads: s.n_kv_heads,
                head_dim: hd,
                scale: a.scale,
                window: a.window,
                softcap: a.softcap,
                sinks: a.sinks.as_deref(),
            };
            let mut r0 = 0;
            for seq in seqs.iter_mut() {
                let rows = r0..r0 + seq.n;
                r0 += seq.n;
                if rows.is_empty() {
                    continue;
                }
                let pos0 = seq.cache.len;
                let kv = &mut seq.cache.layers[l];
                for t in rows.clone() {
                    let q_t = &mut q[t * q_dim..(t + 1) * q_dim];
                    let k_t = &mut k[t * kv_dim..(t + 1) * kv_dim];
                    if let Some(rope) = rope {
                        let (cos, sin) = ws.rope.at(t);
                        rope.apply(q_t, hd, cos, sin);
                        rope.apply(k_t, hd, cos, sin);
                    }
                    kv.store(ws.pos[t], k_t, &v[t * kv_dim..(t + 1) * kv_dim]);
                }
                let at = Positions {
                    start: pos0,
                    n: rows.len(),
                };
                attention(
                    &q[rows.start * q_dim..rows.end * q_dim],
                    kv,
                    at,
                    &shape,
                    &mut ws.attn_scratch,
                    &mut att[rows.start * q_dim..rows.end * q_dim],
                    threads,
                );
            }
            let proj = &mut ws.proj[..n * dim];
            a.out.matmul(att, proj, &mut ws.acts, threads)?;
            residual_add(x, proj, block.post_attn_norm.as_ref(), xn);

            block.ffn_norm.apply(x, xn);
            let (gate, up) = (&mut ws.gate[..n * ffn], &mut ws.up[..n * ffn]);
            match &block.mlp {
                Mlp::Gated {
                    gate: wg,
                    up: wu,
                    down,
                    act,
                } => {
                    let jobs = &mut [MatmulJob::new(wg, &mut *gate), MatmulJob::new(wu, &mut *up)];
                    matmul_many(jobs, xn, &mut ws.acts, threads)?;
                    let hidden = match act {
                        // up = silu(gate) * up, with the kernels' vectorized SiLU.
                        GatedAct::Silu => {
                            silu_mul(gate, up);
                            &*up
                        }
                        GatedAct::GeluTanh => {
                            geglu_in_place(gate, up);
                            &*gate
                        }
                    };
                    down.matmul(hidden, proj, &mut ws.acts, threads)?;
                }
                Mlp::Plain { up: wu, down, act } => {
                    wu.matmul(xn, up, &mut ws.acts, threads)?;
                    activate(*act, up);
                    down.matmul(up, proj, &mut ws.acts, threads)?;
                }
                Mlp::Moe(moe) => moe.forward(xn, proj, gate, up, &mut ws.acts, threads)?,
            }
            residual_add(x, proj, block.post_ffn_norm.as_ref(), xn);
        }
        Ok(())
    }

    /// Final norm, output projection and soft-capping of the hidden states
    /// of rows `rows` of `ws.x`, into `out` (`n_vocab` per row).
    pub fn head_rows(
        &self,
        rows: Range<usize>,
        ws: &mut Workspace,
        threads: &Threads,
        out: &mut [f32],
    ) -> Result<(), Error> {
        let (dim, n) = (self.shape.dim, rows.len());
        self.head.norm.apply(
            &ws.x[rows.start * dim..rows.end * dim],
            &mut ws.xn[..n * dim],
        );
        self.head
            .output
            .matmul(&ws.xn[..n * dim], out, &mut ws.acts, threads)?;
        if let Some(cap) = self.head.softcap {
            let inv = 1.0 / cap;
            for v in out.iter_mut() {
                *v = (*v * inv).tanh() * cap;
            }
        }
        Ok(())
    }

    /// One forward pass over several sequences at once (continuous
    /// batching): each item's tokens go at the next positions of its cache,
    /// which advances. `logits` receives, item after item, `n_vocab` values
    /// for each row the item asked for. Every value is bit-identical to
    /// running that sequence alone. The items' tokens must total at most
    /// [`MAX_CHUNK`], and every cache must have room for its tokens.
    pub fn forward_batch(
        &self,
        items: &mut [BatchItem],
        ws: &mut Workspace,
        threads: &Threads,
        logits: &mut Vec<f32>,
    ) -> Result<(), Error> {
        let nv = self.shape.n_vocab;
        let mut tokens = Vec::with_capacity(MAX_CHUNK);
        for item in items.iter() {
            if item.tokens.is_empty() {
                return Err(Error::Input("a batch item has no tokens".into()));
            }
            check_room(item.cache, item.tokens.len())?;
            tokens.extend_from_slice(item.tokens);
        }
        if tokens.len() > MAX_CHUNK {
            return Err(Error::Input(format!(
                "a batch of {} tokens is larger than {MAX_CHUNK}",
                tokens.len()
            )));
        }
        let mut seqs: Vec<SeqRows> = items
            .iter_mut()
            .map(|it| SeqRows {
                n: it.tokens.len(),
                cache: &mut *it.cache,
            })
            .collect();
        self.forward_rows(&tokens, &mut seqs, ws, threads)?;
        drop(seqs);
        // Move the rows whose logits are wanted to the front of `ws.x`, in
        // order (each goes to an index no later than its own, so none is
        // overwritten before it is read), and run the head once over them:
        // one pass over the output matrix for the whole batch.
        let dim = self.shape.dim;
        let (mut r0, mut k) = (0, 0);
        for item in items.iter_mut() {
            let n = item.tokens.len();
            item.cache.len += n;
            let rows = match item.logits {
                Logits::All => r0..r0 + n,
                Logits::Last => r0 + n - 1..r0 + n,
            };
            for r in rows {
                if r != k {
                    ws.x.copy_within(r * dim..(r + 1) * dim, k * dim);
                }
                k += 1;
            }
            r0 += n;
        }
        logits.clear();
        logits.resize(k * nv, 0.0);
        self.head_rows(0..k, ws, threads, logits)
    }
}

/// `x += norm(y)` with a post-norm, else `x += y` (`tmp`: scratch rows).
fn residual_add(x: &mut [f32], y: &[f32], post_norm: Option<&Norm>, tmp: &mut [f32]) {
    match post_norm {
        Some(norm) => {
            norm.apply(y, tmp);
            add_in_place(x, tmp);
        }
        None => add_in_place(x, y),
    }
}
