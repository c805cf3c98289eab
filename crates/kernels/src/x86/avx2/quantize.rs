//! AVX2 quantization of one 32-value block to 8 bits (Q8_0 / Q8_1
//! activations), with the scalar reference's results bit for bit
//! (`crate::quant::q8_0::quantize_q8`): the same `amax`, the same scalar
//! `d = amax / 127` and `id = 1 / d`, the same rounded products `x * id`,
//! rounded half away from zero like `roundf`.

use std::arch::x86_64::*;

use crate::quant::QK;

/// `(d, q)` of a block of finite values, or `None` if a value is NaN or
/// infinite (the caller then runs the scalar reference, whose `fold` gives
/// NaNs an order-dependent meaning).
///
/// # Safety
///
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q8_block(x: &[f32; QK]) -> Option<(f32, [i8; QK])> {
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
    let idv = _mm256_set1_ps(id);
    let one = _mm256_set1_ps(1.0);
    let half = _mm256_set1_ps(0.5);
    let q: [__m256i; 4] = std::array::from_fn(|k| {
        let p = _mm256_mul_ps(v[k], idv);
        // Half away from zero: round to nearest (ties to even), except at
        // an exact tie, where it is the truncation plus the sign. All
        // steps exact (|p| <= 127 up to rounding).
        let even = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(p);
        let trunc = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(p);
        let frac = _mm256_andnot_ps(sign, _mm256_sub_ps(p, trunc));
        let tie = _mm256_cmp_ps::<_CMP_EQ_OQ>(frac, half);
        let away = _mm256_add_ps(trunc, _mm256_or_ps(one, _mm256_and_ps(sign, p)));
        _mm256_cvtps_epi32(_mm256_blendv_ps(even, away, tie))
    });
    // i32 -> i16 -> i8 (no saturation: |q| <= 127); packs interleaves the
    // 128-bit halves, a final permute restores the order.
    let w01 = _mm256_packs_epi32(q[0], q[1]);
    let w23 = _mm256_packs_epi32(q[2], q[3]);
    let b = _mm256_packs_epi16(w01, w23);
    let b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    let mut out = [0i8; QK];
    // SAFETY: `out` is 32 writable bytes; `storeu` has no alignment
    // requirement.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), b) };
    Some((d, out))
}
