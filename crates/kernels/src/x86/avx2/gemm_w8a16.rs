//! `crate::gemm_w8a16`'s product with AVX2: tiles of up to [`MR`] rows by
//! one panel of 16 features. Each step broadcasts two 16-bit activations
//! of a row and multiplies them by the two inputs' weights of the 16
//! features with `vpmaddwd` (pairs of products added into 32-bit lanes,
//! exact: a group's sum stays below `2^31`); at the end of each group of
//! `GROUP` inputs the sums are converted, multiplied by the group's scales and
//! added in f32, the scalar reference's steps in its order.
//!
//! How close to its limit (issue 34; `gemm_bench` example, thread CPU
//! time, AMD EPYC Zen 4 forced to this set): the tile runs 84-92 GMAC/s on
//! MiniLM's shapes, against 118 GMAC/s for back-to-back `vpmaddwd` +
//! `vpaddd` alone (the example's probe; 67 GMAC/s for f32 FMAs, where the
//! f32 GEMM is at about 95%). The rest is mostly the group ends, which
//! the definition fixes: per 8 `madd`s into a sum vector, a convert, a
//! multiply and an add (about 19% more vector operations), and the
//! spilled f32 sums. Unrolling the line loop, tiles of 3 or 6 rows
//! changed nothing measurable (6 rows: 10% slower). int8 activations
//! with `maddubs` would not help the arithmetic either: `maddubs` leaves
//! i16 pair sums that need a `madd` by ones to become i32, two multiply
//! instructions per 32 products, as many as `vpmaddwd` takes.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::gemm::{Acts, OutPtr, NR};
use crate::gemm_w8a16::{for_each_tile, PackedW8, GROUP, QA, ROWS16, TINY};

/// Most rows per tile.
const MR: usize = 4;

/// As `crate::gemm_w8a16::gemm_w8a16_panels` (shapes checked by it).
///
/// # Safety
/// AVX2 and FMA; the output contract of `gemm_w8a16_panels`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn gemm_w8a16_panels(a: Acts, w: &PackedW8, panels: Range<usize>, out: OutPtr) {
    ROWS16.with(|rows| {
        let mut rows = rows.borrow_mut();
        // SAFETY: AVX2 by this function's contract.
        rows.fill_with(a, w, |x, mul, q| unsafe { quantize_row(x, mul, q) });
        let groups = w.groups();
        for_each_tile(a.m, w, panels, MR, |tile_rows, p| {
            let i = tile_rows.start;
            let t = Tile {
                a: rows.values[i * rows.ld..].as_ptr(),
                ld: rows.ld,
                sa: &rows.scales[i..tile_rows.end],
                b: w.panel(p).as_ptr(),
                groups,
                sw: w.panel_scales(p).as_ptr(),
                // SAFETY: row i, feature p * NR: inside the output by the
                // caller's contract.
                c: unsafe { out.ptr.add(i * out.ld + p * NR) },
                ldc: out.ld,
                cols: (w.n() - p * NR).min(NR),
                bias: out.bias.map(|b| &b[p * NR..]),
                act: out.act,
            };
            // SAFETY: the tile's rows have `groups * GROUP` values each in
            // `rows`, the panel as many lines' worth; the output places are
            // the caller's; AVX2 by this function's contract.
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

/// `x[i]` times `mul[i]`, if given.
#[inline(always)]
fn scaled1(x: &[f32], mul: Option<&[f32]>, i: usize) -> f32 {
    match mul {
        Some(m) => x[i] * m[i],
        None => x[i],
    }
}

/// Values `i..i + 8` of `x`, times `mul`'s if given.
///
/// # Safety
/// AVX; `i + 8` within `x` and `mul`.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn scaled8(x: &[f32], mul: Option<&[f32]>, i: usize) -> __m256 {
    // SAFETY: in bounds by the contract.
    unsafe {
        let v = _mm256_loadu_ps(x.as_ptr().add(i));
        match mul {
            Some(m) => _mm256_mul_ps(v, _mm256_loadu_ps(m.as_ptr().add(i))),
            None => v,
        }
    }
}

/// `crate::gemm_w8a16::quantize_row_i16_scaled`'s bits, 8 values a step
/// and the last `len % 8` one by one: the largest magnitude as the largest
/// of the values' bits without the sign (as the reference), then each
/// value times the factor rounded to nearest even (`vroundps`), clamped
/// and stored as i16 (exact: an integer within ±32767).
///
/// # Safety
/// AVX2; `mul`, if given, at least as long as `x`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn quantize_row(x: &[f32], mul: Option<&[f32]>, q: &mut [i16]) -> f32 {
    let n = x.len();
    assert!(q.len() >= n && mul.is_none_or(|m| m.len() >= n));
    let full = n / 8 * 8;
    let mut max = _mm256_setzero_si256();
    let abs = _mm256_set1_epi32(0x7fff_ffff);
    for i in (0..full).step_by(8) {
        // SAFETY: i + 8 <= full <= n, checked above.
        let v = unsafe { scaled8(x, mul, i) };
        max = _mm256_max_epu32(max, _mm256_and_si256(_mm256_castps_si256(v), abs));
    }
    let mut lanes = [0u32; 8];
    // SAFETY: 8 lanes into 8 places.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), max) };
    let amax_bits = (full..n)
        .map(|i| scaled1(x, mul, i).to_bits() & 0x7fff_ffff)
        .chain(lanes)
        .max()
        .unwrap_or(0);
    if amax_bits >= 0x7f80_0000 {
        q[..n].fill(0);
        return f32::NAN;
    }
    let amax = f32::from_bits(amax_bits);
    if amax < TINY {
        q[..n].fill(0);
        return 0.0;
    }
    let inv = QA / amax;
    let inv8 = _mm256_set1_ps(inv);
    let (lo, hi) = (_mm256_set1_ps(-QA), _mm256_set1_ps(QA));
    for i in (0..full).step_by(8) {
        // SAFETY: i + 8 <= full <= n, within `x`, `mul` and `q` (checked
        // above).
        unsafe {
            let y = _mm256_mul_ps(scaled8(x, mul, i), inv8);
            let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(y);
            let r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
            let v = _mm256_cvtps_epi32(r);
            let packed =
                _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
            _mm_storeu_si128(q.as_mut_ptr().add(i).cast(), packed);
        }
    }
    for (i, o) in q[..n].iter_mut().enumerate().skip(full) {
        *o = (scaled1(x, mul, i) * inv).round_ties_even().clamp(-QA, QA) as i16;
    }
    amax / QA
}

/// One micro-kernel call's operands.
struct Tile<'a> {
    /// The tile's first activation row; row `r` at `a + r * ld`.
    a: *const i16,
    ld: usize,
    /// The rows' scales.
    sa: &'a [f32],
    /// The panel's first line.
    b: *const i16,
    groups: usize,
    /// The panel's scales, 16 per group.
    sw: *const f32,
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
/// AVX2; `t.a` readable for `R` rows of `t.groups * GROUP` values, `t.b`
/// for `t.groups * GROUP / 2` lines of 32 values, `t.sw` for `t.groups`
/// lines of 16 scales, `t.c` writable for `R` rows of `t.cols` values.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn tile<const R: usize>(t: &Tile) {
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    // SAFETY: rows 0..R are in the activations by the contract.
    let rows: [*const i16; R] = std::array::from_fn(|r| unsafe { t.a.add(r * t.ld) });
    for g in 0..t.groups {
        let mut sums = [[_mm256_setzero_si256(); 2]; R];
        for s in g * GROUP / 2..(g + 1) * GROUP / 2 {
            // SAFETY: line s of the panel and values 2s, 2s + 1 of each
            // row are in bounds by the contract.
            unsafe {
                let line = t.b.add(s * 2 * NR);
                let w = [
                    _mm256_loadu_si256(line.cast()),
                    _mm256_loadu_si256(line.add(16).cast()),
                ];
                for (sum_r, row) in sums.iter_mut().zip(&rows) {
                    let x = _mm256_set1_epi32(row.add(2 * s).cast::<i32>().read_unaligned());
                    for h in 0..2 {
                        sum_r[h] = _mm256_add_epi32(sum_r[h], _mm256_madd_epi16(x, w[h]));
                    }
                }
            }
        }
        // SAFETY: group g's 16 scales are in bounds by the contract.
        let sw = unsafe {
            [
                _mm256_loadu_ps(t.sw.add(g * NR)),
                _mm256_loadu_ps(t.sw.add(g * NR + 8)),
            ]
        };
        for (acc_r, sum_r) in acc.iter_mut().zip(&sums) {
            for h in 0..2 {
                let v = _mm256_mul_ps(_mm256_cvtepi32_ps(sum_r[h]), sw[h]);
                acc_r[h] = _mm256_add_ps(acc_r[h], v);
            }
        }
    }
    let values: [[__m256; 2]; R] = std::array::from_fn(|r| {
        let s = _mm256_set1_ps(t.sa[r]);
        [_mm256_mul_ps(acc[r][0], s), _mm256_mul_ps(acc[r][1], s)]
    });
    // SAFETY: the output places as this function's contract says.
    unsafe { super::gemm::finish_tile(values, t.c, t.ldc, t.cols, t.bias, t.act) };
}

#[cfg(test)]
mod tests {
    /// The AVX2 quantizer gives the reference's bits on every length and
    /// on extreme values (`crate::gemm_w8a16::quantizer_cases`).
    #[test]
    fn quantizer_gives_the_references_bits() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            eprintln!("SKIPPED: the CPU has no AVX2");
            return;
        }
        // SAFETY: the CPU has the features (checked above).
        crate::gemm_w8a16::check_quantizer(|x, mul, q| unsafe { super::quantize_row(x, mul, q) });
    }
}
