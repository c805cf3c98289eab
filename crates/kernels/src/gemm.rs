//! f32 matrix products for the encoder models (BERT, nomic-bert), whose
//! weights stay in full precision: `C = A · Wᵀ`, with `A` the activations
//! (`m` rows of `k`) and `W` a weight matrix as PyTorch's `nn.Linear` stores
//! it (`n` output features of `k` inputs each).
//!
//! The weights are repacked once into [`PackedWeights`]: panels of
//! [`NR`] output features, each panel `k` lines of `NR` values (one 64-byte
//! line per input feature). A micro-kernel then computes up to [`MR`] rows
//! by one panel, keeping the `MR x NR` results in registers while it walks
//! `k` (the register-blocking scheme of GotoBLAS/BLIS).
//!
//! **One summation order.** Every output value is a chain of fused
//! multiply-adds over `k` in ascending order, starting from 0:
//! `c = fma(a[i][0], w[j][0], 0); c = fma(a[i][1], w[j][1], c); ...`.
//! That order does not depend on `m`, on which panels a thread computes, on
//! where the row sits in its block, or on the kernel set: the scalar
//! reference ([`f32::mul_add`]) and the AVX2 kernel give the same bits. An
//! input's result is therefore identical alone or inside any batch.

use std::ops::Range;

use crate::math::Activation;

/// Output features per panel: two 8-lane AVX registers, one cache line.
pub const NR: usize = 16;
/// Most activation rows one micro-kernel call computes.
pub const MR: usize = 6;

/// One input feature's values for the `NR` output features of a panel.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; NR]);

/// A weight matrix (`n x k`, row-major as `nn.Linear` stores it) repacked
/// into panels of [`NR`] output features. Features past `n` in the last
/// panel are zero.
#[derive(Clone, Default)]
pub struct PackedWeights {
    n: usize,
    k: usize,
    /// `n_panels * k` lines: panel `p`, input `kk` is line `p * k + kk`.
    lines: Vec<Line>,
}

impl PackedWeights {
    /// Packs `w` (`n x k`, row-major).
    pub fn pack(w: &[f32], n: usize, k: usize) -> PackedWeights {
        assert_eq!(w.len(), n * k, "weights are not n x k");
        let mut p = PackedWeights::default();
        p.repack(n, k, |j, row| row.copy_from_slice(&w[j * k..(j + 1) * k]));
        p
    }

    /// Packs an `n x k` matrix whose row `j` `row(j, out)` writes (e.g.
    /// dequantized from a file), reusing this buffer's memory.
    pub fn repack(&mut self, n: usize, k: usize, mut row: impl FnMut(usize, &mut [f32])) {
        self.reset(n, k);
        let mut buf = vec![0f32; k];
        for j in 0..n {
            row(j, &mut buf);
            let (p, lane) = (j / NR, j % NR);
            for (kk, &v) in buf.iter().enumerate() {
                self.lines[p * k + kk].0[lane] = v;
            }
        }
    }

    /// Packs the `n x k` matrix whose row `j` is `x[j * ldx..][..k]` (a
    /// strided block of a wider matrix, e.g. one attention head's keys).
    pub fn repack_rows(&mut self, x: &[f32], ldx: usize, n: usize, k: usize) {
        self.reset(n, k);
        for j in 0..n {
            let row = &x[j * ldx..j * ldx + k];
            let (p, lane) = (j / NR, j % NR);
            let panel = &mut self.lines[p * k..(p + 1) * k];
            for (line, &v) in panel.iter_mut().zip(row) {
                line.0[lane] = v;
            }
        }
    }

    /// Packs the transpose of `x` (`k x n`, row-major with row stride
    /// `ldx`): for the product `P · V` in attention, where `V`'s rows are
    /// the inputs and its columns the outputs. Cheap: panels are slices of
    /// `x`'s rows.
    pub fn repack_transposed(&mut self, x: &[f32], ldx: usize, k: usize, n: usize) {
        self.reset(n, k);
        for kk in 0..k {
            let row = &x[kk * ldx..kk * ldx + n];
            let mut chunks = row.chunks_exact(NR);
            for (p, chunk) in (&mut chunks).enumerate() {
                // A fixed-size copy: moved in registers, not by memcpy.
                self.lines[p * k + kk].0 = chunk.try_into().expect("NR values");
            }
            let rest = chunks.remainder();
            if !rest.is_empty() {
                let p = n / NR;
                self.lines[p * k + kk].0[..rest.len()].copy_from_slice(rest);
            }
        }
    }

    /// Sizes the buffer for `n x k` and fills all its lines, in order,
    /// from `fill(values)` (`n_panels * k * NR` values; see
    /// `crate::gemm_f16`, whose f16 panels have this layout).
    pub(crate) fn refill(&mut self, n: usize, k: usize, fill: impl FnOnce(&mut [f32])) {
        // `fill` writes every value, so the lines are only resized, not
        // zeroed first (a product refills its scratch many times).
        let n_lines = n.div_ceil(NR) * k;
        self.n = n;
        self.k = k;
        self.lines.resize(n_lines, Line([0.0; NR]));
        let len = n_lines * NR;
        // SAFETY: `Line` is `repr(C)` over `[f32; NR]` (size NR * 4, no
        // padding), so `lines` is `len` contiguous, initialized f32s,
        // borrowed mutably for the call.
        let values = unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast(), len) };
        fill(values);
    }

    /// Sizes the buffer for `n x k`, every value zero.
    fn reset(&mut self, n: usize, k: usize) {
        let n_panels = n.div_ceil(NR);
        self.n = n;
        self.k = k;
        self.lines.clear();
        self.lines.resize(n_panels * k, Line([0.0; NR]));
    }

    /// Row `j` of the matrix (output feature `j`'s `k` weights) into `out`.
    pub fn row(&self, j: usize, out: &mut [f32]) {
        let (panel, lane) = (self.panel(j / NR), j % NR);
        for (o, line) in out.iter_mut().zip(panel) {
            *o = line.0[lane];
        }
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
        self.lines.len() * std::mem::size_of::<Line>()
    }

    fn panel(&self, p: usize) -> &[Line] {
        &self.lines[p * self.k..(p + 1) * self.k]
    }
}

/// Where a product's `m x n` results go (`ptr[i * ld + j]`), and what is
/// done to each value on the way out: `act(value + bias[j])`, each step
/// only if given (the bias add is one rounded addition after the chain).
#[derive(Clone, Copy)]
pub struct OutPtr<'a> {
    pub ptr: *mut f32,
    pub ld: usize,
    /// `(n,)`.
    pub bias: Option<&'a [f32]>,
    pub act: Option<Activation>,
}

impl OutPtr<'_> {
    /// Results stored as they are.
    pub fn plain(ptr: *mut f32, ld: usize) -> OutPtr<'static> {
        OutPtr {
            ptr,
            ld,
            bias: None,
            act: None,
        }
    }
}

/// The activations: `m` rows of `k` values, row `i` at `a[i * lda..]`.
#[derive(Clone, Copy)]
pub struct Acts<'a> {
    pub a: &'a [f32],
    pub lda: usize,
    pub m: usize,
}

impl Acts<'_> {
    pub(crate) fn check(&self, k: usize) {
        assert!(
            self.m == 0 || (self.m - 1) * self.lda + k <= self.a.len(),
            "activations shorter than m rows of k"
        );
    }
}

/// `C = A · Wᵀ` for all rows and output features, into `c` (`m x n`,
/// row-major). Single-threaded; see [`gemm_panels`] to split the work.
pub fn gemm(a: Acts, w: &PackedWeights, c: &mut [f32]) {
    assert!(c.len() >= a.m * w.n, "output shorter than m x n");
    let out = OutPtr::plain(c.as_mut_ptr(), w.n);
    // SAFETY: `c` holds m x n values (checked above) and is exclusively
    // borrowed for the call.
    unsafe { gemm_panels(a, w, 0..w.n_panels(), out) };
}

/// `C = A · Wᵀ` for the output features of panels `panels` (features
/// `p * NR ..` up to `n`), every row of `a`.
///
/// # Safety
/// `out.ptr` must be valid for writes at `i * out.ld + j` for every row
/// `i < a.m` and every feature `j < w.n()` of those panels, and no other
/// thread may access those places during the call.
pub unsafe fn gemm_panels(a: Acts, w: &PackedWeights, panels: Range<usize>, out: OutPtr) {
    a.check(w.k);
    assert!(panels.end <= w.n_panels(), "panel range out of bounds");
    assert!(
        out.bias.is_none_or(|b| b.len() >= w.n),
        "bias shorter than n"
    );
    // SAFETY: the output contract is the caller's.
    unsafe { (crate::table::active().gemm_panels.f)(a, w, panels, out) };
}

/// The portable reference for [`gemm_panels`]: the same per-value chain of
/// fused multiply-adds (`f32::mul_add` rounds once, as the FMA
/// instruction does).
///
/// # Safety
/// As [`gemm_panels`].
pub unsafe fn gemm_panels_scalar(a: Acts, w: &PackedWeights, panels: Range<usize>, out: OutPtr) {
    a.check(w.k);
    for p in panels {
        let panel = w.panel(p);
        let cols = (w.n - p * NR).min(NR);
        for i in 0..a.m {
            let row = &a.a[i * a.lda..i * a.lda + w.k];
            let mut acc = [0f32; NR];
            for (&x, line) in row.iter().zip(panel) {
                for (c, &wv) in acc.iter_mut().zip(&line.0) {
                    *c = x.mul_add(wv, *c);
                }
            }
            // SAFETY: the caller's contract, passed on.
            unsafe { finish_row(&mut acc, cols, (i, p), &out) };
        }
    }
}

/// The scalar reference's end of one row `i` of panel `p`: the bias added
/// to the `cols` sums, then the activation, then the values stored.
///
/// # Safety
/// Row `i` and the panel's first `cols` features must be writable and
/// ours, as in [`gemm_panels`]'s contract.
#[inline(always)]
pub(crate) unsafe fn finish_row(
    acc: &mut [f32; NR],
    cols: usize,
    (i, p): (usize, usize),
    out: &OutPtr,
) {
    let acc = &mut acc[..cols];
    if let Some(b) = out.bias {
        acc.iter_mut().zip(&b[p * NR..]).for_each(|(v, &b)| *v += b);
    }
    if let Some(act) = out.act {
        crate::math::reference::activate(act, acc);
    }
    for (l, &v) in acc.iter().enumerate() {
        // SAFETY: row i < m, feature p * NR + l < n in the caller's
        // panels: writable and ours by the contract.
        unsafe { out.ptr.add(i * out.ld + p * NR + l).write(v) };
    }
}

/// The panels' lines as raw pointers for the SIMD kernels.
pub(crate) fn panel_ptr(w: &PackedWeights, p: usize) -> *const f32 {
    w.panel(p).as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::KernelSet;
    use crate::table::GemmPanelsFn;

    /// Deterministic values in [-1, 1).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn reference(a: &[f32], w: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0f32;
                for kk in 0..k {
                    acc = a[i * k + kk].mul_add(w[j * k + kk], acc);
                }
                c[i * n + j] = acc;
            }
        }
        c
    }

    #[test]
    fn matches_the_fma_chain_for_odd_shapes_in_every_kernel_set() {
        for &(m, n, k) in &[
            (1, 1, 1),
            (1, 16, 7),
            (5, 17, 33),
            (6, 16, 64),
            (7, 40, 65),
            (13, 31, 384),
            (20, 48, 1),
        ] {
            let a = values(m * k, 1 + m as u64);
            let w = values(n * k, 7 + n as u64);
            let expect = reference(&a, &w, m, n, k);
            let packed = PackedWeights::pack(&w, n, k);
            let acts = Acts { a: &a, lda: k, m };
            for set in KernelSet::ALL {
                let Some(t) = set.table() else {
                    eprintln!("SKIPPED {}: not supported by this CPU", set.name());
                    continue;
                };
                let mut got = vec![f32::NAN; m * n];
                let out = OutPtr::plain(got.as_mut_ptr(), n);
                // SAFETY: `got` holds m x n values, borrowed for the call.
                unsafe { (t.gemm_panels.f)(acts, &packed, 0..packed.n_panels(), out) };
                for idx in 0..m * n {
                    assert_eq!(
                        got[idx].to_bits(),
                        expect[idx].to_bits(),
                        "{} {m}x{n}x{k} [{idx}]",
                        set.name()
                    );
                }
            }
        }
    }

    /// Every supported set's GEMM on the shapes the encoders use and odd
    /// ones, with bias and activation, panel ranges split as threads split
    /// them: the scalar reference's bits.
    #[test]
    fn every_set_matches_the_scalar_gemm_with_bias_activation_and_split_panels() {
        // The last two shapes take the AVX-512 kernel through two row
        // groups of uneven tiles, several `k` blocks and two blocks of
        // panels: rows 777 values apart read in place, rows 1536 apart
        // (which share L1 sets) copied; (3, 1536, 384) reads 8+ panels in
        // place.
        for &(m, n, k) in &[
            (1, 384, 384),
            (3, 1536, 384),
            (13, 40, 1536),
            (32, 33, 17),
            (197, 700, 777),
            (197, 300, 1536),
        ] {
            let a = values(m * k, 31 + m as u64);
            let w = values(n * k, 37 + n as u64);
            let bias = values(n, 41);
            let packed = PackedWeights::pack(&w, n, k);
            let acts = Acts { a: &a, lda: k, m };
            for act in [None, Some(Activation::GeluErf)] {
                let run = |f: GemmPanelsFn| {
                    let mut c = vec![f32::NAN; m * n];
                    let np = packed.n_panels();
                    for panels in [0..np / 3, np / 3..np] {
                        let out = OutPtr {
                            bias: Some(&bias),
                            act,
                            ..OutPtr::plain(c.as_mut_ptr(), n)
                        };
                        // SAFETY: `c` holds m x n values, borrowed here.
                        unsafe { f(acts, &packed, panels, out) };
                    }
                    c.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                };
                let want = run(gemm_panels_scalar);
                for set in KernelSet::ALL {
                    let Some(t) = set.table() else {
                        eprintln!("SKIPPED {}: not supported by this CPU", set.name());
                        continue;
                    };
                    assert!(
                        run(t.gemm_panels.f) == want,
                        "{} {m}x{n}x{k} {act:?}",
                        set.name()
                    );
                }
            }
        }
    }

    #[test]
    fn bias_and_activation_on_the_way_out_match_the_reference() {
        let (m, n, k) = (8, 37, 50);
        let a = values(m * k, 21);
        let w = values(n * k, 22);
        let bias = values(n, 23);
        let packed = PackedWeights::pack(&w, n, k);
        let acts = Acts { a: &a, lda: k, m };
        for act in [None, Some(Activation::GeluErf), Some(Activation::Silu)] {
            let mut expect = reference(&a, &w, m, n, k);
            for row in expect.chunks_exact_mut(n) {
                row.iter_mut().zip(&bias).for_each(|(v, &b)| *v += b);
                if let Some(act) = act {
                    crate::math::reference::activate(act, row);
                }
            }
            let mut got = vec![0f32; m * n];
            let out = OutPtr {
                bias: Some(&bias),
                act,
                ..OutPtr::plain(got.as_mut_ptr(), n)
            };
            // SAFETY: `got` holds m x n values, borrowed for the call.
            unsafe { gemm_panels(acts, &packed, 0..packed.n_panels(), out) };
            let b = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(b(&got), b(&expect), "{act:?}");
        }
    }

    #[test]
    fn a_row_gives_the_same_bits_alone_or_in_any_batch() {
        let (n, k) = (40, 96);
        let w = values(n * k, 3);
        let packed = PackedWeights::pack(&w, n, k);
        let a = values(11 * k, 5);
        let mut all = vec![0f32; 11 * n];
        gemm(
            Acts {
                a: &a,
                lda: k,
                m: 11,
            },
            &packed,
            &mut all,
        );
        for i in 0..11 {
            let mut one = vec![0f32; n];
            let row = &a[i * k..(i + 1) * k];
            gemm(
                Acts {
                    a: row,
                    lda: k,
                    m: 1,
                },
                &packed,
                &mut one,
            );
            assert_eq!(
                one.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                all[i * n..(i + 1) * n]
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn strided_activations_and_transposed_packing() {
        // A = rows of a wider buffer; W given as its transpose.
        let (m, n, k, lda) = (9, 21, 19, 30);
        let a_wide = values(m * lda, 11);
        let a: Vec<f32> = (0..m)
            .flat_map(|i| a_wide[i * lda..i * lda + k].to_vec())
            .collect();
        let w = values(n * k, 13);
        let wt: Vec<f32> = (0..k)
            .flat_map(|kk| (0..n).map(move |j| (kk, j)))
            .map(|(kk, j)| w[j * k + kk])
            .collect();
        let mut packed = PackedWeights::default();
        packed.repack_transposed(&wt, n, k, n);
        let mut got = vec![0f32; m * n];
        gemm(Acts { a: &a_wide, lda, m }, &packed, &mut got);
        let expect = reference(&a, &w, m, n, k);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&expect));

        // W as strided rows of a wider buffer (stride 25, the values
        // past k NaN so that reading them would show), packed into the
        // buffer that held the transposed packing above.
        let ldw = 25;
        let w_wide: Vec<f32> = (0..n)
            .flat_map(|j| (0..ldw).map(move |kk| (j, kk)))
            .map(|(j, kk)| if kk < k { w[j * k + kk] } else { f32::NAN })
            .collect();
        packed.repack_rows(&w_wide, ldw, n, k);
        let mut got = vec![0f32; m * n];
        gemm(Acts { a: &a_wide, lda, m }, &packed, &mut got);
        assert_eq!(bits(&got), bits(&expect));
    }
}
