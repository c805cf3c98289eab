//! The AVX-512 micro-kernel of `crate::gemm`: up to [`MR`] activation rows
//! by two panels (32 output features, two 16-lane registers per row), so
//! that 24 of the 32 registers hold results while `k` is walked in
//! ascending order. Per `k` step that is 2 weight loads and 12 broadcasts
//! for 24 multiply-adds of 16 lanes (AVX2's 6 x 16 tile: 8 loads for 12
//! of 8 lanes). Each lane's value is the same chain of fused
//! multiply-adds as the scalar reference (`crate::gemm`), so the bits
//! match it exactly; only the tiling differs.
//!
//! Long rows (`k` above [`KC`]) are walked in blocks of about `KC`
//! inputs: the partial sums of a block are stored to the output and
//! reloaded by the next, which continues the very same chain (a stored
//! and reloaded f32 is unchanged), so the blocks change no bit. They let a
//! row group reuse each weight line for many more rows: the panels of a
//! whole `k` = 1536 do not fit the L2 cache next to the rows.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::gemm::{panel_ptr, Acts, OutPtr, PackedWeights, NR};
use crate::math::Activation;

/// Most activation rows per micro-kernel call.
const MR: usize = 12;

/// Activation bytes a row group may take (of one `k` block), so that it
/// stays in the L2 cache while every panel of the thread's range streams
/// past it.
const ROW_GROUP_BYTES: usize = 128 * 1024;

/// Longest `k` walked in one go; longer rows are split into blocks of
/// nearly equal length, none longer than this.
const KC: usize = 512;

/// As `crate::gemm::gemm_panels`.
///
/// # Safety
/// The CPU must support AVX512F, AVX2 and FMA; the output contract is that
/// of `crate::gemm::gemm_panels` (the activations were bounds-checked
/// there).
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn gemm_panels(a: Acts, w: &PackedWeights, panels: Range<usize>, out: OutPtr) {
    let k = w.k();
    let n_blocks = k.div_ceil(KC).max(1);
    let kc = k.div_ceil(n_blocks);
    let group = (ROW_GROUP_BYTES / (4 * kc.max(1))).clamp(MR, 8 * MR) / MR * MR;
    let mut i0 = 0;
    while i0 < a.m {
        let i1 = (i0 + group).min(a.m);
        for k0 in (0..k.max(1)).step_by(kc.max(1)) {
            let ks = k0..(k0 + kc).min(k);
            // SAFETY: the caller's contract, passed on.
            unsafe { row_group(a, w, i0..i1, ks, panels.clone(), out) };
        }
        i0 = i1;
    }
}

/// Rows `rows` by the panels `panels`, inputs `ks` of `k`: the partial
/// sums of the inputs before `ks` are in the output (unless `ks` starts
/// at 0); the bias and activation are applied when `ks` ends at `k`.
///
/// # Safety
/// As [`gemm_panels`].
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn row_group(
    a: Acts,
    w: &PackedWeights,
    rows: Range<usize>,
    ks: Range<usize>,
    panels: Range<usize>,
    out: OutPtr,
) {
    let (i0, i1) = (rows.start, rows.end);
    {
        let mut p = panels.start;
        while p < panels.end {
            let two = p + 1 < panels.end;
            let cols = (w.n() - p * NR).min(if two { 2 * NR } else { NR });
            let b0 = panel_ptr(w, p);
            let b1 = if two { panel_ptr(w, p + 1) } else { b0 };
            // Tiles of nearly equal height (25 rows as 9 + 8 + 8, not
            // 12 + 12 + 1): a one-row tile runs far below the peak.
            let n_tiles = (i1 - i0).div_ceil(MR);
            let (base, extra) = ((i1 - i0) / n_tiles, (i1 - i0) % n_tiles);
            let mut i = i0;
            for tile_idx in 0..n_tiles {
                let rows = base + usize::from(tile_idx < extra);
                // SAFETY: rows i..i+rows < m have k values at i * lda
                // (checked by the caller); each panel has k lines of 16;
                // the output places are the caller's to write.
                unsafe {
                    let t = Tile {
                        a: a.a.as_ptr().add(i * a.lda),
                        lda: a.lda,
                        b: [b0, b1],
                        ks: ks.clone(),
                        last: ks.end == w.k(),
                        c: out.ptr.add(i * out.ld + p * NR),
                        ldc: out.ld,
                        cols,
                        bias: out.bias.map(|b| &b[p * NR..]),
                        act: out.act,
                    };
                    if two {
                        tile_rows::<2>(rows, t);
                    } else {
                        tile_rows::<1>(rows, t);
                    }
                }
                i += rows;
            }
            p += if two { 2 } else { 1 };
        }
    }
}

/// One micro-kernel call's operands.
struct Tile<'a> {
    /// First activation row; row `r` starts at `a + r * lda`.
    a: *const f32,
    lda: usize,
    /// The panels: `k` lines of 16 values each (the second is read only
    /// by two-panel tiles).
    b: [*const f32; 2],
    /// The inputs of this call: the chain continues from the partial sums
    /// in the output unless `ks` starts at 0.
    ks: Range<usize>,
    /// Whether `ks` ends at `k` (then bias and activation are applied).
    last: bool,
    /// First result; row `r` at `c + r * ldc`, `cols` values each.
    c: *mut f32,
    ldc: usize,
    cols: usize,
    /// The tile's biases (`cols` of them, or more).
    bias: Option<&'a [f32]>,
    act: Option<Activation>,
}

/// `rows` (1..=MR) rows by `P` panels.
///
/// # Safety
/// As [`tile`].
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
unsafe fn tile_rows<const P: usize>(rows: usize, t: Tile) {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        match rows {
            12 => tile::<12, P>(t),
            11 => tile::<11, P>(t),
            10 => tile::<10, P>(t),
            9 => tile::<9, P>(t),
            8 => tile::<8, P>(t),
            7 => tile::<7, P>(t),
            6 => tile::<6, P>(t),
            5 => tile::<5, P>(t),
            4 => tile::<4, P>(t),
            3 => tile::<3, P>(t),
            2 => tile::<2, P>(t),
            _ => tile::<1, P>(t),
        }
    }
}

/// `R` rows by `P` panels.
///
/// # Safety
/// AVX512F, AVX2 and FMA; `t.a` readable for `R` rows of `k`, `t.b[..P]`
/// for `k` lines each, `t.c` readable and writable for `R` rows of `cols`
/// values.
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
unsafe fn tile<const R: usize, const P: usize>(t: Tile) {
    // Lanes of each panel that are output features.
    let masks: [__mmask16; P] = std::array::from_fn(|q| {
        let live = t.cols.saturating_sub(q * NR).min(NR);
        ((1u32 << live) - 1) as __mmask16
    });
    let mut acc = [[_mm512_setzero_ps(); P]; R];
    if t.ks.start > 0 {
        for (r, acc_r) in acc.iter_mut().enumerate() {
            for (q, a) in acc_r.iter_mut().enumerate() {
                // SAFETY: row r's `cols` values are readable (masked
                // lanes are not touched).
                *a = unsafe { _mm512_maskz_loadu_ps(masks[q], t.c.add(r * t.ldc + q * NR)) };
            }
        }
    }
    // Each row's own pointer, so the compiler does not chain the row
    // address computations.
    // SAFETY: rows 0..R start inside `a` by the function's contract.
    let row_ptrs: [*const f32; R] = std::array::from_fn(|r| unsafe { t.a.add(r * t.lda) });
    for kk in t.ks.clone() {
        // SAFETY: line kk of each panel and value kk of each row are in
        // bounds by the function's contract.
        unsafe {
            let b: [__m512; P] = std::array::from_fn(|q| _mm512_loadu_ps(t.b[q].add(kk * NR)));
            for (acc_r, row) in acc.iter_mut().zip(&row_ptrs) {
                let x = _mm512_set1_ps(*row.add(kk));
                for (a, &bq) in acc_r.iter_mut().zip(&b) {
                    *a = _mm512_fmadd_ps(x, bq, *a);
                }
            }
        }
    }
    if !t.last {
        for (r, acc_r) in acc.iter().enumerate() {
            for (q, &a) in acc_r.iter().enumerate() {
                // SAFETY: row r's `cols` values are writable (masked lanes
                // are not touched).
                unsafe { _mm512_mask_storeu_ps(t.c.add(r * t.ldc + q * NR), masks[q], a) };
            }
        }
        return;
    }
    // The tile's results, bias added (one rounded addition), then the
    // activation over all of them at once.
    let mut bias = [0f32; 2 * NR];
    if let Some(b) = t.bias {
        bias[..t.cols].copy_from_slice(&b[..t.cols]);
    }
    let mut res = [[[0f32; NR]; P]; R];
    for (acc_r, row) in acc.iter().zip(res.iter_mut()) {
        for (q, (&v, out)) in acc_r.iter().zip(row.iter_mut()).enumerate() {
            // SAFETY: `out` and `bias[q * NR..]` are 16 values each.
            unsafe {
                let v = if t.bias.is_some() {
                    _mm512_add_ps(v, _mm512_loadu_ps(bias.as_ptr().add(q * NR)))
                } else {
                    v
                };
                _mm512_storeu_ps(out.as_mut_ptr(), v);
            }
        }
    }
    if let Some(act) = t.act {
        // SAFETY: AVX2 and FMA, by this function's contract.
        unsafe { crate::x86::avx2::math::activate(act, res.as_flattened_mut().as_flattened_mut()) };
    }
    for (r, row) in res.iter().enumerate() {
        let row = row.as_flattened();
        for (q, &mask) in masks.iter().enumerate() {
            // SAFETY: row r of the output has `cols` writable values
            // (masked lanes are not touched); `row` holds P * 16.
            unsafe {
                let v = _mm512_loadu_ps(row.as_ptr().add(q * NR));
                _mm512_mask_storeu_ps(t.c.add(r * t.ldc + q * NR), mask, v);
            }
        }
    }
}
