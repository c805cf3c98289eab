//! The NEON micro-kernel of `crate::gemm` (the encoders' f32 products):
//! up to `MR` = 6 activation rows by one panel of `NR` = 16 output
//! features, the 6 x 16 sums in 24 of the 32 vector registers while `k` is
//! walked in ascending order, one `fmla` (a fused multiply-add, as
//! `f32::mul_add`) per row, four features and input. Each lane's value is
//! the scalar reference's chain of fused multiply-adds, and the bias and
//! activation are the reference's code on the stored sums
//! (`crate::gemm::finish_row`), so the bits match it exactly.
//!
//! Also the f16 -> f32 row conversion (`fcvtl`, exact) that the f16 GEMM
//! converts its panels with.

use std::arch::aarch64::*;
use std::ops::Range;

use crate::gemm::{finish_row, panel_ptr, Acts, OutPtr, PackedWeights, MR, NR};

/// As `crate::gemm::gemm_panels`.
///
/// # Safety
/// The output contract of `crate::gemm::gemm_panels`.
pub(super) unsafe fn gemm_panels(a: Acts, w: &PackedWeights, panels: Range<usize>, out: OutPtr) {
    a.check(w.k());
    for p in panels {
        let cols = (w.n() - p * NR).min(NR);
        let mut i = 0;
        while i < a.m {
            let rows = (a.m - i).min(MR);
            // SAFETY: rows i..i + rows < m; the output contract is the
            // caller's.
            unsafe {
                match rows {
                    6 => tile::<6>(&a, i, w, (p, cols), &out),
                    5 => tile::<5>(&a, i, w, (p, cols), &out),
                    4 => tile::<4>(&a, i, w, (p, cols), &out),
                    3 => tile::<3>(&a, i, w, (p, cols), &out),
                    2 => tile::<2>(&a, i, w, (p, cols), &out),
                    _ => tile::<1>(&a, i, w, (p, cols), &out),
                }
            }
            i += rows;
        }
    }
}

/// Rows `i0..i0 + R` against panel `p` (`cols` real features).
///
/// # Safety
/// As [`gemm_panels`], with `i0 + R <= a.m`.
#[inline(always)]
unsafe fn tile<const R: usize>(
    a: &Acts,
    i0: usize,
    w: &PackedWeights,
    (p, cols): (usize, usize),
    out: &OutPtr,
) {
    let k = w.k();
    let lines = panel_ptr(w, p);
    // SAFETY: NEON is part of every aarch64 target; panel `p` holds `k`
    // lines of NR f32 (`lines + kk * NR + 12..+16` is in it for kk < k);
    // `a.check` made every row `i0 + r < m` hold `k` values at `lda` apart.
    unsafe {
        let mut acc = [[vdupq_n_f32(0.0); 4]; R];
        let rows: [&[f32]; R] = std::array::from_fn(|r| &a.a[(i0 + r) * a.lda..][..k]);
        for kk in 0..k {
            let l = lines.add(kk * NR);
            let wv = [
                vld1q_f32(l),
                vld1q_f32(l.add(4)),
                vld1q_f32(l.add(8)),
                vld1q_f32(l.add(12)),
            ];
            for (acc, row) in acc.iter_mut().zip(&rows) {
                let x = vdupq_n_f32(*row.get_unchecked(kk));
                for (c, &wv) in acc.iter_mut().zip(&wv) {
                    // c + wv * x, rounded once: x.mul_add(wv, c).
                    *c = vfmaq_f32(*c, wv, x);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            let mut v = [0f32; NR];
            for (j, &c) in acc.iter().enumerate() {
                vst1q_f32(v[4 * j..].as_mut_ptr(), c);
            }
            finish_row(&mut v, cols, (i0 + r, p), out);
        }
    }
}

/// As `crate::quant::float::f16_to_f32`: `dst.len()` values from `src`
/// (long enough, as the table's contract says), eight per `fcvtl` pair.
pub(super) fn f16_to_f32(src: &[u8], dst: &mut [f32]) {
    let whole = dst.len() / 8 * 8;
    let (head, tail) = dst.split_at_mut(whole);
    for (s, d) in src.chunks_exact(16).zip(head.chunks_exact_mut(8)) {
        let [lo, hi] = super::f16x8(s.try_into().expect("16 bytes"));
        // SAFETY: `d` is 8 writable f32; `st1` has no alignment requirement.
        unsafe {
            vst1q_f32(d.as_mut_ptr(), lo);
            vst1q_f32(d.as_mut_ptr().add(4), hi);
        }
    }
    crate::quant::float::f16_to_f32(&src[2 * whole.min(src.len() / 2)..], tail);
}
