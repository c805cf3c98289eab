//! NEON versions of the two attention loops over an f16 KV cache
//! (`crate::attend`), the scalar reference's bits: each f16 value
//! converted exactly (`fcvtl`), every product and sum rounded separately
//! (`fmul`, `fadd`), in the reference's order.
//!
//! - Scores: the float dot product's 32 lanes as eight vectors, the short
//!   last chunk of a row added lane by lane from lane 0, the lanes folded
//!   in halves (`crate::dot::float::fold_lanes`), times `scale`. Two heads
//!   of a group take each converted key chunk.
//! - Weighted sums: 16 output values of up to four heads stay in
//!   registers while every value row goes past in order (each converted
//!   once for the heads), so each `out[d]` adds its rows' products in the
//!   reference's order.
//!
//! Inputs the reference would only partly read (a short query, weight or
//! output slice, a row cut by the end of its bytes) go to the reference.

use std::arch::aarch64::*;

use crate::attend::{reference, F16Rows};
use crate::dot::float::{fold_lanes, LANES};
use crate::quant::float::f16_le;

use super::f16x8;

/// Whether every row of `runs` has its `2 * head_dim` bytes.
fn rows_whole(runs: &[F16Rows], head_dim: usize) -> bool {
    runs.iter()
        .all(|r| r.n == 0 || r.row(r.n - 1, head_dim).len() == 2 * head_dim)
}

/// The rows of `runs`, in order.
fn rows<'a>(runs: &'a [F16Rows<'a>], head_dim: usize) -> impl Iterator<Item = &'a [u8]> + 'a {
    runs.iter()
        .flat_map(move |run| (0..run.n).map(move |j| run.row(j, head_dim)))
}

/// Eight f16 values at `b[..16]` as two f32 vectors.
#[inline(always)]
fn f16_at(b: &[u8]) -> [float32x4_t; 2] {
    f16x8(b[..16].try_into().expect("16 bytes"))
}

/// Four f32 at `x[..4]`.
#[inline(always)]
fn f32_at(x: &[f32]) -> float32x4_t {
    let x: &[f32; 4] = x[..4].try_into().expect("4 values");
    // SAFETY: `x` is 4 readable f32; NEON is part of every aarch64 target.
    unsafe { vld1q_f32(x.as_ptr()) }
}

/// As `crate::attend::scores_f16`.
pub(super) fn scores_f16(
    q: &[f32],
    heads: usize,
    runs: &[F16Rows],
    head_dim: usize,
    scale: f32,
    out: &mut [f32],
) {
    let n: usize = runs.iter().map(|r| r.n).sum();
    if q.len() < heads * head_dim || out.len() < heads * n || !rows_whole(runs, head_dim) {
        return reference::scores_f16(q, heads, runs, head_dim, scale, out);
    }
    let q_of = |h: usize| &q[h * head_dim..(h + 1) * head_dim];
    let mut h = 0;
    while h < heads {
        if heads - h >= 2 {
            for (j, k) in rows(runs, head_dim).enumerate() {
                let [s0, s1] = dot_heads(k, [q_of(h), q_of(h + 1)]);
                out[h * n + j] = s0 * scale;
                out[(h + 1) * n + j] = s1 * scale;
            }
            h += 2;
        } else {
            for (j, k) in rows(runs, head_dim).enumerate() {
                let [s] = dot_heads(k, [q_of(h)]);
                out[h * n + j] = s * scale;
            }
            h += 1;
        }
    }
}

/// The float dot product of the f16 row `k` with each of the `H` query
/// heads `q` (as long as `k` has values), each chunk of `k` converted once.
#[inline(always)]
fn dot_heads<const H: usize>(k: &[u8], q: [&[f32]; H]) -> [f32; H] {
    let n = q[0].len();
    let full = n / LANES;
    // SAFETY: NEON is part of every aarch64 target.
    let mut acc = unsafe { [[vdupq_n_f32(0.0); 8]; H] };
    for c in 0..full {
        let kc = &k[2 * LANES * c..];
        let kv: [[float32x4_t; 2]; 4] = std::array::from_fn(|i| f16_at(&kc[16 * i..]));
        for (acc, q) in acc.iter_mut().zip(&q) {
            let qc = &q[LANES * c..];
            for (i, acc) in acc.iter_mut().enumerate() {
                let x = f32_at(&qc[4 * i..]);
                // SAFETY: NEON is part of every aarch64 target.
                *acc = unsafe { vaddq_f32(*acc, vmulq_f32(kv[i / 2][i % 2], x)) };
            }
        }
    }
    std::array::from_fn(|h| {
        let mut lanes = [0f32; LANES];
        for (i, &a) in acc[h].iter().enumerate() {
            // SAFETY: 4 writable f32 at `4i <= 28` of 32.
            unsafe { vst1q_f32(lanes[4 * i..].as_mut_ptr(), a) };
        }
        // The last chunk's values, from lane 0.
        let tail = LANES * full;
        for (i, l) in lanes.iter_mut().enumerate().take(n - tail) {
            let b = &k[2 * (tail + i)..];
            *l += f16_le([b[0], b[1]]) * q[h][tail + i];
        }
        fold_lanes(lanes)
    })
}

/// Output values per register block of [`weighted_sum_f16`].
const BLOCK: usize = 16;

/// As `crate::attend::weighted_sum_f16`.
pub(super) fn weighted_sum_f16(p: &[f32], heads: usize, runs: &[F16Rows], out: &mut [f32]) {
    let head_dim = out.len() / heads.max(1);
    let n: usize = runs.iter().map(|r| r.n).sum();
    if heads == 0 || head_dim == 0 || p.len() < heads * n || !rows_whole(runs, head_dim) {
        return reference::weighted_sum_f16(p, heads, runs, out);
    }
    let mut h = 0;
    while h < heads {
        let left = heads - h;
        let g = if left >= 4 { 4 } else { left.min(2) };
        let (p, out) = (&p[h * n..], &mut out[h * head_dim..]);
        match g {
            4 => sum_heads::<4>(p, n, runs, head_dim, out),
            2 => sum_heads::<2>(p, n, runs, head_dim, out),
            _ => sum_heads::<1>(p, n, runs, head_dim, out),
        }
        h += g;
    }
}

/// The weighted sums of `H` heads (weights `p[h * n..]`, outputs
/// `out[h * head_dim..]`), every row converted once for them.
#[inline(always)]
fn sum_heads<const H: usize>(
    p: &[f32],
    n: usize,
    runs: &[F16Rows],
    head_dim: usize,
    out: &mut [f32],
) {
    let whole = head_dim - head_dim % BLOCK;
    for d0 in (0..whole).step_by(BLOCK) {
        // SAFETY: NEON is part of every aarch64 target.
        let mut acc = unsafe { [[vdupq_n_f32(0.0); 4]; H] };
        for (j, v) in rows(runs, head_dim).enumerate() {
            let v = &v[2 * d0..];
            let vv = [f16_at(v), f16_at(&v[16..])];
            for (hh, acc) in acc.iter_mut().enumerate() {
                let w = p[hh * n + j];
                for (i, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: NEON is part of every aarch64 target.
                    *acc = unsafe { vaddq_f32(*acc, vmulq_n_f32(vv[i / 2][i % 2], w)) };
                }
            }
        }
        for (hh, acc) in acc.iter().enumerate() {
            let o = &mut out[hh * head_dim + d0..][..BLOCK];
            for (i, &a) in acc.iter().enumerate() {
                // SAFETY: 4 writable f32 at `4i <= 12` of 16.
                unsafe { vst1q_f32(o[4 * i..].as_mut_ptr(), a) };
            }
        }
    }
    // The last values (fewer than a block), in scalar code: the same
    // products and sums.
    for hh in 0..H {
        let o = &mut out[hh * head_dim + whole..(hh + 1) * head_dim];
        o.fill(0.0);
        for (j, v) in rows(runs, head_dim).enumerate() {
            let w = p[hh * n + j];
            for (o, b) in o.iter_mut().zip(v[2 * whole..].chunks_exact(2)) {
                *o += w * f16_le([b[0], b[1]]);
            }
        }
    }
}
