//! Row conversions with F16C: f16 -> f32 (`vcvtph2ps`), exact for every
//! finite value and infinity, as the scalar `quant::float::f16_to_f32`.

use std::arch::x86_64::{
    __m128i, __m256, _mm256_cvtph_ps, _mm256_permute2f128_ps, _mm256_shuffle_ps, _mm256_storeu_ps,
    _mm256_unpackhi_ps, _mm256_unpacklo_ps, _mm_loadu_si128,
};

/// Converts `dst.len()` little-endian f16 values from `src`.
///
/// # Safety
/// The CPU must support F16C and AVX (checked by `crate::dispatch`).
#[target_feature(enable = "avx2,f16c")]
pub(crate) unsafe fn f16_to_f32(src: &[u8], dst: &mut [f32]) {
    let n = dst.len().min(src.len() / 2);
    let mut i = 0;
    while i + 8 <= n {
        let bytes = &src[2 * i..2 * i + 16];
        let out = &mut dst[i..i + 8];
        // SAFETY: `bytes` holds exactly 16 readable bytes and `out` 8
        // writable f32s (both bounds-checked slices); unaligned loads and
        // stores are used, and F16C/AVX are enabled on this function.
        unsafe {
            let h = _mm_loadu_si128(bytes.as_ptr().cast::<__m128i>());
            _mm256_storeu_ps(out.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    crate::quant::float::f16_to_f32(&src[2 * i..2 * n], &mut dst[i..n]);
}

/// The eight columns of the 8 x 8 matrix whose rows are `r`.
#[target_feature(enable = "avx2")]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    // Pairs of rows interleaved, then quadruples, then the halves swapped.
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ]
}

/// `crate::attend_tile::f16_keys_to_block`: eight rows times eight values
/// converted and transposed at a time, the rest one value at a time.
///
/// # Safety
/// The CPU must support F16C and AVX2; the arguments are the wrapper's
/// (checked there).
#[target_feature(enable = "avx2,f16c")]
pub(crate) unsafe fn f16_keys_to_block(
    src: &[u8],
    stride: usize,
    n: usize,
    head_dim: usize,
    kt: &mut [f32],
    lane0: usize,
) {
    use crate::attend_tile::KEY_BLOCK;
    let d8 = head_dim / 8 * 8;
    let mut j = 0;
    while j + 8 <= n {
        for d0 in (0..d8).step_by(8) {
            let r: [__m256; 8] = std::array::from_fn(|i| {
                let b = &src[(j + i) * stride + 2 * d0..][..16];
                // SAFETY: `b` holds exactly 16 readable bytes (a
                // bounds-checked slice); F16C is enabled on this function.
                unsafe { _mm256_cvtph_ps(_mm_loadu_si128(b.as_ptr().cast::<__m128i>())) }
            });
            for (k, c) in transpose8(r).into_iter().enumerate() {
                let o = &mut kt[(d0 + k) * KEY_BLOCK + lane0 + j..][..8];
                // SAFETY: `o` is 8 writable f32s (a bounds-checked slice).
                unsafe { _mm256_storeu_ps(o.as_mut_ptr(), c) };
            }
        }
        let tail = &src[j * stride..];
        crate::attend_tile::reference::f16_keys_tail(tail, stride, 8, d8..head_dim, kt, lane0 + j);
        j += 8;
    }
    let rest = &src[j * stride..];
    crate::attend_tile::reference::f16_keys_tail(rest, stride, n - j, 0..head_dim, kt, lane0 + j);
}

/// `crate::attend_tile::f16_rows_to_f32`, each row by [`f16_to_f32`].
///
/// # Safety
/// The CPU must support F16C and AVX2; the arguments are the wrapper's
/// (checked there).
#[target_feature(enable = "avx2,f16c")]
pub(crate) unsafe fn f16_rows_to_f32(
    src: &[u8],
    stride: usize,
    n: usize,
    head_dim: usize,
    dst: &mut [f32],
) {
    for j in 0..n {
        let row = &src[j * stride..j * stride + 2 * head_dim];
        // SAFETY: this function's features are f16_to_f32's.
        unsafe { f16_to_f32(row, &mut dst[j * head_dim..(j + 1) * head_dim]) };
    }
}
