//! aarch64 kernels: the NEON set (Advanced SIMD, every ARMv8-A CPU) and, on
//! top of it in the override-the-next-slower-set style of `crate::x86`,
//! the dotprod set (FEAT_DotProd: `sdot`) and the i8mm set (FEAT_I8MM:
//! `smmla`). `crate::dispatch` hands them out after checking the CPU's
//! features; each mirrors the scalar reference in `crate::dot` bit for bit.
//!
//! How the bits are kept (as on x86): each block's integer dot product is
//! exact in any order, so SIMD computes it freely; the f32 arithmetic after
//! it is the scalar reference's, operation for operation: separate
//! multiplies and adds (`fmul`, `fadd`, never `fmla`, which fuses), f16
//! scales converted exactly (`fcvtl`: quiet NaNs, payload kept, as
//! `quant::float::f16_le`), and the per-row sums added term by term in
//! block order. AArch64's Advanced SIMD arithmetic is IEEE (no flush to
//! zero unless FPCR.FZ is set, which Linux and macOS leave clear).
//!
//! The integer instructions of the faster sets (`sdot`, `smmla`) and the
//! f16 conversion are written as inline assembly: their `core::arch`
//! intrinsics are not stable Rust yet. Each such helper is `unsafe` only
//! for the CPU feature it needs.

mod attend;
mod gemm;
mod gemm_bf16;
mod one_row;
mod quantize;
mod rows8;
mod rows8_k;

use std::arch::aarch64::*;
use std::arch::asm;

use crate::dispatch::KernelSet;
use crate::dot::{scalar_vec_dot_kernel, VecDotKernel};
use crate::table::{Entry, Kernel, KernelTable};
use crate::GgmlType;

/// How a kernel set forms exact i32 sums of signed byte products.
pub(crate) trait Mul8 {
    /// `acc` plus, in lane `i`, `a[4i..4i+4] . b[4i..4i+4]` (the lanes of
    /// `sdot`).
    ///
    /// # Safety
    ///
    /// The CPU must support the set's instructions (`sdot` for [`Sdot`]).
    unsafe fn dot4(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t;

    /// `acc` plus, in every lane `i`, `a[4i..4i+4] . b[4L..4L+4]` (`sdot`
    /// by element: the same four bytes of `b` against each lane).
    ///
    /// # Safety
    ///
    /// As [`Mul8::dot4`].
    unsafe fn dot4_lane<const L: i32>(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t;
}

/// Baseline NEON: widening multiplies and pairwise adds, the same lanes
/// as `sdot` (every product and sum exact: `|a * b| <= 2^14`).
pub(crate) struct Neon;

impl Mul8 for Neon {
    #[inline(always)]
    unsafe fn dot4(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // SAFETY: NEON is part of every aarch64 target.
        unsafe {
            let lo = vpaddlq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b)));
            let hi = vpaddlq_s16(vmull_high_s8(a, b));
            vaddq_s32(acc, vpaddq_s32(lo, hi))
        }
    }

    #[inline(always)]
    unsafe fn dot4_lane<const L: i32>(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // SAFETY: NEON is part of every aarch64 target.
        unsafe {
            let b = vreinterpretq_s8_s32(vdupq_laneq_s32::<L>(vreinterpretq_s32_s8(b)));
            Self::dot4(acc, a, b)
        }
    }
}

/// FEAT_DotProd: one `sdot` (sixteen products, four per lane).
pub(crate) struct Sdot;

impl Mul8 for Sdot {
    #[inline(always)]
    unsafe fn dot4(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // SAFETY: the caller runs on a CPU with FEAT_DotProd; the
        // instruction only reads and writes these registers.
        unsafe {
            asm!(
                ".arch_extension dotprod",
                "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                acc = inout(vreg) acc,
                a = in(vreg) a,
                b = in(vreg) b,
                options(pure, nomem, nostack, preserves_flags)
            );
        }
        acc
    }

    #[inline(always)]
    unsafe fn dot4_lane<const L: i32>(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // SAFETY: as in `dot4`.
        unsafe {
            asm!(
                ".arch_extension dotprod",
                "sdot {acc:v}.4s, {a:v}.16b, {b:v}.4b[{l}]",
                acc = inout(vreg) acc,
                a = in(vreg) a,
                b = in(vreg) b,
                l = const L,
                options(pure, nomem, nostack, preserves_flags)
            );
        }
        acc
    }
}

/// `acc` plus the 2x2 product of the rows of `a` (two runs of eight bytes)
/// with the rows of `b`: lanes `[a0.b0, a0.b1, a1.b0, a1.b1]` (`smmla`).
///
/// # Safety
///
/// The CPU must support FEAT_I8MM.
#[inline(always)]
pub(crate) unsafe fn smmla(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    // SAFETY: the caller runs on a CPU with FEAT_I8MM; the instruction only
    // reads and writes these registers.
    unsafe {
        asm!(
            ".arch_extension i8mm",
            "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// Four f16 bit patterns to f32, exactly (`fcvtl`: NaNs quieted with the
/// payload kept, as `quant::float::f16_le`; subnormals kept).
#[inline(always)]
pub(crate) fn f16x4(h: uint16x4_t) -> float32x4_t {
    let r: float32x4_t;
    // SAFETY: `fcvtl` is base ARMv8-A (FP and Advanced SIMD, part of every
    // aarch64 target); it only reads and writes these registers.
    unsafe {
        asm!(
            "fcvtl {r:v}.4s, {h:v}.4h",
            r = out(vreg) r,
            h = in(vreg) h,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    r
}

/// Eight little-endian f16 values (16 bytes) to f32, as two vectors.
#[inline(always)]
pub(crate) fn f16x8(b: &[u8; 16]) -> [float32x4_t; 2] {
    // SAFETY: `b` is 16 readable bytes; NEON is part of every aarch64 target.
    let h = unsafe { vld1q_u16(b.as_ptr().cast()) };
    // SAFETY: as above.
    unsafe { [f16x4(vget_low_u16(h)), f16x4(vget_high_u16(h))] }
}

/// The 16 bytes at `s`.
#[inline(always)]
pub(crate) fn load_u8(s: &[u8; 16]) -> uint8x16_t {
    // SAFETY: `s` is 16 readable bytes; `ld1` has no alignment requirement.
    unsafe { vld1q_u8(s.as_ptr()) }
}

/// The 16 signed bytes at `s`.
#[inline(always)]
pub(crate) fn load_i8(s: &[i8; 16]) -> int8x16_t {
    // SAFETY: `s` is 16 readable bytes; `ld1` has no alignment requirement.
    unsafe { vld1q_s8(s.as_ptr()) }
}

/// The first 16 bytes of `s` (panics if shorter; callers slice fixed-size
/// block arrays at constant offsets, so the check folds away).
#[inline(always)]
pub(crate) fn load_at(s: &[u8]) -> uint8x16_t {
    load_u8(s[..16].try_into().expect("16 bytes"))
}

/// The first 16 signed bytes of `s`, as [`load_at`].
#[inline(always)]
pub(crate) fn load_i8_at(s: &[i8]) -> int8x16_t {
    load_i8(s[..16].try_into().expect("16 bytes"))
}

/// `set`'s kernel for weights of type `w` (the slower ARM sets' entries
/// where `set` has none of its own), or `None` if no ARM set has one (the
/// caller then falls back to the scalar reference).
///
/// # Safety
///
/// The CPU must support `set`'s features: the returned safe `fn`s execute
/// them.
pub(crate) unsafe fn vec_dot_kernel(set: KernelSet, w: GgmlType) -> Option<VecDotKernel> {
    let slower = match set {
        KernelSet::Neon => None,
        // SAFETY: the caller checked a superset of NEON's features.
        KernelSet::Dotprod => unsafe { vec_dot_kernel(KernelSet::Neon, w) },
        // SAFETY: the caller checked a superset of dotprod's features.
        KernelSet::I8mm => unsafe { vec_dot_kernel(KernelSet::Dotprod, w) },
        _ => return None,
    };
    if slower.is_none() && !overrides(set, w) {
        return None;
    }
    // The scalar kernel has no group or four-row kernels.
    let mut k = slower.or_else(|| scalar_vec_dot_kernel(w))?;
    if let Some(f) = one_row::kernel(set, w) {
        k.dot = f;
    }
    if let Some(f) = rows8::kernel8(set, w).or_else(|| rows8_k::kernel8(set, w)) {
        k.dot8 = Some(f);
    }
    if let Some(f) = rows8::kernel8n(set, w).or_else(|| rows8_k::kernel8n(set, w)) {
        k.dot8n = Some(f);
    }
    Some(k)
}

/// Whether `set` has an entry of its own for `w` that the next slower set
/// does not.
pub(crate) fn overrides(set: KernelSet, w: GgmlType) -> bool {
    one_row::kernel(set, w).is_some()
        || rows8::kernel8(set, w)
            .or_else(|| rows8_k::kernel8(set, w))
            .is_some()
        || rows8::kernel8n(set, w)
            .or_else(|| rows8_k::kernel8n(set, w))
            .is_some()
}

/// The entries of `crate::table::KernelTable` `set` provides itself.
pub(crate) fn claims(set: KernelSet) -> &'static [Kernel] {
    match set {
        KernelSet::Neon => &[
            Kernel::QuantizeQ8,
            Kernel::QuantizeActsRow,
            Kernel::QuantizeQ8K,
            Kernel::ScoresF16,
            Kernel::WeightedSumF16,
            Kernel::GemmPanels,
            Kernel::GemmF16Panels,
            Kernel::F16ToF32,
        ],
        _ => &[],
    }
}

/// Replaces the entries of `t` (the next slower set's table) that `set`
/// does better.
///
/// # Safety
///
/// The CPU must support `set`'s features: the entries execute them.
pub(crate) unsafe fn override_table(set: KernelSet, t: &mut KernelTable) {
    let by = set;
    if set == KernelSet::Neon {
        t.quantize_q8 = Entry {
            f: quantize::quantize_q8,
            by,
        };
        t.quantize_acts_row = Entry {
            f: quantize::quantize_acts_row,
            by,
        };
        t.quantize_q8k = Entry {
            f: quantize::quantize_q8k,
            by,
        };
        t.scores_f16 = Entry {
            f: attend::scores_f16,
            by,
        };
        t.weighted_sum_f16 = Entry {
            f: attend::weighted_sum_f16,
            by,
        };
        t.gemm_panels = Entry {
            f: gemm::gemm_panels,
            by,
        };
        t.gemm_f16_panels = Entry {
            f: gemm_f16_panels,
            by,
        };
        t.f16_to_f32 = Entry {
            f: gemm::f16_to_f32,
            by,
        };
    }
}

/// `crate::gemm_bf16::gemm_bf16_panels`' product with `bfmmla`.
///
/// # Safety
/// FEAT_BF16 (checked by the caller through
/// `crate::gemm_bf16::available`); the shapes and output contract of
/// `gemm_bf16_panels`.
pub(crate) unsafe fn gemm_bf16(
    a: crate::gemm::Acts,
    w: &crate::gemm_bf16::PackedBf16,
    panels: std::ops::Range<usize>,
    out: crate::gemm::OutPtr,
) {
    // SAFETY: the caller's contract.
    unsafe { gemm_bf16::gemm_bf16(a, w, panels, out) }
}

/// As `crate::gemm_f16::gemm_f16_panels`: the panels converted with
/// `fcvtl`, then NEON's f32 micro-kernel (the same bits as the scalar
/// reference's conversion and chains of fused multiply-adds).
///
/// # Safety
/// As `crate::gemm_f16::gemm_f16_panels_scalar`.
unsafe fn gemm_f16_panels(
    a: crate::gemm::Acts,
    w: &crate::gemm_f16::PackedF16,
    panels: std::ops::Range<usize>,
    out: crate::gemm::OutPtr,
) {
    let kernels = (
        gemm::f16_to_f32 as crate::table::F16ToF32Fn,
        gemm::gemm_panels as crate::table::GemmPanelsFn,
    );
    // SAFETY: the caller's contract, passed on.
    unsafe { crate::gemm_f16::gemm_f16_panels_converting(a, w, panels, out, kernels) }
}
