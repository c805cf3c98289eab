//! NEON quantization of 32-value activation blocks to 8 bits (Q8_0 /
//! Q8_1: `crate::quant::q8_0::quantize_q8`), the scalar reference's bits:
//! the same `amax` (a vector maximum, order-free for finite values), the
//! same scalar `d = amax / 127` and `id = 1 / d`, the same products
//! `x * id` (`fmul`), rounded half away from zero by `fcvtas` (what
//! `round_half_away` computes, and saturating as `as i8` does for the
//! infinite products of an overflowed `id`). A block with a NaN or an
//! infinity goes to the scalar reference, whose `fold` gives NaNs an
//! order-dependent meaning.

use std::arch::aarch64::*;

use crate::quant::q8_0::{quantize_acts_row_with, quantize_q8_scalar, ActBlockFacts};
use crate::quant::QK;

/// As `crate::quant::q8_0::quantize_q8_scalar`.
pub(super) fn quantize_q8(x: &[f32; QK]) -> (f32, [i8; QK]) {
    // SAFETY: `x` is 32 readable f32 (8 loads of 4 at 4k); NEON is part of
    // every aarch64 target.
    let v: [float32x4_t; 8] = std::array::from_fn(|k| unsafe { vld1q_f32(x[4 * k..].as_ptr()) });
    // SAFETY: NEON is part of every aarch64 target.
    unsafe {
        let abs = v.map(|v| vabsq_f32(v));
        // Finite: |x| below infinity (false for NaN too).
        let inf = vdupq_n_f32(f32::INFINITY);
        let finite = abs.iter().fold(vdupq_n_u32(u32::MAX), |m, &a| {
            vandq_u32(m, vcltq_f32(a, inf))
        });
        if vminvq_u32(finite) == 0 {
            return quantize_q8_scalar(x);
        }
        let m = abs.iter().fold(vdupq_n_f32(0.0), |m, &a| vmaxq_f32(m, a));
        let amax = vmaxvq_f32(m);
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0i8; QK];
        for (k, pair) in v.chunks_exact(2).enumerate() {
            let q0 = vqmovn_s32(vcvtaq_s32_f32(vmulq_n_f32(pair[0], id)));
            let q1 = vqmovn_s32(vcvtaq_s32_f32(vmulq_n_f32(pair[1], id)));
            let q = vqmovn_s16(vcombine_s16(q0, q1));
            // SAFETY: 8 writable bytes at 8k <= 24 of 32.
            vst1_s8(qs[8 * k..].as_mut_ptr(), q);
        }
        (d, qs)
    }
}

/// As `crate::quant::q8_0::quantize_acts_row`, a block at a time by
/// [`quantize_q8`].
pub(super) fn quantize_acts_row(x: &[f32], out: &mut [u8], facts: &mut [ActBlockFacts]) {
    quantize_acts_row_with(x, out, facts, quantize_q8)
}
