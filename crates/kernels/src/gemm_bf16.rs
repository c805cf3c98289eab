//! An optional BF16 GEMM for the encoders, on CPUs with AVX512-BF16 (Zen 4
//! and later, Cooper Lake / Sapphire Rapids and later): the weights are
//! rounded to bf16 once, when the model is loaded, the activations when a
//! product starts (both to nearest, ties to even), and `vdpbf16ps`
//! multiplies two pairs of bf16 values exactly and adds both products to
//! an f32 sum per lane: 32 multiply-adds per instruction where an f32
//! `vfmadd` does 16, at the same rate (one 512-bit instruction per cycle
//! on Zen 4), so up to twice the f32 GEMM's throughput.
//!
//! **Not** the f32 path's results: the inputs of every product lose their
//! last 16 mantissa bits. It is therefore never chosen by itself, only by
//! an explicit option (`--bf16`), and it is measured for quality against
//! sentence-transformers in f32 (tests/embed_bf16.rs). Within one machine
//! the results are deterministic (the same chain of operations for a row
//! whatever the batch or thread split), but there is no scalar reference:
//! on a CPU without AVX512-BF16 the option is refused, not emulated.
//!
//! Layout: [`NR`] output features per panel as for f32; each line holds
//! one *pair* of inputs `(2j, 2j + 1)` of the panel's 16 features as 16
//! 32-bit words, bf16 `2j` in the low half (so an activation pair
//! broadcast as one 32-bit word lines up with it). An odd `k` is padded
//! with a zero input.

use std::ops::Range;

use crate::gemm::{Acts, OutPtr, NR};
use crate::quant::bf16_bits_from_f32;

/// An `n x k` weight matrix rounded to bf16, in panels of [`NR`] output
/// features and pairs of inputs: panel `p`, pair `j`, lane `l` at word
/// `(p * pairs + j) * NR + l`. Features past `n` are zero.
#[derive(Clone, Default)]
pub struct PackedBf16 {
    n: usize,
    k: usize,
    words: Vec<u32>,
}

impl PackedBf16 {
    /// Packs the `n x k` matrix whose row `j` `row(j, out)` writes.
    pub fn from_rows(n: usize, k: usize, mut row: impl FnMut(usize, &mut [f32])) -> PackedBf16 {
        let pairs = k.div_ceil(2);
        let mut words = vec![0u32; n.div_ceil(NR) * pairs * NR];
        let mut buf = vec![0f32; k];
        for j in 0..n {
            row(j, &mut buf);
            let (p, lane) = (j / NR, j % NR);
            for (i, pair) in buf.chunks(2).enumerate() {
                words[(p * pairs + i) * NR + lane] = bf16_pair(pair);
            }
        }
        PackedBf16 { n, k, words }
    }

    /// Output features.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Input features.
    pub fn k(&self) -> usize {
        self.k
    }

    pub fn n_panels(&self) -> usize {
        self.n.div_ceil(NR)
    }

    /// Bytes held.
    pub fn size_bytes(&self) -> usize {
        self.words.len() * 4
    }

    /// Input pairs per row.
    // Only the SIMD kernels read it.
    #[cfg_attr(
        not(any(target_arch = "x86_64", target_arch = "aarch64")),
        allow(dead_code)
    )]
    fn pairs(&self) -> usize {
        self.k.div_ceil(2)
    }

    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    pub(crate) fn panel_ptr(&self, p: usize) -> *const u32 {
        self.words[p * self.pairs() * NR..].as_ptr()
    }
}

/// Whether this CPU runs [`gemm_bf16_panels`]: AVX-512 (F, BW, VL) with
/// BF16, and the AVX-512 kernel set not turned off (`FERRITE_KERNELS`); on
/// aarch64, FEAT_BF16 (`bfmmla`) with a NEON set (not `scalar`).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::dispatch::active_kernel_set() == crate::dispatch::KernelSet::Avx512
            && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(target_arch = "aarch64")]
    {
        crate::dispatch::active_kernel_set() != crate::dispatch::KernelSet::Scalar
            && std::arch::is_aarch64_feature_detected!("bf16")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// `C = A · Wᵀ` in bf16 (see the module) for the output features of
/// `panels`, every row of `a`, bias and activation as `out` says.
///
/// # Panics
/// If [`available`] is false (callers check it when the model is set up),
/// or the shapes do not fit.
///
/// # Safety
/// As [`crate::gemm::gemm_panels`]: `out.ptr` valid for writes at
/// `i * out.ld + j` for every row `i < a.m` and feature `j < w.n()` of
/// those panels, and those places the caller's alone during the call.
pub unsafe fn gemm_bf16_panels(a: Acts, w: &PackedBf16, panels: Range<usize>, out: OutPtr) {
    a.check(w.k);
    assert!(panels.end <= w.n_panels(), "panel range out of bounds");
    assert!(
        out.bias.is_none_or(|b| b.len() >= w.n),
        "bias shorter than n"
    );
    assert!(
        available(),
        "the bf16 GEMM needs AVX512-BF16 (x86-64) or FEAT_BF16 (aarch64)"
    );
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the CPU has AVX512F/BW/VL (the active AVX-512 set) and
    // BF16 (checked above); the shapes were checked; the output contract
    // is the caller's.
    unsafe {
        crate::x86::avx512::gemm_bf16(a, w, panels, out)
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: the CPU has FEAT_BF16 (checked above); the shapes were
    // checked; the output contract is the caller's.
    unsafe {
        crate::aarch64::gemm_bf16(a, w, panels, out)
    }
}

/// One or two values (`pair[0]`, and `pair[1]` or zero) rounded to bf16
/// (to nearest, ties to even) as one word of the packed layout: `pair[0]`
/// in the low half.
pub(crate) fn bf16_pair(pair: &[f32]) -> u32 {
    let bits = |v: f32| u32::from(bf16_bits_from_f32(v));
    bits(pair[0]) | pair.get(1).map_or(0, |&v| bits(v)) << 16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::math::Activation;

    fn bf16(v: f32) -> f64 {
        f64::from(f32::from_bits(u32::from(bf16_bits_from_f32(v)) << 16))
    }

    /// Every shape's result against the exact sum of the bf16-rounded
    /// products (f64): within the f32 rounding of a k-long sum, for row
    /// counts of every tile height, odd k, a last partial panel, split
    /// panel ranges, bias and activation.
    #[test]
    fn matches_the_rounded_products_within_f32_rounding() {
        if !available() {
            eprintln!("SKIPPED: this CPU has no AVX512-BF16 / FEAT_BF16 (or its SIMD set is off)");
            return;
        }
        let mut next = crate::xorshift(0x5eed_b16f);
        let mut rand = move || ((next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
        let mut checked = 0;
        for &(m, n, k) in &[
            (1, 16, 2),
            (5, 33, 7),
            (12, 64, 64),
            (13, 40, 385),
            (37, 100, 768),
            (100, 48, 31),
        ] {
            let a: Vec<f32> = (0..m * k).map(|_| rand()).collect();
            let w: Vec<f32> = (0..n * k).map(|_| rand()).collect();
            let bias: Vec<f32> = (0..n).map(|_| rand()).collect();
            let packed =
                PackedBf16::from_rows(n, k, |j, out| out.copy_from_slice(&w[j * k..(j + 1) * k]));
            for (act, with_bias) in [(None, false), (Some(Activation::Relu), true)] {
                let mut c = vec![f32::NAN; m * n];
                let np = packed.n_panels();
                for panels in [0..np / 2, np / 2..np] {
                    let out = OutPtr {
                        ptr: c.as_mut_ptr(),
                        ld: n,
                        bias: with_bias.then_some(&bias[..]),
                        act,
                    };
                    // SAFETY: c is m x n, borrowed for the call.
                    unsafe { gemm_bf16_panels(Acts { a: &a, lda: k, m }, &packed, panels, out) };
                }
                for i in 0..m {
                    for j in 0..n {
                        let exact: f64 = (0..k)
                            .map(|kk| bf16(a[i * k + kk]) * bf16(w[j * k + kk]))
                            .sum();
                        let magnitude: f64 = (0..k)
                            .map(|kk| (bf16(a[i * k + kk]) * bf16(w[j * k + kk])).abs())
                            .sum();
                        let mut want = exact + if with_bias { f64::from(bias[j]) } else { 0.0 };
                        if act.is_some() {
                            want = want.max(0.0);
                        }
                        let got = f64::from(c[i * n + j]);
                        let tol = (magnitude + 1.0) * f64::from(f32::EPSILON) * 2.0;
                        assert!(
                            (got - want).abs() <= tol,
                            "m {m} n {n} k {k} [{i}][{j}]: {got} vs {want}"
                        );
                        checked += 1;
                    }
                }
            }
        }
        eprintln!("{checked} bf16 GEMM values within f32 rounding of the exact bf16 products");
    }

    #[test]
    fn a_pair_puts_the_even_input_low() {
        assert_eq!(bf16_pair(&[1.0, 2.0]), 0x3f80 | 0x4000 << 16);
        assert_eq!(bf16_pair(&[3.0]), 0x4040);
    }
}
