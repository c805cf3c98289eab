//! Runtime choice of kernels: the CPU's features are detected once, and
//! [`vec_dot_kernel`] hands out the fastest kernel this CPU can run, in the
//! manner of memchr's `src/arch/` dispatch
//! (<https://github.com/BurntSushi/memchr/tree/master/src/arch>).
//!
//! Every kernel set gives the same bits as the scalar reference
//! ([`scalar_vec_dot_kernel`], always compiled; see `dot` for the summation
//! order that makes this possible), so the choice changes speed only.
//!
//! The environment variable `FERRITE_KERNELS=scalar`, read once, forces the
//! scalar reference (for debugging and tests); any other value, or none,
//! means the fastest set available.

use std::sync::OnceLock;

use crate::dot::VecDotKernel;
use crate::GgmlType;

pub use crate::dot::scalar_vec_dot_kernel;

/// A family of kernels, each tied to the CPU features it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KernelSet {
    /// The portable scalar reference; runs everywhere.
    Scalar,
    /// x86_64 with AVX2, FMA and F16C (Haswell, Zen and later).
    Avx2,
}

impl KernelSet {
    /// Every set, slowest first.
    pub const ALL: [KernelSet; 2] = [KernelSet::Scalar, KernelSet::Avx2];

    /// The name used in logs and benchmark output.
    pub fn name(self) -> &'static str {
        match self {
            KernelSet::Scalar => "scalar",
            KernelSet::Avx2 => "avx2",
        }
    }

    /// Whether this CPU can run the set (detected once, then cached).
    pub fn is_supported(self) -> bool {
        match self {
            KernelSet::Scalar => true,
            KernelSet::Avx2 => features().avx2,
        }
    }

    /// This set's kernel for weights of type `w`: its own where it has one,
    /// the scalar reference otherwise. `None` if the CPU cannot run the set
    /// or there is no kernel for `w` at all.
    pub fn vec_dot_kernel(self, w: GgmlType) -> Option<VecDotKernel> {
        match self {
            KernelSet::Scalar => scalar_vec_dot_kernel(w),
            KernelSet::Avx2 => avx2_kernel(w),
        }
    }

    /// Whether the set has a kernel of its own (not the scalar fallback)
    /// for weights of type `w`.
    pub fn has_own_kernel(self, w: GgmlType) -> bool {
        match self {
            KernelSet::Scalar => scalar_vec_dot_kernel(w).is_some(),
            KernelSet::Avx2 => avx2_has(w),
        }
    }
}

/// The CPU features the kernel sets need.
#[derive(Clone, Copy, Debug)]
struct Features {
    /// AVX2, FMA and F16C, all three.
    avx2: bool,
}

fn features() -> Features {
    static FEATURES: OnceLock<Features> = OnceLock::new();
    *FEATURES.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        let avx2 = std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c");
        #[cfg(not(target_arch = "x86_64"))]
        let avx2 = false;
        Features { avx2 }
    })
}

/// The kernel set in use: the fastest this CPU supports, unless
/// `FERRITE_KERNELS=scalar` (read on the first call) asks for the reference.
pub fn active_kernel_set() -> KernelSet {
    static ACTIVE: OnceLock<KernelSet> = OnceLock::new();
    *ACTIVE.get_or_init(|| {
        let forced_scalar = std::env::var_os("FERRITE_KERNELS").is_some_and(|v| v == "scalar");
        if forced_scalar {
            return KernelSet::Scalar;
        }
        KernelSet::ALL
            .into_iter()
            .rev()
            .find(|s| s.is_supported())
            .unwrap_or(KernelSet::Scalar)
    })
}

/// Name of the kernel set in use ("avx2" / "scalar"), for logs and benches.
pub fn kernel_set_name() -> &'static str {
    active_kernel_set().name()
}

/// The fastest kernel for weights of type `w` on this CPU (bit-identical to
/// [`scalar_vec_dot_kernel`]), or `None` if we have no kernel for `w`.
pub fn vec_dot_kernel(w: GgmlType) -> Option<VecDotKernel> {
    active_kernel_set().vec_dot_kernel(w)
}

#[cfg(target_arch = "x86_64")]
fn avx2_kernel(w: GgmlType) -> Option<VecDotKernel> {
    if !KernelSet::Avx2.is_supported() {
        return None;
    }
    // SAFETY: AVX2, FMA and F16C were detected on this CPU just above.
    let own = unsafe { crate::x86::avx2::vec_dot_kernel(w) };
    own.or_else(|| scalar_vec_dot_kernel(w))
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_kernel(_: GgmlType) -> Option<VecDotKernel> {
    None
}

#[cfg(target_arch = "x86_64")]
fn avx2_has(w: GgmlType) -> bool {
    crate::x86::avx2::has_kernel(w)
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_has(_: GgmlType) -> bool {
    false
}

/// Converts little-endian f16 values (`src`, 2 bytes each) to f32 (`dst`),
/// `dst.len()` of them, with F16C where the active kernel set has it. Exact
/// for every finite value and infinity, like the scalar conversion.
pub fn f16_to_f32_row(src: &[u8], dst: &mut [f32]) {
    let n = dst.len().min(src.len() / 2);
    let dst = &mut dst[..n];
    #[cfg(target_arch = "x86_64")]
    if active_kernel_set() == KernelSet::Avx2 {
        // SAFETY: the AVX2 set is active only if AVX2, FMA and F16C were
        // detected on this CPU.
        unsafe { crate::x86::avx2::convert::f16_to_f32(src, dst) };
        return;
    }
    crate::quant::float::f16_to_f32(&src[..2 * n], dst);
}

#[cfg(test)]
mod convert_tests {
    use super::*;

    #[test]
    fn f16_row_conversion_matches_scalar_for_every_pattern() {
        let src: Vec<u8> = (0..=u16::MAX).flat_map(|b| b.to_le_bytes()).collect();
        for len in [0usize, 1, 7, 8, 9, 65536] {
            let mut fast = vec![0f32; len];
            let mut slow = vec![0f32; len];
            f16_to_f32_row(&src[..2 * len], &mut fast);
            crate::quant::float::f16_to_f32(&src[..2 * len], &mut slow);
            for (i, (a, b)) in fast.iter().zip(&slow).enumerate() {
                assert!(
                    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                    "bits {i:#x}: {a} vs {b}"
                );
            }
        }
    }
}
