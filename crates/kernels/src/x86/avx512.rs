//! The AVX-512 set (AVX512F/BW/VL with VNNI, on top of AVX2, FMA and F16C:
//! Zen 4 and later, Xeon since Cascade Lake): the AVX2 set's table with
//! the kernels it does better overridden, so that anything it does not
//! override runs the AVX2 code, never the scalar fallback.
//!
//! Overridden so far: the one-row MXFP4 dot product (`vpdpbusd` for its
//! integer sums); the many-row eight-row kernels (`dot8n`, prefill) of
//! Q4_0, Q4_1, Q5_0, Q8_0, Q4_K and Q6_K, and the eight-row kernels
//! (`dot8`) of Q8_0, Q4_K and Q6_K, whose integer sums take one `vpdpbusd`
//! per 32 bytes instead of `vpmaddubsw` + `vpaddw` (+ `vpmaddwd`), or for
//! Q8_0 instead of two sign extensions and two `vpmaddwd` (its weights read
//! as `w + 128`, `128 * sum(x)` subtracted), Q6_K's in 512-bit registers
//! (two pieces of the eight rows per `vpdpbusd`); the two-group many-row kernels
//! (`dot16n`) of Q4_0, Q4_1, Q5_0 and Q8_0, sixteen rows' lanes in one
//! 512-bit register (Q4_K and Q6_K too); the attention scores and weighted
//! sums, four heads of a group per converted key or value row (AVX2's code
//! with 32 registers); the f32 GEMM panels of the encoders (`gemm`), which
//! also read f16 weights directly when a product has few rows; and
//! the activations, softmax exponentials and layer norm (`math`: the
//! portable source vectorized over 16 lanes), the column reductions of
//! beam search's logit tiles and the f32 attention (`columns`,
//! `attend_f32`: likewise), with the tile store as a transposition in
//! registers; the Q8_0 activation rows with their panels
//! (`quantize`: a block per two registers). The same exact integers and
//! the same f32 operation chains, so the same bits as the scalar
//! reference.

/// `$tile::<R, $p>($t)` for the tile height `R = $rows` (1..=12, larger
/// taken as 1): the micro-kernels' row counts as constants.
macro_rules! tile_of_rows {
    ($tile:ident, $p:ident, $rows:expr, $t:expr) => {
        match $rows {
            12 => $tile::<12, $p>($t),
            11 => $tile::<11, $p>($t),
            10 => $tile::<10, $p>($t),
            9 => $tile::<9, $p>($t),
            8 => $tile::<8, $p>($t),
            7 => $tile::<7, $p>($t),
            6 => $tile::<6, $p>($t),
            5 => $tile::<5, $p>($t),
            4 => $tile::<4, $p>($t),
            3 => $tile::<3, $p>($t),
            2 => $tile::<2, $p>($t),
            _ => $tile::<1, $p>($t),
        }
    };
}

mod columns;
mod gemm;
mod gemm_bf16;
mod gemm_w8a16;
mod math;
mod quantize;

use std::ops::Range;

use crate::dispatch::KernelSet;
use crate::dot::VecDotKernel;
use crate::gemm::{Acts, OutPtr, PackedWeights};
use crate::table::{Entry, Kernel, KernelTable};
use crate::GgmlType;

/// The entries of `crate::table::KernelTable` this set provides itself.
pub(crate) const CLAIMS: &[Kernel] = &[
    Kernel::GemmPanels,
    Kernel::GemmF16Panels,
    Kernel::GemmW8A16Panels,
    Kernel::ScoresF16,
    Kernel::WeightedSumF16,
    Kernel::ScoresTile,
    Kernel::AccumulateTile,
    Kernel::Activate,
    Kernel::SiluMul,
    Kernel::ExpShiftedSum,
    Kernel::ScoresF32,
    Kernel::WeightedSumF32,
    Kernel::TileStats,
    Kernel::RescaledSums,
    Kernel::StoreColumns,
    Kernel::LayerNorm,
    Kernel::QuantizeActsRow,
];

/// Replaces the entries of `t` (AVX2's table) that this set does better.
///
/// # Safety
///
/// The CPU must support AVX2, FMA, F16C, AVX512F, AVX512BW, AVX512VL and
/// AVX512-VNNI: the entries execute them.
pub(crate) unsafe fn override_table(t: &mut KernelTable) {
    let by = KernelSet::Avx512;
    t.gemm_panels = Entry { f: gemm_panels, by };
    t.gemm_f16_panels = Entry {
        f: gemm_f16_panels,
        by,
    };
    t.gemm_w8a16_panels = Entry {
        f: gemm_w8a16_panels,
        by,
    };
    t.scores_f16 = Entry { f: scores_f16, by };
    t.weighted_sum_f16 = Entry {
        f: weighted_sum_f16,
        by,
    };
    t.scores_tile = Entry { f: scores_tile, by };
    t.accumulate_tile = Entry {
        f: accumulate_tile,
        by,
    };
    t.activate = Entry { f: activate, by };
    t.silu_mul = Entry { f: silu_mul, by };
    t.exp_shifted_sum = Entry {
        f: exp_shifted_sum,
        by,
    };
    t.layer_norm = Entry { f: layer_norm, by };
    t.scores_f32 = Entry { f: scores_f32, by };
    t.weighted_sum_f32 = Entry {
        f: weighted_sum_f32,
        by,
    };
    t.tile_stats = Entry { f: tile_stats, by };
    t.rescaled_sums = Entry {
        f: rescaled_sums,
        by,
    };
    t.store_columns = Entry {
        f: store_columns,
        by,
    };
    t.quantize_acts_row = Entry {
        f: quantize_acts_row,
        by,
    };
}

/// As `crate::quant::q8_0::quantize_acts_row`, a block per two registers.
fn quantize_acts_row(x: &[f32], out: &mut [u8], facts: &mut [crate::quant::q8_0::ActBlockFacts]) {
    // SAFETY: see below.
    unsafe { quantize::quantize_acts_row(x, out, facts) }
}

/// As `crate::attend_f32::scores`, vectorized over 16 lanes.
fn scores_f32(a: &crate::attend_f32::Heads, heads: usize, out: &mut [f32]) {
    // SAFETY: see below.
    unsafe { columns::scores_f32(a, heads, out) }
}

/// As `crate::attend_f32::weighted_sum`, vectorized over 16 lanes.
fn weighted_sum_f32(a: &crate::attend_f32::Heads, p: &[f32], out: &mut [f32]) {
    // SAFETY: see below.
    unsafe { columns::weighted_sum_f32(a, p, out) }
}

/// As `crate::columns::tile_stats`, over 16 lanes.
fn tile_stats(
    values: &mut [f32],
    width: usize,
    bias: Option<&[f32]>,
    max: &mut [f32],
    sums: &mut [f32],
) {
    // SAFETY: see below.
    unsafe { columns::tile_stats(values, width, bias, max, sums) }
}

/// As `crate::columns::rescaled_sums`, over 16 lanes.
fn rescaled_sums(
    block_max: &[f32],
    block_sums: &[f32],
    width: usize,
    max: &[f32],
    sums: &mut [f32],
) {
    // SAFETY: see below.
    unsafe { columns::rescaled_sums(block_max, block_sums, width, max, sums) }
}

/// As `crate::columns::store_columns`, transposing in registers.
fn store_columns(part: &[[f32; 16]], span: usize, out: &mut [f32], width: usize, c0: usize) {
    // SAFETY: see below; the wrapper `crate::columns::store_columns`
    // checked the tile's bounds, the kernel's contract.
    unsafe { columns::store_columns(part, span, out, width, c0) }
}

// SAFETY (the four below, and the five above): reachable only through a table
// `override_table` filled, which its caller does only on a CPU with
// AVX-512 (and AVX2, FMA).

/// As `crate::math::activate`, over 16 lanes.
fn activate(act: crate::math::Activation, xs: &mut [f32]) {
    // SAFETY: see above.
    unsafe { math::activate(act, xs) }
}

/// As `crate::math::silu_mul`, over 16 lanes.
fn silu_mul(gate: &[f32], up: &mut [f32]) {
    // SAFETY: see above.
    unsafe { math::silu_mul(gate, up) }
}

/// As `crate::attend_tile::scores_tile`, four rows of 64 lanes at a time.
fn scores_tile(q: &[f32], head_dim: usize, kt: &[f32], scale: f32, out: &mut [f32]) {
    // SAFETY: see above.
    unsafe { math::scores_tile(q, head_dim, kt, scale, out) }
}

/// As `crate::attend_tile::accumulate_tile`, over 16 lanes.
fn accumulate_tile(p: &[f32], spans: &[(u32, u32)], alpha: &[f32], v: &[f32], acc: &mut [f32]) {
    // SAFETY: see above.
    unsafe { math::accumulate_tile(p, spans, alpha, v, acc) }
}

/// As `crate::math::exp_shifted_sum`, over 16 lanes.
fn exp_shifted_sum(xs: &mut [f32], max: f32) -> f32 {
    // SAFETY: see above.
    unsafe { math::exp_shifted_sum(xs, max) }
}

/// As `crate::math::layer_norm`'s body, over 16 lanes (the sums keep
/// their eight partial sums).
fn layer_norm(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    // SAFETY: see above.
    unsafe { math::layer_norm(x, w, b, eps) }
}

/// As `crate::attend::weighted_sum_f16`: AVX2's code built with 32 vector
/// registers, so that four heads share each converted value row.
fn weighted_sum_f16(p: &[f32], heads: usize, runs: &[crate::attend::F16Rows], out: &mut [f32]) {
    // SAFETY: as in `scores_f16`.
    unsafe { super::avx2::attend::weighted_sum_f16_512(p, heads, runs, out) }
}

/// As `crate::attend::scores_f16`: AVX2's code built with 32 vector
/// registers, so that four heads share each converted key chunk.
fn scores_f16(
    q: &[f32],
    heads: usize,
    runs: &[crate::attend::F16Rows],
    head_dim: usize,
    scale: f32,
    out: &mut [f32],
) {
    // SAFETY: reachable only through a table `override_table` filled,
    // which its caller does only on a CPU with AVX-512 (and AVX2, FMA,
    // F16C).
    unsafe { super::avx2::attend::scores_f16_512(q, heads, runs, head_dim, scale, out) }
}

/// # Safety
/// As `crate::gemm::gemm_panels`.
unsafe fn gemm_panels(a: Acts, w: &PackedWeights, panels: Range<usize>, out: OutPtr) {
    // SAFETY: reachable only through a table `override_table` filled,
    // which its caller does only on a CPU with AVX-512 (and AVX2, FMA);
    // the output contract is the caller's.
    unsafe { gemm::gemm_panels(a, w, panels, out) }
}

/// # Safety
/// As `crate::gemm_w8a16::gemm_w8a16_panels` (checked by it).
unsafe fn gemm_w8a16_panels(
    a: Acts,
    w: &crate::gemm_w8a16::PackedW8,
    panels: Range<usize>,
    out: OutPtr,
) {
    // SAFETY: reachable only through a table `override_table` filled,
    // which its caller does only on a CPU with AVX-512 and VNNI; the
    // output contract is the caller's.
    unsafe { gemm_w8a16::gemm_w8a16_panels(a, w, panels, out) }
}

/// Most activation rows for which [`gemm_f16_panels`] converts the weights
/// in the micro-kernel: each converted line of 16 weights then serves one
/// tile of at most 12 rows, against every row through the buffer. On one
/// Zen 4 core nomic-embed's single sentences (~20 tokens) ran at
/// ~78 ms with the buffer, ~24% of it converting.
const F16_DIRECT_ROWS: usize = 48;

/// # Safety
/// As `crate::gemm_f16::gemm_f16_panels` (checked by it).
unsafe fn gemm_f16_panels(
    a: Acts,
    w: &crate::gemm_f16::PackedF16,
    panels: Range<usize>,
    out: OutPtr,
) {
    // SAFETY: as in `gemm_panels`; F16C is part of the set.
    unsafe {
        if a.m <= F16_DIRECT_ROWS {
            gemm::gemm_panels(a, w, panels, out)
        } else {
            let kernels = (
                super::avx2::f16_to_f32_entry as crate::table::F16ToF32Fn,
                gemm_panels as crate::table::GemmPanelsFn,
            );
            crate::gemm_f16::gemm_f16_panels_converting(a, w, panels, out, kernels)
        }
    }
}

/// The AVX-512 set's kernel for weights of type `w`: AVX2's, with this
/// set's own entries where it has them; `None` as for AVX2.
///
/// # Safety
///
/// The CPU must support AVX2, FMA, F16C, AVX512F, AVX512BW, AVX512VL and
/// AVX512-VNNI.
pub(crate) unsafe fn vec_dot_kernel(w: GgmlType) -> Option<VecDotKernel> {
    // SAFETY: the caller checked a superset of what the AVX2 set needs.
    let mut k = unsafe { super::avx2::vec_dot_kernel(w) }?;
    if let Some(f) = super::avx2::rows8::kernel8n_vnni_fn(w) {
        k.dot8n = Some(f);
    }
    if let Some(f) = super::avx2::rows8::kernel16n_vnni_fn(w) {
        k.dot16n = Some(f);
    }
    if let Some(f) = super::avx2::rows8::kernel8_vnni_fn(w) {
        k.dot8 = Some(f);
    }
    if w == GgmlType::Mxfp4 {
        k.dot = super::avx2::mxfp4::mxfp4_q8_0_vnni;
    }
    Some(k)
}

/// Whether this set has an entry of its own (not AVX2's) for `w`.
pub(crate) fn overrides(w: GgmlType) -> bool {
    super::avx2::rows8::kernel8n_vnni_fn(w).is_some()
        || super::avx2::rows8::kernel8_vnni_fn(w).is_some()
        || super::avx2::rows8::kernel16n_vnni_fn(w).is_some()
        || w == GgmlType::Mxfp4
}

/// `crate::gemm_bf16::gemm_bf16_panels`' product.
///
/// # Safety
/// AVX512F/BW/VL and AVX512-BF16 (checked by the caller through
/// `crate::gemm_bf16::available`); the shapes and output contract of
/// `gemm_bf16_panels`.
pub(crate) unsafe fn gemm_bf16(
    a: crate::gemm::Acts,
    w: &crate::gemm_bf16::PackedBf16,
    panels: Range<usize>,
    out: OutPtr,
) {
    // SAFETY: the caller's contract.
    unsafe { gemm_bf16::gemm_bf16(a, w, panels, out) }
}
