//! Row conversions with F16C: f16 -> f32 (`vcvtph2ps`), exact for every
//! finite value and infinity, as the scalar `quant::float::f16_to_f32`.

use std::arch::x86_64::{__m128i, _mm256_cvtph_ps, _mm256_storeu_ps, _mm_loadu_si128};

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
