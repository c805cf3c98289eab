//! `crate::math`'s slice functions compiled with AVX-512 enabled: the same
//! scalar source as the portable and AVX2 builds, vectorized by the
//! compiler over 16 lanes instead of 8. Every operation there is an
//! exactly rounded IEEE operation, and the sums keep their eight
//! interleaved partial sums (`lane_sum`), so the bits equal the portable
//! build's.

mod body {
    crate::math::slice_fns!();
}

use crate::math::Activation;

/// # Safety
/// The CPU must support AVX512F, AVX2 and FMA.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn activate(act: Activation, xs: &mut [f32]) {
    body::activate(act, xs)
}

/// # Safety
/// The CPU must support AVX512F, AVX2 and FMA.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn silu_mul(gate: &[f32], up: &mut [f32]) {
    body::silu_mul(gate, up)
}

/// # Safety
/// The CPU must support AVX512F, AVX2 and FMA.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn exp_shifted_sum(xs: &mut [f32], max: f32) -> f32 {
    body::exp_shifted_sum(xs, max)
}

/// # Safety
/// The CPU must support AVX512F, AVX2 and FMA.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn layer_norm(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    body::layer_norm(x, w, b, eps)
}

mod tile {
    crate::attend_tile::tile_fns!();
}

/// `crate::attend_tile::scores_tile`'s body: four rows of 64 lanes at a
/// time (16 accumulators of 16 lanes).
///
/// # Safety
/// The CPU must support AVX512F, AVX2 and FMA.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn scores_tile(
    q: &[f32],
    head_dim: usize,
    kt: &[f32],
    scale: f32,
    out: &mut [f32],
) {
    tile::scores_tile::<4, 64>(q, head_dim, kt, scale, out)
}

/// `crate::attend_tile::accumulate_tile`'s body, over 16 lanes.
///
/// # Safety
/// The CPU must support AVX512F, AVX2 and FMA.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn accumulate_tile(
    p: &[f32],
    spans: &[(u32, u32)],
    alpha: &[f32],
    v: &[f32],
    acc: &mut [f32],
) {
    tile::accumulate_tile(p, spans, alpha, v, acc)
}
