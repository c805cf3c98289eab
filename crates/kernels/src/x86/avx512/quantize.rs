//! `crate::quant::q8_0::quantize_acts_row` on 16 lanes: each 32-value
//! block as two registers, with the scalar reference's results bit for
//! bit. The same `amax` (for finite values the maximum does not depend on
//! the order), the same scalar `d = amax / 127` and `id = 1 / d`, the same
//! rounded products `x * id`, rounded half away from zero as `roundf`
//! (nearest, except at an exact tie, where it is the truncation plus the
//! sign); `d` to f16 and back by the F16C conversions (round to nearest
//! even, subnormals kept, overflow to infinity: `f16_bits_from_f32` for a
//! finite value). A block with a NaN or an infinity, or whose `1 / d`
//! overflows, runs the scalar reference.

use std::arch::x86_64::*;

use crate::quant::q8_0::{quantize_q8_scalar, ActBlockFacts, BlockQ8_0, ACT_PANEL_ROWS};
use crate::quant::QK;

/// One block's values (as bytes, sixteen per register), scale (f16 bits)
/// and integer sum, or `None` when
/// the scalar reference must run (see the module notes).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
#[inline]
unsafe fn block(x: &[f32; QK]) -> Option<([__m128i; 2], u16, i32)> {
    // SAFETY: `x` is 32 readable f32; `loadu` has no alignment requirement.
    let v = unsafe {
        [
            _mm512_loadu_ps(x.as_ptr()),
            _mm512_loadu_ps(x[16..].as_ptr()),
        ]
    };
    let abs = v.map(|v| _mm512_abs_ps(v));
    // Finite: |x| below infinity (false for NaN too).
    let inf = _mm512_set1_ps(f32::INFINITY);
    let finite = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(abs[0], inf)
        & _mm512_cmp_ps_mask::<_CMP_LT_OQ>(abs[1], inf);
    if finite != 0xffff {
        return None;
    }
    let amax = _mm512_reduce_max_ps(_mm512_max_ps(abs[0], abs[1]));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    if !id.is_finite() {
        return None;
    }
    let idv = _mm512_set1_ps(id);
    let sign = _mm512_set1_ps(-0.0);
    let one = _mm512_set1_ps(1.0);
    let half = _mm512_set1_ps(0.5);
    let q = v.map(|v| {
        let p = _mm512_mul_ps(v, idv);
        let even = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(p);
        let trunc = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(p);
        let frac = _mm512_abs_ps(_mm512_sub_ps(p, trunc));
        let tie = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(frac, half);
        // trunc + copysign(1, p) at the ties (all steps exact: |p| <= 127
        // up to rounding).
        // (Integer logic: the f32 `and`/`or` are AVX512DQ.)
        let sign_of_p = _mm512_and_si512(_mm512_castps_si512(sign), _mm512_castps_si512(p));
        let signed_one = _mm512_or_si512(_mm512_castps_si512(one), sign_of_p);
        let away = _mm512_add_ps(trunc, _mm512_castsi512_ps(signed_one));
        _mm512_cvtps_epi32(_mm512_mask_blend_ps(tie, even, away))
    });
    let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q[0], q[1]));
    // The values are in -127..=127, so the truncating narrowing keeps them.
    let bytes = q.map(|q| _mm512_cvtepi32_epi8(q));
    let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(d));
    Some((bytes, _mm_extract_epi16::<0>(h) as u16, sum))
}

/// See the module notes; the arguments are checked by the public wrapper.
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX512F/BW/VL.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn quantize_acts_row(x: &[f32], out: &mut [u8], facts: &mut [ActBlockFacts]) {
    const SIZE: usize = std::mem::size_of::<BlockQ8_0>();
    for (b, (x, o)) in x
        .chunks_exact(QK)
        .zip(out.chunks_exact_mut(SIZE))
        .enumerate()
    {
        let Ok(x) = <&[f32; QK]>::try_from(x) else {
            continue;
        };
        // SAFETY: this function's own contract.
        let Some((qs, h, sum)) = (unsafe { block(x) }) else {
            crate::quant::q8_0::quantize_acts_row_with(
                x,
                o,
                facts.get_mut(b * ACT_PANEL_ROWS..).unwrap_or_default(),
                quantize_q8_scalar,
            );
            continue;
        };
        let Ok(o) = <&mut [u8; SIZE]>::try_from(o) else {
            continue;
        };
        o[..2].copy_from_slice(&h.to_le_bytes());
        // SAFETY: bytes 2..34 of `o` are writable; `storeu` has no
        // alignment requirement.
        unsafe {
            _mm_storeu_si128(o[2..].as_mut_ptr().cast(), qs[0]);
            _mm_storeu_si128(o[18..].as_mut_ptr().cast(), qs[1]);
        }
        if let Some(f) = facts.get_mut(b * ACT_PANEL_ROWS) {
            f.d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))));
            f.offset = -128 * sum;
            // SAFETY: `f.qs` is 32 writable bytes; as above.
            unsafe {
                _mm_storeu_si128(f.qs.as_mut_ptr().cast(), qs[0]);
                _mm_storeu_si128(f.qs[16..].as_mut_ptr().cast(), qs[1]);
            }
        }
    }
}
