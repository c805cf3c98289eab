//! `crate::gemm_bf16`'s product: tiles of up to [`MR`] rows by two panels
//! of 16 features, 24 sums in registers, each step one broadcast pair of
//! activations per row and one `vdpbf16ps` per row and panel.

use std::arch::x86_64::*;
use std::cell::RefCell;
use std::ops::Range;

use crate::gemm::{Acts, OutPtr, NR};
use crate::gemm_bf16::{bf16_pair, PackedBf16};
use crate::math::Activation;

/// Most rows per tile (24 sums, two weight lines and a broadcast: 27 of
/// the 32 registers).
const MR: usize = 12;

/// Weight bytes of the panels a group of tiles walks while they stay in
/// the L2 cache.
const B_BLOCK_BYTES: usize = 512 * 1024;

thread_local! {
    /// The activations of the current product as bf16 pairs.
    static ROWS: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
}

/// # Safety
/// AVX512F/BW/VL and AVX512-BF16; the shapes checked by
/// `crate::gemm_bf16::gemm_bf16_panels`; its output contract.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")]
pub(crate) unsafe fn gemm_bf16(a: Acts, w: &PackedBf16, panels: Range<usize>, out: OutPtr) {
    if a.m == 0 || panels.is_empty() {
        return;
    }
    let k = w.k();
    let pairs = k.div_ceil(2);
    ROWS.with(|rows| {
        let mut rows = rows.borrow_mut();
        rows.resize(a.m * pairs, 0);
        for (i, dst) in rows.chunks_exact_mut(pairs).enumerate() {
            round_row(&a.a[i * a.lda..i * a.lda + k], dst);
        }
        // Tiles of nearly equal height (25 rows as 9 + 8 + 8).
        let n_tiles = a.m.div_ceil(MR);
        let (base, extra) = (a.m / n_tiles, a.m % n_tiles);
        let height = |t: usize| base + usize::from(t < extra);
        let block = (B_BLOCK_BYTES / (pairs * NR * 4)).max(2) / 2 * 2;
        let mut p0 = panels.start;
        while p0 < panels.end {
            let p1 = (p0 + block).min(panels.end);
            let mut i = 0;
            for t in 0..n_tiles {
                let h = height(t);
                let mut p = p0;
                while p < p1 {
                    let two = p + 1 < p1;
                    let tile = Tile {
                        a: rows[i * pairs..].as_ptr(),
                        pairs,
                        b: [w.panel_ptr(p), w.panel_ptr(if two { p + 1 } else { p })],
                        // SAFETY: row i, feature p * NR: inside the output
                        // by the caller's contract.
                        c: unsafe { out.ptr.add(i * out.ld + p * NR) },
                        ldc: out.ld,
                        cols: (w.n() - p * NR).min(if two { 2 * NR } else { NR }),
                        bias: out.bias.map(|b| &b[p * NR..]),
                        act: out.act,
                    };
                    // SAFETY: the tile's rows and panels are in bounds (its
                    // h rows of `pairs` words are in `rows`, each panel has
                    // `pairs` lines); the output places are the caller's.
                    unsafe {
                        if two {
                            tile_rows::<2>(h, &tile);
                        } else {
                            tile_rows::<1>(h, &tile);
                        }
                    }
                    p += if two { 2 } else { 1 };
                }
                i += h;
            }
            p0 = p1;
        }
    });
}

/// `x` rounded to bf16 (to nearest, ties to even), as pairs: value `2j`
/// in the low half of `out[j]`; an odd last value pairs with zero.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")]
unsafe fn round_row(x: &[f32], out: &mut [u32]) {
    let mut chunks = x.chunks_exact(32);
    let mut o = 0;
    for c in &mut chunks {
        // SAFETY: `c` holds 32 values; `out` has a word for each pair of
        // `x`, so 16 from `o`.
        unsafe {
            let lo = _mm512_loadu_ps(c.as_ptr());
            let hi = _mm512_loadu_ps(c.as_ptr().add(16));
            // Values 0..16 from `lo` in the low 16 halves: pairs in order.
            let v: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
            _mm512_storeu_si512(out.as_mut_ptr().add(o).cast(), v);
        }
        o += 16;
    }
    for (p, dst) in chunks.remainder().chunks(2).zip(&mut out[o..]) {
        *dst = bf16_pair(p);
    }
}

/// One micro-kernel call's operands.
struct Tile<'a> {
    /// The tile's first row of activation pairs; row `r` at `a + r * pairs`.
    a: *const u32,
    pairs: usize,
    /// The panels' first lines (the second read only by two-panel tiles).
    b: [*const u32; 2],
    /// First result; row `r` at `c + r * ldc`, `cols` values each.
    c: *mut f32,
    ldc: usize,
    cols: usize,
    bias: Option<&'a [f32]>,
    act: Option<Activation>,
}

/// `rows` (1..=MR) rows by `P` panels.
///
/// # Safety
/// As [`tile`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")]
unsafe fn tile_rows<const P: usize>(rows: usize, t: &Tile) {
    // SAFETY: the caller's contract, passed on.
    unsafe { tile_of_rows!(tile, P, rows, t) }
}

/// `R` rows by `P` panels, over every input pair.
///
/// # Safety
/// AVX512F/BW/VL and AVX512-BF16; `t.a` readable for `R` rows of
/// `t.pairs` words, `t.b[..P]` for `t.pairs` lines of 16 words, `t.c`
/// writable for `R` rows of `t.cols` values.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")]
#[inline]
unsafe fn tile<const R: usize, const P: usize>(t: &Tile) {
    let masks: [__mmask16; P] = std::array::from_fn(|q| {
        let live = t.cols.saturating_sub(q * NR).min(NR);
        ((1u32 << live) - 1) as __mmask16
    });
    let mut acc = [[_mm512_setzero_ps(); P]; R];
    // SAFETY: rows 0..R are in the activations by the contract.
    let rows: [*const u32; R] = std::array::from_fn(|r| unsafe { t.a.add(r * t.pairs) });
    for j in 0..t.pairs {
        // SAFETY: line j of each panel and word j of each row are in
        // bounds by the contract; __m512i and __m512bh are both 64 bytes
        // of lanes, reinterpreted.
        unsafe {
            let b: [__m512bh; P] = std::array::from_fn(|q| {
                std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(
                    t.b[q].add(j * NR).cast(),
                ))
            });
            for (acc_r, row) in acc.iter_mut().zip(&rows) {
                let x: __m512bh = std::mem::transmute(_mm512_set1_epi32(*row.add(j) as i32));
                for (s, &bq) in acc_r.iter_mut().zip(&b) {
                    *s = _mm512_dpbf16_ps(*s, x, bq);
                }
            }
        }
    }
    // SAFETY: the output places as this function's contract says.
    unsafe { super::gemm::finish_tile(acc, masks, t.c, t.ldc, t.cols, t.bias, t.act) };
}
