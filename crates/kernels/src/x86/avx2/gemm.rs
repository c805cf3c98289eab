//! The AVX2 + FMA micro-kernel of `crate::gemm`: up to `MR` activation rows
//! by one panel of `NR` = 16 output features, the `MR x 16` results held in
//! `2 * MR` registers while `k` is walked in ascending order. Each lane's
//! value is the same chain of fused multiply-adds as the scalar reference,
//! so the bits match it exactly.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::gemm::{panel_ptr, Acts, OutPtr, PackedWeights, MR, NR};
use crate::math::Activation;

/// Activation bytes a row group may take, so that it stays in the L2 cache
/// while every panel of the thread's range streams past it.
const ROW_GROUP_BYTES: usize = 96 * 1024;

/// As `crate::gemm::gemm_panels`.
///
/// # Safety
/// The CPU must support AVX2 and FMA; the output contract is that of
/// `crate::gemm::gemm_panels` (the activations were bounds-checked there).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn gemm_panels(a: Acts, w: &PackedWeights, panels: Range<usize>, out: OutPtr) {
    let k = w.k();
    let group = (ROW_GROUP_BYTES / (4 * k.max(1))).clamp(MR, 16 * MR) / MR * MR;
    let mut i0 = 0;
    while i0 < a.m {
        let i1 = (i0 + group).min(a.m);
        for p in panels.clone() {
            let cols = (w.n() - p * NR).min(NR);
            let b = panel_ptr(w, p);
            // Tiles of nearly equal height (e.g. 25 rows as 5 x 5, not
            // 4 x 6 + 1): a one-row tile runs at a third of the speed.
            let n_tiles = (i1 - i0).div_ceil(MR);
            let (base, extra) = ((i1 - i0) / n_tiles, (i1 - i0) % n_tiles);
            let mut i = i0;
            for tile_idx in 0..n_tiles {
                let rows = base + usize::from(tile_idx < extra);
                // SAFETY: rows i..i+rows < m have k values at i * lda
                // (checked by the caller); the panel has k lines of 16; the
                // output places are the caller's to write.
                unsafe {
                    let a_ptr = a.a.as_ptr().add(i * a.lda);
                    let c_ptr = out.ptr.add(i * out.ld + p * NR);
                    let t = Tile {
                        a: a_ptr,
                        lda: a.lda,
                        b,
                        k,
                        c: c_ptr,
                        ldc: out.ld,
                        cols,
                        bias: out.bias.map(|b| &b[p * NR..]),
                        act: out.act,
                    };
                    match rows {
                        6 => tile::<6>(t),
                        5 => tile::<5>(t),
                        4 => tile::<4>(t),
                        3 => tile::<3>(t),
                        2 => tile::<2>(t),
                        _ => tile::<1>(t),
                    }
                }
                i += rows;
            }
        }
        i0 = i1;
    }
}

/// One micro-kernel call's operands.
struct Tile<'a> {
    /// First activation row; row `r` starts at `a + r * lda`.
    a: *const f32,
    lda: usize,
    /// The panel: `k` lines of 16 values.
    b: *const f32,
    k: usize,
    /// First result; row `r` at `c + r * ldc`, `cols` values each.
    c: *mut f32,
    ldc: usize,
    cols: usize,
    /// This panel's biases (`cols` of them, or more).
    bias: Option<&'a [f32]>,
    act: Option<Activation>,
}

/// `R` rows by one panel.
///
/// # Safety
/// AVX2 and FMA; `t.a` readable for `R` rows of `k`, `t.b` for `k` lines,
/// `t.c` writable for `R` rows of `cols` values.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn tile<const R: usize>(t: Tile) {
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    // Each row's own pointer: `a + r * lda + kk` would make the compiler
    // step from row to row with a chain of dependent additions.
    // SAFETY: rows 0..R start inside `a` by the function's contract.
    let row_ptrs: [*const f32; R] = std::array::from_fn(|r| unsafe { t.a.add(r * t.lda) });
    for kk in 0..t.k {
        // SAFETY: line kk of the panel and value kk of each row are in
        // bounds by the function's contract.
        unsafe {
            let line = t.b.add(kk * NR);
            let b0 = _mm256_loadu_ps(line);
            let b1 = _mm256_loadu_ps(line.add(8));
            for (acc_r, row) in acc.iter_mut().zip(&row_ptrs) {
                let x = _mm256_broadcast_ss(&*row.add(kk));
                acc_r[0] = _mm256_fmadd_ps(x, b0, acc_r[0]);
                acc_r[1] = _mm256_fmadd_ps(x, b1, acc_r[1]);
            }
        }
    }
    // SAFETY: the output places as this function's contract says.
    unsafe { finish_tile(acc, t.c, t.ldc, t.cols, t.bias, t.act) };
}

/// A tile's results on the way out: bias added, then the activation over
/// all of them at once (a long loop overlaps its iterations' latencies),
/// stored to the `cols` features of each row at `c + r * ldc`. The sums
/// are taken by value (by reference they would live in memory through
/// the caller's whole loop).
///
/// # Safety
/// AVX2 and FMA; `c` writable for `R` rows of `cols` values; `bias`, if
/// any, holds `cols` values.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) unsafe fn finish_tile<const R: usize>(
    acc: [[__m256; 2]; R],
    c: *mut f32,
    ldc: usize,
    cols: usize,
    bias_of: Option<&[f32]>,
    act: Option<Activation>,
) {
    let mut bias = [0f32; NR];
    if let Some(b) = bias_of {
        bias[..cols].copy_from_slice(&b[..cols]);
    }
    let mut rows = [[0f32; NR]; R];
    for (acc_r, row) in acc.iter().zip(rows.iter_mut()) {
        // SAFETY: `row` and `bias` are 16 values each.
        unsafe {
            let (mut v0, mut v1) = (acc_r[0], acc_r[1]);
            if bias_of.is_some() {
                v0 = _mm256_add_ps(v0, _mm256_loadu_ps(bias.as_ptr()));
                v1 = _mm256_add_ps(v1, _mm256_loadu_ps(bias.as_ptr().add(8)));
            }
            _mm256_storeu_ps(row.as_mut_ptr(), v0);
            _mm256_storeu_ps(row.as_mut_ptr().add(8), v1);
        }
    }
    if let Some(act) = act {
        // SAFETY: AVX2 and FMA, by this function's contract.
        unsafe { super::math::activate(act, rows.as_flattened_mut()) };
    }
    for (r, row) in rows.iter().enumerate() {
        // SAFETY: row r of the output has `cols` writable values.
        unsafe {
            let c = c.add(r * ldc);
            if cols == NR {
                _mm256_storeu_ps(c, _mm256_loadu_ps(row.as_ptr()));
                _mm256_storeu_ps(c.add(8), _mm256_loadu_ps(row.as_ptr().add(8)));
            } else {
                for (l, &v) in row[..cols].iter().enumerate() {
                    c.add(l).write(v);
                }
            }
        }
    }
}
