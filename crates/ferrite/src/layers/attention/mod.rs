//! Causal multi-head attention with grouped-query heads over a [`LayerKv`]
//! cache, optionally restricted to a sliding window, optionally with
//! soft-capped scores (Gemma 2) or a learned sink logit per head (gpt-oss),
//! through the library's one attention core ([`core::attend`]): the cache
//! gives it its f16 or f32 rows ([`CacheSpan`]).
//!
//! Work is split across threads by (token, head) pairs; each pair's scores,
//! softmax and weighted sum are computed in one fixed order, so a token's
//! output does not depend on the batch it is in or on the thread count.

pub mod core;

use std::ops::Range;

use ferrite_kernels::attend::F16Rows;
use ferrite_kernels::matmul::RowKernels;
use ferrite_kernels::GgmlType;

use self::core::{attend, F16Runs, KvSource, Scoring};
use crate::kv_cache::LayerKv;
use crate::parallel::{DisjointSlice, Threads};
use crate::tensor::f32_bytes;
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

/// Scratch values one thread needs: scores for `n_ctx` positions of each
/// of the `group` query heads that share a KV head.
pub fn attention_scratch_len(n_ctx: usize, group: usize) -> usize {
    group.max(1) * n_ctx
}

/// `out[t][h]` = softmax over past positions of `q[t][h] . k` times `v`.
///
/// `q`: (n_tokens, n_heads * head_dim); `out`: the same shape. The cache
/// must already hold keys and values for every position up to the last
/// token. `scratch` holds `threads.count()` segments of
/// [`attention_scratch_len`] values.
///
/// Work items are (token, KV head) pairs, each scoring all the query heads
/// that share that KV head in one kernel call (which may convert each key
/// once for all of them), when there are enough of them to keep every
/// thread busy (prefill); else (token, head) pairs (decoding). Either way
/// each head's scores, softmax and weighted sum are the same operations in
/// the same order, so results do not depend on the split.
pub fn attention(
    q: &[f32],
    cache: &LayerKv,
    at: Positions,
    shape: &AttnShape,
    scratch: &mut [f32],
    out: &mut [f32],
    threads: &Threads,
) {
    let hd = shape.head_dim;
    let q_dim = shape.n_heads * hd;
    let group = shape.n_heads / shape.n_kv_heads;
    // Heads per work item: a whole group, or one head.
    let per_item = if at.n * shape.n_kv_heads >= 4 * threads.count() {
        group
    } else {
        1
    };
    let n_units = shape.n_heads / per_item;
    // A decode step (one query of this sequence) reads rows the weights
    // streamed since the last step have evicted; a prompt's queries read
    // rows just written.
    let cold = at.n == 1;
    let per_thread = scratch.len() / threads.count();
    let scratch = DisjointSlice::new(scratch);
    let out = DisjointSlice::new(out);
    threads.split_indexed(at.n * n_units, |thread, items| {
        // SAFETY: thread indices are distinct, so each thread owns its own
        // segment of the scratch space.
        let scores = unsafe { scratch.segment(thread * per_thread, per_thread) };
        // The runs of rows (one per cache block) of the current item.
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        for item in items {
            // Items run through the tokens from both ends in turn (0, n-1,
            // 1, n-2, ...): a causal token's cost grows with its position,
            // so each thread's contiguous range of items gets a fair mix.
            let (u, unit) = (item / n_units, item % n_units);
            let t = if u % 2 == 0 { u / 2 } else { at.n - 1 - u / 2 };
            let pos = at.start + t;
            let first = match shape.window {
                Some(w) => (pos + 1).saturating_sub(w),
                None => 0,
            };
            let heads = unit * per_item..(unit + 1) * per_item;
            let kv_off = (heads.start / group) * hd;
            let qs = &q[t * q_dim + heads.start * hd..t * q_dim + heads.end * hd];
            let how = Scoring {
                scale: shape.scale,
                bias: None,
                softcap: shape.softcap,
                sinks: shape.sinks.map(|k| &k[heads.clone()]),
            };
            // SAFETY: the (token, head) pairs are split across threads, so
            // these heads' output values are written by this thread only.
            let o = unsafe { out.segment(t * q_dim + heads.start * hd, per_item * hd) };
            let (positions, kv) = (first..pos + 1, (&mut keys, &mut values));
            let span = CacheSpan::new(cache, positions, kv_off, hd, kv, cold);
            attend(&span, qs, per_item, &how, scores, o);
        }
    });
}

/// The keys and values of some positions of a [`LayerKv`] at one KV head
/// (values `offset..offset + head_dim` of each row), read by every query
/// head of a call.
pub enum CacheSpan<'a> {
    /// An f16 cache: runs of rows, one per block.
    F16(F16Runs<'a>),
    /// An f32 cache.
    F32(F32Slots<'a>),
}

impl<'a> CacheSpan<'a> {
    /// Positions `positions` of `cache` at value `offset`; `kv` is room
    /// for the runs of keys and values of an f16 cache, marked `cold`
    /// ([`F16Rows::cold`]: the kernels then prefetch ahead; no result
    /// changes) when they are probably in no cache.
    pub fn new<'c: 'a>(
        cache: &'c LayerKv,
        positions: Range<usize>,
        offset: usize,
        head_dim: usize,
        kv: (&'a mut Vec<F16Rows<'c>>, &'a mut Vec<F16Rows<'c>>),
        cold: bool,
    ) -> CacheSpan<'a> {
        let (keys, values) = kv;
        if cache.is_f32() {
            return CacheSpan::F32(F32Slots {
                cache,
                positions,
                offset,
                head_dim,
            });
        }
        keys.clear();
        values.clear();
        cache.key_runs(positions.clone(), offset, keys);
        cache.value_runs(positions, offset, values);
        for run in keys.iter_mut().chain(values.iter_mut()) {
            run.cold = cold;
        }
        CacheSpan::F16(F16Runs {
            keys,
            values,
            head_dim,
        })
    }

    fn source(&self) -> &dyn KvSource {
        match self {
            CacheSpan::F16(r) => r,
            CacheSpan::F32(s) => s,
        }
    }
}

impl KvSource for CacheSpan<'_> {
    fn positions(&self) -> usize {
        self.source().positions()
    }

    fn scores(&self, q: &[f32], heads: usize, scale: f32, out: &mut [f32]) {
        self.source().scores(q, heads, scale, out)
    }

    fn weighted_sum(&self, p: &[f32], heads: usize, out: &mut [f32]) {
        self.source().weighted_sum(p, heads, out)
    }
}

/// Positions of an f32 [`LayerKv`] at one KV head, each position's row
/// read from its block; the dot products by the kernels' f32 dot (the
/// same order as the f16 runs': 32 lanes folded in halves).
pub struct F32Slots<'a> {
    cache: &'a LayerKv,
    positions: Range<usize>,
    offset: usize,
    head_dim: usize,
}

impl KvSource for F32Slots<'_> {
    fn positions(&self) -> usize {
        self.positions.len()
    }

    fn scores(&self, q: &[f32], heads: usize, scale: f32, out: &mut [f32]) {
        let (hd, n, off) = (self.head_dim, self.positions.len(), self.offset);
        let dot = f32_dot();
        for (qh, s) in q.chunks_exact(hd).take(heads).zip(out.chunks_exact_mut(n)) {
            let qb = f32_bytes(qh);
            for (s, p) in s.iter_mut().zip(self.positions.clone()) {
                let k = &self.cache.key_f32(p)[off..off + hd];
                *s = dot.as_ref().map_or(f32::NAN, |d| d.dot(f32_bytes(k), qb)) * scale;
            }
        }
    }

    fn weighted_sum(&self, p: &[f32], heads: usize, out: &mut [f32]) {
        let (hd, n, off) = (self.head_dim, self.positions.len(), self.offset);
        for (acc, p) in out.chunks_exact_mut(hd).take(heads).zip(p.chunks_exact(n)) {
            acc.fill(0.0);
            for (&w, pos) in p.iter().zip(self.positions.clone()) {
                let v = &self.cache.value_f32(pos)[off..off + hd];
                for (a, &x) in acc.iter_mut().zip(v) {
                    *a += w * x;
                }
            }
        }
    }
}

/// The active set's f32 dot product (bytes of two f32 rows).
fn f32_dot() -> &'static Option<RowKernels> {
    static DOT: std::sync::OnceLock<Option<RowKernels>> = std::sync::OnceLock::new();
    DOT.get_or_init(|| RowKernels::for_type(GgmlType::F32))
}
