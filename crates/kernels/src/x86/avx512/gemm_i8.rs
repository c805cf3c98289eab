//! `crate::gemm_i8`'s product with AVX-512 VNNI: tiles of up to [`MR`]
//! rows by two panels of 16 features, 24 sums in registers; each step
//! broadcasts four activations of a row (stored as `q + 128`, unsigned)
//! and adds their products with four inputs of 16 features into each
//! feature's 32-bit sum with one `vpdpbusd` per row and panel. `128 · Σ
//! qw` (each feature's weight sum, kept with the weights) is subtracted at
//! the end: the exact integer sums of the scalar reference.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::gemm::{Acts, OutPtr, NR};
use crate::gemm_i8::{for_each_tile, quantize_value, row_factors, PackedI8, GROUP, ROWS};

/// Most rows per tile (24 sums, two weight lines and a broadcast: 27 of
/// the 32 registers).
const MR: usize = 12;

/// As `crate::gemm_i8::gemm_i8_panels` (shapes checked by it).
///
/// # Safety
/// AVX512F/BW/VL and VNNI; the output contract of `gemm_i8_panels`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
pub(crate) unsafe fn gemm_i8_panels(a: Acts, w: &PackedI8, panels: Range<usize>, out: OutPtr) {
    ROWS.with(|rows| {
        let mut rows = rows.borrow_mut();
        // SAFETY: AVX-512, by this function's contract.
        rows.fill(a, w, true, |x, q| unsafe { quantize_row_offset(x, q) });
        let groups = w.groups();
        for_each_tile(a.m, panels, groups, MR, 2, |tile_rows, tile_panels| {
            let (i, p) = (tile_rows.start, tile_panels.start);
            let two = tile_panels.len() == 2;
            let second = if two { p + 1 } else { p };
            let t = Tile {
                a: rows.bytes[i * rows.ld..].as_ptr(),
                ld: rows.ld,
                sa: &rows.scales[i..tile_rows.end],
                b: [w.panel(p).as_ptr(), w.panel(second).as_ptr()],
                groups,
                sw: [w.panel_scales(p), w.panel_scales(second)],
                sums: [w.panel_sums(p), w.panel_sums(second)],
                // SAFETY: row i, feature p * NR: inside the output by the
                // caller's contract.
                c: unsafe { out.ptr.add(i * out.ld + p * NR) },
                ldc: out.ld,
                cols: (w.n() - p * NR).min(if two { 2 * NR } else { NR }),
                bias: out.bias.map(|b| &b[p * NR..]),
                act: out.act,
            };
            // SAFETY: the tile's rows have `groups` words each in `rows`,
            // each panel `groups` lines; the output places are the
            // caller's; AVX-512 VNNI by this function's contract.
            unsafe {
                if two {
                    tile_rows_of::<2>(tile_rows.len(), &t);
                } else {
                    tile_rows_of::<1>(tile_rows.len(), &t);
                }
            }
        });
    });
}

/// `crate::gemm_i8::quantize_row` over 16 lanes, each byte stored as
/// `q + 128` (unsigned, for `vpdpbusd`): the largest magnitude as the
/// maximum of the bit patterns, then `x · inv` rounded by `vcvtps2dq` (to
/// nearest even), clamped.
///
/// # Safety
/// AVX512F/BW/VL; `q` at least as long as `x`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
unsafe fn quantize_row_offset(x: &[f32], q: &mut [u8]) -> f32 {
    let n = x.len();
    let magnitude = _mm512_set1_epi32(0x7fff_ffff);
    let mut max = _mm512_setzero_si512();
    for i in (0..n).step_by(16) {
        let mask = tail_mask(n - i);
        // SAFETY: the mask's lanes are inside `x` (masked-off lanes are
        // not read).
        let v = unsafe { _mm512_maskz_loadu_epi32(mask, x.as_ptr().add(i).cast()) };
        max = _mm512_max_epu32(max, _mm512_and_si512(v, magnitude));
    }
    let (scale, inv) = match row_factors(_mm512_reduce_max_epu32(max)) {
        Ok(f) => f,
        Err(scale) => {
            q[..n].fill(128);
            return scale;
        }
    };
    let vinv = _mm512_set1_ps(inv);
    let (lo, hi) = (_mm512_set1_epi32(-127), _mm512_set1_epi32(127));
    let offset = _mm_set1_epi8(-128);
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: 16 values of `x` and bytes of `q` from `i`.
        unsafe {
            let r = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x.as_ptr().add(i)), vinv));
            let r = _mm512_min_epi32(_mm512_max_epi32(r, lo), hi);
            let b = _mm_xor_si128(_mm512_cvtepi32_epi8(r), offset);
            _mm_storeu_si128(q.as_mut_ptr().add(i).cast(), b);
        }
        i += 16;
    }
    for (d, &v) in q[i..n].iter_mut().zip(&x[i..]) {
        *d = (quantize_value(v, inv) as u8) ^ 0x80;
    }
    scale
}

/// The lanes of the first `left` (up to 16) values.
pub(super) fn tail_mask(left: usize) -> __mmask16 {
    if left >= 16 {
        0xffff
    } else {
        ((1u32 << left) - 1) as __mmask16
    }
}

/// One micro-kernel call's operands.
struct Tile<'a> {
    /// The tile's first activation row; row `r` at `a + r * ld`.
    a: *const u8,
    ld: usize,
    /// The rows' scales.
    sa: &'a [f32],
    /// The panels' first lines (the second read only by two-panel tiles).
    b: [*const i8; 2],
    groups: usize,
    /// The panels' 16 weight scales and sums.
    sw: [&'a [f32]; 2],
    sums: [&'a [i32]; 2],
    /// First result; row `r` at `c + r * ldc`, `cols` values each.
    c: *mut f32,
    ldc: usize,
    cols: usize,
    bias: Option<&'a [f32]>,
    act: Option<crate::math::Activation>,
}

/// `rows` (1..=MR) rows by `P` panels.
///
/// # Safety
/// As [`tile`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
unsafe fn tile_rows_of<const P: usize>(rows: usize, t: &Tile) {
    // SAFETY: the caller's contract, passed on.
    unsafe { tile_of_rows!(tile, P, rows, t) }
}

/// `R` rows by `P` panels, over every group of inputs.
///
/// # Safety
/// AVX512F/BW/VL and VNNI; `t.a` readable for `R` rows of `t.groups`
/// words, `t.b[..P]` for `t.groups` lines of 64 bytes, `t.c` writable for
/// `R` rows of `t.cols` values.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
#[inline]
unsafe fn tile<const R: usize, const P: usize>(t: &Tile) {
    let masks: [__mmask16; P] = std::array::from_fn(|q| tail_mask(t.cols.saturating_sub(q * NR)));
    let mut acc = [[_mm512_setzero_si512(); P]; R];
    // SAFETY: rows 0..R are in the activations by the contract.
    let rows: [*const u8; R] = std::array::from_fn(|r| unsafe { t.a.add(r * t.ld) });
    for g in 0..t.groups {
        // SAFETY: line g of each panel and word g of each row are in
        // bounds by the contract.
        unsafe {
            let b: [__m512i; P] =
                std::array::from_fn(|q| _mm512_loadu_si512(t.b[q].add(g * NR * GROUP).cast()));
            for (acc_r, row) in acc.iter_mut().zip(&rows) {
                let x = _mm512_set1_epi32(row.add(g * GROUP).cast::<i32>().read_unaligned());
                for (s, &bq) in acc_r.iter_mut().zip(&b) {
                    *s = _mm512_dpbusd_epi32(*s, x, bq);
                }
            }
        }
    }
    // SAFETY: each panel's scales and sums are 16 values.
    let (sw, offset): ([__m512; P], [__m512i; P]) = unsafe {
        (
            std::array::from_fn(|q| _mm512_loadu_ps(t.sw[q].as_ptr())),
            std::array::from_fn(|q| {
                _mm512_slli_epi32::<7>(_mm512_loadu_si512(t.sums[q].as_ptr().cast()))
            }),
        )
    };
    let values: [[__m512; P]; R] = std::array::from_fn(|r| {
        let s = _mm512_set1_ps(t.sa[r]);
        std::array::from_fn(|q| {
            let sum = _mm512_sub_epi32(acc[r][q], offset[q]);
            _mm512_mul_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(s, sw[q]))
        })
    });
    // SAFETY: the output places as this function's contract says.
    unsafe { super::gemm::finish_tile(values, masks, t.c, t.ldc, t.cols, t.bias, t.act) };
}
