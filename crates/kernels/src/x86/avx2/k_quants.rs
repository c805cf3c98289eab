//! AVX2 dot products of the k-quant super-blocks Q4_K, Q5_K and Q6_K with
//! Q8_K activations; the SIMD counterparts of `crate::dot::k_quants`, after
//! ggml's `ggml_vec_dot_q{4,5,6}_K_q8_K` in `ggml-cpu/arch/x86/quants.c` of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.
//!
//! Per super-block, `isum` and `msum` are computed exactly with SIMD and
//! passed to the scalar reference's own term functions, so the f32 part is
//! literally the same code; the terms are added in block order. The
//! four-row kernels (Q4_K, Q5_K: `VecDotKernel::dot4`) compute the same
//! terms for four rows at once, one f32 lane per row, with the reference's
//! operations in the reference's order.
//!
//! No saturation or overflow for any bytes: `_mm256_maddubs_epi16` gets the
//! unsigned weights (`0..16` for Q4_K, `0..32` for Q5_K, `0..64` for Q6_K)
//! against signed activations, pair sums at most `2 * 63 * 128 = 16128`;
//! Q6_K's offset is applied as `maddubs(q, x) - maddubs(32, x)`, which lies
//! in `-8192..=8192`. Group scales then multiply pairs in
//! `_mm256_madd_epi16` (`2 * 16128 * 128 < 2^31`), and the mins multiply the
//! activations' `bsums` as i16 x i16 there too, without first adding two
//! `bsums` in i16 (which could overflow for arbitrary bytes).

use std::arch::x86_64::*;

use super::{hsum_i32, load_i8, load_u8, load_u8x16};
use crate::dot::k_quants::{q6_k_term, with_min};
use crate::dot::whole_blocks;
use crate::quant::{Block, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K};

/// The eight 6-bit scales (bytes 0..8) and mins (bytes 8..16) packed in a
/// Q4_K/Q5_K `scales` field, unpacked four at a time as ggml does (the same
/// values as `quant::q4_k::scale_min_k4`).
fn unpack_scales_mins(packed: &[u8; 12]) -> [u8; 16] {
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const LOW2: u32 = 0x0303_0303;
    let word =
        |i: usize| u32::from_le_bytes([packed[i], packed[i + 1], packed[i + 2], packed[i + 3]]);
    let (u0, u1, u2) = (word(0), word(4), word(8));
    let scales_lo = u0 & LOW6;
    let scales_hi = (u2 & LOW4) | (((u0 >> 6) & LOW2) << 4);
    let mins_lo = u1 & LOW6;
    let mins_hi = ((u2 >> 4) & LOW4) | (((u1 >> 6) & LOW2) << 4);
    let mut out = [0u8; 16];
    for (chunk, w) in out
        .chunks_exact_mut(4)
        .zip([scales_lo, scales_hi, mins_lo, mins_hi])
    {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// `msum = sum_g m_g * (bsum[2g] + bsum[2g + 1])`, exactly.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn min_sum(scales_mins: __m128i, ab: &BlockQ8K) -> i32 {
    // m0 m0 m1 m1 ... m7 m7 as i16, against the 16 bsums.
    let mins = _mm_unpackhi_epi8(scales_mins, scales_mins);
    let bsums = load_u8(ab.bsums.as_flattened());
    hsum_i32(_mm256_madd_epi16(_mm256_cvtepu8_epi16(mins), bsums))
}

/// The (scale of group 2p, scale of group 2p + 1) i16 vectors: shuffle
/// masks picking i16 lane `g` of the eight scales, repeated.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn group_scale(scales: __m256i, g: i32) -> __m256i {
    let pick = (2 * g) | ((2 * g + 1) << 8);
    _mm256_shuffle_epi8(scales, _mm256_set1_epi16(pick as i16))
}

/// The scales of a Q4_K/Q5_K super-block as i16 in both 128-bit halves
/// (for [`group_scale`]), and the unpacked scales and mins as bytes (for
/// [`min_sum`]).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn scales_k4(packed: &[u8; 12]) -> (__m256i, __m128i) {
    let scales_mins = load_u8x16(&unpack_scales_mins(packed));
    let scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scales_mins));
    (scales, scales_mins)
}

/// `acc` plus the scaled dot products of groups `g` and `g + 1` (values `q`,
/// unsigned below 32) with the 64 activations `x`, as eight i32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn add_group_pair(
    acc: __m256i,
    (q_even, q_odd): (__m256i, __m256i),
    x: &[i8],
    scales: __m256i,
    g: i32,
) -> __m256i {
    let even = _mm256_maddubs_epi16(q_even, load_i8(x));
    let odd = _mm256_maddubs_epi16(q_odd, load_i8(&x[32..]));
    let even = _mm256_madd_epi16(even, group_scale(scales, g));
    let odd = _mm256_madd_epi16(odd, group_scale(scales, g + 1));
    _mm256_add_epi32(acc, _mm256_add_epi32(even, odd))
}

/// The low and high nibbles of 32 bytes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn split_nibbles(b: __m256i) -> (__m256i, __m256i) {
    let low = _mm256_set1_epi8(0x0f);
    (
        _mm256_and_si256(b, low),
        _mm256_and_si256(_mm256_srli_epi16::<4>(b), low),
    )
}

/// Q4_K's integer parts of one super-block: eight i32 summing to `isum`,
/// and `msum`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q4_k_sums(wb: &BlockQ4K, ab: &BlockQ8K) -> (__m256i, i32) {
    let (scales, scales_mins) = scales_k4(&wb.scales);
    let mut acc = _mm256_setzero_si256();
    // Groups 2p (low nibbles) and 2p + 1 (high) share 32 bytes.
    for (p, (bytes, x)) in wb
        .qs
        .chunks_exact(32)
        .zip(ab.qs.chunks_exact(64))
        .enumerate()
    {
        let q = split_nibbles(load_u8(bytes));
        acc = add_group_pair(acc, q, x, scales, 2 * p as i32);
    }
    (acc, min_sum(scales_mins, ab))
}

/// 16 in the bytes of `qh` that have the bit set in `bit`, else 0.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn fifth_bit(qh: __m256i, bit: __m256i) -> __m256i {
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
    _mm256_and_si256(set, _mm256_set1_epi8(16))
}

/// Q5_K's integer parts of one super-block, as [`q4_k_sums`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q5_k_sums(wb: &BlockQ5K, ab: &BlockQ8K) -> (__m256i, i32) {
    let (scales, scales_mins) = scales_k4(&wb.scales);
    let qh = load_u8(&wb.qh);
    // Bit g of qh byte l is the fifth bit of value l of group g.
    let mut bit = _mm256_set1_epi8(1);
    let mut acc = _mm256_setzero_si256();
    for (p, (bytes, x)) in wb
        .qs
        .chunks_exact(32)
        .zip(ab.qs.chunks_exact(64))
        .enumerate()
    {
        let (lo, hi) = split_nibbles(load_u8(bytes));
        let lo = _mm256_or_si256(lo, fifth_bit(qh, bit));
        bit = _mm256_add_epi8(bit, bit);
        let hi = _mm256_or_si256(hi, fifth_bit(qh, bit));
        bit = _mm256_add_epi8(bit, bit);
        acc = add_group_pair(acc, (lo, hi), x, scales, 2 * p as i32);
    }
    (acc, min_sum(scales_mins, ab))
}

/// `v & mask` in every byte.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn and_mask(v: __m256i, mask: u8) -> __m256i {
    _mm256_and_si256(v, _mm256_set1_epi8(mask as i8))
}

/// Shuffle mask for Q6_K run `r`: bytes `2r` (eight times), then `2r + 1`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn run_scales(scales: __m128i, r: usize) -> __m256i {
    let (a, b) = ((2 * r) as u8 as i8, (2 * r + 1) as u8 as i8);
    let pick = _mm_set_epi8(b, b, b, b, b, b, b, b, a, a, a, a, a, a, a, a);
    _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, pick))
}

/// `acc` plus run `r`'s scaled dot product: values `q` in `0..64` (the
/// offset 32 is taken off here), activations `x`, eight i32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn add_q6_run(acc: __m256i, q: __m256i, x: &[i8], scales: __m128i, r: usize) -> __m256i {
    let x = load_i8(x);
    // (q - 32) * x summed in pairs: q * x pairs (<= 16128) minus 32 * x
    // pairs (<= 8192), the difference within 8192.
    let pairs = _mm256_sub_epi16(
        _mm256_maddubs_epi16(q, x),
        _mm256_maddubs_epi16(_mm256_set1_epi8(32), x),
    );
    // i16 lanes 0..8 are values 0..16 (group 2r), 8..16 the next group.
    _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, run_scales(scales, r)))
}

/// Q6_K's integer part of one super-block: eight i32 summing to `isum`
/// (and no `msum`, 0).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q6_k_sums(wb: &BlockQ6K, ab: &BlockQ8K) -> (__m256i, i32) {
    // SAFETY: `scales` is 16 i8, readable; no alignment requirement.
    let scales = unsafe { _mm_loadu_si128(wb.scales.as_ptr().cast()) };
    let low = _mm256_set1_epi8(0x0f);
    let mut acc = _mm256_setzero_si256();
    // Half h (runs 4h..4h + 4): run 4h + k takes the low (k < 2) or
    // high nibbles of ql bytes 64h + 32 (k % 2) .., and bits 2k, 2k + 1
    // of qh bytes 32h .. as bits 4 and 5 (see `dot::k_quants`).
    let halves = wb.ql.chunks_exact(64).zip(wb.qh.chunks_exact(32));
    for (h, ((ql, qh), x)) in halves.zip(ab.qs.chunks_exact(128)).enumerate() {
        let (ql0, ql1, qh) = (load_u8(ql), load_u8(&ql[32..]), load_u8(qh));
        let (t0, t1) = (and_mask(qh, 0x03), and_mask(qh, 0x0c));
        let (t2, t3) = (and_mask(qh, 0x30), and_mask(qh, 0xc0));
        let (hi0, hi1) = (_mm256_srli_epi16::<4>(ql0), _mm256_srli_epi16::<4>(ql1));
        let q = [
            _mm256_or_si256(_mm256_and_si256(ql0, low), _mm256_slli_epi16::<4>(t0)),
            _mm256_or_si256(_mm256_and_si256(ql1, low), _mm256_slli_epi16::<2>(t1)),
            _mm256_or_si256(_mm256_and_si256(hi0, low), t2),
            _mm256_or_si256(_mm256_and_si256(hi1, low), _mm256_srli_epi16::<2>(t3)),
        ];
        for (k, (q, x)) in q.into_iter().zip(x.chunks_exact(32)).enumerate() {
            acc = add_q6_run(acc, q, x, scales, 4 * h + k);
        }
    }
    (acc, 0)
}

/// A k-quant weight format: its integer parts and its f32 term.
trait Super {
    type W: Block;
    /// Whether the term has the `(d_x * dmin) * msum` part.
    const MIN: bool;

    /// Eight i32 summing to the super-block's `isum`, and its `msum`.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2, FMA and F16C.
    unsafe fn sums(w: &Self::W, a: &BlockQ8K) -> (__m256i, i32);

    /// The f16 bits of `d` and (if `MIN`) `dmin`.
    fn scales(w: &Self::W) -> ([u8; 2], [u8; 2]);
}

struct Q4K;
impl Super for Q4K {
    type W = BlockQ4K;
    const MIN: bool = true;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn sums(w: &BlockQ4K, a: &BlockQ8K) -> (__m256i, i32) {
        q4_k_sums(w, a)
    }
    fn scales(w: &BlockQ4K) -> ([u8; 2], [u8; 2]) {
        (w.d, w.dmin)
    }
}

struct Q5K;
impl Super for Q5K {
    type W = BlockQ5K;
    const MIN: bool = true;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn sums(w: &BlockQ5K, a: &BlockQ8K) -> (__m256i, i32) {
        q5_k_sums(w, a)
    }
    fn scales(w: &BlockQ5K) -> ([u8; 2], [u8; 2]) {
        (w.d, w.dmin)
    }
}

struct Q6K;
impl Super for Q6K {
    type W = BlockQ6K;
    const MIN: bool = false;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn sums(w: &BlockQ6K, a: &BlockQ8K) -> (__m256i, i32) {
        q6_k_sums(w, a)
    }
    fn scales(w: &BlockQ6K) -> ([u8; 2], [u8; 2]) {
        (w.d, [0; 2])
    }
}

/// One row: [`Super::sums`] per super-block, the scalar reference's own
/// term function, the terms added in block order.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn dot<S: Super>(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (wb, ab) in whole_blocks::<S::W>(w)
        .iter()
        .zip(whole_blocks::<BlockQ8K>(a))
    {
        let (acc, msum) = S::sums(wb, ab);
        let (d, dmin) = S::scales(wb);
        sum += if S::MIN {
            with_min(ab.d(), d, dmin, hsum_i32(acc), msum)
        } else {
            q6_k_term(d, ab, hsum_i32(acc))
        };
    }
    sum
}

/// Four rows (`w.len() / 4` bytes each) against one activation row, bit
/// for bit [`dot`] of each: the running sums of the four rows in the four
/// lanes of one f32 vector, each lane computing its row's term with the
/// scalar reference's operations (`(d_x * d) * isum - (d_x * dmin) * msum`,
/// or `(d * d_x) * isum` for Q6_K) and adding it in block order.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn dot4<S: Super>(w: &[u8], a: &[u8], out: &mut [f32; 4]) {
    let block = std::mem::size_of::<S::W>();
    let row_bytes = w.len() / 4;
    if !w.len().is_multiple_of(4 * block) {
        // Rows of partial blocks, or not four equal rows: one at a time.
        for (i, o) in out.iter_mut().enumerate() {
            // In bounds: (i + 1) * row_bytes <= 4 * row_bytes <= w.len().
            *o = dot::<S>(&w[i * row_bytes..(i + 1) * row_bytes], a);
        }
        return;
    }
    let ab = whole_blocks::<BlockQ8K>(a);
    let n = ab.len().min(row_bytes / block);
    // Row i's blocks start at byte i * row_bytes, a whole number of blocks
    // before the end of `w`, so at least `n` whole blocks follow.
    let row = |i: usize| &whole_blocks::<S::W>(&w[i * row_bytes..])[..n];
    let rows = [row(0), row(1), row(2), row(3)];
    let mut acc = _mm_setzero_ps();
    for (b, ab) in ab[..n].iter().enumerate() {
        let wb = rows.map(|r| &r[b]);
        let sums = wb.map(|wb| S::sums(wb, ab));
        // Row r's isum in lane r: hadd twice per 128-bit half, then the
        // halves added.
        let h01 = _mm256_hadd_epi32(sums[0].0, sums[1].0);
        let h23 = _mm256_hadd_epi32(sums[2].0, sums[3].0);
        let h = _mm256_hadd_epi32(h01, h23);
        let isum = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
        let isum = _mm_cvtepi32_ps(isum);
        let scales = wb.map(|wb| S::scales(wb));
        let d = f16x4(scales.map(|s| s.0));
        let d_x = _mm_set1_ps(ab.d());
        let terms = if S::MIN {
            let dmin = f16x4(scales.map(|s| s.1));
            let msum = _mm_cvtepi32_ps(_mm_setr_epi32(sums[0].1, sums[1].1, sums[2].1, sums[3].1));
            _mm_sub_ps(
                _mm_mul_ps(_mm_mul_ps(d_x, d), isum),
                _mm_mul_ps(_mm_mul_ps(d_x, dmin), msum),
            )
        } else {
            _mm_mul_ps(_mm_mul_ps(d, d_x), isum)
        };
        acc = _mm_add_ps(acc, terms);
    }
    // SAFETY: `out` is 4 writable f32; `storeu` has no alignment requirement.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), acc) };
}

/// Four little-endian f16 to f32, exactly (as `quant::float::f16_le`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn f16x4(h: [[u8; 2]; 4]) -> __m128 {
    let h = h.map(i16::from_le_bytes);
    _mm_cvtph_ps(_mm_setr_epi16(h[0], h[1], h[2], h[3], 0, 0, 0, 0))
}

/// Q4_K x Q8_K.
pub(super) fn q4_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: handed out only by `avx2::vec_dot_kernel`, whose callers have
    // checked that the CPU supports AVX2, FMA and F16C.
    unsafe { dot::<Q4K>(w, a) }
}

/// Q5_K x Q8_K.
pub(super) fn q5_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: as in `q4_k_q8_k`.
    unsafe { dot::<Q5K>(w, a) }
}

/// Q6_K x Q8_K.
pub(super) fn q6_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: as in `q4_k_q8_k`.
    unsafe { dot::<Q6K>(w, a) }
}

/// Q4_K x Q8_K, four rows.
pub(super) fn q4_k_q8_k_x4(w: &[u8], a: &[u8], out: &mut [f32; 4]) {
    // SAFETY: as in `q4_k_q8_k`.
    unsafe { dot4::<Q4K>(w, a, out) }
}

/// Q5_K x Q8_K, four rows.
pub(super) fn q5_k_q8_k_x4(w: &[u8], a: &[u8], out: &mut [f32; 4]) {
    // SAFETY: as in `q4_k_q8_k`.
    unsafe { dot4::<Q5K>(w, a, out) }
}

#[cfg(test)]
mod tests {
    use super::unpack_scales_mins;
    use crate::quant::q4_k::scale_min_k4;

    #[test]
    fn unpacked_scales_match_scale_min_k4() {
        let mut state = 0x1234_5678_9abc_def0u64;
        for _ in 0..10_000 {
            let mut packed = [0u8; 12];
            for b in &mut packed {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *b = state as u8;
            }
            let out = unpack_scales_mins(&packed);
            for g in 0..8 {
                assert_eq!(
                    (out[g], out[8 + g]),
                    scale_min_k4(g, &packed),
                    "{packed:?} g={g}"
                );
            }
        }
    }
}
