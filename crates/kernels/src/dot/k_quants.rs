//! Dot products of the k-quant super-blocks (256 values) with Q8_K
//! activations; mirrors `ggml_vec_dot_q2_K_q8_K_generic`,
//! `ggml_vec_dot_q3_K_q8_K_generic`, `ggml_vec_dot_q4_K_q8_K_generic`,
//! `ggml_vec_dot_q5_K_q8_K_generic` and `ggml_vec_dot_q6_K_q8_K_generic`
//! (ggml-cpu/quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.
//!
//! A super-block is split in groups that each have a small integer scale
//! `sc` (and, for Q2_K/Q4_K/Q5_K, a min `m`): `w = d * sc * q - dmin * m`.
//! With activations `x = d_x * q_x`, a super-block contributes
//!
//! `(d_x * d) * isum - (d_x * dmin) * msum`,
//! `isum = sum_groups sc * sum(q * q_x)`, `msum = sum_groups m * sum(q_x)`,
//!
//! where the per-group activation sums come from Q8_K's `bsums` (sums of 16
//! values), as in ggml. Q3_K and Q6_K have signed values and no min; their
//! offsets (-4, -32) are applied to `q` before multiplying, as ggml's
//! generic code does, so they do not read `bsums`.
//!
//! No overflow for any bytes, with `|q_x| <= 128` and `|bsum| <= 32768`:
//! `|isum|` is at most `256 * 63 * 31 * 128` (Q5_K) and
//! `256 * 128 * 32 * 128 = 2^27` (Q6_K), `|msum| <= 16 * 63 * 32768`.

use super::{idot, sum_blocks};
use crate::quant::float::f16_le;
use crate::quant::q4_k::scale_min_k4;
use crate::quant::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, QK_K};

/// The f32 term of one super-block with a min (shared with the SIMD
/// kernels, so that both round it the same way).
#[inline(always)]
pub(crate) fn with_min(d_x: f32, d: [u8; 2], dmin: [u8; 2], isum: i32, msum: i32) -> f32 {
    (d_x * f16_le(d)) * isum as f32 - (d_x * f16_le(dmin)) * msum as f32
}

/// Q2_K x Q8_K: 16 groups of 16 values, 2-bit `q`, 4-bit `sc` and `m`.
pub(super) fn q2_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockQ2K, ab: &BlockQ8K| {
        let (mut isum, mut msum) = (0i32, 0i32);
        // Group g: half g / 8 of the block, bytes 16 * (g % 2) .. + 16 of
        // that half's 32, bits 2 * ((g / 2) % 4) .. + 2 (see BlockQ2K).
        for (g, (&sc, q_x)) in wb.scales.iter().zip(ab.qs.chunks_exact(16)).enumerate() {
            let shift = 2 * ((g / 2) % 4);
            let bytes = &wb.qs[32 * (g / 8) + 16 * (g % 2)..][..16];
            let q = bytes.iter().map(|&b| i32::from((b >> shift) & 3));
            isum += i32::from(sc & 0x0f) * idot(q, q_x);
            msum += i32::from(sc >> 4) * i32::from(ab.bsum(g));
        }
        with_min(ab.d(), wb.d, wb.dmin, isum, msum)
    })
}

/// Q3_K x Q8_K: 16 groups of 16 values, signed 3-bit `q` (low two bits in
/// `qs`, a clear `hmask` bit subtracts 4), signed 6-bit `sc`.
pub(super) fn q3_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockQ3K, ab: &BlockQ8K| {
        let mut isum = 0i32;
        // Group g: low bits as in Q2_K, at k = (g / 2) % 4; its high bits
        // are bit 4 * (g / 8) + k of hmask bytes 16 * (g % 2) .. + 16.
        for (g, (&sc, q_x)) in wb.scales().iter().zip(ab.qs.chunks_exact(16)).enumerate() {
            let k = (g / 2) % 4;
            let high = 1u8 << (4 * (g / 8) + k);
            let lo = 16 * (g % 2);
            let bytes = &wb.qs[32 * (g / 8) + lo..][..16];
            let q = bytes.iter().zip(&wb.hmask[lo..][..16]).map(|(&b, &h)| {
                let low = i32::from((b >> (2 * k)) & 3);
                if h & high != 0 {
                    low
                } else {
                    low - 4
                }
            });
            isum += i32::from(sc) * idot(q, q_x);
        }
        (f16_le(wb.d) * ab.d()) * isum as f32
    })
}

/// `isum` and `msum` of Q4_K and Q5_K: 8 groups of 32 values with 6-bit
/// `sc` and `m` packed in `scales`; `q(g)` yields group `g`'s values.
#[inline(always)]
fn q4_k_like_sums<I: Iterator<Item = i32>>(
    scales: &[u8; 12],
    ab: &BlockQ8K,
    q: impl Fn(usize) -> I,
) -> (i32, i32) {
    let (mut isum, mut msum) = (0i32, 0i32);
    for (g, q_x) in ab.qs.chunks_exact(32).enumerate() {
        let (sc, m) = scale_min_k4(g, scales);
        isum += i32::from(sc) * idot(q(g), q_x);
        let bsum = i32::from(ab.bsum(2 * g)) + i32::from(ab.bsum(2 * g + 1));
        msum += i32::from(m) * bsum;
    }
    (isum, msum)
}

/// Q4_K x Q8_K: group g in the low (even g) or high (odd g) nibbles of
/// bytes `32 * (g / 2) .. + 32`.
pub(super) fn q4_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockQ4K, ab: &BlockQ8K| {
        let (isum, msum) = q4_k_like_sums(&wb.scales, ab, |g| {
            let shift = 4 * (g % 2);
            wb.qs[32 * (g / 2)..][..32]
                .iter()
                .map(move |&b| i32::from((b >> shift) & 0x0f))
        });
        with_min(ab.d(), wb.d, wb.dmin, isum, msum)
    })
}

/// Q5_K x Q8_K: Q4_K's nibbles plus 16 where bit g of `qh[l]` is set.
pub(super) fn q5_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockQ5K, ab: &BlockQ8K| {
        let (isum, msum) = q4_k_like_sums(&wb.scales, ab, |g| {
            let shift = 4 * (g % 2);
            let high = 1u8 << g;
            wb.qs[32 * (g / 2)..][..32]
                .iter()
                .zip(&wb.qh)
                .map(move |(&b, &h)| {
                    let low = i32::from((b >> shift) & 0x0f);
                    if h & high != 0 {
                        low + 16
                    } else {
                        low
                    }
                })
        });
        with_min(ab.d(), wb.d, wb.dmin, isum, msum)
    })
}

/// Q6_K x Q8_K: 16 groups of 16 values with i8 scales, 6-bit `q - 32`.
pub(super) fn q6_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
    sum_blocks(w, a, |wb: &BlockQ6K, ab: &BlockQ8K| {
        let mut isum = 0i32;
        // Run r of 32 values (groups 2r, 2r + 1): half h = r / 4, k = r % 4;
        // low nibble (k < 2) or high nibble of ql bytes 64h + 32 (k % 2) ..,
        // top bits 2k..2k+2 of qh bytes 32h .. (see BlockQ6K).
        for (r, q_x) in ab.qs.chunks_exact(32).enumerate() {
            let (h, k) = (r / 4, r % 4);
            let nib = 4 * (k / 2);
            let ql = &wb.ql[64 * h + 32 * (k % 2)..][..32];
            let qh = &wb.qh[32 * h..][..32];
            let mut q = [0i32; 32];
            for (q, (&lo, &hi)) in q.iter_mut().zip(ql.iter().zip(qh)) {
                *q = i32::from(((lo >> nib) & 0x0f) | (((hi >> (2 * k)) & 3) << 4)) - 32;
            }
            for (half, (q, q_x)) in q.chunks_exact(16).zip(q_x.chunks_exact(16)).enumerate() {
                let sc = i32::from(wb.scales[2 * r + half]);
                isum += sc * idot(q.iter().copied(), q_x);
            }
        }
        q6_k_term(wb.d, ab, isum)
    })
}

/// The f32 term of one Q6_K super-block (shared with the SIMD kernels).
#[inline(always)]
pub(crate) fn q6_k_term(d: [u8; 2], ab: &BlockQ8K, isum: i32) -> f32 {
    (f16_le(d) * ab.d()) * isum as f32
}

// The group layouts above are written out for 256-value super-blocks.
const _: () = assert!(QK_K == 256);
