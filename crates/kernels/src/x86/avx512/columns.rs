//! `crate::columns`' and `crate::attend_f32`'s loops compiled with AVX-512
//! enabled (the portable source, vectorized by the compiler over sixteen
//! lanes; the same bits), and the tile store as a 16 x 16 transposition in
//! registers.

// The portable tile store is replaced by the transposition below.
#[allow(dead_code)]
mod body {
    crate::columns::column_fns!();
}

mod attend_body {
    crate::attend_f32::attend_f32_fns!();
}

use std::arch::x86_64::*;

/// # Safety
/// The CPU must support AVX512F, AVX2 and FMA.
#[target_feature(enable = "avx512f,avx2,fma")]
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
/// The CPU must support AVX512F, AVX2 and FMA.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn rescaled_sums(
    block_max: &[f32],
    block_sums: &[f32],
    width: usize,
    max: &[f32],
    sums: &mut [f32],
) {
    body::rescaled_sums(block_max, block_sums, width, max, sums)
}

/// `crate::columns::store_columns`: the tile's sixteen token rows loaded
/// (missing ones as zeros), transposed (pairs of rows interleaved, then
/// quadruples within 128-bit lanes, then the lanes exchanged twice), and
/// each weight row's values stored with a mask of the tile's tokens.
///
/// # Safety
/// The CPU must support AVX512F; the arguments must pass the wrapper's
/// checks (`part.len() <= 16`, `span <= 16`, the tile inside `out`).
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn store_columns(
    part: &[[f32; 16]],
    span: usize,
    out: &mut [f32],
    width: usize,
    c0: usize,
) {
    let n = part.len().min(16);
    let a: [__m512; 16] = std::array::from_fn(|t| match part.get(t) {
        // SAFETY: a row of 16 f32; loadu has no alignment requirement.
        Some(row) => unsafe { _mm512_loadu_ps(row.as_ptr()) },
        None => _mm512_setzero_ps(),
    });
    // t[2i], t[2i + 1]: rows 2i and 2i + 1 interleaved, low and high pairs
    // of each 128-bit lane.
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]);
    }
    // u[4i + j], lane l: rows 4i..4i + 4 at column 4l + j.
    let mut u = [_mm512_setzero_ps(); 16];
    for i in 0..4 {
        u[4 * i] = _mm512_shuffle_ps::<0x44>(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_shuffle_ps::<0xEE>(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_shuffle_ps::<0x44>(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_shuffle_ps::<0xEE>(t[4 * i + 1], t[4 * i + 3]);
    }
    // Column 4l + j: lane l of u[j], u[4 + j], u[8 + j], u[12 + j].
    let mut cols = [_mm512_setzero_ps(); 16];
    for j in 0..4 {
        let v0 = _mm512_shuffle_f32x4::<0x88>(u[j], u[4 + j]);
        let v1 = _mm512_shuffle_f32x4::<0xDD>(u[j], u[4 + j]);
        let v2 = _mm512_shuffle_f32x4::<0x88>(u[8 + j], u[12 + j]);
        let v3 = _mm512_shuffle_f32x4::<0xDD>(u[8 + j], u[12 + j]);
        cols[j] = _mm512_shuffle_f32x4::<0x88>(v0, v2);
        cols[8 + j] = _mm512_shuffle_f32x4::<0xDD>(v0, v2);
        cols[4 + j] = _mm512_shuffle_f32x4::<0x88>(v1, v3);
        cols[12 + j] = _mm512_shuffle_f32x4::<0xDD>(v1, v3);
    }
    let mask = ((1u32 << n) - 1) as __mmask16;
    for (r, col) in cols.iter().enumerate().take(span.min(16)) {
        // SAFETY: the wrapper checked that row r's tokens c0..c0 + n are
        // inside `out`; the masked-off lanes are not accessed.
        unsafe { _mm512_mask_storeu_ps(out.as_mut_ptr().add(r * width + c0), mask, *col) };
    }
}

/// # Safety
/// The CPU must support AVX512F, AVX2 and FMA.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn scores_f32(a: &crate::attend_f32::Heads, heads: usize, out: &mut [f32]) {
    attend_body::scores(a, heads, out)
}

/// # Safety
/// The CPU must support AVX512F, AVX2 and FMA.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn weighted_sum_f32(a: &crate::attend_f32::Heads, p: &[f32], out: &mut [f32]) {
    attend_body::weighted_sum(a, p, out)
}
