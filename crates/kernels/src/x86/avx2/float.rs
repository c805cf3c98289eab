//! AVX2 dot products of float weights (F32, F16, BF16) with f32
//! activations; the SIMD counterparts of `crate::dot::float`.
//!
//! The scalar reference's 32 lanes are four 8-lane vectors, lane `i % 32`
//! in vector `(i % 32) / 8`: each full chunk of 32 values is one multiply
//! and one add (not an FMA) per vector. A last partial chunk goes through
//! the scalar expression into the same lanes (adding a zero to the unused
//! lanes instead would turn a -0.0 there into +0.0). The fold
//! `lane[i] += lane[i + w]` for `w = 16, 8, 4, 2, 1` is done with vectors,
//! the lower lanes always the first operand, as in the scalar code.

use std::arch::x86_64::*;

use super::load_u8;
use crate::quant::float::f16_le;

/// Values per chunk: the scalar reference's lane count.
const LANES: usize = 32;

/// A float weight format.
trait Weights {
    /// Bytes per value.
    const SIZE: usize;
    /// Eight values from the front of `b` (at least `8 * SIZE` bytes).
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2, FMA and F16C.
    unsafe fn load8(b: &[u8]) -> __m256;
    /// One value, as the scalar reference decodes it.
    fn decode(b: &[u8]) -> f32;
}

struct F32;
impl Weights for F32 {
    const SIZE: usize = 4;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn load8(b: &[u8]) -> __m256 {
        _mm256_castsi256_ps(load_u8(b))
    }
    fn decode(b: &[u8]) -> f32 {
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
}

struct F16;
impl Weights for F16 {
    const SIZE: usize = 2;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn load8(b: &[u8]) -> __m256 {
        let b = &b[..16];
        // SAFETY: `b` is 16 readable bytes; `loadu` has no alignment
        // requirement.
        let h = unsafe { _mm_loadu_si128(b.as_ptr().cast()) };
        // Exact, NaNs quieted with their payload, like `f16_le`.
        _mm256_cvtph_ps(h)
    }
    fn decode(b: &[u8]) -> f32 {
        f16_le([b[0], b[1]])
    }
}

struct Bf16;
impl Weights for Bf16 {
    const SIZE: usize = 2;
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn load8(b: &[u8]) -> __m256 {
        let b = &b[..16];
        // SAFETY: `b` is 16 readable bytes; `loadu` has no alignment
        // requirement.
        let h = unsafe { _mm_loadu_si128(b.as_ptr().cast()) };
        // bf16 is the top half of an f32.
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
    }
    fn decode(b: &[u8]) -> f32 {
        f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)
    }
}

/// The dot product of `W` weights with little-endian f32 activations, over
/// as many values as both slices hold.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn lanes_dot<W: Weights>(w: &[u8], a: &[u8]) -> f32 {
    let n = (w.len() / W::SIZE).min(a.len() / 4);
    let (w, a) = (&w[..n * W::SIZE], &a[..n * 4]);
    let (mut w_chunks, mut a_chunks) = (w.chunks_exact(W::SIZE * LANES), a.chunks_exact(4 * LANES));
    let mut acc = [_mm256_setzero_ps(); 4];
    for (wc, ac) in (&mut w_chunks).zip(&mut a_chunks) {
        for (k, acc) in acc.iter_mut().enumerate() {
            let wv = W::load8(&wc[8 * W::SIZE * k..]);
            let av = _mm256_castsi256_ps(load_u8(&ac[32 * k..]));
            *acc = _mm256_add_ps(*acc, _mm256_mul_ps(wv, av));
        }
    }
    // Both slices hold exactly n values: the remainders are the same last
    // n % 32 values, for lanes 0.. .
    let (w_tail, a_tail) = (w_chunks.remainder(), a_chunks.remainder());
    if !w_tail.is_empty() {
        let mut lanes = [0.0f32; LANES];
        for (v, chunk) in acc.iter().zip(lanes.chunks_exact_mut(8)) {
            // SAFETY: `chunk` is 8 writable f32; `storeu` has no alignment
            // requirement.
            unsafe { _mm256_storeu_ps(chunk.as_mut_ptr(), *v) };
        }
        let tail = w_tail.chunks_exact(W::SIZE).zip(a_tail.chunks_exact(4));
        for (s, (wv, av)) in lanes.iter_mut().zip(tail) {
            *s += W::decode(wv) * f32::from_le_bytes([av[0], av[1], av[2], av[3]]);
        }
        for (v, chunk) in acc.iter_mut().zip(lanes.chunks_exact(8)) {
            // SAFETY: `chunk` is 8 readable f32; `loadu` has no alignment
            // requirement.
            *v = unsafe { _mm256_loadu_ps(chunk.as_ptr()) };
        }
    }
    // Fold 16 and 8: whole vectors.
    let x = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
    // Fold 4: lanes 0..4 += lanes 4..8.
    let x = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps::<1>(x));
    // Fold 2: lanes 0, 1 += lanes 2, 3.
    let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    // Fold 1: lane 0 += lane 1.
    let x = _mm_add_ss(x, _mm_shuffle_ps::<0b01>(x, x));
    _mm_cvtss_f32(x)
}

/// F32 weights x F32 activations.
pub(super) fn f32_f32(w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: handed out only by `avx2::vec_dot_kernel`, whose callers have
    // checked that the CPU supports AVX2, FMA and F16C.
    unsafe { lanes_dot::<F32>(w, a) }
}

/// F16 weights x F32 activations.
pub(super) fn f16_f32(w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: as in `f32_f32`.
    unsafe { lanes_dot::<F16>(w, a) }
}

/// BF16 weights x F32 activations.
pub(super) fn bf16_f32(w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: as in `f32_f32`.
    unsafe { lanes_dot::<Bf16>(w, a) }
}
