//! AVX2 (with FMA and F16C) dot products, bit-identical to the scalar
//! reference kernels of `crate::dot`; the integer parts follow the ideas of
//! ggml's `ggml-cpu/arch/x86/quants.c` and `ggml-cpu/simd-mappings.h` of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>, with every
//! product arranged so that no byte values can saturate (see each kernel).
//!
//! How the bits are kept: each block's integer dot product is exact in any
//! order, so SIMD computes it freely; the f32 arithmetic after it (the
//! per-block terms, the sequential sum of the terms, the 32 float lanes and
//! their folding) is the scalar reference's, operation for operation, with
//! separate multiplies and adds (no FMA) and the same roundings
//! (`cvtepi32_ps` and `cvtph_ps` round and convert exactly as `as f32` and
//! `f16_le` do). Only the payload of a NaN may differ, where the compiler
//! swaps the operands of a commutative operation.
//!
//! Every function here is `unsafe` only because it needs AVX2, FMA and F16C;
//! [`vec_dot_kernel`] hands out safe wrappers, and is itself `unsafe` so that
//! only `crate::dispatch`, after checking the CPU, can call it.

pub(crate) mod attend;
mod columns;
pub(crate) mod convert;
mod float;
pub(crate) mod gemm;
mod gemm_w8a16;
mod iq4;
mod k_quants;
mod legacy;
pub(crate) mod math;
pub(crate) mod mxfp4;
pub(crate) mod quantize;
pub(crate) mod rows8;
mod table;

pub(crate) use table::{f16_to_f32 as f16_to_f32_entry, override_table};

use std::arch::x86_64::*;

use crate::dot::{scalar_vec_dot_kernel, Dot4Fn, VecDotKernel};
use crate::GgmlType;

/// The AVX2 kernel for weights of type `w`, or `None` if this set has none
/// of its own (the caller then falls back to the scalar reference).
///
/// # Safety
///
/// The CPU must support AVX2, FMA and F16C: the returned safe `fn`s execute
/// those instructions.
pub(crate) unsafe fn vec_dot_kernel(w: GgmlType) -> Option<VecDotKernel> {
    if !has_kernel(w) {
        return None;
    }
    // Types with only an eight-row kernel (Q2_K, Q3_K) keep the scalar
    // one-row `dot`, used for rows that do not fill a group.
    let scalar = scalar_vec_dot_kernel(w)?;
    Some(VecDotKernel {
        act_type: scalar.act_type,
        dot: kernel_fn(w).unwrap_or(scalar.dot),
        dot4: kernel4_fn(w),
        group_rows: rows8::ROWS,
        dot8: rows8::kernel8_fn(w),
        dot8n: rows8::kernel8n_fn(w),
        dot16: None,
        dot16n: rows8::kernel16n_fn(w),
    })
}

/// Whether this set has a kernel of its own for weights of type `w`.
pub(crate) fn has_kernel(w: GgmlType) -> bool {
    kernel_fn(w).is_some() || rows8::kernel8_fn(w).is_some()
}

/// A kernel entry point, as in [`VecDotKernel::dot`].
type DotFn = fn(&[u8], &[u8]) -> f32;

fn kernel_fn(w: GgmlType) -> Option<DotFn> {
    use GgmlType::*;
    Some(match w {
        F32 => float::f32_f32 as DotFn,
        F16 => float::f16_f32,
        Bf16 => float::bf16_f32,
        Q4_0 => legacy::q4_0_q8_0,
        Q4_1 => legacy::q4_1_q8_1,
        Q5_0 => legacy::q5_0_q8_0,
        Q5_1 => legacy::q5_1_q8_1,
        Q8_0 => legacy::q8_0_q8_0,
        Mxfp4 => mxfp4::mxfp4_q8_0,
        Iq4Nl => iq4::iq4_nl_q8_0,
        Iq4Xs => iq4::iq4_xs_q8_k,
        Q4K => k_quants::q4_k_q8_k,
        Q5K => k_quants::q5_k_q8_k,
        Q6K => k_quants::q6_k_q8_k,
        _ => return None,
    })
}

fn kernel4_fn(w: GgmlType) -> Option<Dot4Fn> {
    use GgmlType::*;
    Some(match w {
        Q4_0 => legacy::q4_0_q8_0_x4 as Dot4Fn,
        Q4_1 => legacy::q4_1_q8_1_x4,
        Q5_0 => legacy::q5_0_q8_0_x4,
        Q5_1 => legacy::q5_1_q8_1_x4,
        Q8_0 => legacy::q8_0_q8_0_x4,
        Q4K => k_quants::q4_k_q8_k_x4,
        Q5K => k_quants::q5_k_q8_k_x4,
        // Q6_K has none: `k_quants::dot4` measured slower than four calls
        // of its `dot` (the four inlined super-block bodies spill).
        _ => return None,
    })
}

/// The first 32 bytes of `s` (panics if shorter; callers slice fixed-size
/// block arrays at constant offsets, so the check folds away).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn load_u8(s: &[u8]) -> __m256i {
    let s = &s[..32];
    // SAFETY: `s` is 32 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
}

/// The first 32 values of `s`, as [`load_u8`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn load_i8(s: &[i8]) -> __m256i {
    let s = &s[..32];
    // SAFETY: `s` is 32 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
}

/// The first 16 bytes of `s` (panics if shorter, as [`load_u8`]).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn load_u8x16(s: &[u8]) -> __m128i {
    let s = &s[..16];
    // SAFETY: `s` is 16 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm_loadu_si128(s.as_ptr().cast()) }
}

/// Eight f16 bit patterns to f32, exactly (NaNs quieted, payload kept, like
/// `quant::float::f16_le`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn f16x8(h: &[u16; 8]) -> __m256 {
    // SAFETY: `h` is 16 readable bytes; `loadu` has no alignment requirement.
    let v = unsafe { _mm_loadu_si128(h.as_ptr().cast()) };
    _mm256_cvtph_ps(v)
}

/// Sum of the eight i32 lanes (wrapping, which the callers' bounds rule
/// out).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn hsum_i32(v: __m256i) -> i32 {
    let x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let x = _mm_add_epi32(x, _mm_shuffle_epi32::<0b01_00_11_10>(x));
    let x = _mm_add_epi32(x, _mm_shuffle_epi32::<0b10_11_00_01>(x));
    _mm_cvtsi128_si32(x)
}

/// Lane `i` of the result is the sum of the eight i32 lanes of `v[i]`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn hsum_i32x8(v: &[__m256i; 8]) -> __m256i {
    // Within each 128-bit half, hadd(a, b) = [a0+a1, a2+a3, b0+b1, b2+b3];
    // two rounds leave, per half, one partial sum of each of four vectors.
    let h01 = _mm256_hadd_epi32(v[0], v[1]);
    let h23 = _mm256_hadd_epi32(v[2], v[3]);
    let h45 = _mm256_hadd_epi32(v[4], v[5]);
    let h67 = _mm256_hadd_epi32(v[6], v[7]);
    let h0123 = _mm256_hadd_epi32(h01, h23);
    let h4567 = _mm256_hadd_epi32(h45, h67);
    let lo = _mm256_permute2x128_si256::<0x20>(h0123, h4567);
    let hi = _mm256_permute2x128_si256::<0x31>(h0123, h4567);
    _mm256_add_epi32(lo, hi)
}
