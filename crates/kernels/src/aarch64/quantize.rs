//! NEON quantization of 32-value activation blocks to 8 bits (Q8_0 /
//! Q8_1: `crate::quant::q8_0::quantize_q8`), the scalar reference's bits:
//! the same `amax` (a vector maximum, order-free for finite values), the
//! same scalar `d = amax / 127` and `id = 1 / d`, the same products
//! `x * id` (`fmul`), rounded half away from zero by `fcvtas` (what
//! `round_half_away` computes, and saturating as `as i8` does for the
//! infinite products of an overflowed `id`). A block with a NaN or an
//! infinity goes to the scalar reference, whose `fold` gives NaNs an
//! order-dependent meaning.
//!
//! Also Q8_K's 256-value blocks ([`quantize_q8k`]), likewise.

use std::arch::aarch64::*;

use crate::quant::q8_0::{quantize_acts_row_with, quantize_q8_scalar, ActBlockFacts};
use crate::quant::{BlockQ8K, QK, QK_K};

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

/// As `crate::quant::BlockQ8K::from_f32_scalar`, bit for bit: the blocks
/// of finite values with NEON ([`q8k_block`]), the others by the scalar
/// reference.
pub(super) fn quantize_q8k(x: &[f32; QK_K]) -> BlockQ8K {
    q8k_block(x).unwrap_or_else(|| BlockQ8K::from_f32_scalar(x))
}

/// A Q8_K block of 256 finite values as the scalar reference makes it, or
/// `None` if a value is NaN or infinite. The maximum magnitude is a vector
/// maximum (order-free for finite values), the first value that has it
/// found by a scan; `iscale` and `d` are the same scalar divisions; the
/// products `x * iscale` (`fmul`) are rounded to nearest even by `fcvtns`
/// (as `round_ties_even`, for these magnitudes of at most about 127) and
/// capped at 127; the sums of 16 are exact.
fn q8k_block(x: &[f32; QK_K]) -> Option<BlockQ8K> {
    let load = |c: &[f32]| {
        let c: &[f32; 4] = c.try_into().expect("4 values");
        // SAFETY: `c` is 4 readable f32; `ld1` has no alignment
        // requirement; NEON is part of every aarch64 target.
        unsafe { vld1q_f32(c.as_ptr()) }
    };
    // SAFETY: NEON is part of every aarch64 target.
    unsafe {
        let inf = vdupq_n_f32(f32::INFINITY);
        let mut finite = vdupq_n_u32(u32::MAX);
        let mut m = vdupq_n_f32(0.0);
        for c in x.chunks_exact(4) {
            let a = vabsq_f32(load(c));
            finite = vandq_u32(finite, vcltq_f32(a, inf));
            m = vmaxq_f32(m, a);
        }
        if vminvq_u32(finite) == 0 {
            return None;
        }
        let amax = vmaxvq_f32(m);
        let mut out = BlockQ8K::ZERO;
        if amax == 0.0 {
            return Some(out);
        }
        // The first value of largest magnitude (the scalar loop keeps the
        // first on ties, of either sign).
        let max = *x.iter().find(|v| v.abs() == amax)?;
        let iscale = -127.0 / max;
        let cap = vdupq_n_s32(127);
        for (c, (q, s)) in x
            .chunks_exact(16)
            .zip(out.qs.chunks_exact_mut(16).zip(out.bsums.iter_mut()))
        {
            let n: [int32x4_t; 4] = std::array::from_fn(|k| {
                let p = vmulq_n_f32(load(&c[4 * k..4 * k + 4]), iscale);
                vminq_s32(vcvtnq_s32_f32(p), cap)
            });
            // i32 -> i16 -> i8: no saturation, -128 <= n <= 127.
            let lo = vcombine_s16(vqmovn_s32(n[0]), vqmovn_s32(n[1]));
            let hi = vcombine_s16(vqmovn_s32(n[2]), vqmovn_s32(n[3]));
            let q: &mut [i8; 16] = q.try_into().expect("16 values");
            // SAFETY: `q` is 16 writable bytes; `st1` has no alignment
            // requirement.
            vst1q_s8(q.as_mut_ptr(), vcombine_s8(vqmovn_s16(lo), vqmovn_s16(hi)));
            let sum = vaddvq_s32(vaddq_s32(vaddq_s32(n[0], n[1]), vaddq_s32(n[2], n[3])));
            *s = (sum as i16).to_le_bytes();
        }
        out.d = (1.0 / iscale).to_le_bytes();
        Some(out)
    }
}
