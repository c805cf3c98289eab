//! Causal multi-head attention with grouped-query heads over a [`LayerKv`]
//! cache, optionally restricted to a sliding window, optionally with a
//! learned sink logit per head (gpt-oss: one more logit in each softmax's
//! denominator, with no value: `p_j = e^(s_j) / (e^(sink) + sum_i e^(s_i))`,
//! as transformers' `eager_attention_forward` for gpt-oss and llama.cpp's
//! `ggml_soft_max_add_sinks`).
//!
//! Work is split across threads by (token, head) pairs; each pair's scores,
//! softmax and weighted sum are computed in one fixed order, so a token's
//! output does not depend on the batch it is in or on the thread count.

use ferrite_kernels::attend::{scores_f16, weighted_sum_f16};
use ferrite_kernels::math::{exp, exp_shifted_sum, max_value, softmax};
use ferrite_kernels::matmul::RowKernels;
use ferrite_kernels::GgmlType;

use crate::generate::kv_cache::LayerKv;
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
/// of the `group` query heads that share a KV head, and one head's
/// accumulator and value row (f32 caches).
pub fn attention_scratch_len(n_ctx: usize, head_dim: usize, group: usize) -> usize {
    group.max(1) * n_ctx + 2 * head_dim
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
    let per_thread = scratch.len() / threads.count();
    let scratch = DisjointSlice::new(scratch);
    let out = DisjointSlice::new(out);
    threads.split_indexed(at.n * n_units, |thread, items| {
        // SAFETY: thread indices are distinct, so each thread owns its own
        // segment of the scratch space.
        let mine = unsafe { scratch.segment(thread * per_thread, per_thread) };
        let (acc, rest) = mine.split_at_mut(hd);
        let scores = &mut rest[hd..];
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
            let n = pos + 1 - first;
            let qs = &q[t * q_dim + heads.start * hd..t * q_dim + heads.end * hd];
            let scores = &mut scores[..per_item * n];
            if cache.is_f32() {
                for (h, s) in heads.zip(scores.chunks_exact_mut(n)) {
                    let qh = &q[t * q_dim + h * hd..t * q_dim + (h + 1) * hd];
                    let sink = shape.sinks.map(|k| k[h]);
                    exact_head(qh, cache, first..pos + 1, kv_off, shape, sink, s, acc);
                    write_head(&out, t * q_dim + h * hd, acc);
                }
                continue;
            }
            keys.clear();
            cache.key_runs(first..pos + 1, kv_off, &mut keys);
            scores_f16(qs, per_item, &keys, hd, shape.scale, scores);
            if let Some(cap) = shape.softcap {
                softcap(scores, cap);
            }
            for (h, s) in heads.clone().zip(scores.chunks_exact_mut(n)) {
                // The kernels' vectorized softmax (one fixed summation order).
                softmax_sink(s, shape.sinks.map(|k| k[h]));
            }
            values.clear();
            cache.value_runs(first..pos + 1, kv_off, &mut values);
            // SAFETY: the (token, head) pairs are split across threads, so
            // these heads' output values are written by this thread only.
            let o = unsafe { out.segment(t * q_dim + heads.start * hd, per_item * hd) };
            weighted_sum_f16(scores, per_item, &values, o);
        }
    });
}

/// One head's result `acc` into `out` at `base`.
fn write_head(out: &DisjointSlice<f32>, base: usize, acc: &[f32]) {
    for (d, &a) in acc.iter().enumerate() {
        // SAFETY: the (token, head) pairs are split across threads, so this
        // head's output values are written by this thread only.
        unsafe { out.write(base + d, a) };
    }
}

/// One head's attention over an f32 cache: scores with the kernels' f32
/// dot product (the same bits in every kernel set), softmax (with the
/// head's sink logit, if any), and the weighted sum of values added in
/// position order.
#[allow(clippy::too_many_arguments)]
fn exact_head(
    q: &[f32],
    cache: &LayerKv,
    positions: std::ops::Range<usize>,
    kv_off: usize,
    shape: &AttnShape,
    sink: Option<f32>,
    scores: &mut [f32],
    acc: &mut [f32],
) {
    let hd = q.len();
    let dot = f32_dot();
    let qb = f32_bytes(q);
    for (s, p) in scores.iter_mut().zip(positions.clone()) {
        let k = &cache.key_f32(p)[kv_off..kv_off + hd];
        *s = dot.map_or(f32::NAN, |d| d.dot(f32_bytes(k), qb)) * shape.scale;
    }
    if let Some(cap) = shape.softcap {
        softcap(scores, cap);
    }
    softmax_sink(scores, sink);
    acc.fill(0.0);
    for (&w, p) in scores.iter().zip(positions) {
        let v = &cache.value_f32(p)[kv_off..kv_off + hd];
        for (a, &x) in acc.iter_mut().zip(v) {
            *a += w * x;
        }
    }
}

/// Softmax of `scores` in place; with a sink logit, as if it were one more
/// score whose probability is dropped: the maximum and the sum include
/// it (the kernels' shifted exponentials and sum, then the sink's term).
pub fn softmax_sink(scores: &mut [f32], sink: Option<f32>) {
    let Some(sink) = sink else {
        return softmax(scores);
    };
    let max = max_value(scores).max(sink);
    let sum = exp_shifted_sum(scores, max) + exp(sink - max);
    let inv = 1.0 / sum;
    scores.iter_mut().for_each(|x| *x *= inv);
}

/// `cap * tanh(s / cap)` on every score (transformers divides, takes the
/// tanh, multiplies, in f32).
fn softcap(scores: &mut [f32], cap: f32) {
    for s in scores.iter_mut() {
        *s = (*s / cap).tanh() * cap;
    }
}

/// The active set's f32 dot product (bytes of two f32 rows).
fn f32_dot() -> &'static Option<RowKernels> {
    static DOT: std::sync::OnceLock<Option<RowKernels>> = std::sync::OnceLock::new();
    DOT.get_or_init(|| RowKernels::for_type(GgmlType::F32))
}
