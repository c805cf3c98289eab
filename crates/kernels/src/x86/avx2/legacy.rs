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
//! The four-row kernels ([`dot4`], `VecDotKernel::dot4`) keep the running
//! sums of four weight rows in the four lanes of one f32 vector: per pair
//! of blocks, the activations are loaded once, the eight (block, row)
//! integer sums and terms fill eight lanes (block `b` in the low half, row
//! `r` in lane `r`), and the two halves are added to the sums in block
//! order. Each lane does its row's scalar sequence of operations, so the
//! results are those of the one-row kernel, bit for bit, while the four
//! dependent add chains run side by side.
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
    /// What [`Pair::isum`] needs of an activation block, prepared once for
    /// all the weight rows it meets (see [`dot4`]).
    type X: Copy;
    /// Whether the term has the `m_w * s_x` part (Q4_1, Q5_1).
    const MIN: bool;

    /// The activation block made ready for [`Pair::isum`].
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2, FMA and F16C.
    unsafe fn prepare(a: &Self::A) -> Self::X;

    /// Eight i32 whose sum is the exact integer dot product of `w` with
    /// the activation block `x` was prepared from.
    ///
    /// # Safety
    ///
    /// As [`Pair::prepare`].
    unsafe fn isum(w: &Self::W, x: &Self::X) -> __m256i;

    /// What [`Pair::isum2`] needs of two activation blocks.
    type X2: Copy;

    /// Two activation blocks made ready for [`Pair::isum2`].
    ///
    /// # Safety
    ///
    /// As [`Pair::prepare`].
    unsafe fn prepare2(a0: &Self::A, a1: &Self::A) -> Self::X2;

    /// Eight i32: lanes 0..4 sum to the integer dot product of `w0` with
    /// activation block `a0`, lanes 4..8 to that of `w1` with `a1` (the
    /// blocks `x` was prepared from).
    ///
    /// # Safety
    ///
    /// As [`Pair::prepare`].
    unsafe fn isum2(w0: &Self::W, w1: &Self::W, x: &Self::X2) -> __m256i;

    /// The f16 bits of `d_w` and, if `MIN`, `m_w` (else anything).
    fn w_scales(w: &Self::W) -> [u16; 2];

    /// The f16 bits of `d_x` and, if `MIN`, `s_x` (else anything).
    fn a_scales(a: &Self::A) -> [u16; 2];
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
        parts[i] = P::isum(&wb[i], &P::prepare(&ab[i]));
        let ([d_w, m_w], [d_x, s_x]) = (P::w_scales(&wb[i]), P::a_scales(&ab[i]));
        for (field, s) in scales.iter_mut().zip([d_w, d_x, m_w, s_x]) {
            field[i] = s;
        }
    }
    let terms = terms::<P>(&parts, &scales);
    let mut t = [0.0f32; BATCH];
    // SAFETY: `t` is 8 writable f32; `storeu` has no alignment requirement.
    unsafe { _mm256_storeu_ps(t.as_mut_ptr(), terms) };
    for &t in &t[..count.min(BATCH)] {
        sum += t;
    }
    sum
}

/// The scalar reference's terms of eight block pairs, one per lane: the
/// integer partial sums `parts[i]` of pair `i`, and its `d_w`, `d_x`, `m_w`,
/// `s_x` (f16 bits) in lane `i` of `scales[0..4]`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn terms<P: Pair>(parts: &[__m256i; BATCH], scales: &[[u16; BATCH]; 4]) -> __m256 {
    let isum = _mm256_cvtepi32_ps(hsum_i32x8(parts));
    let d = _mm256_mul_ps(f16x8(&scales[0]), f16x8(&scales[1]));
    let terms = _mm256_mul_ps(d, isum);
    if P::MIN {
        _mm256_add_ps(terms, _mm256_mul_ps(f16x8(&scales[2]), f16x8(&scales[3])))
    } else {
        terms
    }
}

/// Weight rows per [`dot4`] call, one f32 lane each.
const ROWS: usize = 4;

/// Four weight rows (`w.len() / 4` bytes each) against one activation row:
/// `out[i]` is [`dot`] of row `i`, bit for bit. Each row's running sum
/// lives in its own lane of one f32 vector, and every block adds its four
/// terms at once, so each lane does exactly the scalar reference's
/// sequence of operations for its row; the activation block is prepared
/// once for the four rows.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn dot4<P: Pair>(w: &[u8], a: &[u8], out: &mut [f32; ROWS]) {
    let block = std::mem::size_of::<P::W>();
    let row_bytes = w.len() / ROWS;
    if !w.len().is_multiple_of(ROWS * block) {
        // Rows of partial blocks, or not four equal rows: one at a time.
        for (i, o) in out.iter_mut().enumerate() {
            // In bounds: (i + 1) * row_bytes <= 4 * row_bytes <= w.len().
            *o = dot::<P>(&w[i * row_bytes..(i + 1) * row_bytes], a);
        }
        return;
    }
    // As `dot`: the whole blocks common to a row and the activations.
    let ab = whole_blocks::<P::A>(a);
    let n = ab.len().min(row_bytes / block);
    let ab = &ab[..n];
    // Row i's blocks start at byte i * row_bytes, a whole number of blocks
    // before the end of `w`, so at least `n` whole blocks follow.
    let row = |i: usize| &whole_blocks::<P::W>(&w[i * row_bytes..])[..n];
    let (r0, r1, r2, r3) = (row(0), row(1), row(2), row(3));
    let mut acc = _mm_setzero_ps();
    let mut b0 = 0;
    while b0 < n {
        // Blocks b0 and b1 = b0 + 1 (b0 again, not added, at an odd end).
        let two = b0 + 1 < n;
        let b1 = if two { b0 + 1 } else { b0 };
        // SAFETY: b0 < n and b1 < n, and `ab`, r0..r3 all hold n blocks.
        let (a0, a1, w) = unsafe {
            /// # Safety
            ///
            /// `b < r.len()`.
            unsafe fn at<W>(r: &[W], b: usize) -> &W {
                // SAFETY: `b < r.len()`, by this function's contract.
                unsafe { r.get_unchecked(b) }
            }
            let ws = [
                at(r0, b0),
                at(r1, b0),
                at(r2, b0),
                at(r3, b0),
                at(r0, b1),
                at(r1, b1),
                at(r2, b1),
                at(r3, b1),
            ];
            (ab.get_unchecked(b0), ab.get_unchecked(b1), ws)
        };
        // The eight (block, row) terms: lane r of the low half is row r's
        // term of block b0, lane r of the high half its term of block b1.
        let x = P::prepare2(a0, a1);
        // Per 128-bit half (block), hadd twice leaves row r's sum in lane r.
        let h01 = _mm256_hadd_epi32(P::isum2(w[0], w[4], &x), P::isum2(w[1], w[5], &x));
        let h23 = _mm256_hadd_epi32(P::isum2(w[2], w[6], &x), P::isum2(w[3], w[7], &x));
        let isum = _mm256_cvtepi32_ps(_mm256_hadd_epi32(h01, h23));
        // (d, m) and (d, s) as the low and high halves of i32 lanes, built
        // in registers (no narrow stores to reload).
        let head = |[lo, hi]: [u16; 2]| i32::from(lo) | (i32::from(hi) << 16);
        let w_heads = _mm256_setr_epi32(
            head(P::w_scales(w[0])),
            head(P::w_scales(w[1])),
            head(P::w_scales(w[2])),
            head(P::w_scales(w[3])),
            head(P::w_scales(w[4])),
            head(P::w_scales(w[5])),
            head(P::w_scales(w[6])),
            head(P::w_scales(w[7])),
        );
        let a_heads = _mm256_set_m128i(
            _mm_set1_epi32(head(P::a_scales(a1))),
            _mm_set1_epi32(head(P::a_scales(a0))),
        );
        let (d_w, m_w) = f16_halves(w_heads);
        let (d_x, s_x) = f16_halves(a_heads);
        let mut terms = _mm256_mul_ps(_mm256_mul_ps(d_w, d_x), isum);
        if P::MIN {
            terms = _mm256_add_ps(terms, _mm256_mul_ps(m_w, s_x));
        }
        // Block b0's terms, then block b1's, each row in its own lane.
        acc = _mm_add_ps(acc, _mm256_castps256_ps128(terms));
        if two {
            acc = _mm_add_ps(acc, _mm256_extractf128_ps::<1>(terms));
        }
        b0 += 2;
    }
    // SAFETY: `out` is 4 writable f32; `storeu` has no alignment requirement.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), acc) };
}

/// The f16 values in the low and in the high halves of eight i32 lanes, as
/// two eight-lane f32 vectors (exactly, as [`f16x8`]).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn f16_halves(v: __m256i) -> (__m256, __m256) {
    let lo = _mm256_and_si256(v, _mm256_set1_epi32(0xffff));
    let hi = _mm256_srli_epi32::<16>(v);
    // Both in 0..=0xffff, so the unsigned saturation leaves them as they
    // are: per 128-bit half, lo[0..4] then hi[0..4]; reorder the quarters
    // to lo[0..8], hi[0..8].
    let packed = _mm256_packus_epi32(lo, hi);
    let ordered = _mm256_permute4x64_epi64::<0b11_01_10_00>(packed);
    (
        _mm256_cvtph_ps(_mm256_castsi256_si128(ordered)),
        _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(ordered)),
    )
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

/// Exact `sum(q * x)` for `q` unsigned in `0..32` and the 32 activations
/// `x`, as eight i32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn dot_unsigned(q: __m256i, x: __m256i) -> __m256i {
    // Pair sums |q0 x0 + q1 x1| <= 2 * 31 * 128: no saturation.
    let pairs = _mm256_maddubs_epi16(q, x);
    _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
}

/// The activations `x` of an offset format, and the pair sums of
/// `offset * x` for `offset` 8 or 16 (exact, `|.| <= 2 * 16 * 128`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn prepare_offset(offset: i8, x: &[i8; 32]) -> (__m256i, __m256i) {
    let x = load_i8(x);
    (x, _mm256_maddubs_epi16(_mm256_set1_epi8(offset), x))
}

/// Exact `sum((q - offset) * x)` for `q` unsigned in `0..32`, with `x` and
/// the offset's pair sums from [`prepare_offset`], as eight i32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn dot_offset(q: __m256i, (x, offset_pairs): (__m256i, __m256i)) -> __m256i {
    // Pair sums of q * x (|.| <= 2 * 31 * 128) and of offset * x
    // (<= 2 * 16 * 128) are exact, and so is their difference, the pair
    // sum of (q - offset) * x, |.| <= 2 * 16 * 128.
    let pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(q, x), offset_pairs);
    _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
}

/// The 32 values of each of two Q4 blocks, block 0 in the low 128-bit
/// half and block 1 in the high one: values `0..16` (low nibbles), then
/// values `16..32` (high nibbles), in `0..16`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn nibbles2(qs0: &[u8; 16], qs1: &[u8; 16]) -> (__m256i, __m256i) {
    let v = _mm256_set_m128i(load_u8x16(qs1), load_u8x16(qs0));
    let low = _mm256_set1_epi8(0x0f);
    (
        _mm256_and_si256(v, low),
        _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
    )
}

/// [`bits`] of two blocks in the layout of [`nibbles2`]: 0xff where the
/// value's fifth bit is set, values `0..16`, then values `16..32`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn bits2(qh0: [u8; 4], qh1: [u8; 4]) -> (__m256i, __m256i) {
    let q = _mm256_set_m128i(
        _mm_set1_epi32(i32::from_le_bytes(qh1)),
        _mm_set1_epi32(i32::from_le_bytes(qh0)),
    );
    // As in `bits`: byte j of a half takes qh byte j / 8 (values 0..16)
    // or 2 + j / 8 (values 16..32), then tests bit j % 8.
    let spread_lo = _mm256_shuffle_epi8(
        q,
        _mm256_set_epi64x(0x0101_0101_0101_0101, 0, 0x0101_0101_0101_0101, 0),
    );
    let spread_hi = _mm256_shuffle_epi8(
        q,
        _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
        ),
    );
    let others = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
    let ones = _mm256_set1_epi8(-1);
    (
        _mm256_cmpeq_epi8(_mm256_or_si256(spread_lo, others), ones),
        _mm256_cmpeq_epi8(_mm256_or_si256(spread_hi, others), ones),
    )
}

/// The activations of two blocks in the layout of [`nibbles2`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn acts2(x0: &[i8; 32], x1: &[i8; 32]) -> (__m256i, __m256i) {
    let (lo0, hi0) = x0.split_at(16);
    let (lo1, hi1) = x1.split_at(16);
    let load = |s: &[i8]| {
        let s = &s[..16];
        // SAFETY: `s` is 16 readable bytes; `loadu` has no alignment
        // requirement; AVX2 is enabled in the enclosing function.
        unsafe { _mm_loadu_si128(s.as_ptr().cast()) }
    };
    (
        _mm256_set_m128i(load(lo1), load(lo0)),
        _mm256_set_m128i(load(hi1), load(hi0)),
    )
}

/// Exact integer dot products of two blocks of values in `0..32` (layout
/// of [`nibbles2`]) with their activations (from [`acts2`]), minus
/// `offset_pairs` (i16 pair sums of the offset times the activations, or
/// zero): eight i32, lanes 0..4 for block 0, 4..8 for block 1.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn dot2(
    (q_lo, q_hi): (__m256i, __m256i),
    (x_lo, x_hi): (__m256i, __m256i),
    offset_pairs: __m256i,
) -> __m256i {
    // Each maddubs pair sum is at most 2 * 31 * 128 = 7936 in size (no
    // saturation), their sum at most 15872; with the offset (at most
    // 2 * 2 * 16 * 128) taken off, the i16 lane is the sum of four products
    // (q - offset) * x, at most 4 * 31 * 128 in size: every step exact.
    let pairs = _mm256_add_epi16(
        _mm256_maddubs_epi16(q_lo, x_lo),
        _mm256_maddubs_epi16(q_hi, x_hi),
    );
    let pairs = _mm256_sub_epi16(pairs, offset_pairs);
    _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
}

/// The i16 pair sums of `offset * x` over both halves of [`acts2`]'s
/// activations (each at most 2 * 2 * 16 * 128 in size).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn offset_pairs2(offset: i8, (x_lo, x_hi): (__m256i, __m256i)) -> __m256i {
    let o = _mm256_set1_epi8(offset);
    _mm256_add_epi16(_mm256_maddubs_epi16(o, x_lo), _mm256_maddubs_epi16(o, x_hi))
}

/// The fifth bits of two blocks (from [`bits2`]) as 16 or 0.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn fifth2(qh0: [u8; 4], qh1: [u8; 4]) -> (__m256i, __m256i) {
    let (lo, hi) = bits2(qh0, qh1);
    let sixteen = _mm256_set1_epi8(0x10);
    (_mm256_and_si256(lo, sixteen), _mm256_and_si256(hi, sixteen))
}

/// Two Q5 blocks' values in `0..32`, in the layout of [`nibbles2`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn five_bits2(qs: (&[u8; 16], &[u8; 16]), qh: ([u8; 4], [u8; 4])) -> (__m256i, __m256i) {
    let (lo, hi) = nibbles2(qs.0, qs.1);
    let (h_lo, h_hi) = fifth2(qh.0, qh.1);
    (_mm256_or_si256(lo, h_lo), _mm256_or_si256(hi, h_hi))
}

struct Q4_0;
impl Pair for Q4_0 {
    type W = BlockQ4_0;
    type A = BlockQ8_0;
    type X = (__m256i, __m256i);
    const MIN: bool = false;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn prepare(a: &BlockQ8_0) -> Self::X {
        prepare_offset(8, &a.qs)
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn isum(w: &BlockQ4_0, x: &Self::X) -> __m256i {
        dot_offset(nibbles(&w.qs), *x)
    }
    type X2 = ((__m256i, __m256i), __m256i);
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn prepare2(a0: &BlockQ8_0, a1: &BlockQ8_0) -> Self::X2 {
        let x = acts2(&a0.qs, &a1.qs);
        (x, offset_pairs2(8, x))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn isum2(w0: &BlockQ4_0, w1: &BlockQ4_0, (x, offset): &Self::X2) -> __m256i {
        dot2(nibbles2(&w0.qs, &w1.qs), *x, *offset)
    }
    fn w_scales(w: &BlockQ4_0) -> [u16; 2] {
        [u16::from_le_bytes(w.d), 0]
    }
    fn a_scales(a: &BlockQ8_0) -> [u16; 2] {
        [u16::from_le_bytes(a.d), 0]
    }
}

struct Q4_1;
impl Pair for Q4_1 {
    type W = BlockQ4_1;
    type A = BlockQ8_1;
    type X = __m256i;
    const MIN: bool = true;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn prepare(a: &BlockQ8_1) -> __m256i {
        load_i8(&a.qs)
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn isum(w: &BlockQ4_1, x: &__m256i) -> __m256i {
        dot_unsigned(nibbles(&w.qs), *x)
    }
    type X2 = (__m256i, __m256i);
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn prepare2(a0: &BlockQ8_1, a1: &BlockQ8_1) -> Self::X2 {
        acts2(&a0.qs, &a1.qs)
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn isum2(w0: &BlockQ4_1, w1: &BlockQ4_1, x: &Self::X2) -> __m256i {
        dot2(nibbles2(&w0.qs, &w1.qs), *x, _mm256_setzero_si256())
    }
    fn w_scales(w: &BlockQ4_1) -> [u16; 2] {
        [u16::from_le_bytes(w.d), u16::from_le_bytes(w.m)]
    }
    fn a_scales(a: &BlockQ8_1) -> [u16; 2] {
        [u16::from_le_bytes(a.d), u16::from_le_bytes(a.s)]
    }
}

struct Q5_0;
impl Pair for Q5_0 {
    type W = BlockQ5_0;
    type A = BlockQ8_0;
    type X = (__m256i, __m256i);
    const MIN: bool = false;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn prepare(a: &BlockQ8_0) -> Self::X {
        prepare_offset(16, &a.qs)
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn isum(w: &BlockQ5_0, x: &Self::X) -> __m256i {
        let high = _mm256_and_si256(bits(w.qh), _mm256_set1_epi8(0x10));
        dot_offset(_mm256_or_si256(nibbles(&w.qs), high), *x)
    }
    type X2 = ((__m256i, __m256i), __m256i);
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn prepare2(a0: &BlockQ8_0, a1: &BlockQ8_0) -> Self::X2 {
        let x = acts2(&a0.qs, &a1.qs);
        (x, offset_pairs2(16, x))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn isum2(w0: &BlockQ5_0, w1: &BlockQ5_0, (x, offset): &Self::X2) -> __m256i {
        let q = five_bits2((&w0.qs, &w1.qs), (w0.qh, w1.qh));
        dot2(q, *x, *offset)
    }
    fn w_scales(w: &BlockQ5_0) -> [u16; 2] {
        [u16::from_le_bytes(w.d), 0]
    }
    fn a_scales(a: &BlockQ8_0) -> [u16; 2] {
        [u16::from_le_bytes(a.d), 0]
    }
}

struct Q5_1;
impl Pair for Q5_1 {
    type W = BlockQ5_1;
    type A = BlockQ8_1;
    type X = __m256i;
    const MIN: bool = true;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn prepare(a: &BlockQ8_1) -> __m256i {
        load_i8(&a.qs)
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn isum(w: &BlockQ5_1, x: &__m256i) -> __m256i {
        let high = _mm256_and_si256(bits(w.qh), _mm256_set1_epi8(0x10));
        dot_unsigned(_mm256_or_si256(nibbles(&w.qs), high), *x)
    }
    type X2 = (__m256i, __m256i);
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn prepare2(a0: &BlockQ8_1, a1: &BlockQ8_1) -> Self::X2 {
        acts2(&a0.qs, &a1.qs)
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn isum2(w0: &BlockQ5_1, w1: &BlockQ5_1, x: &Self::X2) -> __m256i {
        let q = five_bits2((&w0.qs, &w1.qs), (w0.qh, w1.qh));
        dot2(q, *x, _mm256_setzero_si256())
    }
    fn w_scales(w: &BlockQ5_1) -> [u16; 2] {
        [u16::from_le_bytes(w.d), u16::from_le_bytes(w.m)]
    }
    fn a_scales(a: &BlockQ8_1) -> [u16; 2] {
        [u16::from_le_bytes(a.d), u16::from_le_bytes(a.s)]
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
    /// The two halves of the activations, widened to i16.
    type X = (__m256i, __m256i);
    const MIN: bool = false;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn prepare(a: &BlockQ8_0) -> Self::X {
        let (a_lo, a_hi) = a.qs.split_at(16);
        (widen(a_lo), widen(a_hi))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn isum(w: &BlockQ8_0, (a_lo, a_hi): &Self::X) -> __m256i {
        // Both sides span all of i8: widen to i16, products summed in
        // pairs by madd, |.| <= 2 * 128 * 128.
        let (w_lo, w_hi) = w.qs.split_at(16);
        let lo = _mm256_madd_epi16(widen(w_lo), *a_lo);
        let hi = _mm256_madd_epi16(widen(w_hi), *a_hi);
        _mm256_add_epi32(lo, hi)
    }
    type X2 = (Self::X, Self::X);
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn prepare2(a0: &BlockQ8_0, a1: &BlockQ8_0) -> Self::X2 {
        (Self::prepare(a0), Self::prepare(a1))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn isum2(w0: &BlockQ8_0, w1: &BlockQ8_0, (x0, x1): &Self::X2) -> __m256i {
        let (s0, s1) = (Self::isum(w0, x0), Self::isum(w1, x1));
        // Fold each block's eight lanes to four: block 0 low, block 1 high.
        _mm256_add_epi32(
            _mm256_permute2x128_si256::<0x20>(s0, s1),
            _mm256_permute2x128_si256::<0x31>(s0, s1),
        )
    }
    fn w_scales(w: &BlockQ8_0) -> [u16; 2] {
        [u16::from_le_bytes(w.d), 0]
    }
    fn a_scales(a: &BlockQ8_0) -> [u16; 2] {
        [u16::from_le_bytes(a.d), 0]
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

/// Q4_0 x Q8_0, four rows.
pub(super) fn q4_0_q8_0_x4(w: &[u8], a: &[u8], out: &mut [f32; 4]) {
    // SAFETY: as in `q4_0_q8_0`.
    unsafe { dot4::<Q4_0>(w, a, out) }
}

/// Q4_1 x Q8_1, four rows.
pub(super) fn q4_1_q8_1_x4(w: &[u8], a: &[u8], out: &mut [f32; 4]) {
    // SAFETY: as in `q4_0_q8_0`.
    unsafe { dot4::<Q4_1>(w, a, out) }
}

/// Q5_0 x Q8_0, four rows.
pub(super) fn q5_0_q8_0_x4(w: &[u8], a: &[u8], out: &mut [f32; 4]) {
    // SAFETY: as in `q4_0_q8_0`.
    unsafe { dot4::<Q5_0>(w, a, out) }
}

/// Q5_1 x Q8_1, four rows.
pub(super) fn q5_1_q8_1_x4(w: &[u8], a: &[u8], out: &mut [f32; 4]) {
    // SAFETY: as in `q4_0_q8_0`.
    unsafe { dot4::<Q5_1>(w, a, out) }
}

/// Q8_0 x Q8_0, four rows.
pub(super) fn q8_0_q8_0_x4(w: &[u8], a: &[u8], out: &mut [f32; 4]) {
    // SAFETY: as in `q4_0_q8_0`.
    unsafe { dot4::<Q8_0>(w, a, out) }
}
