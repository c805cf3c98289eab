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
//! and reloaded f32 is unchanged), so the blocks change no bit; nor does
//! the order in which tiles are visited. The loop order around the
//! micro-kernel (GotoBLAS's, the weights being packed once at load) keeps
//! a block of weight panels in the L2 cache while up to [`MC`] rows go
//! past it, and each tile's activations, copied into a small buffer, in
//! the L1 cache while the block's panels go past them. (Walking each
//! pair of panels down all the rows instead, with the activations read in
//! place, ran mpnet's `k` = 3072 down projection at ~65 GFLOP/s on one
//! Zen 4 core: a pair of panels of a 512-input block is 64 KiB, more than
//! the L1 cache, and twelve rows 3072 values apart all fall in one L1
//! set.)

use std::arch::x86_64::*;
use std::ops::Range;

use crate::gemm::{panel_ptr, Acts, OutPtr, PackedWeights, NR};
use crate::gemm_f16::PackedF16;
use crate::math::Activation;

/// Weights in the panel layout of `crate::gemm` (panel `p`, input `kk`,
/// lane `l` at value `(p * k + kk) * NR + l`), as f32 or as f16 values
/// that the micro-kernel converts as it loads them (exact, so the same
/// chain of multiply-adds and the same bits).
pub(crate) trait Panels {
    /// One stored value.
    type Value;
    /// Output features.
    fn n(&self) -> usize;
    /// Input features.
    fn k(&self) -> usize;
    /// Panel `p`'s first value.
    fn panel(&self, p: usize) -> *const Self::Value;
    /// The 16 values at `at`, as f32.
    ///
    /// # Safety
    /// AVX512F, AVX2, FMA and F16C; 16 values readable at `at`.
    unsafe fn load16(at: *const Self::Value) -> __m512;
}

impl Panels for PackedWeights {
    type Value = f32;
    fn n(&self) -> usize {
        PackedWeights::n(self)
    }
    fn k(&self) -> usize {
        PackedWeights::k(self)
    }
    fn panel(&self, p: usize) -> *const f32 {
        panel_ptr(self, p)
    }
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    #[inline]
    unsafe fn load16(at: *const f32) -> __m512 {
        // SAFETY: the caller's contract.
        unsafe { _mm512_loadu_ps(at) }
    }
}

impl Panels for PackedF16 {
    type Value = u16;
    fn n(&self) -> usize {
        PackedF16::n(self)
    }
    fn k(&self) -> usize {
        PackedF16::k(self)
    }
    fn panel(&self, p: usize) -> *const u16 {
        self.panel_ptr(p)
    }
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    #[inline]
    unsafe fn load16(at: *const u16) -> __m512 {
        // SAFETY: the caller's contract (32 bytes, no alignment needed).
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(at.cast())) }
    }
}

/// Most activation rows per micro-kernel call.
const MR: usize = 12;

/// Longest `k` walked in one go; longer rows are split into blocks of
/// nearly equal length, none longer than this. A tile's activations for
/// one block (12 rows of up to 768 values, 36 KiB) come from the L1 and
/// L2 caches while the panels of a block go past them. Blocks of at most
/// 384 (18 KiB, all in the L1 cache) were 1-5% slower on one Zen 4 core
/// for the 768-wide encoders (mpnet, nomic: `k` = 768 in one block
/// instead of two, 3072 in four instead of eight), `gemm_bench mpnet`
/// medians of 6 alternating runs: 800x768x768 107.0 -> 111.2 GFLOP/s,
/// 800x3072x768 104.5 -> 110.1, 800x768x3072 105.3 -> 107.7.
const KC: usize = 768;

/// Distance between two packed activation rows: [`KC`] and one cache
/// line, so that the twelve rows of a tile fall in different L1 sets.
const PACK_LD: usize = KC + 16;

/// Most activation rows packed and walked together: a group's packed
/// rows of one `k` block (up to 600 KiB), its outputs for one block of
/// panels (up to 192 KiB) and that block ([`B_BLOCK_BYTES`]) share the
/// 1 MiB L2 cache of a Zen 4 core as far as they can.
const MC: usize = 192;

/// Fewest panels for which the activations are copied: a copy of the
/// rows costs about as much as a few panels' multiply-adds, so a narrow
/// product (the f16 GEMM calls this on two to four panels converted at a
/// time) reads the rows in place.
const PACK_MIN_PANELS: usize = 8;

/// Whether the [`MR`] rows of a tile, `lda` values apart, start in so few
/// L1 cache sets (64 sets of 64-byte lines) that reading them in place
/// evicts them: fewer than half as many sets as rows. Rows of 3072, 1536
/// or 768 values start in 1, 2 or 4 sets; rows of 384 (MiniLM's width) or
/// 1152 in 8, which the cache's 8 ways hold, so those are read in place
/// (copying them cost ~2% of MiniLM's time).
fn rows_share_l1_sets(lda: usize) -> bool {
    let mut sets = [false; 64];
    for r in 0..MR {
        sets[(r * lda * 4 / 64) % 64] = true;
    }
    sets.iter().filter(|&&s| s).count() < MR / 2
}

/// Most weight bytes of one `k` block that every row of a group walks
/// before the next block (kept in the L2 cache while the group's tiles go
/// past).
const B_BLOCK_BYTES: usize = 256 * 1024;

thread_local! {
    /// A row group's activations for one `k` block, packed tile by tile
    /// (see [`pack_rows`]).
    static PACKED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// As `crate::gemm::gemm_panels`.
///
/// Loop order: for each group of at most [`MC`] rows, for each `k`
/// block, copy the group's activations tile by tile ([`pack_rows`];
/// not for fewer than [`PACK_MIN_PANELS`] panels); then for each block of
/// panels (at most
/// [`B_BLOCK_BYTES`], kept in the L2 cache while the group's tiles go
/// past), for each tile of up to [`MR`] rows (its packed activations in
/// the L1 cache), for each pair of panels: one micro-kernel call.
///
/// # Safety
/// The CPU must support AVX512F, AVX2, FMA and F16C; the output contract is that
/// of `crate::gemm::gemm_panels` (the activations were bounds-checked
/// there).
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(crate) unsafe fn gemm_panels<W: Panels>(a: Acts, w: &W, panels: Range<usize>, out: OutPtr) {
    if a.m == 0 {
        return;
    }
    let k = w.k();
    let n_blocks = k.div_ceil(KC).max(1);
    let kc = k.div_ceil(n_blocks).max(1);
    // Blocks of nearly equal size, each an even number of panels (so that
    // every tile but a range's last covers two).
    let most = (B_BLOCK_BYTES / (size_of::<W::Value>() * NR * kc)).max(2);
    let n_panel_blocks = panels.len().div_ceil(most).max(1);
    let block_panels = panels.len().div_ceil(n_panel_blocks).next_multiple_of(2);
    // Row groups and their tiles of nearly equal height (25 rows as 9 + 8
    // + 8, not 12 + 12 + 1): a one-row tile runs far below the peak.
    let n_groups = a.m.div_ceil(MC);
    let tiles_per_group = a.m.div_ceil(n_groups).div_ceil(MR);
    let n_tiles = n_groups * tiles_per_group;
    let (base, extra) = (a.m / n_tiles, a.m % n_tiles);
    let height = |t: usize| base + usize::from(t < extra);
    let pack = panels.len() >= PACK_MIN_PANELS && rows_share_l1_sets(a.lda);
    PACKED.with(|packed| {
        let mut packed = packed.borrow_mut();
        if pack {
            packed.resize(tiles_per_group * MR * PACK_LD, 0.0);
        }
        let mut i0 = 0;
        for g in 0..n_groups {
            let tiles = g * tiles_per_group..(g + 1) * tiles_per_group;
            let rows = i0..i0 + tiles.clone().map(height).sum::<usize>();
            for k0 in (0..k.max(1)).step_by(kc) {
                let ks = k0..(k0 + kc).min(k);
                let mut i = i0;
                if pack {
                    for (t, buf) in tiles.clone().zip(packed.chunks_exact_mut(MR * PACK_LD)) {
                        pack_rows(a, i..i + height(t), ks.clone(), buf);
                        i += height(t);
                    }
                }
                let mut p = panels.start;
                while p < panels.end {
                    let q = (p + block_panels).min(panels.end);
                    let mut i = i0;
                    for (j, t) in tiles.clone().enumerate() {
                        // The tile's first row at input ks.start, packed
                        // or in place.
                        let (rows_at, lda) = if pack {
                            (packed[j * MR * PACK_LD..].as_ptr(), PACK_LD)
                        } else {
                            (a.a[i * a.lda + ks.start..].as_ptr(), a.lda)
                        };
                        let block = Block {
                            a: rows_at,
                            lda,
                            rows: i..i + height(t),
                            ks: ks.clone(),
                            panels: p..q,
                        };
                        // SAFETY: the caller's contract, passed on.
                        unsafe { tile_panels(w, block, out) };
                        i += height(t);
                    }
                    p = q;
                }
            }
            i0 = rows.end;
        }
    });
}

/// One tile's work in a block of panels.
struct Block {
    /// The tile's first row at input `ks.start` (packed by [`pack_rows`]
    /// or in place); row `r` at `a + r * lda`.
    a: *const f32,
    lda: usize,
    rows: Range<usize>,
    ks: Range<usize>,
    panels: Range<usize>,
}

/// Rows `b.rows` (at most [`MR`]) by the panels `b.panels`, inputs
/// `b.ks` of `k`: the partial sums of the inputs before `ks` are in the
/// output (unless `ks` starts at 0); the bias and activation are applied
/// when `ks` ends at `k`.
///
/// # Safety
/// As [`gemm_panels`].
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn tile_panels<W: Panels>(w: &W, b: Block, out: OutPtr) {
    let i = b.rows.start;
    let mut p = b.panels.start;
    while p < b.panels.end {
        let two = p + 1 < b.panels.end;
        let cols = (w.n() - p * NR).min(if two { 2 * NR } else { NR });
        let b0 = w.panel(p);
        let b1 = if two { w.panel(p + 1) } else { b0 };
        // SAFETY: `b.a` holds the tile's rows for `ks`; each panel has k
        // lines of 16; the output places are the caller's to write.
        unsafe {
            let t = Tile {
                a: b.a,
                lda: b.lda,
                b: [b0, b1],
                ks: b.ks.clone(),
                last: b.ks.end == w.k(),
                c: out.ptr.add(i * out.ld + p * NR),
                ldc: out.ld,
                cols,
                bias: out.bias.map(|b| &b[p * NR..]),
                act: out.act,
            };
            if two {
                tile_rows::<2, W>(b.rows.len(), t);
            } else {
                tile_rows::<1, W>(b.rows.len(), t);
            }
        }
        p += if two { 2 } else { 1 };
    }
}

/// Copies rows `rows` (at most [`MR`]), inputs `ks` (at most [`KC`]) of
/// `a` into `packed`, row `r` at `r * PACK_LD`. The micro-kernel then
/// reads rows [`PACK_LD`] apart, which fall in different L1 cache sets,
/// instead of rows `lda` apart (rows of 3072 values all fall in the same
/// set).
fn pack_rows(a: Acts, rows: Range<usize>, ks: Range<usize>, packed: &mut [f32]) {
    for (dst, i) in packed.chunks_exact_mut(PACK_LD).zip(rows) {
        dst[..ks.len()].copy_from_slice(&a.a[i * a.lda + ks.start..i * a.lda + ks.end]);
    }
}

/// One micro-kernel call's operands.
struct Tile<'a, V> {
    /// The tile's first row at input `ks.start`; row `r` at `a + r *
    /// lda`.
    a: *const f32,
    lda: usize,
    /// The panels: `k` lines of 16 values each (the second is read only
    /// by two-panel tiles).
    b: [*const V; 2],
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
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[inline]
unsafe fn tile_rows<const P: usize, W: Panels>(rows: usize, t: Tile<W::Value>) {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        match rows {
            12 => tile::<12, P, W>(t),
            11 => tile::<11, P, W>(t),
            10 => tile::<10, P, W>(t),
            9 => tile::<9, P, W>(t),
            8 => tile::<8, P, W>(t),
            7 => tile::<7, P, W>(t),
            6 => tile::<6, P, W>(t),
            5 => tile::<5, P, W>(t),
            4 => tile::<4, P, W>(t),
            3 => tile::<3, P, W>(t),
            2 => tile::<2, P, W>(t),
            _ => tile::<1, P, W>(t),
        }
    }
}

/// `R` rows by `P` panels.
///
/// # Safety
/// AVX512F, AVX2, FMA and F16C; `t.a` readable for `R` rows of `ks.len()`
/// values `t.lda` apart, `t.b[..P]` for `k` lines each, `t.c` readable and
/// writable for `R` rows of `cols` values.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[inline]
unsafe fn tile<const R: usize, const P: usize, W: Panels>(t: Tile<W::Value>) {
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
    // SAFETY: rows 0..R start inside the activations by the contract.
    let row_ptrs: [*const f32; R] = std::array::from_fn(|r| unsafe { t.a.add(r * t.lda) });
    for (j, kk) in t.ks.clone().enumerate() {
        // SAFETY: line kk of each panel and value j of each packed row
        // are in bounds by the function's contract.
        unsafe {
            let b: [__m512; P] = std::array::from_fn(|q| W::load16(t.b[q].add(kk * NR)));
            for (acc_r, row) in acc.iter_mut().zip(&row_ptrs) {
                let x = _mm512_set1_ps(*row.add(j));
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
    // SAFETY: the output places as this function's contract says.
    unsafe { finish_tile(acc, masks, t.c, t.ldc, t.cols, t.bias, t.act) };
}

/// A tile's last step: its sums `acc` (`R` rows by `P` panels) plus the
/// bias (one rounded addition), then the activation over all of them at
/// once, stored to `c` (row `r` at `c + r * ldc`) with the lanes of
/// `masks` (the `cols` live features).
///
/// # Safety
/// AVX512F, AVX2 and FMA; `c` writable for `R` rows of `cols` values;
/// `bias`, if any, at least `cols` long.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn finish_tile<const R: usize, const P: usize>(
    acc: [[__m512; P]; R],
    masks: [__mmask16; P],
    c: *mut f32,
    ldc: usize,
    cols: usize,
    bias_of: Option<&[f32]>,
    act: Option<Activation>,
) {
    let mut bias = [0f32; 2 * NR];
    if let Some(b) = bias_of {
        bias[..cols].copy_from_slice(&b[..cols]);
    }
    let mut res = [[[0f32; NR]; P]; R];
    for (acc_r, row) in acc.iter().zip(res.iter_mut()) {
        for (q, (&v, out)) in acc_r.iter().zip(row.iter_mut()).enumerate() {
            // SAFETY: `out` and `bias[q * NR..]` are 16 values each.
            unsafe {
                let v = if bias_of.is_some() {
                    _mm512_add_ps(v, _mm512_loadu_ps(bias.as_ptr().add(q * NR)))
                } else {
                    v
                };
                _mm512_storeu_ps(out.as_mut_ptr(), v);
            }
        }
    }
    if let Some(act) = act {
        // SAFETY: AVX512F, AVX2 and FMA, by this function's contract.
        unsafe { super::math::activate(act, res.as_flattened_mut().as_flattened_mut()) };
    }
    for (r, row) in res.iter().enumerate() {
        let row = row.as_flattened();
        for (q, &mask) in masks.iter().enumerate() {
            // SAFETY: row r of the output has `cols` writable values
            // (masked lanes are not touched); `row` holds P * 16.
            unsafe {
                let v = _mm512_loadu_ps(row.as_ptr().add(q * NR));
                _mm512_mask_storeu_ps(c.add(r * ldc + q * NR), mask, v);
            }
        }
    }
}
