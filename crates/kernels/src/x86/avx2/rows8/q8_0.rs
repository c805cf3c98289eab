//! Q8_0 x Q8_0 on groups of eight interleaved rows: `dot8` and the
//! many-row `dot8n`, in two forms that take the same exact integer sums.
//!
//! - AVX2 ([`Q8_0`]): weights and activations both span all of i8, too
//!   wide for `maddubs` (its i16 pair sums would saturate), so each 32-byte
//!   piece of the block is widened to i16, rows 0..4 and rows 4..8 apart,
//!   and multiplied with `madd` by its four activations, widened and
//!   repeated. `dot8n` widens a block once per pass of rows.
//! - VNNI ([`Q8_0Vnni`]): `dpbusd` multiplies unsigned by signed bytes and
//!   adds each lane's four products into its i32 without saturation. The
//!   weights are read as `q = w + 128` (the sign bit flipped, 0..=255), so
//!   the block sums `sum(q * x) - 128 * sum(x) = sum(w * x)`, exact in i32
//!   (`|sum(q * x)| <= 32 * 255 * 128`): a `Small` format with offset 128.
//!
//! The f32 part of a block is `term_from`'s, as for the other 32-value
//! formats, so every form has the scalar reference's bits.

use std::arch::x86_64::*;

use super::{
    dot8, dot8_vnni, dot8n_vnni, legacy_term, load_u8, load_u8x16, pass_rows, small_isums_vnni,
    term_from, w_scales, x4, Act8, Legacy, Rows8, Small, ROWS, TOKENS,
};
use crate::quant::BlockQ8_0;

/// Bytes of one Q8_0 block of one row.
const BLOCK: usize = 34;

/// Where piece `c` (values `4c..4c + 4` of each row) of an interleaved
/// block starts: after the eight rows' f16 scales.
const fn piece(c: usize) -> usize {
    16 + 32 * c
}

/// Q8_0 for AVX2: `d` at 0, the eight value pieces at `16 + 32c`.
pub(super) struct Q8_0;

/// A format whose blocks decode into i16 values for `madd` (Q8_0 for
/// AVX2): vector `2c` holds piece `c` of rows 0..4 (row `r` in i16 lanes
/// `4r..4r + 4`), vector `2c + 1` of rows 4..8.
trait Wide: Legacy + Rows8<A: Act8> {
    /// The eight pieces of an interleaved block, widened.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2, FMA and F16C.
    unsafe fn values(w: &[u8]) -> [__m256i; 16];
}

impl Wide for Q8_0 {
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn values(w: &[u8]) -> [__m256i; 16] {
        let mut q = [_mm256_setzero_si256(); 16];
        for c in 0..8 {
            q[2 * c] = _mm256_cvtepi8_epi16(load_u8x16(&w[piece(c)..]));
            q[2 * c + 1] = _mm256_cvtepi8_epi16(load_u8x16(&w[piece(c) + 16..]));
        }
        q
    }
}

/// Lane `r`: the exact `sum(w * x)` of row `r`, from the widened values of
/// [`Wide::values`]. `madd` sums products in pairs, so row `r'` of a half
/// has two i32 lanes (`2r'`, `2r' + 1`), each at most `8 * 2 * 128 * 128`
/// in size; `hadd` then adds each pair.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn wide_isums<K: Wide>(q: &[__m256i; 16], x: &[i8; 32]) -> __m256i {
    let mut rows_lo = _mm256_setzero_si256();
    let mut rows_hi = _mm256_setzero_si256();
    for c in 0..8 {
        let xw = _mm256_cvtepi8_epi16(_mm_set1_epi32(x4(x, 4 * c)));
        rows_lo = _mm256_add_epi32(rows_lo, _mm256_madd_epi16(q[2 * c], xw));
        rows_hi = _mm256_add_epi32(rows_hi, _mm256_madd_epi16(q[2 * c + 1], xw));
    }
    // Per 128-bit half, hadd gives [r0, r1, r4, r5] (low) and
    // [r2, r3, r6, r7] (high); reorder the 64-bit pairs to r0..r8.
    let h = _mm256_hadd_epi32(rows_lo, rows_hi);
    _mm256_permute4x64_epi64::<0b11_01_10_00>(h)
}

impl Rows8 for Q8_0 {
    const BLOCK: usize = BLOCK;
    type A = BlockQ8_0;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn term(w: &[u8], a: &BlockQ8_0) -> __m256 {
        legacy_term::<Self>(w, a)
    }
}

impl Legacy for Q8_0 {
    const MIN: bool = false;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn isums(w: &[u8], a: &BlockQ8_0) -> __m256i {
        wide_isums::<Self>(&Self::values(w), &a.qs)
    }
    fn a_scales(a: &BlockQ8_0) -> [u16; 2] {
        a.scales()
    }
}

dot8n_with!(wide_dot8n, Wide, wide_isums, "avx2,fma,f16c");

/// Q8_0 for VNNI: the same interleaved blocks, its values read as
/// `w + 128`.
pub(super) struct Q8_0Vnni;

impl Small for Q8_0Vnni {
    const OFFSET: i32 = 128;
    const BITS: u32 = 8;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn values(w: &[u8]) -> [__m256i; 8] {
        // Vector 2c: values 4c..4c + 4 (piece c); 2c + 1: values
        // 16 + 4c.. (piece 4 + c). Flipping the sign bit adds 128.
        let flip = _mm256_set1_epi8(i8::MIN);
        let mut q = [_mm256_setzero_si256(); 8];
        for c in 0..4 {
            q[2 * c] = _mm256_xor_si256(load_u8(&w[piece(c)..]), flip);
            q[2 * c + 1] = _mm256_xor_si256(load_u8(&w[piece(4 + c)..]), flip);
        }
        q
    }
}

impl Rows8 for Q8_0Vnni {
    const BLOCK: usize = BLOCK;
    type A = BlockQ8_0;
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn term(w: &[u8], a: &BlockQ8_0) -> __m256 {
        term_from::<Self>(Self::isums(w, a), w_scales::<Self>(w), a)
    }
}

impl Legacy for Q8_0Vnni {
    const MIN: bool = false;
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn isums(w: &[u8], a: &BlockQ8_0) -> __m256i {
        small_isums_vnni::<Self>(&Self::values(w), &a.qs)
    }
    fn a_scales(a: &BlockQ8_0) -> [u16; 2] {
        a.scales()
    }
}

/// Q8_0 x Q8_0, eight interleaved rows.
pub(super) fn q8_0_q8_0_x8(group: &[u8], act: &[u8], out: &mut [f32; ROWS]) {
    // SAFETY: handed out only by `avx2::vec_dot_kernel`, whose callers have
    // checked that the CPU supports AVX2, FMA and F16C.
    unsafe { dot8::<Q8_0>(group, act, out) }
}

/// Q8_0 x Q8_0, eight interleaved rows, many activation rows.
pub(super) fn q8_0_q8_0_x8n(group: &[u8], acts: &[u8], act_row: usize, out: &mut [[f32; ROWS]]) {
    // SAFETY: as in `q8_0_q8_0_x8`.
    unsafe { wide_dot8n::<Q8_0>(group, acts, act_row, out) }
}

/// Q8_0 x Q8_0, eight interleaved rows, VNNI.
pub(super) fn q8_0_q8_0_x8_vnni(group: &[u8], act: &[u8], out: &mut [f32; ROWS]) {
    // SAFETY: handed out only by `avx512::vec_dot_kernel`, whose callers
    // have checked that the CPU supports AVX2, FMA, F16C, AVX512F/BW/VL
    // and AVX512-VNNI.
    unsafe { dot8_vnni::<Q8_0Vnni>(group, act, out) }
}

/// Q8_0 x Q8_0, eight interleaved rows, many activation rows, VNNI.
pub(super) fn q8_0_q8_0_x8n_vnni(
    group: &[u8],
    acts: &[u8],
    act_row: usize,
    out: &mut [[f32; ROWS]],
) {
    // SAFETY: as in `q8_0_q8_0_x8_vnni`.
    unsafe { dot8n_vnni::<Q8_0Vnni>(group, acts, act_row, out) }
}
