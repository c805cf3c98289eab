//! `crate::columns`' and `crate::attend_f32`'s loops compiled with AVX2
//! and FMA enabled: the same scalar source, vectorized by the compiler
//! (eight lanes), with `mul_add` as the FMA instruction, so the bits equal
//! the portable build's.

mod body {
    crate::columns::column_fns!();
}

mod attend_body {
    crate::attend_f32::attend_f32_fns!();
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn tile_stats(
    values: &mut [f32],
    width: usize,
    bias: Option<&[f32]>,
    max: &mut [f32],
    sums: &mut [f32],
) {
    body::tile_stats(values, width, bias, max, sums)
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn rescaled_sums(
    block_max: &[f32],
    block_sums: &[f32],
    width: usize,
    max: &[f32],
    sums: &mut [f32],
) {
    body::rescaled_sums(block_max, block_sums, width, max, sums)
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn store_columns(
    part: &[[f32; 16]],
    span: usize,
    out: &mut [f32],
    width: usize,
    c0: usize,
) {
    body::store_columns(part, span, out, width, c0)
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn scores_f32(a: &crate::attend_f32::Heads, heads: usize, out: &mut [f32]) {
    attend_body::scores(a, heads, out)
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn weighted_sum_f32(a: &crate::attend_f32::Heads, p: &[f32], out: &mut [f32]) {
    attend_body::weighted_sum(a, p, out)
}
