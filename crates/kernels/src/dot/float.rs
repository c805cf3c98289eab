//! Dot products of float weights (F32, F16, BF16) with f32 activations;
//! the counterparts of ggml's `ggml_vec_dot_f32`, `ggml_vec_dot_f16` and
//! `ggml_vec_dot_bf16` (ggml-cpu/vec.cpp) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>, which take
//! F32, F16 and BF16 activations respectively; ours are always f32.
//!
//! Order (see the module above): 32 f32 lanes, value `i` into lane
//! `i % 32`, each product rounded to f32 and then added; the lanes are
//! folded in halves at the end. ggml's scalar fallback accumulates in f64
//! instead, and its SIMD paths use their own lane counts.
//!
//! Every value is read with `from_le_bytes`, so the bytes may sit at any
//! address.

use crate::quant::float::f16_le;

/// Number of independent partial sums.
pub(crate) const LANES: usize = 32;

/// Dot product of `W`-byte weights (decoded by `decode`) with
/// little-endian f32 activations, over as many values as both slices hold.
#[inline(always)]
fn lanes_dot<const W: usize>(w: &[u8], a: &[u8], decode: impl Fn(&[u8]) -> f32) -> f32 {
    let n = (w.len() / W).min(a.len() / 4);
    let (w, a) = (&w[..n * W], &a[..n * 4]);
    let mut acc = [0.0f32; LANES];
    let (w_chunks, a_chunks) = (w.chunks_exact(W * LANES), a.chunks_exact(4 * LANES));
    // Both slices hold exactly n values, so the remainders are the same
    // last n % LANES values; they go to lanes 0.. like a full chunk would.
    let (w_tail, a_tail) = (w_chunks.remainder(), a_chunks.remainder());
    let chunks = w_chunks.zip(a_chunks).chain([(w_tail, a_tail)]);
    for (wc, ac) in chunks {
        add_chunk(&mut acc, (wc, W), ac, &decode);
    }
    fold_lanes(acc)
}

/// `lane[i] += w[i] * a[i]` for the values of one chunk (a last one may be
/// short: its values go to lanes 0..), weights of `size` bytes decoded by
/// `decode`, little-endian f32 activations.
#[inline(always)]
pub(crate) fn add_chunk(
    acc: &mut [f32; LANES],
    (wc, size): (&[u8], usize),
    ac: &[u8],
    decode: impl Fn(&[u8]) -> f32,
) {
    for ((s, wv), av) in acc
        .iter_mut()
        .zip(wc.chunks_exact(size))
        .zip(ac.chunks_exact(4))
    {
        *s += decode(wv) * f32::from_le_bytes([av[0], av[1], av[2], av[3]]);
    }
}

/// The lanes folded in halves, `lane[i] += lane[i + w]` for w = 16, 8, 4,
/// 2, 1 (shared with the SIMD kernels that store their lanes).
#[inline(always)]
pub(crate) fn fold_lanes(mut acc: [f32; LANES]) -> f32 {
    let mut width = LANES / 2;
    while width > 0 {
        let (lo, hi) = acc.split_at_mut(width);
        for (l, h) in lo.iter_mut().zip(hi.iter()) {
            *l += *h;
        }
        width /= 2;
    }
    acc[0]
}

/// F32 weights x F32 activations.
pub(super) fn f32_f32(w: &[u8], a: &[u8]) -> f32 {
    lanes_dot::<4>(w, a, |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// F16 weights x F32 activations (the f16 -> f32 conversion is exact).
pub(super) fn f16_f32(w: &[u8], a: &[u8]) -> f32 {
    lanes_dot::<2>(w, a, |b| f16_le([b[0], b[1]]))
}

/// BF16 weights x F32 activations (bf16 is the top half of an f32).
pub(super) fn bf16_f32(w: &[u8], a: &[u8]) -> f32 {
    lanes_dot::<2>(w, a, |b| {
        f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)
    })
}
