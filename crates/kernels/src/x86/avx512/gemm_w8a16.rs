//! `crate::gemm_w8a16`'s product with AVX-512 VNNI: tiles of up to [`MR`]
//! rows by one panel of 16 features. Each step broadcasts two 16-bit
//! activations of a row and adds their products with the two inputs' weights
//! of the 16 features into each feature's 32-bit sum with one `vpdpwssd`
//! (exact: a group's sum stays below `2^31`); at the end of each group the
//! sums are converted, multiplied by the group's scales and added in f32,
//! the scalar reference's steps in its order.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::gemm::{Acts, OutPtr, NR};
use crate::gemm_w8a16::{for_each_tile, PackedW8, GROUP, QA, ROWS16, TINY};

/// Most rows per tile (12 sums, 12 f32 results, a weight line and a
/// broadcast: 26 of the 32 registers).
const MR: usize = 12;

/// As `crate::gemm_w8a16::gemm_w8a16_panels` (shapes checked by it).
///
/// # Safety
/// AVX512F/BW/VL and VNNI; the output contract of `gemm_w8a16_panels`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
pub(crate) unsafe fn gemm_w8a16_panels(a: Acts, w: &PackedW8, panels: Range<usize>, out: OutPtr) {
    ROWS16.with(|rows| {
        let mut rows = rows.borrow_mut();
        // SAFETY: AVX-512 by this function's contract.
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
            // the caller's; AVX-512 VNNI by this function's contract.
            unsafe { tile_rows_of::<1>(tile_rows.len(), &t) };
        });
    });
}

/// The lanes of the first `left` (up to 16) values.
pub(super) fn tail_mask(left: usize) -> __mmask16 {
    if left >= 16 {
        0xffff
    } else {
        ((1u32 << left) - 1) as __mmask16
    }
}

/// Values `i..` (the lanes of `mask`) of `x`, times `mul`'s if given,
/// zero in the other lanes.
///
/// # Safety
/// AVX512F; the lanes of `mask` in bounds of `x` and `mul`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn scaled(x: &[f32], mul: Option<&[f32]>, i: usize, mask: __mmask16) -> __m512 {
    // SAFETY: the masked lanes are in bounds by the contract.
    unsafe {
        let v = _mm512_maskz_loadu_ps(mask, x.as_ptr().add(i));
        match mul {
            Some(m) => _mm512_mul_ps(v, _mm512_maskz_loadu_ps(mask, m.as_ptr().add(i))),
            None => v,
        }
    }
}

/// `crate::gemm_w8a16::quantize_row_i16_scaled`'s bits, 16 values a
/// step: the largest magnitude as the largest of the values' bits without
/// the sign (as the reference), then each value times the factor rounded
/// to nearest even (`vrndscaleps`), clamped and stored as i16 (exact: an
/// integer within ±32767).
///
/// # Safety
/// AVX512F/BW; `mul`, if given, at least as long as `x`.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn quantize_row(x: &[f32], mul: Option<&[f32]>, q: &mut [i16]) -> f32 {
    let n = x.len();
    assert!(q.len() >= n && mul.is_none_or(|m| m.len() >= n));
    let mut max = _mm512_setzero_si512();
    let abs = _mm512_set1_epi32(0x7fff_ffff);
    for i in (0..n).step_by(16) {
        let mask = tail_mask(n - i);
        // SAFETY: the lanes of `mask` are in bounds (checked above).
        let v = unsafe { scaled(x, mul, i, mask) };
        max = _mm512_max_epu32(max, _mm512_and_si512(_mm512_castps_si512(v), abs));
    }
    let amax_bits = _mm512_reduce_max_epu32(max);
    if amax_bits >= 0x7f80_0000 {
        q[..n].fill(0);
        return f32::NAN;
    }
    let amax = f32::from_bits(amax_bits);
    if amax < TINY {
        q[..n].fill(0);
        return 0.0;
    }
    let inv = _mm512_set1_ps(QA / amax);
    let (lo, hi) = (_mm512_set1_ps(-QA), _mm512_set1_ps(QA));
    for i in (0..n).step_by(16) {
        let mask = tail_mask(n - i);
        // SAFETY: the lanes of `mask` are in bounds of `x`, `mul` and `q`
        // (checked above).
        unsafe {
            let y = _mm512_mul_ps(scaled(x, mul, i, mask), inv);
            let r = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(y);
            let r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
            let v = _mm512_cvtps_epi32(r);
            _mm512_mask_cvtsepi32_storeu_epi16(q.as_mut_ptr().add(i).cast(), mask, v);
        }
    }
    amax / QA
}

/// `acc + vpdpwssd(b, broadcast of the two i16 at x)`, as one instruction
/// with the broadcast from memory. Inline assembly because LLVM, tuning for
/// a generic CPU, splits `_mm512_dpwssd_epi32` on an accumulator chain
/// into `vpmaddwd` + `vpaddd` (twice the instructions of the inner loop);
/// the sums are exact either way.
///
/// # Safety
/// AVX512F and VNNI; `x` readable for 4 bytes.
#[target_feature(enable = "avx512f,avx512vnni")]
#[inline]
unsafe fn dpwssd_broadcast(acc: __m512i, b: __m512i, x: *const i16) -> __m512i {
    let mut acc = acc;
    // SAFETY: reads 4 bytes at `x` (the contract); registers only
    // otherwise.
    unsafe {
        std::arch::asm!(
            "vpdpwssd {acc}, {b}, dword ptr [{x}]{{1to16}}",
            acc = inout(zmm_reg) acc,
            b = in(zmm_reg) b,
            x = in(reg) x,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    acc
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

/// `rows` (1..=MR) rows by one panel (`P` is 1).
///
/// # Safety
/// As [`tile`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
unsafe fn tile_rows_of<const P: usize>(rows: usize, t: &Tile) {
    // SAFETY: the caller's contract, passed on.
    unsafe { tile_of_rows!(tile, P, rows, t) }
}

/// `R` rows by one panel, over every group of inputs.
///
/// # Safety
/// AVX512F/BW/VL and VNNI; `t.a` readable for `R` rows of `t.groups *
/// GROUP` values, `t.b` for `t.groups * GROUP / 2` lines of 32 values,
/// `t.sw` for `t.groups` lines of 16 scales, `t.c` writable for `R` rows
/// of `t.cols` values.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
#[inline]
unsafe fn tile<const R: usize, const P: usize>(t: &Tile) {
    let mut acc = [[_mm512_setzero_ps(); P]; R];
    // SAFETY: rows 0..R are in the activations by the contract.
    let rows: [*const i16; R] = std::array::from_fn(|r| unsafe { t.a.add(r * t.ld) });
    for g in 0..t.groups {
        let mut sums = [_mm512_setzero_si512(); R];
        for s in g * GROUP / 2..(g + 1) * GROUP / 2 {
            // SAFETY: line s of the panel and values 2s, 2s + 1 of each
            // row are in bounds by the contract.
            unsafe {
                let b = _mm512_loadu_si512(t.b.add(s * 2 * NR).cast());
                for (sum, row) in sums.iter_mut().zip(&rows) {
                    *sum = dpwssd_broadcast(*sum, b, row.add(2 * s));
                }
            }
        }
        // SAFETY: group g's 16 scales are in bounds by the contract.
        let sw = unsafe { _mm512_loadu_ps(t.sw.add(g * NR)) };
        for (acc_r, sum) in acc.iter_mut().zip(&sums) {
            let v = _mm512_mul_ps(_mm512_cvtepi32_ps(*sum), sw);
            acc_r[0] = _mm512_add_ps(acc_r[0], v);
        }
    }
    let values: [[__m512; P]; R] = std::array::from_fn(|r| {
        let s = _mm512_set1_ps(t.sa[r]);
        std::array::from_fn(|q| _mm512_mul_ps(acc[r][q], s))
    });
    let masks: [__mmask16; P] = std::array::from_fn(|q| tail_mask(t.cols.saturating_sub(q * NR)));
    // SAFETY: the output places as this function's contract says.
    unsafe { super::gemm::finish_tile(values, masks, t.c, t.ldc, t.cols, t.bias, t.act) };
}

#[cfg(test)]
mod tests {
    /// The AVX-512 quantizer gives the reference's bits on every length and
    /// on extreme values (`crate::gemm_w8a16::quantizer_cases`).
    #[test]
    fn quantizer_gives_the_references_bits() {
        if !(is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw")) {
            eprintln!("SKIPPED: the CPU has no AVX-512");
            return;
        }
        // SAFETY: the CPU has the features (checked above).
        crate::gemm_w8a16::check_quantizer(|x, mul, q| unsafe { super::quantize_row(x, mul, q) });
    }
}
