//! `crate::gemm_bf16`'s product on CPUs with FEAT_BF16 (Graviton 3/4,
//! Apple M2 and later, Neoverse V1/N2): `bfmmla` multiplies a 2x4 block of
//! bf16 activations (two rows, four inputs) by a 4x2 block of bf16 weights
//! (four inputs, two features) into 2x2 f32 sums, 16 multiply-adds per
//! instruction where an f32 `fmla` does 4.
//!
//! Tiles of up to [`ROW_PAIRS`] pairs of activation rows by one panel of
//! 16 features: 24 sums in registers (each a 2x2 block), per four inputs
//! one 16-byte load of a row pair's activations and eight `bfmmla`. The
//! weights keep `crate::gemm_bf16`'s layout (each line one input pair of
//! the 16 features); two lines zipped give `bfmmla`'s operands for four
//! inputs, shared by the tile's rows. The activations are rounded to bf16
//! once per product, in row pairs: row `2r` then `2r + 1`, four inputs
//! each, an odd last row or input pair padded with zeros.
//!
//! Like the x86 version this is not the f32 path's arithmetic (the inputs
//! lose 16 mantissa bits, and `bfmmla` adds its products with the
//! architecture's bf16 dot-product rounding), so it has no scalar
//! reference: it is tested against the exact sum of the rounded products
//! within f32 rounding, and chosen only on request.

use std::arch::aarch64::*;
use std::arch::asm;
use std::cell::RefCell;
use std::ops::Range;

use crate::gemm::{finish_row, Acts, OutPtr, NR};
use crate::gemm_bf16::{bf16_pair, PackedBf16};

/// Most pairs of activation rows per tile (3 x 8 sums of 2x2, 24 of the
/// 32 vector registers).
const ROW_PAIRS: usize = 3;

thread_local! {
    /// The activations of the current product as bf16, in row pairs.
    static ROWS: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
}

/// `acc` plus `a . bᵀ`: `a` two rows of four bf16 (row 0 in the low
/// half), `b` two rows of four bf16; lanes `[a0.b0, a0.b1, a1.b0, a1.b1]`.
///
/// # Safety
/// The CPU must support FEAT_BF16.
#[inline(always)]
unsafe fn bfmmla(mut acc: float32x4_t, a: uint32x4_t, b: uint32x4_t) -> float32x4_t {
    // SAFETY: the caller runs on a CPU with FEAT_BF16; the instruction only
    // reads and writes these registers.
    unsafe {
        asm!(
            ".arch_extension bf16",
            "bfmmla {acc:v}.4s, {a:v}.8h, {b:v}.8h",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// As `crate::gemm_bf16::gemm_bf16_panels` (shapes checked by it).
///
/// # Safety
/// FEAT_BF16 (checked by the caller through `crate::gemm_bf16::available`);
/// the output contract of `gemm_bf16_panels`.
pub(crate) unsafe fn gemm_bf16(a: Acts, w: &PackedBf16, panels: Range<usize>, out: OutPtr) {
    if a.m == 0 || panels.is_empty() {
        return;
    }
    let k = w.k();
    let quads = k.div_ceil(4);
    let row_pairs = a.m.div_ceil(2);
    ROWS.with(|rows| {
        let mut rows = rows.borrow_mut();
        rows.clear();
        rows.resize(row_pairs * quads * 4, 0);
        pack_rows(&a, k, quads, &mut rows);
        for p in panels {
            let cols = (w.n() - p * NR).min(NR);
            let mut rp = 0;
            while rp < row_pairs {
                let n = (row_pairs - rp).min(ROW_PAIRS);
                let t = Tile {
                    a: &rows[rp * quads * 4..(rp + n) * quads * 4],
                    quads,
                    w,
                    p,
                    cols,
                    row0: 2 * rp,
                    m: a.m,
                };
                // SAFETY: FEAT_BF16 is the caller's contract; the tile's
                // rows are below `a.m` where stored; the output places are
                // the caller's.
                unsafe {
                    match n {
                        3 => tile::<3>(&t, &out),
                        2 => tile::<2>(&t, &out),
                        _ => tile::<1>(&t, &out),
                    }
                }
                rp += n;
            }
        }
    });
}

/// The rows of `a` (`k` inputs each) rounded to bf16 into `out`: row
/// pair `r`, quad `i` at words `4 (r * quads + i)..`: row `2r`'s input
/// pairs `2i`, `2i + 1`, then row `2r + 1`'s (zero past the rows or
/// inputs).
fn pack_rows(a: &Acts, k: usize, quads: usize, out: &mut [u32]) {
    for i in 0..a.m {
        let row = &a.a[i * a.lda..i * a.lda + k];
        let base = (i / 2) * quads * 4 + 2 * (i % 2);
        for (j, pair) in row.chunks(2).enumerate() {
            out[base + 4 * (j / 2) + j % 2] = bf16_pair(pair);
        }
    }
}

/// One micro-kernel call's operands.
struct Tile<'a> {
    /// The tile's row pairs of activations (`4 * quads` words each).
    a: &'a [u32],
    quads: usize,
    w: &'a PackedBf16,
    /// The panel, and its real features.
    p: usize,
    cols: usize,
    /// The tile's first row, and the rows of the product.
    row0: usize,
    m: usize,
}

/// `R` row pairs by the 16 features of panel `t.p`, over every input.
///
/// # Safety
/// FEAT_BF16; `t.a` holds `R` row pairs; the output places of rows
/// `t.row0..` below `t.m`, features of panel `t.p`, are the caller's.
#[inline(always)]
unsafe fn tile<const R: usize>(t: &Tile, out: &OutPtr) {
    let pairs = t.w.k().div_ceil(2);
    let lines = t.w.panel_ptr(t.p);
    // SAFETY: NEON is part of every aarch64 target; line `l < pairs` of
    // the panel is 16 words at `lines + 16 l`; `t.a` has `4 * quads` words
    // per row pair, R of them; FEAT_BF16 is the caller's contract.
    unsafe {
        let mut acc = [[vdupq_n_f32(0.0); 8]; R];
        let zero = vdupq_n_u32(0);
        for i in 0..t.quads {
            // Lines 2i and 2i + 1 (zero past the last pair), features
            // 4q..4q + 4 each; zipped: features (4q, 4q + 1), then
            // (4q + 2, 4q + 3), four inputs each.
            let line = |l: usize, q: usize| {
                if l < pairs {
                    vld1q_u32(lines.add(NR * l + 4 * q))
                } else {
                    zero
                }
            };
            let b: [uint32x4_t; 8] = std::array::from_fn(|f| {
                let (q, second) = (f / 2, f % 2 == 1);
                let (l0, l1) = (line(2 * i, q), line(2 * i + 1, q));
                if second {
                    vzip2q_u32(l0, l1)
                } else {
                    vzip1q_u32(l0, l1)
                }
            });
            for (r, acc) in acc.iter_mut().enumerate() {
                let x = vld1q_u32(t.a[4 * (r * t.quads + i)..][..4].as_ptr());
                for (s, &b) in acc.iter_mut().zip(&b) {
                    *s = bfmmla(*s, x, b);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            // acc[f] = [row 2r . feature 2f, . 2f + 1, row 2r + 1 . 2f,
            // . 2f + 1].
            for half in 0..2 {
                let i = t.row0 + 2 * r + half;
                if i >= t.m {
                    continue;
                }
                let mut v = [0f32; NR];
                for q in 0..4 {
                    let (x, y) = (
                        vreinterpretq_u64_f32(acc[2 * q]),
                        vreinterpretq_u64_f32(acc[2 * q + 1]),
                    );
                    let row = if half == 0 {
                        vzip1q_u64(x, y)
                    } else {
                        vzip2q_u64(x, y)
                    };
                    vst1q_f32(v[4 * q..].as_mut_ptr(), vreinterpretq_f32_u64(row));
                }
                finish_row(&mut v, t.cols, (i, t.p), out);
            }
        }
    }
}
