//! `crate::gemm_i8`'s product with AVX2: tiles of up to [`MR`] rows by
//! one panel of 16 features (two registers of eight 32-bit sums per row).
//! Each step broadcasts four int8 activations of a row and multiplies
//! them by four inputs of eight features with `vpmaddubsw` (`|w|` times
//! the activation with `w`'s sign, `vpsignb`: at most `2 · 127²` per pair
//! of products, never saturated) and `vpmaddwd` (pairs added into 32-bit
//! lanes): the exact integer sums of the scalar reference.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::gemm::{Acts, OutPtr, NR};
use crate::gemm_i8::{for_each_tile, quantize_value, row_factors, PackedI8, GROUP, ROWS};

/// Most rows per tile: 8 sums, 4 weight registers, a broadcast, the
/// constant and temporaries in the 16 registers.
const MR: usize = 4;

/// As `crate::gemm_i8::gemm_i8_panels` (shapes checked by it).
///
/// # Safety
/// AVX2 and FMA; the output contract of `gemm_i8_panels`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn gemm_i8_panels(a: Acts, w: &PackedI8, panels: Range<usize>, out: OutPtr) {
    ROWS.with(|rows| {
        let mut rows = rows.borrow_mut();
        // SAFETY: AVX2, by this function's contract.
        rows.fill(a, w, false, |x, q| unsafe { quantize_row(x, q) });
        let groups = w.groups();
        for_each_tile(a.m, panels, groups, MR, 1, |tile_rows, tile_panels| {
            let (i, p) = (tile_rows.start, tile_panels.start);
            let t = Tile {
                a: rows.bytes[i * rows.ld..].as_ptr(),
                ld: rows.ld,
                sa: &rows.scales[i..tile_rows.end],
                b: w.panel(p).as_ptr(),
                groups,
                sw: w.panel_scales(p),
                // SAFETY: row i, feature p * NR: inside the output by the
                // caller's contract.
                c: unsafe { out.ptr.add(i * out.ld + p * NR) },
                ldc: out.ld,
                cols: (w.n() - p * NR).min(NR),
                bias: out.bias.map(|b| &b[p * NR..]),
                act: out.act,
            };
            // SAFETY: the tile's rows have `groups` words each in `rows`,
            // the panel `groups` lines; the output places are the
            // caller's; AVX2 by this function's contract.
            unsafe {
                match tile_rows.len() {
                    4 => tile::<4>(&t),
                    3 => tile::<3>(&t),
                    2 => tile::<2>(&t),
                    _ => tile::<1>(&t),
                }
            }
        });
    });
}

/// `crate::gemm_i8::quantize_row` over eight lanes: the largest magnitude
/// as the maximum of the bit patterns, then `x · inv` rounded by
/// `vcvtps2dq` (to nearest even), clamped, packed to bytes.
///
/// # Safety
/// AVX2; `q` at least as long as `x`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn quantize_row(x: &[f32], q: &mut [u8]) -> f32 {
    let mut chunks = x.chunks_exact(8);
    let mut max = _mm256_setzero_si256();
    let magnitude = _mm256_set1_epi32(0x7fff_ffff);
    for c in &mut chunks {
        // SAFETY: `c` holds 8 values.
        let v = unsafe { _mm256_loadu_si256(c.as_ptr().cast()) };
        max = _mm256_max_epi32(max, _mm256_and_si256(v, magnitude));
    }
    let mut lanes = [0u32; 8];
    // SAFETY: `lanes` holds 8 words.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), max) };
    let amax = chunks
        .remainder()
        .iter()
        .map(|v| v.to_bits() & 0x7fff_ffff)
        .chain(lanes)
        .max()
        .unwrap_or(0);
    let (scale, inv) = match row_factors(amax) {
        Ok(f) => f,
        Err(scale) => {
            q[..x.len()].fill(0);
            return scale;
        }
    };
    let vinv = _mm256_set1_ps(inv);
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let mut blocks = x.chunks_exact(32);
    let mut o = 0;
    for c in &mut blocks {
        // SAFETY: `c` holds 32 values, `q` 32 bytes from `o`.
        unsafe {
            let v: [__m256i; 4] =
                std::array::from_fn(|j| rounded(_mm256_loadu_ps(c.as_ptr().add(8 * j)), vinv));
            // Words (4 bytes) a0 b0 c0 d0 | a1 b1 c1 d1 after the packs;
            // `order` puts them back in sequence.
            let ab = _mm256_packs_epi32(v[0], v[1]);
            let cd = _mm256_packs_epi32(v[2], v[3]);
            let bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), order);
            _mm256_storeu_si256(q.as_mut_ptr().add(o).cast(), bytes);
        }
        o += 32;
    }
    for (d, &v) in q[o..].iter_mut().zip(blocks.remainder()) {
        *d = quantize_value(v, inv) as u8;
    }
    scale
}

/// `v · inv` rounded to the nearest integer (ties to even, the default
/// rounding mode) and clamped to `-127..=127`.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn rounded(v: __m256, inv: __m256) -> __m256i {
    let r = _mm256_cvtps_epi32(_mm256_mul_ps(v, inv));
    _mm256_min_epi32(
        _mm256_max_epi32(r, _mm256_set1_epi32(-127)),
        _mm256_set1_epi32(127),
    )
}

/// One micro-kernel call's operands.
struct Tile<'a> {
    /// The tile's first activation row; row `r` at `a + r * ld`.
    a: *const u8,
    ld: usize,
    /// The rows' scales.
    sa: &'a [f32],
    /// The panel's first line.
    b: *const i8,
    groups: usize,
    /// The panel's 16 weight scales.
    sw: &'a [f32],
    /// First result; row `r` at `c + r * ldc`, `cols` values each.
    c: *mut f32,
    ldc: usize,
    cols: usize,
    bias: Option<&'a [f32]>,
    act: Option<crate::math::Activation>,
}

/// `R` rows by one panel, over every group of inputs.
///
/// # Safety
/// AVX2; `t.a` readable for `R` rows of `t.groups` words, `t.b` for
/// `t.groups` lines of 64 bytes, `t.c` writable for `R` rows of `t.cols`
/// values.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn tile<const R: usize>(t: &Tile) {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_si256(); 2]; R];
    // SAFETY: rows 0..R are in the activations by the contract.
    let rows: [*const u8; R] = std::array::from_fn(|r| unsafe { t.a.add(r * t.ld) });
    for g in 0..t.groups {
        // SAFETY: line g of the panel and word g of each row are in
        // bounds by the contract.
        unsafe {
            let line = t.b.add(g * NR * GROUP);
            let w = [
                _mm256_loadu_si256(line.cast()),
                _mm256_loadu_si256(line.add(32).cast()),
            ];
            let u = w.map(|w| _mm256_abs_epi8(w));
            for (acc_r, row) in acc.iter_mut().zip(&rows) {
                let x = _mm256_set1_epi32(row.add(g * GROUP).cast::<i32>().read_unaligned());
                for h in 0..2 {
                    let pairs = _mm256_maddubs_epi16(u[h], _mm256_sign_epi8(x, w[h]));
                    acc_r[h] = _mm256_add_epi32(acc_r[h], _mm256_madd_epi16(pairs, ones));
                }
            }
        }
    }
    // SAFETY: `sw` holds 16 scales.
    let sw = unsafe {
        [
            _mm256_loadu_ps(t.sw.as_ptr()),
            _mm256_loadu_ps(t.sw.as_ptr().add(8)),
        ]
    };
    let values: [[__m256; 2]; R] = std::array::from_fn(|r| {
        let s = _mm256_set1_ps(t.sa[r]);
        std::array::from_fn(|h| {
            _mm256_mul_ps(_mm256_cvtepi32_ps(acc[r][h]), _mm256_mul_ps(s, sw[h]))
        })
    });
    // SAFETY: the output places as this function's contract says.
    unsafe { super::gemm::finish_tile(values, t.c, t.ldc, t.cols, t.bias, t.act) };
}
