//! Runtime choice of kernels: the CPU's features are detected once, and
//! [`vec_dot_kernel`] hands out the fastest kernel this CPU can run, in the
//! manner of memchr's `src/arch/` dispatch
//! (<https://github.com/BurntSushi/memchr/tree/master/src/arch>).
//!
//! Every kernel set gives the same bits as the scalar reference
//! ([`scalar_vec_dot_kernel`], always compiled; see `dot` for the summation
//! order that makes this possible), so the choice changes speed only.
//!
//! Each set is built by overriding the next slower one (x86_64: avx512 <-
//! avx2 <- scalar; aarch64: i8mm <- dotprod <- neon <- scalar): a kernel a
//! set does not have of its own is the slower set's,
//! never silently the scalar reference's. The other hot kernels (GEMM,
//! attention, math, activation quantization, f16 conversion) are reached
//! through the active set's [`crate::table::KernelTable`], built the same
//! way; nothing outside the tables asks which set is active.
//!
//! The environment variable `FERRITE_KERNELS`, read once, forces a set by
//! name (`scalar`, `avx2`, `avx512`, `neon`, `dotprod`, `i8mm`) for
//! debugging and tests; unset or empty means the fastest set available. A
//! set the CPU lacks (or of another architecture), or a name that is no
//! set, falls back to the fastest set; [`KernelRequest`] says which case
//! applies, for programs to report it (the `ferrite` binary refuses an
//! unknown name and warns about a set the CPU cannot run).

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
    /// AVX2's set plus AVX512F/BW/VL and AVX512-VNNI (Zen 4, Cascade Lake
    /// and later), overriding some of AVX2's kernels.
    Avx512,
    /// aarch64's Advanced SIMD (NEON), part of every ARMv8-A CPU.
    Neon,
    /// NEON's set plus the dot product instructions (`sdot`/`udot`,
    /// ARMv8.2-A's FEAT_DotProd: Apple M1 and later, Graviton 2 and later,
    /// Cortex-A76/A55 and later), overriding some of NEON's kernels.
    Dotprod,
    /// The dotprod set plus the 8-bit matrix multiplies (`smmla`,
    /// ARMv8.6-A's FEAT_I8MM: Apple M2 and later, Graviton 3 and later),
    /// overriding some of its kernels.
    I8mm,
}

impl KernelSet {
    /// Every set of this architecture, slowest first (each the next slower
    /// one with some entries overridden).
    #[cfg(target_arch = "x86_64")]
    pub const ALL: [KernelSet; 3] = [KernelSet::Scalar, KernelSet::Avx2, KernelSet::Avx512];
    /// Every set of this architecture, slowest first (each the next slower
    /// one with some entries overridden).
    #[cfg(target_arch = "aarch64")]
    pub const ALL: [KernelSet; 4] = [
        KernelSet::Scalar,
        KernelSet::Neon,
        KernelSet::Dotprod,
        KernelSet::I8mm,
    ];
    /// Every set of this architecture: the scalar reference only.
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    pub const ALL: [KernelSet; 1] = [KernelSet::Scalar];

    /// The name used in logs and benchmark output.
    pub fn name(self) -> &'static str {
        match self {
            KernelSet::Scalar => "scalar",
            KernelSet::Avx2 => "avx2",
            KernelSet::Avx512 => "avx512",
            KernelSet::Neon => "neon",
            KernelSet::Dotprod => "dotprod",
            KernelSet::I8mm => "i8mm",
        }
    }

    /// The CPU features the set needs, as the CPU manuals name them.
    pub fn needs(self) -> &'static str {
        match self {
            KernelSet::Scalar => "nothing",
            KernelSet::Avx2 => "AVX2, FMA and F16C",
            KernelSet::Avx512 => "AVX2, FMA, F16C, AVX512F, AVX512BW, AVX512VL and AVX512-VNNI",
            KernelSet::Neon => "NEON (ASIMD)",
            KernelSet::Dotprod => "NEON and the dot product extension (FEAT_DotProd)",
            KernelSet::I8mm => "NEON, FEAT_DotProd and the int8 matrix multiply (FEAT_I8MM)",
        }
    }

    /// Whether this CPU can run the set (detected once, then cached).
    pub fn is_supported(self) -> bool {
        match self {
            KernelSet::Scalar => true,
            KernelSet::Avx2 => features().avx2,
            KernelSet::Avx512 => features().avx2 && features().avx512vnni,
            KernelSet::Neon => features().neon,
            KernelSet::Dotprod => features().neon && features().dotprod,
            KernelSet::I8mm => features().neon && features().dotprod && features().i8mm,
        }
    }

    /// This set's kernel for weights of type `w`: its own where it has one,
    /// the scalar reference otherwise. `None` if the CPU cannot run the set
    /// or there is no kernel for `w` at all.
    pub fn vec_dot_kernel(self, w: GgmlType) -> Option<VecDotKernel> {
        match self {
            KernelSet::Scalar => scalar_vec_dot_kernel(w),
            KernelSet::Avx2 => avx2_kernel(w),
            KernelSet::Avx512 => avx512_kernel(w),
            KernelSet::Neon | KernelSet::Dotprod | KernelSet::I8mm => arm_kernel(self, w),
        }
    }

    /// Whether the set has a kernel of its own (not the scalar fallback)
    /// for weights of type `w`.
    pub fn has_own_kernel(self, w: GgmlType) -> bool {
        match self {
            KernelSet::Scalar => scalar_vec_dot_kernel(w).is_some(),
            KernelSet::Avx2 => avx2_has(w),
            KernelSet::Avx512 => avx2_has(w) || avx512_overrides(w),
            KernelSet::Neon | KernelSet::Dotprod | KernelSet::I8mm => {
                let arm = [KernelSet::Neon, KernelSet::Dotprod, KernelSet::I8mm];
                arm.into_iter()
                    .take_while(|&s| s != self)
                    .chain([self])
                    .any(|s| arm_overrides(s, w))
            }
        }
    }

    /// Whether this set has an entry of its own for `w` that the next
    /// slower set does not (what a new set adds; tested per set).
    pub fn overrides(self, w: GgmlType) -> bool {
        match self {
            KernelSet::Scalar => false,
            KernelSet::Avx2 => avx2_has(w),
            KernelSet::Avx512 => avx512_overrides(w),
            KernelSet::Neon | KernelSet::Dotprod | KernelSet::I8mm => arm_overrides(self, w),
        }
    }
}

/// The CPU features the kernel sets need.
#[derive(Clone, Copy, Debug)]
struct Features {
    /// AVX2, FMA and F16C, all three.
    avx2: bool,
    /// AVX512F, AVX512BW, AVX512VL and AVX512-VNNI, all four.
    avx512vnni: bool,
    /// aarch64 Advanced SIMD.
    neon: bool,
    /// aarch64 FEAT_DotProd (`sdot`, `udot`).
    dotprod: bool,
    /// aarch64 FEAT_I8MM (`smmla`, `ummla`, `usmmla`).
    i8mm: bool,
}

fn features() -> Features {
    static FEATURES: OnceLock<Features> = OnceLock::new();
    *FEATURES.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        let avx2 = std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c");
        #[cfg(target_arch = "x86_64")]
        let avx512vnni = std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl")
            && std::is_x86_feature_detected!("avx512vnni");
        #[cfg(not(target_arch = "x86_64"))]
        let (avx2, avx512vnni) = (false, false);
        #[cfg(target_arch = "aarch64")]
        let (neon, dotprod, i8mm) = (
            std::arch::is_aarch64_feature_detected!("neon"),
            std::arch::is_aarch64_feature_detected!("dotprod"),
            std::arch::is_aarch64_feature_detected!("i8mm"),
        );
        #[cfg(not(target_arch = "aarch64"))]
        let (neon, dotprod, i8mm) = (false, false, false);
        Features {
            avx2,
            avx512vnni,
            neon,
            dotprod,
            i8mm,
        }
    })
}

/// What `FERRITE_KERNELS` asks for, judged against a CPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelRequest {
    /// Unset or empty: the fastest set the CPU runs.
    Fastest(KernelSet),
    /// A set the CPU runs: that set.
    Forced(KernelSet),
    /// A set the CPU cannot run: the fastest it can (`used`) instead.
    Unsupported { asked: KernelSet, used: KernelSet },
    /// No set has this name: the fastest set (`used`) instead.
    Unknown { name: String, used: KernelSet },
}

impl KernelRequest {
    /// The request `value` (the variable's value, `None` if unset) makes
    /// on a CPU that runs the sets for which `supported` is true. Names
    /// are matched without regard to case or surrounding spaces.
    pub fn parse(value: Option<&str>, supported: impl Fn(KernelSet) -> bool) -> KernelRequest {
        let fastest = KernelSet::ALL
            .into_iter()
            .rev()
            .find(|&s| supported(s))
            .unwrap_or(KernelSet::Scalar);
        let name = value.map(str::trim).unwrap_or("");
        if name.is_empty() {
            return KernelRequest::Fastest(fastest);
        }
        match KernelSet::ALL
            .into_iter()
            .find(|s| s.name().eq_ignore_ascii_case(name))
        {
            Some(set) if supported(set) => KernelRequest::Forced(set),
            Some(asked) => KernelRequest::Unsupported {
                asked,
                used: fastest,
            },
            None => KernelRequest::Unknown {
                name: name.to_string(),
                used: fastest,
            },
        }
    }

    /// The request of this process's `FERRITE_KERNELS` on this CPU.
    pub fn from_env() -> KernelRequest {
        let value = std::env::var("FERRITE_KERNELS").ok();
        KernelRequest::parse(value.as_deref(), KernelSet::is_supported)
    }

    /// The set that runs.
    pub fn set(&self) -> KernelSet {
        match *self {
            KernelRequest::Fastest(s) | KernelRequest::Forced(s) => s,
            KernelRequest::Unsupported { used, .. } | KernelRequest::Unknown { used, .. } => used,
        }
    }
}

/// The kernel set in use: the fastest this CPU supports, unless
/// `FERRITE_KERNELS` (read on the first call) names another it runs.
pub fn active_kernel_set() -> KernelSet {
    static ACTIVE: OnceLock<KernelSet> = OnceLock::new();
    *ACTIVE.get_or_init(|| KernelRequest::from_env().set())
}

/// Name of the kernel set in use ("avx512" / "avx2" / "scalar"), for logs
/// and benches.
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
fn avx512_kernel(w: GgmlType) -> Option<VecDotKernel> {
    if !KernelSet::Avx512.is_supported() {
        return None;
    }
    // SAFETY: AVX2, FMA, F16C, AVX512F/BW/VL and VNNI were detected just
    // above.
    let own = unsafe { crate::x86::avx512::vec_dot_kernel(w) };
    own.or_else(|| scalar_vec_dot_kernel(w))
}

#[cfg(not(target_arch = "x86_64"))]
fn avx512_kernel(_: GgmlType) -> Option<VecDotKernel> {
    None
}

#[cfg(target_arch = "x86_64")]
fn avx512_overrides(w: GgmlType) -> bool {
    crate::x86::avx512::overrides(w)
}

#[cfg(not(target_arch = "x86_64"))]
fn avx512_overrides(_: GgmlType) -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
fn avx2_has(w: GgmlType) -> bool {
    crate::x86::avx2::has_kernel(w)
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_has(_: GgmlType) -> bool {
    false
}

#[cfg(target_arch = "aarch64")]
fn arm_kernel(set: KernelSet, w: GgmlType) -> Option<VecDotKernel> {
    if !set.is_supported() {
        return None;
    }
    // SAFETY: `is_supported` detected every feature `set` needs just above.
    let own = unsafe { crate::aarch64::vec_dot_kernel(set, w) };
    own.or_else(|| scalar_vec_dot_kernel(w))
}

#[cfg(not(target_arch = "aarch64"))]
fn arm_kernel(_: KernelSet, _: GgmlType) -> Option<VecDotKernel> {
    None
}

#[cfg(target_arch = "aarch64")]
fn arm_overrides(set: KernelSet, w: GgmlType) -> bool {
    crate::aarch64::overrides(set, w)
}

#[cfg(not(target_arch = "aarch64"))]
fn arm_overrides(_: KernelSet, _: GgmlType) -> bool {
    false
}

/// Converts little-endian f16 values (`src`, 2 bytes each) to f32 (`dst`),
/// `dst.len()` of them, with F16C where the active kernel set has it. Exact
/// for every finite value and infinity, like the scalar conversion.
pub fn f16_to_f32_row(src: &[u8], dst: &mut [f32]) {
    let n = dst.len().min(src.len() / 2);
    let dst = &mut dst[..n];
    (crate::table::active().f16_to_f32.f)(&src[..2 * n], dst);
}

#[cfg(test)]
mod table_tests {
    use super::*;
    use crate::quant::ALL_TYPES;

    /// Each set is the next slower one with some entries overridden: it
    /// has every kernel and entry point the slower set has, with the same
    /// activation format, so no type silently drops to slower code.
    #[test]
    fn every_set_keeps_what_the_slower_set_has() {
        for pair in KernelSet::ALL.windows(2) {
            let (slow, fast) = (pair[0], pair[1]);
            if !fast.is_supported() {
                eprintln!(
                    "SKIPPED {}: not supported by this CPU, not checked",
                    fast.name()
                );
                continue;
            }
            let mut overridden = 0;
            for t in ALL_TYPES {
                let Some(s) = slow.vec_dot_kernel(t) else {
                    assert!(fast.vec_dot_kernel(t).is_none(), "{t}");
                    continue;
                };
                let f = fast
                    .vec_dot_kernel(t)
                    .unwrap_or_else(|| panic!("{}: no kernel for {t}", fast.name()));
                assert_eq!(f.act_type, s.act_type, "{t}");
                let name = fast.name();
                assert!(
                    s.dot4.is_none() || f.dot4.is_some(),
                    "{name} {t}: lost dot4"
                );
                assert!(
                    s.dot8.is_none() || f.dot8.is_some(),
                    "{name} {t}: lost dot8"
                );
                assert!(
                    s.dot8n.is_none() || f.dot8n.is_some(),
                    "{name} {t}: lost dot8n"
                );
                assert!(
                    s.dot16n.is_none() || f.dot16n.is_some(),
                    "{name} {t}: lost dot16n"
                );
                assert!(
                    !slow.has_own_kernel(t) || fast.has_own_kernel(t),
                    "{name} {t}: falls back to scalar"
                );
                overridden += usize::from(fast.overrides(t));
            }
            eprintln!(
                "{}: {overridden} types with entries of its own",
                fast.name()
            );
            assert!(overridden > 0, "{} overrides nothing", fast.name());
        }
    }
}

#[cfg(test)]
mod convert_tests {
    use super::*;

    #[test]
    fn f16_row_conversion_matches_scalar_for_every_pattern() {
        let src: Vec<u8> = (0..=u16::MAX).flat_map(|b| b.to_le_bytes()).collect();
        for set in KernelSet::ALL {
            let Some(t) = set.table() else {
                eprintln!("SKIPPED {}: not supported by this CPU", set.name());
                continue;
            };
            for len in [0usize, 1, 7, 8, 9, 65536] {
                let mut fast = vec![0f32; len];
                let mut slow = vec![0f32; len];
                (t.f16_to_f32.f)(&src[..2 * len], &mut fast);
                crate::quant::float::f16_to_f32(&src[..2 * len], &mut slow);
                for (i, (a, b)) in fast.iter().zip(&slow).enumerate() {
                    assert!(
                        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                        "{} bits {i:#x}: {a} vs {b}",
                        set.name()
                    );
                }
            }
        }
        let (mut a, mut b) = (vec![0f32; 9], vec![0f32; 9]);
        f16_to_f32_row(&src[..18], &mut a);
        crate::quant::float::f16_to_f32(&src[..18], &mut b);
        assert_eq!(a, b);
    }
}

#[cfg(test)]
mod request_tests {
    use super::*;

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn kernel_requests_name_what_runs() {
        use KernelRequest::*;
        use KernelSet::*;
        let avx2_cpu = |s: KernelSet| s != Avx512;
        assert_eq!(KernelRequest::parse(None, avx2_cpu), Fastest(Avx2));
        assert_eq!(KernelRequest::parse(Some(" "), avx2_cpu), Fastest(Avx2));
        assert_eq!(
            KernelRequest::parse(Some("scalar"), avx2_cpu),
            Forced(Scalar)
        );
        assert_eq!(KernelRequest::parse(Some("AVX2"), avx2_cpu), Forced(Avx2));
        let unsupported = KernelRequest::parse(Some("avx512"), avx2_cpu);
        assert_eq!(
            unsupported,
            Unsupported {
                asked: Avx512,
                used: Avx2
            }
        );
        assert_eq!(unsupported.set(), Avx2);
        let unknown = KernelRequest::parse(Some("neon"), |_| true);
        assert_eq!(
            unknown,
            Unknown {
                name: "neon".into(),
                used: Avx512
            }
        );
        let scalar_cpu = |s: KernelSet| s == Scalar;
        assert_eq!(KernelRequest::parse(Some("avx2"), scalar_cpu).set(), Scalar);
    }

    /// The same rules with aarch64's sets (`KernelSet::ALL` is per
    /// architecture: an x86 name is no set there).
    #[test]
    #[cfg(target_arch = "aarch64")]
    fn kernel_requests_name_what_runs() {
        use KernelRequest::*;
        use KernelSet::*;
        let dotprod_cpu = |s: KernelSet| s != I8mm;
        assert_eq!(KernelRequest::parse(None, dotprod_cpu), Fastest(Dotprod));
        assert_eq!(
            KernelRequest::parse(Some("NEON"), dotprod_cpu),
            Forced(Neon)
        );
        assert_eq!(
            KernelRequest::parse(Some("i8mm"), dotprod_cpu),
            Unsupported {
                asked: I8mm,
                used: Dotprod
            }
        );
        assert_eq!(
            KernelRequest::parse(Some("avx2"), |_| true),
            Unknown {
                name: "avx2".into(),
                used: I8mm
            }
        );
    }
}
