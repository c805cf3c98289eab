//! F16 weights for the f32 GEMM of `crate::gemm` (encoders from F16 GGUF
//! or safetensors files): the weights stay in f16, half the memory of f32,
//! in the same panel layout as [`PackedWeights`]. A product converts a few
//! panels at a time (with the set's own f16 conversion) into a per-thread
//! f32 buffer that stays in the L2 cache, and runs the set's f32
//! micro-kernel on it (`gemm_f16_panels_converting`). The AVX-512 set
//! instead converts in the micro-kernel, as it loads each line of 16
//! weights, when there are few activation rows (a single sentence): the
//! buffer then costs more than the multiply-adds it serves, because each
//! converted weight is used by only a few rows.
//!
//! f16 to f32 is exact, so every output value is the same chain of fused
//! multiply-adds as with the f32-packed weights: the bits equal those of
//! [`crate::gemm::gemm_panels`] on the converted matrix (tested below), and
//! every guarantee of `crate::gemm` (same bits alone or in any batch, for
//! any split of the panels) carries over.

use std::cell::RefCell;
use std::ops::Range;

use crate::gemm::{Acts, OutPtr, PackedWeights, NR};
use crate::table::{F16ToF32Fn, GemmPanelsFn};

/// f32 bytes of converted panels one step takes, about (fits a 512 KiB+
/// L2 with room for activation rows; at least two panels, even for long
/// rows: 384 KiB at k = 3072).
const STEP_BYTES: usize = 256 * 1024;

/// An `n x k` matrix of f16 values (`nn.Linear` layout: `n` output
/// features of `k` inputs) in panels of [`NR`] output features: panel `p`,
/// input `kk`, lane `l` at value `(p * k + kk) * NR + l`, little-endian.
/// Features past `n` in the last panel are zero.
#[derive(Clone, Default)]
pub struct PackedF16 {
    n: usize,
    k: usize,
    bytes: Vec<u8>,
}

impl PackedF16 {
    /// Row `j` of the matrix (output feature `j`'s `k` weights) as f32
    /// (exactly) into `out`.
    pub fn row(&self, j: usize, out: &mut [f32]) {
        let (p, lane) = (j / NR, j % NR);
        for (kk, o) in out.iter_mut().enumerate().take(self.k) {
            let at = 2 * ((p * self.k + kk) * NR + lane);
            *o = crate::quant::float::f16_le([self.bytes[at], self.bytes[at + 1]]);
        }
    }

    /// Packs `src`, `n` rows of `k` little-endian f16 values (2 bytes each).
    pub fn pack(src: &[u8], n: usize, k: usize) -> PackedF16 {
        assert_eq!(src.len(), 2 * n * k, "f16 weights are not n x k");
        let n_panels = n.div_ceil(NR);
        let mut bytes = vec![0u8; 2 * n_panels * k * NR];
        for j in 0..n {
            let (p, lane) = (j / NR, j % NR);
            let row = &src[2 * j * k..2 * (j + 1) * k];
            for (kk, v) in row.chunks_exact(2).enumerate() {
                let at = 2 * ((p * k + kk) * NR + lane);
                bytes[at..at + 2].copy_from_slice(v);
            }
        }
        PackedF16 { n, k, bytes }
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
        self.bytes.len()
    }

    /// Panel `p`'s first value, for the SIMD kernels.
    // Only the x86 kernels read it so far.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn panel_ptr(&self, p: usize) -> *const u16 {
        self.bytes[2 * p * self.k * NR..].as_ptr().cast()
    }

    /// Panels `panels` as f32 into `dst` (an `n' x k` matrix, `n'` the
    /// features of those panels), converted by `convert`.
    fn convert(&self, panels: Range<usize>, dst: &mut PackedWeights, convert: F16ToF32Fn) {
        let n = (panels.end * NR).min(self.n) - panels.start * NR;
        let (from, to) = (panels.start * self.k * NR, panels.end * self.k * NR);
        dst.refill(n, self.k, |values| {
            convert(&self.bytes[2 * from..2 * to], values)
        });
    }
}

thread_local! {
    /// Each thread's converted panels.
    static SCRATCH: RefCell<PackedWeights> = RefCell::new(PackedWeights::default());
}

/// `C = A · Wᵀ` for the output features of panels `panels` of `w`, every
/// row of `a`: as [`crate::gemm::gemm_panels`], with the same bits.
///
/// # Safety
/// As [`crate::gemm::gemm_panels`]: `out.ptr` valid for writes at `i *
/// out.ld + j` for every row `i < a.m` and feature `j` of those panels, and
/// no other thread accesses those places during the call.
pub unsafe fn gemm_f16_panels(a: Acts, w: &PackedF16, panels: Range<usize>, out: OutPtr) {
    a.check(w.k);
    assert!(panels.end <= w.n_panels(), "panel range out of bounds");
    assert!(
        out.bias.is_none_or(|b| b.len() >= w.n),
        "bias shorter than n"
    );
    // SAFETY: checked above; the output contract is the caller's.
    unsafe { (crate::table::active().gemm_f16_panels.f)(a, w, panels, out) };
}

/// The product through converted panels: a few panels at a time converted
/// by `convert` into a per-thread buffer, then multiplied by `gemm` (a
/// set's f32 `gemm_panels`). Each set's entry names its own two kernels.
///
/// # Safety
/// As [`gemm_f16_panels`], whose checks the caller has made.
pub(crate) unsafe fn gemm_f16_panels_converting(
    a: Acts,
    w: &PackedF16,
    panels: Range<usize>,
    out: OutPtr,
    (convert, gemm): (F16ToF32Fn, GemmPanelsFn),
) {
    // An even number of panels: the micro-kernels run two panels at a
    // time, and a lone panel takes nearly one load per multiply-add.
    let step = (STEP_BYTES / (4 * NR * w.k.max(1))).max(2) / 2 * 2;
    SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        let mut p = panels.start;
        while p < panels.end {
            let q = (p + step).min(panels.end);
            w.convert(p..q, &mut scratch, convert);
            let shifted = OutPtr {
                // SAFETY: column p * NR of row 0 is inside the caller's
                // output (p is one of its panels).
                ptr: unsafe { out.ptr.add(p * NR) },
                bias: out.bias.map(|b| &b[p * NR..]),
                ..out
            };
            // SAFETY: the converted panels 0..q-p are the caller's panels
            // p..q, whose output places the caller lets us write.
            unsafe { gemm(a, &scratch, 0..q - p, shifted) };
            p = q;
        }
    });
}

/// The scalar reference's entry: converted panels, the portable
/// conversion and GEMM.
///
/// # Safety
/// As [`gemm_f16_panels`], whose checks the caller has made.
pub(crate) unsafe fn gemm_f16_panels_scalar(
    a: Acts,
    w: &PackedF16,
    panels: Range<usize>,
    out: OutPtr,
) {
    let kernels = (
        crate::quant::float::f16_to_f32 as F16ToF32Fn,
        crate::gemm::gemm_panels_scalar as GemmPanelsFn,
    );
    // SAFETY: the caller's contract, passed on.
    unsafe { gemm_f16_panels_converting(a, w, panels, out, kernels) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::KernelSet;
    use crate::gemm::gemm_panels;
    use crate::math::Activation;

    /// f16 bits of pseudo-random values in about -2..2.
    fn f16_values(n: usize, seed: u64) -> Vec<u8> {
        let mut s = seed;
        (0..n)
            .flat_map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let x = ((s >> 33) as f32 / (1u64 << 31) as f32) * 4.0 - 2.0;
                crate::quant::float::f16_bits_from_f32(x).to_le_bytes()
            })
            .collect()
    }

    /// Every set's entry, on shapes that take the AVX-512 set both ways
    /// (converting in the micro-kernel up to 48 rows, through the buffer
    /// above), panel ranges split as two threads would: the bits of the
    /// f32 GEMM on the converted matrix.
    #[test]
    fn equals_the_f32_gemm_on_the_converted_weights_bit_for_bit() {
        for &(m, n, k) in &[
            (1, 1, 1),
            (7, 37, 19),
            (13, 100, 768),
            (3, 40, 3072),
            (48, 70, 300),
            (49, 70, 300),
            (100, 33, 65),
        ] {
            let wb = f16_values(n * k, (n * k) as u64);
            let mut w32 = vec![0f32; n * k];
            crate::dispatch::f16_to_f32_row(&wb, &mut w32);
            let a: Vec<f32> = f16_values(m * k, 7)
                .chunks_exact(2)
                .map(|b| crate::quant::float::f16_le([b[0], b[1]]))
                .collect();
            let bias: Vec<f32> = (0..n).map(|j| j as f32 * 0.01).collect();
            let f32w = PackedWeights::pack(&w32, n, k);
            let f16w = PackedF16::pack(&wb, n, k);
            let acts = Acts { a: &a, lda: k, m };
            let np = f16w.n_panels();
            let out = |c: &mut Vec<f32>| OutPtr {
                bias: Some(&bias),
                act: Some(Activation::Silu),
                ..OutPtr::plain(c.as_mut_ptr(), n)
            };
            let mut want = vec![0f32; m * n];
            // SAFETY: the output is m x n and ours.
            unsafe { gemm_panels(acts, &f32w, 0..np, out(&mut want)) };
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for set in KernelSet::ALL {
                let Some(t) = set.table() else {
                    eprintln!("SKIPPED {}: not supported by this CPU", set.name());
                    continue;
                };
                let mut got = vec![f32::NAN; m * n];
                // SAFETY: the output is m x n and ours.
                unsafe {
                    // Split in two ranges, as two threads would.
                    (t.gemm_f16_panels.f)(acts, &f16w, 0..np / 2, out(&mut got));
                    (t.gemm_f16_panels.f)(acts, &f16w, np / 2..np, out(&mut got));
                }
                assert_eq!(bits(&got), bits(&want), "{} m {m} n {n} k {k}", set.name());
            }
            // And the public wrapper (the active set).
            let mut got = vec![f32::NAN; m * n];
            // SAFETY: the output is m x n and ours.
            unsafe { gemm_f16_panels(acts, &f16w, 0..np, out(&mut got)) };
            assert_eq!(bits(&got), bits(&want), "active set m {m} n {n} k {k}");
        }
    }
}
