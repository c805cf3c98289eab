//! The AVX2 set's entries of `crate::table::KernelTable`: safe wrappers
//! around this set's `#[target_feature]` kernels, handed out only by
//! [`override_table`], which only `crate::table` calls after checking the
//! CPU.

use std::ops::Range;

use crate::attend::F16Rows;
use crate::dispatch::KernelSet;
use crate::gemm::{Acts, OutPtr, PackedWeights};
use crate::gemm_f16::PackedF16;
use crate::gemm_w8a16::PackedW8;
use crate::math::Activation;
use crate::quant::{BlockQ8K, QK, QK_K};
use crate::table::{Entry, F16ToF32Fn, GemmPanelsFn, KernelTable};

/// Replaces every entry of `t` with this set's own.
///
/// # Safety
///
/// The CPU must support AVX2, FMA and F16C: the entries execute them.
pub(crate) unsafe fn override_table(t: &mut KernelTable) {
    let by = KernelSet::Avx2;
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
    t.f16_keys_to_block = Entry {
        f: f16_keys_to_block,
        by,
    };
    t.f16_rows_to_f32 = Entry {
        f: f16_rows_to_f32,
        by,
    };
    t.activate = Entry { f: activate, by };
    t.silu_mul = Entry { f: silu_mul, by };
    t.layer_norm = Entry { f: layer_norm, by };
    t.exp_shifted_sum = Entry {
        f: exp_shifted_sum,
        by,
    };
    t.quantize_q8 = Entry { f: quantize_q8, by };
    t.quantize_acts_row = Entry {
        f: quantize_acts_row,
        by,
    };
    t.quantize_q8k = Entry {
        f: quantize_q8k,
        by,
    };
    t.f16_to_f32 = Entry { f: f16_to_f32, by };
    t.quantize_row = Entry {
        f: quantize_row,
        by,
    };
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
}

/// As `crate::quant::quantize`: the same source compiled with AVX2 (the
/// k-quant searches' eight lanes in one register).
fn quantize_row(t: crate::GgmlType, src: &[f32], dst: &mut [u8]) {
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn body(t: crate::GgmlType, src: &[f32], dst: &mut [u8]) {
        crate::quant::quantize_row_inline(t, src, dst)
    }
    // SAFETY: reachable only through a table `override_table` filled, which
    // its caller does only on a CPU with AVX2, FMA and F16C.
    unsafe { body(t, src, dst) }
}

/// As `crate::attend_f32::scores`, vectorized over 8 lanes.
fn scores_f32(a: &crate::attend_f32::Heads, heads: usize, out: &mut [f32]) {
    // SAFETY: see above.
    unsafe { super::columns::scores_f32(a, heads, out) }
}

/// As `crate::attend_f32::weighted_sum`, vectorized over 8 lanes.
fn weighted_sum_f32(a: &crate::attend_f32::Heads, p: &[f32], out: &mut [f32]) {
    // SAFETY: see above.
    unsafe { super::columns::weighted_sum_f32(a, p, out) }
}

/// As `crate::columns::tile_stats`, over 8 lanes.
fn tile_stats(
    values: &mut [f32],
    width: usize,
    bias: Option<&[f32]>,
    max: &mut [f32],
    sums: &mut [f32],
) {
    // SAFETY: see above.
    unsafe { super::columns::tile_stats(values, width, bias, max, sums) }
}

/// As `crate::columns::rescaled_sums`, over 8 lanes.
fn rescaled_sums(
    block_max: &[f32],
    block_sums: &[f32],
    width: usize,
    max: &[f32],
    sums: &mut [f32],
) {
    // SAFETY: see above.
    unsafe { super::columns::rescaled_sums(block_max, block_sums, width, max, sums) }
}

/// As `crate::columns::store_columns`.
fn store_columns(part: &[[f32; 16]], span: usize, out: &mut [f32], width: usize, c0: usize) {
    // SAFETY: see above.
    unsafe { super::columns::store_columns(part, span, out, width, c0) }
}

// SAFETY (every wrapper below): these functions are reachable only through
// a table `override_table` filled, which its caller does only on a CPU with
// AVX2, FMA and F16C; the remaining contracts are the wrapped kernels' own
// and are passed through unchanged.

/// # Safety
/// As `crate::gemm::gemm_panels`.
unsafe fn gemm_panels(a: Acts, w: &PackedWeights, panels: Range<usize>, out: OutPtr) {
    // SAFETY: see above; the output contract is the caller's.
    unsafe { super::gemm::gemm_panels(a, w, panels, out) }
}

/// # Safety
/// As `crate::gemm_w8a16::gemm_w8a16_panels` (checked by it).
unsafe fn gemm_w8a16_panels(a: Acts, w: &PackedW8, panels: Range<usize>, out: OutPtr) {
    // SAFETY: see above; the output contract is the caller's.
    unsafe { super::gemm_w8a16::gemm_w8a16_panels(a, w, panels, out) }
}

/// # Safety
/// As `crate::gemm_f16::gemm_f16_panels` (checked by it).
unsafe fn gemm_f16_panels(a: Acts, w: &PackedF16, panels: Range<usize>, out: OutPtr) {
    let kernels = (f16_to_f32 as F16ToF32Fn, gemm_panels as GemmPanelsFn);
    // SAFETY: see above; the output contract is the caller's.
    unsafe { crate::gemm_f16::gemm_f16_panels_converting(a, w, panels, out, kernels) }
}

fn scores_f16(
    q: &[f32],
    heads: usize,
    runs: &[F16Rows],
    head_dim: usize,
    scale: f32,
    out: &mut [f32],
) {
    // SAFETY: see above.
    unsafe { super::attend::scores_f16(q, heads, runs, head_dim, scale, out) }
}

fn weighted_sum_f16(p: &[f32], heads: usize, runs: &[F16Rows], out: &mut [f32]) {
    // SAFETY: see above.
    unsafe { super::attend::weighted_sum_f16(p, heads, runs, out) }
}

fn activate(act: Activation, xs: &mut [f32]) {
    // SAFETY: see above.
    unsafe { super::math::activate(act, xs) }
}

fn silu_mul(gate: &[f32], up: &mut [f32]) {
    // SAFETY: see above.
    unsafe { super::math::silu_mul(gate, up) }
}

fn layer_norm(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    // SAFETY: see above.
    unsafe { super::math::layer_norm(x, w, b, eps) }
}

fn scores_tile(q: &[f32], head_dim: usize, kt: &[f32], scale: f32, out: &mut [f32]) {
    // SAFETY: see above.
    unsafe { super::math::scores_tile(q, head_dim, kt, scale, out) }
}

fn accumulate_tile(p: &[f32], spans: &[(u32, u32)], alpha: &[f32], v: &[f32], acc: &mut [f32]) {
    // SAFETY: see above.
    unsafe { super::math::accumulate_tile(p, spans, alpha, v, acc) }
}

fn exp_shifted_sum(xs: &mut [f32], max: f32) -> f32 {
    // SAFETY: see above.
    unsafe { super::math::exp_shifted_sum(xs, max) }
}

/// Non-finite blocks go to the scalar reference, whose NaN handling the
/// vector code does not reproduce (a documented edge, not a fallback of
/// the hot path).
fn quantize_q8(x: &[f32; QK]) -> (f32, [i8; QK]) {
    // SAFETY: see above.
    unsafe { super::quantize::q8_block(x) }
        .unwrap_or_else(|| crate::quant::q8_0::quantize_q8_scalar(x))
}

/// `crate::quant::q8_0::quantize_acts_row`, a block at a time in one pass.
fn quantize_acts_row(x: &[f32], out: &mut [u8], facts: &mut [crate::quant::q8_0::ActBlockFacts]) {
    // SAFETY: see above.
    unsafe { super::quantize::quantize_acts_row(x, out, facts) }
}

/// As `quantize_q8`: non-finite blocks go to the scalar reference.
fn quantize_q8k(x: &[f32; QK_K]) -> BlockQ8K {
    // SAFETY: see above.
    unsafe { super::quantize::q8k_block(x) }.unwrap_or_else(|| BlockQ8K::from_f32_scalar(x))
}

/// As `crate::attend_tile::f16_keys_to_block`, 8 x 8 values at a time.
fn f16_keys_to_block(
    src: &[u8],
    stride: usize,
    n: usize,
    head_dim: usize,
    kt: &mut [f32],
    lane0: usize,
) {
    // SAFETY: see above; the wrapper checked the arguments.
    unsafe { super::convert::f16_keys_to_block(src, stride, n, head_dim, kt, lane0) }
}

/// As `crate::attend_tile::f16_rows_to_f32`.
fn f16_rows_to_f32(src: &[u8], stride: usize, n: usize, head_dim: usize, dst: &mut [f32]) {
    // SAFETY: see above; the wrapper checked the arguments.
    unsafe { super::convert::f16_rows_to_f32(src, stride, n, head_dim, dst) }
}

pub(crate) fn f16_to_f32(src: &[u8], dst: &mut [f32]) {
    // SAFETY: see above.
    unsafe { super::convert::f16_to_f32(src, dst) }
}
