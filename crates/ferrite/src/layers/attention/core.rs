//! The encoder-decoders' attention core: for some query heads over the
//! keys and values of `n` positions, the scores, their modifiers (a bias
//! per head and position, a soft-cap), the softmax (with a sink logit per
//! head, if any) and the weighted sum of the values, in one fixed order.
//! Marian's and T5's attention goes through it (causal self-attention over
//! a hypothesis' `LayerKv` of one-position blocks, read row by row,
//! bidirectional encoder self-attention, cross-attention over the
//! encoder's keys, T5's relative position bias). The decoders' attention
//! is [`super::tiled`]'s (blocks of keys, an online softmax).
//!
//! What differs between the callers is only how the rows are read:
//! listed row by row or in order. A
//! storage gives the core its two loops as a [`KvSource`]; the mask is the
//! caller's choice of positions (a causal query's span ends at itself, a
//! window starts later, a bidirectional or cross query sees them all).
//!
//! Per head: `s_j = dot(q, k_j) * scale` (the source's dot product),
//! then `s_j + bias_j` (if a bias), then `cap * tanh(s_j / cap)` (if a
//! soft-cap), then the softmax of [`softmax_sink`], then
//! `out[d] = sum_j p_j * v_j[d]` from 0, positions in order, each product
//! rounded then added (no fused multiply-add).

use ferrite_kernels::attend_f32;
use ferrite_kernels::math::{exp, exp_shifted_sum, max_value, softmax};

/// Keys and values of the positions some query heads attend to, as one
/// storage keeps them: the two loops of the core over them. Which key
/// and value row each head reads is the source's (a group of query heads
/// sharing one KV head, or one KV head per query head).
pub trait KvSource {
    /// Positions attended, `n`.
    fn positions(&self) -> usize;

    /// `out[h * n + j] = dot(q_h, k_j) * scale` for the `heads` query
    /// heads of `q` (`head_dim` values each, one after the other) and the
    /// positions `j` in order; `out` holds `heads * n` values.
    fn scores(&self, q: &[f32], heads: usize, scale: f32, out: &mut [f32]);

    /// `out[h * head_dim + d] = sum_j p[h * n + j] * v_j[d]`, from 0,
    /// positions in order, each product rounded then added; `out` holds
    /// `heads * head_dim` values.
    fn weighted_sum(&self, p: &[f32], heads: usize, out: &mut [f32]);
}

/// What happens to the scores between the dot products and the softmax.
#[derive(Clone, Copy, Debug)]
pub struct Scoring<'a> {
    /// Multiplies `q . k` (usually `1/sqrt(head_dim)`).
    pub scale: f32,
    /// Added to score `j` of head `h` at `bias[h * n + j]` (T5's relative
    /// position biases).
    pub bias: Option<&'a [f32]>,
    /// `cap * tanh(score / cap)` on the scaled scores (Gemma 2).
    pub softcap: Option<f32>,
    /// One sink logit per head of the call (gpt-oss), see
    /// [`softmax_sink`].
    pub sinks: Option<&'a [f32]>,
}

impl Scoring<'_> {
    /// Scores scaled by `scale`, nothing else.
    pub fn scaled(scale: f32) -> Scoring<'static> {
        Scoring {
            scale,
            bias: None,
            softcap: None,
            sinks: None,
        }
    }
}

/// Attention of the `heads` query heads of `q` over `src`: see the module
/// notes for the operations. `scores` is scratch of at least `heads * n`
/// values; `out` receives `heads * head_dim` values.
pub fn attend<S: KvSource + ?Sized>(
    src: &S,
    q: &[f32],
    heads: usize,
    how: &Scoring,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let n = src.positions();
    let scores = &mut scores[..heads * n];
    src.scores(q, heads, how.scale, scores);
    if let Some(bias) = how.bias {
        scores.iter_mut().zip(bias).for_each(|(s, &b)| *s += b);
    }
    if let Some(cap) = how.softcap {
        softcap(scores, cap);
    }
    if n > 0 {
        for (h, s) in scores.chunks_exact_mut(n).enumerate() {
            softmax_sink(s, how.sinks.map(|k| k[h]));
        }
    }
    src.weighted_sum(scores, heads, out);
}

/// Softmax of `scores` in place (the kernels' vectorized softmax: one
/// fixed summation order); with a sink logit (gpt-oss: one more logit in
/// the denominator, with no value: `p_j = e^(s_j) / (e^(sink) + sum_i
/// e^(s_i))`, as transformers' `eager_attention_forward` for gpt-oss and
/// llama.cpp's `ggml_soft_max_add_sinks`), as if it were one more score
/// whose probability is dropped: the maximum and the sum include it (the
/// kernels' shifted exponentials and sum, then the sink's term).
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

/// f32 keys and values as rows of a matrix (`ld` values apart), head `h`
/// of the call reading values `h * head_dim..` of its rows, position `j`
/// in row `j`; or each position's rows listed (`rows`: an encoder-decoder
/// hypothesis' [`crate::kv_cache::KvCache`] rows): the
/// encoder-decoders' attention, through `ferrite_kernels::attend_f32` (its
/// dot product: eight lanes folded in order, then the tail).
#[derive(Clone, Copy, Debug)]
pub struct F32Rows<'a> {
    pub keys: &'a [f32],
    pub values: &'a [f32],
    pub ld: usize,
    pub n: usize,
    pub head_dim: usize,
    pub rows: Option<attend_f32::Listed<'a>>,
}

impl F32Rows<'_> {
    fn heads<'q>(&'q self, q: &'q [f32], scale: f32) -> attend_f32::Heads<'q> {
        attend_f32::Heads {
            q,
            keys: self.keys,
            values: self.values,
            ld: self.ld,
            n: self.n,
            hd: self.head_dim,
            scale,
            rows: self.rows,
        }
    }
}

impl KvSource for F32Rows<'_> {
    fn positions(&self) -> usize {
        self.n
    }

    fn scores(&self, q: &[f32], heads: usize, scale: f32, out: &mut [f32]) {
        attend_f32::scores(&self.heads(q, scale), heads, out);
    }

    fn weighted_sum(&self, p: &[f32], _heads: usize, out: &mut [f32]) {
        attend_f32::weighted_sum(&self.heads(&[], 1.0), p, out);
    }
}
