//! `crate::math`'s slice functions compiled with AVX2 and FMA enabled: the
//! same scalar source, vectorized by the compiler. Every operation there is
//! an exactly rounded IEEE operation (`mul_add` becomes the FMA
//! instruction), so the bits equal the portable build's.

mod body {
    crate::math::slice_fns!();
}

use crate::math::Activation;

/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn activate(act: Activation, xs: &mut [f32]) {
    body::activate(act, xs)
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn silu_mul(gate: &[f32], up: &mut [f32]) {
    body::silu_mul(gate, up)
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn exp_shifted_sum(xs: &mut [f32], max: f32) -> f32 {
    body::exp_shifted_sum(xs, max)
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn layer_norm(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    body::layer_norm(x, w, b, eps)
}

mod tile {
    crate::attend_tile::tile_fns!();
}

/// `crate::attend_tile::scores_tile`'s body: two rows of 32 lanes at a time.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn scores_tile(
    q: &[f32],
    head_dim: usize,
    kt: &[f32],
    scale: f32,
    out: &mut [f32],
) {
    tile::scores_tile::<2, 32>(q, head_dim, kt, scale, out)
}

/// `crate::attend_tile::accumulate_tile`'s body.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn accumulate_tile(
    p: &[f32],
    spans: &[(u32, u32)],
    alpha: &[f32],
    v: &[f32],
    acc: &mut [f32],
) {
    tile::accumulate_tile(p, spans, alpha, v, acc)
}
