//! Q8_0 x Q8_0 on groups of eight interleaved rows: `dot8` and the
//! many-row `dot8n`, in two forms that take the same exact integer sums.
//!
//! - AVX2 ([`Q8_0`]): weights and activations both span all of i8, too
//!   wide for `maddubs` (its i16 pair sums would saturate), so each 32-byte
//!   piece of the block is widened to i16, rows 0..4 and rows 4..8 apart,
//!   and multiplied with `madd` by its four activations, widened and
//!   repeated. `dot8n` widens a block once per pass of rows; `dot16n`
//!   ([`wide_many`]) widens a block of both groups once per pass, and each
//!   activation block's widened broadcasts and scale serve both (a pass of
//!   sixteen whole rows reads the scale as f32 from the activation panel).
//! - VNNI ([`Q8_0Vnni`]): `dpbusd` multiplies unsigned by signed bytes and
//!   adds each lane's four products into its i32 without saturation. The
//!   weights are read as `q = w + 128` (the sign bit flipped, 0..=255), so
//!   the block sums `sum(q * x) - 128 * sum(x) = sum(w * x)`, exact in i32
//!   (`|sum(q * x)| <= 32 * 255 * 128`): a `Small` format with offset 128.
//!
//! The f32 part of a block is `term_from`'s, as for the other 32-value
//! formats, so every form has the scalar reference's bits.

use std::arch::x86_64::*;

use super::prefill::{panel_pass, store_groups};
use super::{
    dot8, dot8_vnni, dot8n_vnni, f16_splat, legacy_term, load_u8, load_u8x16, pass_rows,
    small_isums_vnni, term_from, w_scales, x4, Act8, Legacy, Rows8, Small, ROWS, TOKENS,
};
use crate::quant::{ActBlockFacts, BlockQ8_0};

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
            [q[2 * c], q[2 * c + 1]] = wide_piece(w, c);
        }
        q
    }
}

/// Piece `c` of an interleaved Q8_0 block widened to i16: rows 0..4, then
/// rows 4..8 (vectors `2c` and `2c + 1` of [`Wide::values`]).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn wide_piece(w: &[u8], c: usize) -> [__m256i; 2] {
    [
        _mm256_cvtepi8_epi16(load_u8x16(&w[piece(c)..])),
        _mm256_cvtepi8_epi16(load_u8x16(&w[piece(c) + 16..])),
    ]
}

/// Activation values `4c..4c + 4` widened to i16 and repeated in every
/// 64-bit lane, the `madd` partner of piece `c`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn wide_x(x: &[i8; 32], c: usize) -> __m256i {
    _mm256_cvtepi8_epi16(_mm_set1_epi32(x4(x, 4 * c)))
}

/// The row sums from the `madd` sums of rows 0..4 (`lo`) and 4..8 (`hi`):
/// per 128-bit half, `hadd` gives [r0, r1, r4, r5] (low) and
/// [r2, r3, r6, r7] (high); the 64-bit pairs reordered give r0..r8.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn wide_rows(lo: __m256i, hi: __m256i) -> __m256i {
    _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_hadd_epi32(lo, hi))
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
        let xw = wide_x(x, c);
        rows_lo = _mm256_add_epi32(rows_lo, _mm256_madd_epi16(q[2 * c], xw));
        rows_hi = _mm256_add_epi32(rows_hi, _mm256_madd_epi16(q[2 * c + 1], xw));
    }
    wide_rows(rows_lo, rows_hi)
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
        // [`wide_isums`]' sums with each piece widened just before its
        // products, not all sixteen first by [`Wide::values`]: once
        // `dot16n` also called it, LLVM compiled `values` on its own and
        // `dot8` got the sixteen vectors back through memory for every
        // block (Gemma 3's Q8_0 output head: 6% slower decode with AVX2).
        let mut rows_lo = _mm256_setzero_si256();
        let mut rows_hi = _mm256_setzero_si256();
        for c in 0..8 {
            let xw = wide_x(&a.qs, c);
            let [lo, hi] = wide_piece(w, c);
            rows_lo = _mm256_add_epi32(rows_lo, _mm256_madd_epi16(lo, xw));
            rows_hi = _mm256_add_epi32(rows_hi, _mm256_madd_epi16(hi, xw));
        }
        wide_rows(rows_lo, rows_hi)
    }
    fn a_scales(a: &BlockQ8_0) -> [u16; 2] {
        a.scales()
    }
}

dot8n_with!(wide_dot8n, Wide, wide_isums, "avx2,fma,f16c");

/// Adds to `acc[g]` the term of group `g` (widened values `q[g]`, eight
/// `d_w` in `d_w[g]`) with one activation block (values `x`, `d_x` in
/// every lane): [`wide_isums`]' exact integers (`madd` of the widened
/// pieces and activations, the pairs added by `hadd`) and `term_from`'s
/// f32 operations, `(d_w * d_x) * isum`, then added to the row's sum.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn wide_terms<const G: usize>(
    q: &[[__m256i; 16]; G],
    d_w: &[__m256; G],
    x: &[i8; 32],
    d_x: __m256,
    acc: &mut [__m256; G],
) {
    // The activations' four-byte pieces widened and repeated, once for
    // every group (a loop, not `from_fn`: a closure does not take the
    // target features, and an intrinsic it calls is not inlined).
    let mut xw = [_mm256_setzero_si256(); 8];
    for (c, xw) in xw.iter_mut().enumerate() {
        *xw = wide_x(x, c);
    }
    for g in 0..G {
        let (mut rows_lo, mut rows_hi) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for (c, xw) in xw.iter().enumerate() {
            rows_lo = _mm256_add_epi32(rows_lo, _mm256_madd_epi16(q[g][2 * c], *xw));
            rows_hi = _mm256_add_epi32(rows_hi, _mm256_madd_epi16(q[g][2 * c + 1], *xw));
        }
        let isum = wide_rows(rows_lo, rows_hi);
        let term = _mm256_mul_ps(_mm256_mul_ps(d_w[g], d_x), _mm256_cvtepi32_ps(isum));
        acc[g] = _mm256_add_ps(acc[g], term);
    }
}

/// `out[t]` = the `dot8` results of the `G` groups of `groups` (each
/// `groups.len() / G` bytes, cut to whole blocks) with activation row `t`,
/// group `g` in `out[t][8g..8g + 8]`, bit for bit: each block of the groups
/// is widened once per pass of up to [`TOKENS`] rows ([`Wide::values`]),
/// and each activation block's widened pieces and scale serve every group
/// ([`wide_terms`]). A pass of [`TOKENS`] rows that all have the groups'
/// blocks reads the values and `d_x` (as f32, exactly the f16's value)
/// from its panel in `facts` (`crate::quant::act_panels` of `acts`) where
/// there is one.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn wide_many<const G: usize, O: AsMut<[f32]>>(
    groups: &[u8],
    acts: &[u8],
    act_row: usize,
    facts: &[ActBlockFacts],
    out: &mut [O],
) {
    let step = ROWS * BLOCK;
    let per_group = groups.len() / G / step * step;
    for (c, chunk) in out.chunks_mut(TOKENS).enumerate() {
        let (rows, n, panel) =
            panel_pass::<BlockQ8_0>(acts, act_row, c, chunk.len(), per_group / step, facts);
        let mut acc = [[_mm256_setzero_ps(); G]; TOKENS];
        let mut q = [[_mm256_setzero_si256(); 16]; G];
        let mut d_w = [_mm256_setzero_ps(); G];
        for b in 0..n {
            for g in 0..G {
                let w = &groups[g * per_group + b * step..][..step];
                q[g] = <Q8_0 as Wide>::values(w);
                d_w[g] = _mm256_cvtph_ps(load_u8x16(w));
            }
            if let Some(panel) = panel {
                for (acc, f) in acc.iter_mut().zip(&panel[b * TOKENS..(b + 1) * TOKENS]) {
                    wide_terms::<G>(&q, &d_w, &f.qs, _mm256_set1_ps(f.d), acc);
                }
                continue;
            }
            for (acc, r) in acc.iter_mut().zip(&rows[..chunk.len()]) {
                // Rows shorter than the groups stop where `dot8` would.
                let Some(a) = r.get(b) else { continue };
                let d_x = f16_splat(a.scales()[0]);
                wide_terms::<G>(&q, &d_w, &a.qs, d_x, acc);
            }
        }
        store_groups(chunk, &acc, 0);
    }
}

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

/// Q8_0 x Q8_0, two groups, many activation rows.
pub(super) fn q8_0_q8_0_x16n(
    groups: &[u8],
    acts: &[u8],
    act_row: usize,
    facts: &[ActBlockFacts],
    out: &mut [[f32; 2 * ROWS]],
) {
    // SAFETY: as in `q8_0_q8_0_x8`.
    unsafe { wide_many::<2, _>(groups, acts, act_row, facts, out) }
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
