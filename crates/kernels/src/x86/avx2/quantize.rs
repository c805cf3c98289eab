//! AVX2 quantization of activation blocks to 8 bits, with the scalar
//! reference's results bit for bit: 32-value blocks for Q8_0 / Q8_1
//! (`crate::quant::q8_0::quantize_q8`: the same `amax`, the same scalar
//! `d = amax / 127` and `id = 1 / d`, the same rounded products `x * id`,
//! rounded half away from zero like `roundf`), Q8_0 activation rows with
//! their panel places in one pass ([`quantize_acts_row`]), and Q8_K's
//! 256-value blocks ([`q8k_block`]).

use std::arch::x86_64::*;

use crate::quant::q8_0::{
    quantize_acts_row_with, quantize_q8_scalar, ActBlockFacts, BlockQ8_0, ACT_PANEL_ROWS,
};
use crate::quant::{BlockQ8K, QK, QK_K};

/// `d` and the rounded values of a block of finite values, values
/// `8k..8k + 8` as i32 in vector `k`, or `None` if a value is NaN or
/// infinite (the caller then runs the scalar reference, whose `fold` gives
/// NaNs an order-dependent meaning) or `1 / d` overflows.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q8_values(x: &[f32; QK]) -> Option<(f32, [__m256i; 4])> {
    // SAFETY: `x` is 32 readable f32; `loadu` has no alignment requirement.
    let v: [__m256; 4] = std::array::from_fn(|k| unsafe { _mm256_loadu_ps(x[8 * k..].as_ptr()) });
    let sign = _mm256_set1_ps(-0.0);
    let abs = v.map(|v| _mm256_andnot_ps(sign, v));
    // Finite: |x| below infinity (false for NaN too).
    let inf = _mm256_set1_ps(f32::INFINITY);
    let finite = abs.iter().fold(-1i32, |m, &a| {
        m & _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(a, inf))
    });
    if finite & 0xff != 0xff {
        return None;
    }
    // The maximum of finite values does not depend on the order.
    let m = _mm256_max_ps(_mm256_max_ps(abs[0], abs[1]), _mm256_max_ps(abs[2], abs[3]));
    let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_max_ss(m, _mm_shuffle_ps::<0b01>(m, m));
    let amax = _mm_cvtss_f32(m);
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    if !id.is_finite() {
        // `1 / d` overflowed (all values below about 3.7e-37): the products
        // are infinite, which the scalar reference casts to ±127 and the
        // vector conversion would not.
        return None;
    }
    let idv = _mm256_set1_ps(id);
    let one = _mm256_set1_ps(1.0);
    let half = _mm256_set1_ps(0.5);
    let mut q = [_mm256_setzero_si256(); 4];
    for (q, v) in q.iter_mut().zip(v) {
        let p = _mm256_mul_ps(v, idv);
        // Half away from zero: round to nearest (ties to even), except at
        // an exact tie, where it is the truncation plus the sign. All
        // steps exact (|p| <= 127 up to rounding).
        let even = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(p);
        let trunc = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(p);
        let frac = _mm256_andnot_ps(sign, _mm256_sub_ps(p, trunc));
        let tie = _mm256_cmp_ps::<_CMP_EQ_OQ>(frac, half);
        let away = _mm256_add_ps(trunc, _mm256_or_ps(one, _mm256_and_ps(sign, p)));
        *q = _mm256_cvtps_epi32(_mm256_blendv_ps(even, away, tie));
    }
    Some((d, q))
}

/// The 32 values of [`q8_values`] as bytes, in order: i32 -> i16 -> i8
/// (no saturation: |q| <= 127); packs interleaves the 128-bit halves, a
/// final permute restores the order.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q8_bytes(q: &[__m256i; 4]) -> __m256i {
    let w01 = _mm256_packs_epi32(q[0], q[1]);
    let w23 = _mm256_packs_epi32(q[2], q[3]);
    let b = _mm256_packs_epi16(w01, w23);
    _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

/// `(d, q)` of a block of finite values (`crate::quant::q8_0::quantize_q8`
/// bit for bit), or `None` as [`q8_values`].
///
/// # Safety
///
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q8_block(x: &[f32; QK]) -> Option<(f32, [i8; QK])> {
    let (d, q) = q8_values(x)?;
    let mut out = [0i8; QK];
    // SAFETY: `out` is 32 writable bytes; `storeu` has no alignment
    // requirement.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), q8_bytes(&q)) };
    Some((d, out))
}

/// `crate::quant::q8_0::quantize_acts_row` in one pass per block: the
/// values of [`q8_values`] stored as bytes into the row and the block's
/// panel place, their sum taken from the same registers, `d` to f16 and
/// back by the F16C conversions (round to nearest even, subnormals kept,
/// overflow to infinity: `f16_le_from` for a finite value). A block
/// [`q8_values`] refuses runs the scalar reference. The arguments are
/// checked by the public wrapper.
///
/// # Safety
///
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_acts_row(x: &[f32], out: &mut [u8], facts: &mut [ActBlockFacts]) {
    const SIZE: usize = std::mem::size_of::<BlockQ8_0>();
    for (b, (x, o)) in x
        .chunks_exact(QK)
        .zip(out.chunks_exact_mut(SIZE))
        .enumerate()
    {
        let (Ok(x), Ok(o)) = (<&[f32; QK]>::try_from(x), <&mut [u8; SIZE]>::try_from(o)) else {
            continue;
        };
        let Some((d, q)) = q8_values(x) else {
            quantize_acts_row_with(
                x,
                o,
                facts.get_mut(b * ACT_PANEL_ROWS..).unwrap_or_default(),
                quantize_q8_scalar,
            );
            continue;
        };
        let bytes = q8_bytes(&q);
        let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(d));
        o[..2].copy_from_slice(&(_mm_extract_epi16::<0>(h) as u16).to_le_bytes());
        // SAFETY: bytes 2..34 of `o` are writable; `storeu` has no
        // alignment requirement.
        unsafe { _mm256_storeu_si256(o[2..].as_mut_ptr().cast(), bytes) };
        if let Some(f) = facts.get_mut(b * ACT_PANEL_ROWS) {
            let sum = super::hsum_i32(_mm256_add_epi32(
                _mm256_add_epi32(q[0], q[1]),
                _mm256_add_epi32(q[2], q[3]),
            ));
            f.d = _mm_cvtss_f32(_mm_cvtph_ps(h));
            f.offset = -128 * sum;
            // SAFETY: `f.qs` is 32 writable bytes; as above.
            unsafe { _mm256_storeu_si256(f.qs.as_mut_ptr().cast(), bytes) };
        }
    }
}

/// A Q8_K block of 256 finite values, as `BlockQ8K::from_f32_scalar`
/// makes it (bit for bit), or `None` if a value is NaN or infinite (the
/// caller then runs the scalar reference). The maximum magnitude and the
/// first value that has it are found with vector compares (for finite
/// values neither depends on the order); `iscale` and `d` are the same
/// scalar divisions; the products `iscale * x` are rounded to nearest even
/// (`vroundps`, as ggml's `nearest_int` and our `round_ties_even`) and
/// capped at 127; the sums of 16 are exact.
///
/// # Safety
///
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q8k_block(x: &[f32; QK_K]) -> Option<BlockQ8K> {
    let sign = _mm256_set1_ps(-0.0);
    let inf = _mm256_set1_ps(f32::INFINITY);
    let mut m = _mm256_setzero_ps();
    let mut finite = -1i32;
    for c in x.chunks_exact(8) {
        // SAFETY: `c` is 8 readable f32; `loadu` has no alignment requirement.
        let a = _mm256_andnot_ps(sign, unsafe { _mm256_loadu_ps(c.as_ptr()) });
        finite &= _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(a, inf));
        m = _mm256_max_ps(m, a);
    }
    if finite & 0xff != 0xff {
        return None;
    }
    let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps::<0b01>(m, m)));
    let mut out = BlockQ8K::ZERO;
    if amax == 0.0 {
        return Some(out);
    }
    // The first value of largest magnitude (the scalar loop keeps the
    // first on ties, of either sign).
    let am = _mm256_set1_ps(amax);
    let first = x.chunks_exact(8).enumerate().find_map(|(i, c)| {
        // SAFETY: `c` is 8 readable f32; `loadu` has no alignment
        // requirement.
        let a = _mm256_andnot_ps(sign, unsafe { _mm256_loadu_ps(c.as_ptr()) });
        let hit = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(a, am));
        (hit != 0).then(|| 8 * i + hit.trailing_zeros() as usize)
    })?;
    let max = x[first];
    let iscale = -127.0 / max;
    let is = _mm256_set1_ps(iscale);
    let cap = _mm256_set1_epi32(127);
    for (c, (q, s)) in x
        .chunks_exact(16)
        .zip(out.qs.chunks_exact_mut(16).zip(out.bsums.iter_mut()))
    {
        // SAFETY: `c` is 16 readable f32; `loadu` has no alignment requirement.
        let (v0, v1) = unsafe {
            (
                _mm256_loadu_ps(c.as_ptr()),
                _mm256_loadu_ps(c.as_ptr().add(8)),
            )
        };
        let r = |v: __m256| {
            let p = _mm256_mul_ps(is, v);
            let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(p);
            _mm256_min_epi32(_mm256_cvtps_epi32(n), cap)
        };
        let (n0, n1) = (r(v0), r(v1));
        // i32 -> i16 -> i8 (no saturation: -128 <= n <= 127); packs works
        // per 128-bit half, the permute restores the order.
        let w = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(n0, n1));
        let b = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256::<1>(w));
        // SAFETY: `q` is 16 writable bytes; `storeu` has no alignment
        // requirement.
        unsafe { _mm_storeu_si128(q.as_mut_ptr().cast(), b) };
        let sum = super::hsum_i32(_mm256_add_epi32(n0, n1));
        *s = (sum as i16).to_le_bytes();
    }
    out.d = (1.0 / iscale).to_le_bytes();
    Some(out)
}
