//! AVX2 dot products of the 32-value formats (Q4_0, Q4_1, Q5_0, Q5_1,
//! Q8_0) with Q8_0/Q8_1 activations; the SIMD counterparts of
//! `crate::dot::legacy`, after ggml's `ggml_vec_dot_q*_q8_*` in
//! `ggml-cpu/arch/x86/quants.c` of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.
//!
//! Per block, the exact integer dot product as eight i32 partial sums; per
//! batch of eight blocks, the partial sums are reduced to one `isum` per
//! lane and the scalar reference's term, `(d_w * d_x) * isum` (`+ m_w * s_x`
//! for Q4_1/Q5_1), is computed in the eight lanes with the same roundings;
//! the terms are then added to the row sum one by one, in block order.
//!
//! No saturation for any bytes: `_mm256_maddubs_epi16` multiplies unsigned
//! by signed bytes and saturates each sum of two products to i16. Its
//! unsigned operand here is always a weight in `0..32` before any offset is
//! taken off (pair sums `<= 2 * 31 * 128`); Q4_0 and Q5_0 then subtract
//! `maddubs(offset, x)` (ggml's sign trick, `|q - offset|` against
//! `x * sign(q - offset)`, would be wrong for `x = -128`). Q8_0 weights are
//! not small, so both sides are widened to i16 and multiplied with
//! `_mm256_madd_epi16` (exact: `2 * 128 * 128 < 2^31`).

use std::arch::x86_64::*;

use super::{f16x8, hsum_i32x8, load_i8, load_u8x16};
use crate::dot::whole_blocks;
use crate::quant::{Block, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1};

/// Blocks per batch (one 8-lane f32 vector of terms).
const BATCH: usize = 8;

/// A weight block format and the activation format it pairs with.
trait Pair {
    type W: Block;
    type A: Block;
    /// Whether the term has the `m_w * s_x` part (Q4_1, Q5_1).
    const MIN: bool;

    /// Eight i32 whose sum is the block pair's exact integer dot product.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2, FMA and F16C.
    unsafe fn isum(w: &Self::W, a: &Self::A) -> __m256i;

    /// The f16 bits of `d_w`, `d_x` and, if `MIN`, `m_w`, `s_x`.
    fn scales(w: &Self::W, a: &Self::A) -> [u16; 4];
}

/// The row dot product: [`Pair::isum`] per block, the terms in batches.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn dot<P: Pair>(w: &[u8], a: &[u8]) -> f32 {
    let (mut wb, mut ab) = (whole_blocks::<P::W>(w), whole_blocks::<P::A>(a));
    let mut sum = 0.0f32;
    while let (Some((wc, w_rest)), Some((ac, a_rest))) = (
        wb.split_first_chunk::<BATCH>(),
        ab.split_first_chunk::<BATCH>(),
    ) {
        sum = add_batch::<P>(sum, wc, ac, BATCH);
        (wb, ab) = (w_rest, a_rest);
    }
    // The last (fewer than 8) pairs, padded with copies of the first one
    // whose terms are computed but not added.
    let n = wb.len().min(ab.len());
    if let (Some(&w0), Some(&a0)) = (wb.first(), ab.first()) {
        let (mut wc, mut ac) = ([w0; BATCH], [a0; BATCH]);
        wc[..n].copy_from_slice(&wb[..n]);
        ac[..n].copy_from_slice(&ab[..n]);
        sum = add_batch::<P>(sum, &wc, &ac, n);
    }
    sum
}

/// `sum` plus the terms of the first `count` of the eight block pairs, in
/// order.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn add_batch<P: Pair>(
    mut sum: f32,
    wb: &[P::W; BATCH],
    ab: &[P::A; BATCH],
    count: usize,
) -> f32 {
    let mut parts = [_mm256_setzero_si256(); BATCH];
    // d_w, d_x, m_w, s_x of each block.
    let mut scales = [[0u16; BATCH]; 4];
    for i in 0..BATCH {
        parts[i] = P::isum(&wb[i], &ab[i]);
        let s = P::scales(&wb[i], &ab[i]);
        for (field, s) in scales.iter_mut().zip(s) {
            field[i] = s;
        }
    }
    let isum = _mm256_cvtepi32_ps(hsum_i32x8(&parts));
    let d = _mm256_mul_ps(f16x8(&scales[0]), f16x8(&scales[1]));
    let mut terms = _mm256_mul_ps(d, isum);
    if P::MIN {
        terms = _mm256_add_ps(terms, _mm256_mul_ps(f16x8(&scales[2]), f16x8(&scales[3])));
    }
    let mut t = [0.0f32; BATCH];
    // SAFETY: `t` is 8 writable f32; `storeu` has no alignment requirement.
    unsafe { _mm256_storeu_ps(t.as_mut_ptr(), terms) };
    for &t in &t[..count.min(BATCH)] {
        sum += t;
    }
    sum
}

/// The 32 values of a Q4 block in byte order (value `j` is the low nibble
/// of byte `j`, value `j + 16` the high nibble of byte `j`), in `0..16`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn nibbles(qs: &[u8; 16]) -> __m256i {
    let lo = load_u8x16(qs);
    let hi = _mm_srli_epi16::<4>(lo);
    _mm256_and_si256(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(0x0f))
}

/// Byte `j` is 0xff where bit `j` of the little-endian `qh` is set, else 0.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn bits(qh: [u8; 4]) -> __m256i {
    // Byte j of the broadcast becomes byte j / 8 of qh; OR-ing all bits but
    // bit j % 8 leaves all-ones exactly when that bit is set.
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(i32::from_le_bytes(qh)),
        _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        ),
    );
    let others = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
    _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi8(-1))
}

/// Exact `sum(q * x)` for `q` unsigned in `0..32`, as eight i32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn dot_unsigned(q: __m256i, x: &[i8; 32]) -> __m256i {
    // Pair sums |q0 x0 + q1 x1| <= 2 * 31 * 128: no saturation.
    let pairs = _mm256_maddubs_epi16(q, load_i8(x));
    _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
}

/// Exact `sum((q - offset) * x)` for `q` unsigned in `0..32` and `offset`
/// 8 or 16, as eight i32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn dot_offset(q: __m256i, offset: i8, x: &[i8; 32]) -> __m256i {
    let x = load_i8(x);
    // Pair sums of q * x (|.| <= 2 * 31 * 128) and of offset * x
    // (<= 2 * 16 * 128) are exact, and so is their difference, the pair
    // sum of (q - offset) * x, |.| <= 2 * 16 * 128.
    let pairs = _mm256_sub_epi16(
        _mm256_maddubs_epi16(q, x),
        _mm256_maddubs_epi16(_mm256_set1_epi8(offset), x),
    );
    _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
}

struct Q4_0;
impl Pair for Q4_0 {
    type W = BlockQ4_0;
    type A = BlockQ8_0;
    const MIN: bool = false;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn isum(w: &BlockQ4_0, a: &BlockQ8_0) -> __m256i {
        dot_offset(nibbles(&w.qs), 8, &a.qs)
    }
    fn scales(w: &BlockQ4_0, a: &BlockQ8_0) -> [u16; 4] {
        [u16::from_le_bytes(w.d), u16::from_le_bytes(a.d), 0, 0]
    }
}

struct Q4_1;
impl Pair for Q4_1 {
    type W = BlockQ4_1;
    type A = BlockQ8_1;
    const MIN: bool = true;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn isum(w: &BlockQ4_1, a: &BlockQ8_1) -> __m256i {
        dot_unsigned(nibbles(&w.qs), &a.qs)
    }
    fn scales(w: &BlockQ4_1, a: &BlockQ8_1) -> [u16; 4] {
        let h = u16::from_le_bytes;
        [h(w.d), h(a.d), h(w.m), h(a.s)]
    }
}

struct Q5_0;
impl Pair for Q5_0 {
    type W = BlockQ5_0;
    type A = BlockQ8_0;
    const MIN: bool = false;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn isum(w: &BlockQ5_0, a: &BlockQ8_0) -> __m256i {
        let high = _mm256_and_si256(bits(w.qh), _mm256_set1_epi8(0x10));
        dot_offset(_mm256_or_si256(nibbles(&w.qs), high), 16, &a.qs)
    }
    fn scales(w: &BlockQ5_0, a: &BlockQ8_0) -> [u16; 4] {
        [u16::from_le_bytes(w.d), u16::from_le_bytes(a.d), 0, 0]
    }
}

struct Q5_1;
impl Pair for Q5_1 {
    type W = BlockQ5_1;
    type A = BlockQ8_1;
    const MIN: bool = true;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn isum(w: &BlockQ5_1, a: &BlockQ8_1) -> __m256i {
        let high = _mm256_and_si256(bits(w.qh), _mm256_set1_epi8(0x10));
        dot_unsigned(_mm256_or_si256(nibbles(&w.qs), high), &a.qs)
    }
    fn scales(w: &BlockQ5_1, a: &BlockQ8_1) -> [u16; 4] {
        let h = u16::from_le_bytes;
        [h(w.d), h(a.d), h(w.m), h(a.s)]
    }
}

/// The first 16 values of `s` sign-extended to i16 (panics if shorter, as
/// `load_u8`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn widen(s: &[i8]) -> __m256i {
    let s = &s[..16];
    // SAFETY: `s` is 16 readable bytes; `loadu` has no alignment requirement.
    let v = unsafe { _mm_loadu_si128(s.as_ptr().cast()) };
    _mm256_cvtepi8_epi16(v)
}

struct Q8_0;
impl Pair for Q8_0 {
    type W = BlockQ8_0;
    type A = BlockQ8_0;
    const MIN: bool = false;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn isum(w: &BlockQ8_0, a: &BlockQ8_0) -> __m256i {
        // Both sides span all of i8: widen to i16, products summed in
        // pairs by madd, |.| <= 2 * 128 * 128.
        let (w_lo, w_hi) = w.qs.split_at(16);
        let (a_lo, a_hi) = a.qs.split_at(16);
        let lo = _mm256_madd_epi16(widen(w_lo), widen(a_lo));
        let hi = _mm256_madd_epi16(widen(w_hi), widen(a_hi));
        _mm256_add_epi32(lo, hi)
    }
    fn scales(w: &BlockQ8_0, a: &BlockQ8_0) -> [u16; 4] {
        [u16::from_le_bytes(w.d), u16::from_le_bytes(a.d), 0, 0]
    }
}

/// Q4_0 x Q8_0.
pub(super) fn q4_0_q8_0(w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: handed out only by `avx2::vec_dot_kernel`, whose callers have
    // checked that the CPU supports AVX2, FMA and F16C.
    unsafe { dot::<Q4_0>(w, a) }
}

/// Q4_1 x Q8_1.
pub(super) fn q4_1_q8_1(w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: as in `q4_0_q8_0`.
    unsafe { dot::<Q4_1>(w, a) }
}

/// Q5_0 x Q8_0.
pub(super) fn q5_0_q8_0(w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: as in `q4_0_q8_0`.
    unsafe { dot::<Q5_0>(w, a) }
}

/// Q5_1 x Q8_1.
pub(super) fn q5_1_q8_1(w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: as in `q4_0_q8_0`.
    unsafe { dot::<Q5_1>(w, a) }
}

/// Q8_0 x Q8_0.
pub(super) fn q8_0_q8_0(w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: as in `q4_0_q8_0`.
    unsafe { dot::<Q8_0>(w, a) }
}
