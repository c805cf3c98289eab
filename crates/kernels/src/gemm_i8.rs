//! An optional int8 GEMM for the encoders, on every CPU: each weight row
//! (output feature) is rounded to int8 once, when the model is loaded,
//! with one f32 scale per row; each activation row (token) when a product
//! starts, with one f32 scale per row; the products and their sums are
//! exact integers, and only the finished sum is scaled in f32:
//! `c[i][j] = f32(Σ qa[i][kk] · qw[j][kk]) · (sa[i] · sw[j])`, then the
//! bias added and the activation applied as in `crate::gemm`.
//!
//! **Not** the f32 path's results (the inputs of every product keep about
//! 8 of their 24 bits), so it is never chosen by itself, only by an
//! explicit option (`--int8`); its quality is measured against
//! sentence-transformers and llama.cpp in f32 (tests/embed_int8.rs).
//!
//! **The same bits in every kernel set.** Symmetric quantization to
//! `-127..=127` with a row's scale `max|x| / 127`: `q = round(x · (127 /
//! max|x|))`, to nearest with ties to even, as the scalar reference
//! ([`quantize_row`]) and the SIMD conversions (`cvtps2dq` in the default
//! rounding mode) both do; the largest magnitude is compared as integer
//! bit patterns, so it is exact and order-free. The integer sums cannot
//! overflow (`k` is at most [`MAX_K`]) and are exact in any order, so the
//! AVX-512 set's `vpdpbusd` (unsigned activations `q + 128`, with `128 ·
//! Σ qw` subtracted), the AVX2 set's `vpmaddubsw` + `vpmaddwd` (`|qw|`
//! times `qa` with `qw`'s sign, at most `2 · 127²` per pair, so never
//! saturated) and the scalar loops agree; the f32 steps after it are the
//! same operations in the same order. A row is therefore the same alone or
//! in any batch, and with any split of the features across threads.
//!
//! Edge cases: a row whose largest magnitude is below [`TINY`] (zeros,
//! denormals) quantizes to zeros with scale 0 (its products are the bias);
//! a row holding an infinity or NaN quantizes to zeros with scale NaN, so
//! every product with it is NaN.
//!
//! Layout: panels of [`NR`] output features as in `crate::gemm`; each
//! line holds four consecutive inputs of the panel's 16 features (64
//! bytes, feature-major: byte `4 l + b` is input `4 g + b` of feature
//! `l`), so that one activation word of four inputs, broadcast, lines up
//! with it. `k` is padded to a multiple of four with zero weights.

use std::cell::RefCell;
use std::ops::Range;

use crate::gemm::{Acts, OutPtr, NR};

/// Inputs per 32-bit word of a line.
pub const GROUP: usize = 4;

/// Longest rows the integer sums hold exactly: `255 · 127 · k` (the
/// AVX-512 set's offset activations) stays below `2^31`.
pub const MAX_K: usize = 65_536;

/// Rows whose largest magnitude is below this quantize to zeros (scale
/// 0): `127 / max|x|` must stay finite.
pub const TINY: f32 = 1e-30;

/// An `n x k` weight matrix rounded to int8 per row, in panels of [`NR`]
/// output features and groups of [`GROUP`] inputs: panel `p`, group `g`,
/// lane `l`, input `b` at byte `((p * groups + g) * NR + l) * GROUP + b`.
/// Features past `n` are zero, with scale 0.
#[derive(Clone, Default)]
pub struct PackedI8 {
    n: usize,
    k: usize,
    bytes: Vec<i8>,
    /// Each feature's scale, `n_panels * NR`.
    scales: Vec<f32>,
    /// Each feature's `Σ qw`, `n_panels * NR` (for offset activations).
    sums: Vec<i32>,
    /// Per input, the factor the activations are multiplied by before
    /// they are rounded (`1 / s` of [`PackedI8::from_rows_smoothed`]).
    act_mul: Option<Vec<f32>>,
}

impl PackedI8 {
    /// Quantizes and packs the `n x k` matrix whose row `j` `row(j, out)`
    /// writes.
    ///
    /// # Panics
    /// If `k` is above [`MAX_K`] (callers check it).
    pub fn from_rows(n: usize, k: usize, row: impl FnMut(usize, &mut [f32])) -> PackedI8 {
        Self::pack(n, k, None, row)
    }

    /// As [`PackedI8::from_rows`] with input `kk`'s weights multiplied by
    /// `smooth[kk]` before they are rounded, and the activations' input
    /// `kk` by `1 / smooth[kk]` (SmoothQuant, Xiao et al. 2022): the same
    /// product before rounding, with an input whose activations are large
    /// (an outlier channel) shrunk and its weights grown, so that it no
    /// longer takes most of its rows' int8 range.
    ///
    /// # Panics
    /// As [`PackedI8::from_rows`], or if `smooth` is not `k` long.
    pub fn from_rows_smoothed(
        n: usize,
        k: usize,
        smooth: &[f32],
        row: impl FnMut(usize, &mut [f32]),
    ) -> PackedI8 {
        assert_eq!(smooth.len(), k, "one smoothing factor per input");
        Self::pack(n, k, Some(smooth), row)
    }

    fn pack(
        n: usize,
        k: usize,
        smooth: Option<&[f32]>,
        mut row: impl FnMut(usize, &mut [f32]),
    ) -> PackedI8 {
        assert!(k <= MAX_K, "int8 rows longer than {MAX_K} inputs");
        let groups = k.div_ceil(GROUP);
        let n_panels = n.div_ceil(NR);
        let mut bytes = vec![0i8; n_panels * groups * NR * GROUP];
        let mut scales = vec![0f32; n_panels * NR];
        let mut sums = vec![0i32; n_panels * NR];
        let mut buf = vec![0f32; k];
        let mut q = vec![0i8; k];
        for j in 0..n {
            row(j, &mut buf);
            if let Some(s) = smooth {
                buf.iter_mut().zip(s).for_each(|(v, &s)| *v *= s);
            }
            scales[j] = quantize_row(&buf, &mut q);
            sums[j] = q.iter().map(|&v| i32::from(v)).sum();
            let (p, lane) = (j / NR, j % NR);
            for (g, four) in q.chunks(GROUP).enumerate() {
                let at = ((p * groups + g) * NR + lane) * GROUP;
                bytes[at..at + four.len()].copy_from_slice(four);
            }
        }
        PackedI8 {
            n,
            k,
            bytes,
            scales,
            sums,
            act_mul: smooth.map(|s| s.iter().map(|&s| 1.0 / s).collect()),
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
        self.bytes.len() + self.scales.len() * 4 + self.sums.len() * 4
    }

    /// Groups of [`GROUP`] inputs per row.
    pub(crate) fn groups(&self) -> usize {
        self.k.div_ceil(GROUP)
    }

    /// Panel `p`'s lines, `groups * NR * GROUP` bytes.
    pub(crate) fn panel(&self, p: usize) -> &[i8] {
        let len = self.groups() * NR * GROUP;
        &self.bytes[p * len..(p + 1) * len]
    }

    /// Panel `p`'s 16 scales.
    pub(crate) fn panel_scales(&self, p: usize) -> &[f32] {
        &self.scales[p * NR..(p + 1) * NR]
    }

    /// The activations' factors per input, if smoothed.
    pub fn act_mul(&self) -> Option<&[f32]> {
        self.act_mul.as_deref()
    }

    /// Panel `p`'s 16 weight sums (the x86 kernels' offset correction).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) fn panel_sums(&self, p: usize) -> &[i32] {
        &self.sums[p * NR..(p + 1) * NR]
    }
}

/// The scale of a row whose largest magnitude has the bit pattern
/// `amax_bits` (sign cleared), and the factor its values are multiplied
/// by before rounding; `None` when the row quantizes to zeros (with the
/// scale returned in the error: 0, or NaN for a non-finite row).
pub(crate) fn row_factors(amax_bits: u32) -> Result<(f32, f32), f32> {
    if amax_bits >= 0x7f80_0000 {
        return Err(f32::NAN);
    }
    let amax = f32::from_bits(amax_bits);
    if amax < TINY {
        return Err(0.0);
    }
    Ok((amax / 127.0, 127.0 / amax))
}

/// One value times its row's factor, rounded to an integer in
/// `-127..=127` (to nearest, ties to even).
#[inline]
pub(crate) fn quantize_value(x: f32, inv: f32) -> i8 {
    (x * inv).round_ties_even().clamp(-127.0, 127.0) as i8
}

/// `x` rounded to int8 (the scalar reference; see the module): writes
/// `q[..x.len()]`, returns the row's scale.
pub fn quantize_row(x: &[f32], q: &mut [i8]) -> f32 {
    let amax_bits = x
        .iter()
        .map(|v| v.to_bits() & 0x7fff_ffff)
        .max()
        .unwrap_or(0);
    match row_factors(amax_bits) {
        Ok((scale, inv)) => {
            for (o, &v) in q.iter_mut().zip(x) {
                *o = quantize_value(v, inv);
            }
            scale
        }
        Err(scale) => {
            q[..x.len()].fill(0);
            scale
        }
    }
}

/// A product's activations rounded to int8, row by row: row `i`'s bytes
/// at `i * ld` (`ld` a multiple of [`GROUP`], the padding zero), its
/// scale `scales[i]`. Bytes are `q`, or `q + 128` as unsigned for the
/// AVX-512 set's kernel (`offset`).
#[derive(Default)]
pub(crate) struct QuantRows {
    pub bytes: Vec<u8>,
    pub scales: Vec<f32>,
    pub ld: usize,
    /// One row times the weights' activation factors.
    scaled: Vec<f32>,
}

impl QuantRows {
    /// Quantizes every row of `a` (`k` values each, first multiplied by
    /// `w`'s activation factors if it has them) with `quantize(row, out)
    /// -> scale`, a kernel set's version of [`quantize_row`] (writing `k`
    /// bytes); pads each row to `ld` with the zero byte (`0`, or `128` for
    /// `offset`).
    pub fn fill(
        &mut self,
        a: Acts,
        w: &PackedI8,
        offset: bool,
        mut quantize: impl FnMut(&[f32], &mut [u8]) -> f32,
    ) {
        let k = w.k;
        self.ld = k.div_ceil(GROUP) * GROUP;
        self.bytes.resize(a.m * self.ld, 0);
        self.scales.resize(a.m, 0.0);
        let pad = if offset { 128 } else { 0 };
        for (i, (row, scale)) in self
            .bytes
            .chunks_exact_mut(self.ld)
            .zip(&mut self.scales)
            .enumerate()
        {
            let x = &a.a[i * a.lda..i * a.lda + k];
            *scale = match w.act_mul() {
                Some(mul) => {
                    self.scaled.clear();
                    self.scaled.extend(x.iter().zip(mul).map(|(&v, &c)| v * c));
                    quantize(&self.scaled, &mut row[..k])
                }
                None => quantize(x, &mut row[..k]),
            };
            row[k..].fill(pad);
        }
    }
}

thread_local! {
    /// The activations of the current product on this thread.
    pub(crate) static ROWS: RefCell<QuantRows> = RefCell::new(QuantRows::default());
}

/// Weight bytes of the panels a group of tiles walks while they stay in
/// the L2 cache.
// Used by the x86 kernels only (other targets run the scalar reference).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const B_BLOCK_BYTES: usize = 256 * 1024;

/// Calls `tile(rows, panels)` over `m` rows and `panels`, in tiles of
/// nearly equal height (at most `max_rows`, e.g. 25 rows as 9 + 8 + 8) by
/// up to `max_panels` panels, a block of panels at a time (GotoBLAS's
/// order: the block's weights stay in the L2 cache while every row goes
/// past them). The order changes no bit: every value is one exact integer
/// sum.
// Used by the x86 kernels only (other targets run the scalar reference).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn for_each_tile(
    m: usize,
    panels: Range<usize>,
    groups: usize,
    max_rows: usize,
    max_panels: usize,
    mut tile: impl FnMut(Range<usize>, Range<usize>),
) {
    if m == 0 || panels.is_empty() {
        return;
    }
    let n_tiles = m.div_ceil(max_rows);
    let (base, extra) = (m / n_tiles, m % n_tiles);
    let panel_bytes = groups * NR * GROUP;
    let block = (B_BLOCK_BYTES / panel_bytes.max(1)).max(max_panels) / max_panels * max_panels;
    let mut p0 = panels.start;
    while p0 < panels.end {
        let p1 = (p0 + block).min(panels.end);
        let mut i = 0;
        for t in 0..n_tiles {
            let h = base + usize::from(t < extra);
            let mut p = p0;
            while p < p1 {
                let q = (p + max_panels).min(p1);
                tile(i..i + h, p..q);
                p = q;
            }
            i += h;
        }
        p0 = p1;
    }
}

/// `C = A · Wᵀ` with int8 products (see the module) for the output
/// features of `panels`, every row of `a`, bias and activation as `out`
/// says; the active kernel set's code.
///
/// # Panics
/// If the shapes do not fit.
///
/// # Safety
/// As [`crate::gemm::gemm_panels`]: `out.ptr` valid for writes at
/// `i * out.ld + j` for every row `i < a.m` and feature `j < w.n()` of
/// those panels, and those places the caller's alone during the call.
pub unsafe fn gemm_i8_panels(a: Acts, w: &PackedI8, panels: Range<usize>, out: OutPtr) {
    check(&a, w, &panels, &out);
    // SAFETY: the shapes were checked; the output contract is the
    // caller's.
    unsafe { (crate::table::active().gemm_i8_panels.f)(a, w, panels, out) };
}

/// The shape checks every kernel set's entry relies on.
pub(crate) fn check(a: &Acts, w: &PackedI8, panels: &Range<usize>, out: &OutPtr) {
    a.check(w.k);
    assert!(panels.end <= w.n_panels(), "panel range out of bounds");
    assert!(
        out.bias.is_none_or(|b| b.len() >= w.n),
        "bias shorter than n"
    );
}

/// The portable reference for [`gemm_i8_panels`]: the integer sums in
/// plain loops, then the same f32 steps.
///
/// # Safety
/// As [`gemm_i8_panels`].
pub unsafe fn gemm_i8_panels_scalar(a: Acts, w: &PackedI8, panels: Range<usize>, out: OutPtr) {
    check(&a, w, &panels, &out);
    ROWS.with(|rows| {
        let mut rows = rows.borrow_mut();
        rows.fill(a, w, false, |x, q| {
            // SAFETY: i8 and u8 have one layout; `q` is borrowed for the
            // call only.
            let q = unsafe { std::slice::from_raw_parts_mut(q.as_mut_ptr().cast(), q.len()) };
            quantize_row(x, q)
        });
        for p in panels {
            let panel = w.panel(p);
            let cols = (w.n - p * NR).min(NR);
            let sw = w.panel_scales(p);
            for i in 0..a.m {
                let qa = &rows.bytes[i * rows.ld..(i + 1) * rows.ld];
                let mut acc = [0i32; NR];
                for (four, line) in qa.chunks_exact(GROUP).zip(panel.chunks_exact(NR * GROUP)) {
                    for (s, wl) in acc.iter_mut().zip(line.chunks_exact(GROUP)) {
                        for (&x, &wv) in four.iter().zip(wl) {
                            *s += i32::from(x as i8) * i32::from(wv);
                        }
                    }
                }
                let mut v = [0f32; NR];
                for l in 0..cols {
                    v[l] = scaled(acc[l], rows.scales[i], sw[l]);
                }
                let v = &mut v[..cols];
                if let Some(b) = out.bias {
                    v.iter_mut().zip(&b[p * NR..]).for_each(|(v, &b)| *v += b);
                }
                if let Some(act) = out.act {
                    crate::math::reference::activate(act, v);
                }
                for (l, &x) in v.iter().enumerate() {
                    // SAFETY: row i < m, feature p * NR + l < n in the
                    // caller's panels: writable and ours by the contract.
                    unsafe { out.ptr.add(i * out.ld + p * NR + l).write(x) };
                }
            }
        }
    });
}

/// An integer sum scaled back: `f32(sum) · (sa · sw)`, the steps every
/// kernel set takes.
#[inline]
pub(crate) fn scaled(sum: i32, sa: f32, sw: f32) -> f32 {
    sum as f32 * (sa * sw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::KernelSet;
    use crate::math::Activation;
    use crate::table::GemmI8PanelsFn;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut next = crate::xorshift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        (0..n)
            .map(|_| ((next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0)
            .collect()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    fn pack(w: &[f32], n: usize, k: usize) -> PackedI8 {
        PackedI8::from_rows(n, k, |j, out| out.copy_from_slice(&w[j * k..(j + 1) * k]))
    }

    /// Runs `f` over `panels` split in three ranges (as threads split
    /// them), NaN where nothing was written.
    fn run(
        f: GemmI8PanelsFn,
        a: &[f32],
        m: usize,
        w: &PackedI8,
        bias: Option<&[f32]>,
        act: Option<Activation>,
    ) -> Vec<f32> {
        let (n, k) = (w.n(), w.k());
        let mut c = vec![f32::NAN; m * n];
        let np = w.n_panels();
        for panels in [0..np / 3, np / 3..np / 2, np / 2..np] {
            let out = OutPtr {
                bias,
                act,
                ..OutPtr::plain(c.as_mut_ptr(), n)
            };
            // SAFETY: `c` holds m x n values, borrowed for the call.
            unsafe { f(Acts { a, lda: k, m }, w, panels, out) };
        }
        c
    }

    /// The definition, independent of the packed layout: each row and
    /// weight row quantized by `quantize_row`, the integer dot product,
    /// `scaled`, bias, activation.
    fn definition(
        a: &[f32],
        w: &[f32],
        m: usize,
        n: usize,
        k: usize,
        bias: Option<&[f32]>,
        act: Option<Activation>,
    ) -> Vec<f32> {
        let quant = |x: &[f32]| {
            let mut q = vec![0i8; x.len()];
            let s = quantize_row(x, &mut q);
            (q, s)
        };
        let ws: Vec<_> = w.chunks_exact(k).map(quant).collect();
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            let (qa, sa) = quant(&a[i * k..(i + 1) * k]);
            let row = &mut c[i * n..(i + 1) * n];
            for (j, (qw, sw)) in ws.iter().enumerate() {
                let sum: i32 = qa
                    .iter()
                    .zip(qw)
                    .map(|(&x, &y)| i32::from(x) * i32::from(y))
                    .sum();
                row[j] = scaled(sum, sa, *sw) + bias.map_or(0.0, |b| b[j]);
            }
            if let Some(act) = act {
                crate::math::reference::activate(act, row);
            }
        }
        c
    }

    /// Every shape class: tile heights 1..=13 and uneven row counts, odd
    /// `k` (1, 3, 5, 7, 385, 767), partial last panels, panels split as
    /// threads split them, bias and activations: every kernel set gives
    /// the definition's bits (the scalar reference included, so that its
    /// packed-layout loops are checked too).
    #[test]
    fn every_set_gives_the_definitions_bits_for_every_shape() {
        let mut checked = 0;
        for &(m, n, k) in &[
            (1, 1, 1),
            (2, 16, 3),
            (3, 17, 5),
            (4, 33, 7),
            (5, 40, 8),
            (6, 48, 12),
            (7, 31, 64),
            (8, 64, 65),
            (9, 100, 385),
            (10, 16, 767),
            (11, 20, 129),
            (12, 32, 96),
            (13, 47, 63),
            (25, 70, 768),
            (37, 300, 384),
            (100, 18, 1536),
        ] {
            let a = values(m * k, 11 + m as u64);
            let w = values(n * k, 13 + n as u64);
            let bias = values(n, 17);
            let packed = pack(&w, n, k);
            for (b, act) in [
                (None, None),
                (Some(&bias[..]), None),
                (Some(&bias[..]), Some(Activation::GeluErf)),
                (None, Some(Activation::Relu)),
            ] {
                let want = bits(&definition(&a, &w, m, n, k, b, act));
                for set in KernelSet::ALL {
                    let Some(t) = set.table() else {
                        eprintln!("SKIPPED {}: not supported by this CPU", set.name());
                        continue;
                    };
                    let got = bits(&run(t.gemm_i8_panels.f, &a, m, &packed, b, act));
                    assert!(got == want, "{} {m}x{n}x{k} {act:?}", set.name());
                    checked += 1;
                }
            }
        }
        eprintln!("{checked} int8 products equal to the definition, bit for bit");
    }

    /// Extreme inputs: rows of zeros, of denormals, of huge values (±1e30),
    /// values at ±max|x| and at ties of the rounding, a row with
    /// an infinity and one with a NaN (products NaN), weights the same.
    #[test]
    fn every_set_gives_the_same_bits_on_extreme_values() {
        let (m, n, k) = (9, 37, 71);
        let mut a = values(m * k, 5);
        let mut w = values(n * k, 6);
        let row = |v: &mut Vec<f32>, r: usize, f: &dyn Fn(usize) -> f32| {
            for (kk, x) in v[r * k..(r + 1) * k].iter_mut().enumerate() {
                *x = f(kk);
            }
        };
        row(&mut a, 0, &|_| 0.0);
        row(&mut a, 1, &|kk| {
            f32::from_bits(1 + kk as u32) * if kk % 2 == 0 { 1.0 } else { -1.0 }
        });
        row(&mut a, 2, &|kk| {
            if kk % 3 == 0 {
                -1e30
            } else {
                1e30 / (kk + 1) as f32
            }
        });
        // The largest 127 (factor 1), the others multiples of 0.5: ties
        // of the rounding.
        row(&mut a, 3, &|kk| {
            if kk == 70 {
                127.0
            } else {
                (kk as f32 - 35.0) * 0.5
            }
        });
        row(&mut a, 4, &|kk| if kk == 9 { f32::INFINITY } else { 1.0 });
        row(&mut a, 5, &|kk| if kk == 30 { f32::NAN } else { -1.0 });
        row(&mut a, 6, &|kk| if kk == 0 { -1e-3 } else { 1e-7 });
        row(&mut w, 0, &|_| 0.0);
        row(&mut w, 1, &|kk| if kk % 2 == 0 { 127.0 } else { -127.0 });
        row(&mut w, 2, &|kk| {
            if kk == 3 {
                f32::NEG_INFINITY
            } else {
                0.5
            }
        });
        row(&mut w, 3, &|kk| (kk as f32 - 35.0) * 0.5);
        let bias = values(n, 9);
        let packed = pack(&w, n, k);
        for (b, act) in [(None, None), (Some(&bias[..]), Some(Activation::GeluErf))] {
            let want = definition(&a, &w, m, n, k, b, act);
            // The NaN rows and features, and nothing else, are NaN.
            for i in 0..m {
                for j in 0..n {
                    let nan = i == 4 || i == 5 || j == 2;
                    assert_eq!(want[i * n + j].is_nan(), nan, "[{i}][{j}]");
                }
            }
            for set in KernelSet::ALL {
                let Some(t) = set.table() else {
                    eprintln!("SKIPPED {}: not supported by this CPU", set.name());
                    continue;
                };
                let got = run(t.gemm_i8_panels.f, &a, m, &packed, b, act);
                assert!(bits(&got) == bits(&want), "{} {act:?}", set.name());
            }
        }
    }

    /// The quantizer: the largest magnitude maps to ±127, ties round to
    /// even, the scale is max|x| / 127; zeros, denormal rows and
    /// non-finite rows as the module says.
    #[test]
    fn quantize_row_rounds_to_nearest_even_in_range() {
        let mut q = [0i8; 6];
        // Factor 127 / 127 = 1: 2.5 -> 2, 3.5 -> 4, -0.5 -> 0.
        let s = quantize_row(&[2.5, 3.5, -0.5, -127.0, 126.5, 1.49], &mut q);
        assert_eq!(s, 1.0);
        assert_eq!(q, [2, 4, 0, -127, 126, 1]);
        let s = quantize_row(&[0.0, -0.0, 1e-31, 0.0, 0.0, 0.0], &mut q);
        assert_eq!((s, q), (0.0, [0; 6]));
        let s = quantize_row(&[1.0, f32::INFINITY, 2.0, 0.0, 0.0, 0.0], &mut q);
        assert!(s.is_nan());
        assert_eq!(q, [0; 6]);
        let x = values(1000, 3);
        let mut q = vec![0i8; 1000];
        let s = quantize_row(&x, &mut q);
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert_eq!(s, amax / 127.0);
        assert!(q.iter().any(|&v| v.abs() == 127) && !q.contains(&i8::MIN));
        for (&v, &qv) in x.iter().zip(&q) {
            assert!((v - f32::from(qv) * s).abs() <= s * 0.5001, "{v} {qv}");
        }
    }

    /// Against the exact f64 product of the unrounded values: within the
    /// rounding of both operands (half a step of each per product).
    #[test]
    fn the_products_are_within_the_int8_rounding_of_the_exact_ones() {
        let (m, n, k) = (13, 40, 385);
        let a = values(m * k, 1);
        let w = values(n * k, 2);
        let c = run(
            crate::table::active().gemm_i8_panels.f,
            &a,
            m,
            &pack(&w, n, k),
            None,
            None,
        );
        let amax = |x: &[f32]| f64::from(x.iter().fold(0f32, |m, v| m.max(v.abs())));
        let mut worst = 0f64;
        for i in 0..m {
            let ar = &a[i * k..(i + 1) * k];
            for j in 0..n {
                let wr = &w[j * k..(j + 1) * k];
                let exact: f64 = ar
                    .iter()
                    .zip(wr)
                    .map(|(&x, &y)| f64::from(x) * f64::from(y))
                    .sum();
                let (ea, ew) = (amax(ar) / 254.0, amax(wr) / 254.0);
                let bound: f64 = ar
                    .iter()
                    .zip(wr)
                    .map(|(&x, &y)| f64::from(x).abs() * ew + f64::from(y).abs() * ea + ea * ew)
                    .sum();
                let err = (f64::from(c[i * n + j]) - exact).abs();
                assert!(err <= bound * 1.001 + 1e-6, "[{i}][{j}] {err} > {bound}");
                worst = worst.max(err / bound);
            }
        }
        eprintln!("largest error {worst:.3} of the rounding bound");
    }

    /// Smoothed weights (`from_rows_smoothed`): every set gives the bits of
    /// the definition on the activations times `1 / s` and the weights
    /// times `s`, odd `k` and partial panels included.
    #[test]
    fn smoothed_products_match_the_definition_in_every_set() {
        for &(m, n, k) in &[(3, 17, 5), (13, 40, 385), (25, 70, 768)] {
            let a = values(m * k, 23 + k as u64);
            let w = values(n * k, 29 + k as u64);
            let smooth: Vec<f32> = values(k, 31).iter().map(|v| 4f32.powf(*v)).collect();
            let packed = PackedI8::from_rows_smoothed(n, k, &smooth, |j, out| {
                out.copy_from_slice(&w[j * k..(j + 1) * k])
            });
            let mul: Vec<f32> = smooth.iter().map(|&s| 1.0 / s).collect();
            let a_s: Vec<f32> = a.iter().enumerate().map(|(i, &v)| v * mul[i % k]).collect();
            let w_s: Vec<f32> = w
                .iter()
                .enumerate()
                .map(|(i, &v)| v * smooth[i % k])
                .collect();
            let bias = values(n, 37);
            let act = Some(Activation::GeluErf);
            let want = bits(&definition(&a_s, &w_s, m, n, k, Some(&bias), act));
            for set in KernelSet::ALL {
                let Some(t) = set.table() else {
                    eprintln!("SKIPPED {}: not supported by this CPU", set.name());
                    continue;
                };
                let got = bits(&run(t.gemm_i8_panels.f, &a, m, &packed, Some(&bias), act));
                assert!(got == want, "{} {m}x{n}x{k}", set.name());
            }
        }
    }

    #[test]
    fn a_row_gives_the_same_bits_alone_or_in_any_batch() {
        let (n, k) = (50, 200);
        let packed = pack(&values(n * k, 3), n, k);
        let a = values(30 * k, 4);
        let f = crate::table::active().gemm_i8_panels.f;
        let all = run(f, &a, 30, &packed, None, None);
        for i in [0, 7, 29] {
            let one = run(f, &a[i * k..(i + 1) * k], 1, &packed, None, None);
            assert_eq!(bits(&one), bits(&all[i * n..(i + 1) * n]));
        }
    }
}
