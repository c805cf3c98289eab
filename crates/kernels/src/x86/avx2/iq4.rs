//! IQ4_NL x Q8_0 and IQ4_XS x Q8_K with AVX2, the SIMD counterparts of the
//! scalar references `crate::dot::iq4::{iq4_nl_q8_0, iq4_xs_q8_k}`.
//!
//! A run of sixteen code bytes is split into nibbles (low nibbles, values
//! 0..16, in the low 128 bits; high nibbles, values 16..32, in the high 128
//! bits: the order of the activations) and looked up in
//! `KVALUES_IQ4NL` with `pshufb`. The table's values (-127..=113) times any
//! i8 activation (-128 included) do not fit `maddubs`' i16 pair sums
//! without saturating, so weights and activations are widened to i16 and
//! multiplied with `madd` (exact i32 pair sums). Each block's (IQ4_NL) or
//! super-block's (IQ4_XS, each run's sum times its scale first) integer
//! sum is then exact, and its f32 term is the scalar reference's
//! expression, added in block order.

use std::arch::x86_64::*;

use super::{hsum_i32, load_i8, load_u8x16};
use crate::dot::whole_blocks;
use crate::quant::float::f16_le;
use crate::quant::iq4::KVALUES_IQ4NL;
use crate::quant::{BlockIq4Nl, BlockIq4Xs, BlockQ8K, BlockQ8_0};

/// The table, in both 128-bit halves.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn table() -> __m256i {
    // SAFETY: `KVALUES_IQ4NL` is 16 readable bytes; `loadu` has no
    // alignment requirement.
    _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()) })
}

/// Eight i32 lanes summing to `sum(KVALUES_IQ4NL[q] * x)` over one run of
/// sixteen code bytes and its 32 activations, exactly.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn run_isum(qs: &[u8], x: &[i8], table: __m256i) -> __m256i {
    let q = load_u8x16(qs);
    let both = _mm256_set_m128i(_mm_srli_epi16::<4>(q), q);
    let w = _mm256_shuffle_epi8(table, _mm256_and_si256(both, _mm256_set1_epi8(0x0f)));
    let x = load_i8(x);
    let w_lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(w));
    let w_hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(w));
    let x_lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(x));
    let x_hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(x));
    _mm256_add_epi32(_mm256_madd_epi16(w_lo, x_lo), _mm256_madd_epi16(w_hi, x_hi))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nl_row(w: &[u8], a: &[u8]) -> f32 {
    let t = table();
    let mut sum = 0.0f32;
    for (wb, ab) in whole_blocks::<BlockIq4Nl>(w)
        .iter()
        .zip(whole_blocks::<BlockQ8_0>(a))
    {
        let isum = hsum_i32(run_isum(&wb.qs, &ab.qs, t));
        sum += (f16_le(wb.d) * f16_le(ab.d)) * isum as f32;
    }
    sum
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn xs_row(w: &[u8], a: &[u8]) -> f32 {
    let t = table();
    let mut sum = 0.0f32;
    for (wb, ab) in whole_blocks::<BlockIq4Xs>(w)
        .iter()
        .zip(whole_blocks::<BlockQ8K>(a))
    {
        let mut acc = _mm256_setzero_si256();
        for r in 0..8 {
            let run = run_isum(&wb.qs[16 * r..], &ab.qs[32 * r..], t);
            acc = _mm256_add_epi32(
                acc,
                _mm256_mullo_epi32(run, _mm256_set1_epi32(wb.run_scale(r))),
            );
        }
        sum += (f16_le(wb.d) * ab.d()) * hsum_i32(acc) as f32;
    }
    sum
}

/// IQ4_NL x Q8_0 with AVX2, bit for bit the scalar reference.
pub(super) fn iq4_nl_q8_0(w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: handed out only by `avx2::vec_dot_kernel`, whose callers
    // checked that the CPU has AVX2, FMA and F16C.
    unsafe { nl_row(w, a) }
}

/// IQ4_XS x Q8_K with AVX2, bit for bit the scalar reference.
pub(super) fn iq4_xs_q8_k(w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: as `iq4_nl_q8_0`.
    unsafe { xs_row(w, a) }
}
