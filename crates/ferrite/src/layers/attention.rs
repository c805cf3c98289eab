//! Causal multi-head attention with grouped-query heads over a [`LayerKv`]
//! cache, optionally restricted to a sliding window.
//!
//! Work is split across threads by (token, head) pairs; each pair's scores,
//! softmax and weighted sum are computed in one fixed order, so a token's
//! output does not depend on the batch it is in or on the thread count.

use ferrite_kernels::attend::{scores_f16, weighted_sum_f16};
use ferrite_kernels::math::softmax;

use crate::generate::kv_cache::LayerKv;
use crate::parallel::{DisjointSlice, Threads};

/// Shape of an attention layer.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Multiplies `q . k` before the softmax (usually `1/sqrt(head_dim)`).
    pub scale: f32,
    /// Attend only to the last `window` positions (including the current).
    pub window: Option<usize>,
}

/// The tokens of one forward pass: `n` tokens at positions `start..start+n`.
#[derive(Clone, Copy, Debug)]
pub struct Positions {
    pub start: usize,
    pub n: usize,
}

/// Scratch values one thread needs: scores for `n_ctx` positions, one
/// head's accumulator and one value row converted to f32.
pub fn attention_scratch_len(n_ctx: usize, head_dim: usize) -> usize {
    n_ctx + 2 * head_dim
}

/// `out[t][h]` = softmax over past positions of `q[t][h] . k` times `v`.
///
/// `q`: (n_tokens, n_heads * head_dim); `out`: the same shape. The cache
/// must already hold keys and values for every position up to the last
/// token. `scratch` holds `threads.count()` segments of
/// [`attention_scratch_len`] values.
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
    let per_thread = scratch.len() / threads.count();
    let scratch = DisjointSlice::new(scratch);
    let out = DisjointSlice::new(out);
    threads.split_indexed(at.n * shape.n_heads, |thread, items| {
        // SAFETY: thread indices are distinct, so each thread owns its own
        // segment of the scratch space.
        let mine = unsafe { scratch.segment(thread * per_thread, per_thread) };
        let (acc, rest) = mine.split_at_mut(hd);
        let scores = &mut rest[hd..];
        for item in items {
            // Items run through the tokens from both ends in turn (0, n-1,
            // 1, n-2, ...): a causal token's cost grows with its position,
            // so each thread's contiguous range of items gets a fair mix.
            let (u, h) = (item / shape.n_heads, item % shape.n_heads);
            let t = if u % 2 == 0 { u / 2 } else { at.n - 1 - u / 2 };
            let pos = at.start + t;
            let first = match shape.window {
                Some(w) => (pos + 1).saturating_sub(w),
                None => 0,
            };
            let kv_off = (h / group) * hd;
            let qh = &q[t * q_dim + h * hd..t * q_dim + (h + 1) * hd];

            let n = pos + 1 - first;
            let s = &mut scores[..n];
            scores_f16(
                qh,
                &cache.key_runs(first..pos + 1, kv_off),
                hd,
                shape.scale,
                s,
            );
            // The kernels' vectorized softmax (one fixed summation order).
            softmax(s);
            weighted_sum_f16(s, &cache.value_runs(first..pos + 1, kv_off), acc);
            let base = t * q_dim + h * hd;
            for (d, &a) in acc.iter().enumerate() {
                // SAFETY: (t, h) pairs are split across threads, so this
                // head's output values are written by this thread only.
                unsafe { out.write(base + d, a) };
            }
        }
    });
}
