//! MXFP4 x Q8_0 dot products, the SIMD counterparts of the scalar
//! reference `crate::dot::legacy::mxfp4_q8_0`: with AVX2
//! ([`mxfp4_q8_0`]) and with AVX-512 VNNI ([`mxfp4_q8_0_vnni`], for the
//! AVX-512 set).
//!
//! Per block, the sixteen bytes of codes are split into nibbles (low
//! nibbles, values 0..16, in the low 128 bits; high nibbles, values
//! 16..32, in the high 128 bits, the order of the Q8_0 block's values) and
//! looked up in a table of the E2M1 values plus 12 (`0..=24`, unsigned, so
//! `maddubs`/`dpbusd` can take them; no pair sum comes near saturation:
//! `2 * 24 * 128`); `12 * sum(x)` is subtracted again. The block's integer
//! sum is exact either way. Per batch of eight blocks the scalar
//! reference's terms `(d_w * d_x) * isum` are made in the eight f32 lanes
//! and added to the row sum one by one, in block order.

use std::arch::x86_64::*;

use super::{f16x8, hsum_i32x8, load_i8, load_u8x16};
use crate::dot::whole_blocks;
use crate::quant::mxfp4::{e8m0_half, KVALUES};
use crate::quant::{BlockMxfp4, BlockQ8_0};

/// Blocks per batch (one 8-lane f32 vector of terms).
const BATCH: usize = 8;

/// What is added to each E2M1 value to make it unsigned.
const OFFSET: i8 = 12;

/// The lookup table: `KVALUES[i] + 12`, in both 128-bit halves.
const TABLE: [i8; 16] = {
    let mut t = [0i8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = KVALUES[i] + OFFSET;
        i += 1;
    }
    t
};

/// The 32 weights of block `w` plus 12, as unsigned bytes in the order of
/// a Q8_0 block's values.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn codes_plus_offset(w: &BlockMxfp4, table: __m256i) -> __m256i {
    let q = load_u8x16(&w.qs);
    let both = _mm256_set_m128i(_mm_srli_epi16::<4>(q), q);
    _mm256_shuffle_epi8(table, _mm256_and_si256(both, _mm256_set1_epi8(0x0f)))
}

/// Eight i32 lanes summing to the exact `sum(KVALUES[q] * x)` (AVX2).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn isum_avx2(w: &BlockMxfp4, a: &BlockQ8_0, table: __m256i) -> __m256i {
    let u = codes_plus_offset(w, table);
    let x = load_i8(&a.qs);
    // Pair sums: |(w + 12) x0 + (w + 12) x1| <= 2 * 24 * 128 and
    // |12 x0 + 12 x1| <= 2 * 12 * 128, far from i16 saturation.
    let prod = _mm256_maddubs_epi16(u, x);
    let off = _mm256_maddubs_epi16(_mm256_set1_epi8(OFFSET), x);
    _mm256_madd_epi16(_mm256_sub_epi16(prod, off), _mm256_set1_epi16(1))
}

/// As [`isum_avx2`], with VNNI's `vpdpbusd` (exact i32 sums of four
/// unsigned-by-signed products).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn isum_vnni(w: &BlockMxfp4, a: &BlockQ8_0, table: __m256i) -> __m256i {
    let u = codes_plus_offset(w, table);
    let x = load_i8(&a.qs);
    let zero = _mm256_setzero_si256();
    let prod = _mm256_dpbusd_epi32(zero, u, x);
    let off = _mm256_dpbusd_epi32(zero, _mm256_set1_epi8(OFFSET), x);
    _mm256_sub_epi32(prod, off)
}

/// The row loop shared by both kernels, `$isum` giving one block pair's
/// eight partial sums (a macro, so that each kernel's loop is compiled
/// with its own target features and the block body inlined).
macro_rules! mxfp4_row {
    ($w:expr, $a:expr, $isum:ident) => {{
        let wb = whole_blocks::<BlockMxfp4>($w);
        let ab = whole_blocks::<BlockQ8_0>($a);
        let n = wb.len().min(ab.len());
        // SAFETY: `TABLE` is 16 readable bytes; `loadu` has no alignment
        // requirement.
        let table = _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(TABLE.as_ptr().cast()) });
        let mut sum = 0.0f32;
        let mut b0 = 0;
        while b0 < n {
            let count = (n - b0).min(BATCH);
            let mut parts = [_mm256_setzero_si256(); BATCH];
            let mut d_w = [0.0f32; BATCH];
            let mut d_x = [0u16; BATCH];
            for i in 0..count {
                let (w, a) = (&wb[b0 + i], &ab[b0 + i]);
                parts[i] = $isum(w, a, table);
                d_w[i] = e8m0_half(w.e);
                d_x[i] = u16::from_le_bytes(a.d);
            }
            let isum = _mm256_cvtepi32_ps(hsum_i32x8(&parts));
            // SAFETY: `d_w` is 8 readable f32; `loadu` has no alignment
            // requirement.
            let dw = unsafe { _mm256_loadu_ps(d_w.as_ptr()) };
            let terms = _mm256_mul_ps(_mm256_mul_ps(dw, f16x8(&d_x)), isum);
            let mut t = [0.0f32; BATCH];
            // SAFETY: `t` is 8 writable f32; `storeu` has no alignment
            // requirement.
            unsafe { _mm256_storeu_ps(t.as_mut_ptr(), terms) };
            for &t in &t[..count] {
                sum += t;
            }
            b0 += count;
        }
        sum
    }};
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn row_avx2(w: &[u8], a: &[u8]) -> f32 {
    mxfp4_row!(w, a, isum_avx2)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn row_vnni(w: &[u8], a: &[u8]) -> f32 {
    mxfp4_row!(w, a, isum_vnni)
}

/// MXFP4 x Q8_0 with AVX2, bit for bit the scalar reference.
pub(super) fn mxfp4_q8_0(w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: handed out only by `avx2::vec_dot_kernel`, whose callers
    // checked that the CPU has AVX2, FMA and F16C.
    unsafe { row_avx2(w, a) }
}

/// MXFP4 x Q8_0 with AVX-512 VNNI, bit for bit the scalar reference.
pub(crate) fn mxfp4_q8_0_vnni(w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: handed out only by `avx512::vec_dot_kernel`, whose callers
    // checked that the CPU has AVX2, FMA, F16C, AVX512F/BW/VL and VNNI.
    unsafe { row_vnni(w, a) }
}
