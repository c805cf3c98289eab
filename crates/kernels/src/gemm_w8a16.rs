//! The encoders' `--int8` product: int8 weights with one f32 scale per
//! output feature and group of [`GROUP`] inputs, 16-bit integer
//! activations with one f32 scale per row (token), exact integer sums per
//! group, scaled and added in f32.
//!
//! Why not int8 activations (an int8 × int8 product, removed after
//! session 17): measured on
//! all-MiniLM-L6-v2 and all-mpnet-base-v2 against sentence-transformers,
//! per-token int8 activations lose too much for issue 34's bar of 0.9995
//! (MiniLM's min cosine 0.9912 with per-row int8 weights, 0.9990 with
//! activations and weights in groups of 32 as Q8_0 × Q8_0, 0.9994 in
//! groups of 16); with 16-bit activations the weights per row give 0.9985,
//! per 32 inputs 0.9996 (mpnet 0.99945), per 16 inputs 0.99968 (mpnet
//! 0.99960): see tests/embed_int8.rs in `ferrite`.
//!
//! Definition, the same bits in every kernel set: row `i` of the
//! activations is rounded to `qa = round(x · (32767 / max|x|))` (to
//! nearest, ties to even; scale `sa = max|x| / 32767`; a row below
//! [`TINY`] gives zeros and scale 0, a non-finite row zeros and scale NaN),
//! feature `j`'s weights `qw` per group `g` of [`GROUP`] inputs with scale
//! `sw[j][g] = max|w| / 127` the same way. Then
//! `acc = 0; for g in order: acc = acc + f32(Σ_g qa · qw) · sw[j][g]`
//! (a product then a sum, never fused), `c = acc · sa`, then the bias
//! added and the activation applied as in `crate::gemm`. A group's sum is
//! at most `16 · 32767 · 127 < 2^31`: exact in any order, so the SIMD
//! `vpmaddwd` sums and the scalar loop agree; its conversion to f32 rounds
//! to nearest even in both. The activations are quantized by the scalar
//! code in every set (linear in the input, small next to the product).
//!
//! Layout: panels of [`NR`] features; per pair of inputs a line of the 16
//! features' two weights as i16 (64 bytes, feature-major: element `2 l + b`
//! is input `2 s + b` of feature `l`), so that a 32-bit broadcast of two
//! activations lines up with it for `vpmaddwd`; per group, 16 scales.
//! `k` is padded to a multiple of [`GROUP`] with zero weights.

use std::cell::RefCell;
use std::ops::Range;

use crate::gemm::{Acts, OutPtr, NR};

/// Inputs per weight scale.
pub const GROUP: usize = 16;

/// Rows (and groups of weights) whose largest magnitude is below this
/// round to zeros with scale 0: the factor `QA / max|x|` must stay
/// finite.
pub const TINY: f32 = 1e-30;

/// Largest activation magnitude after rounding.
pub(crate) const QA: f32 = 32767.0;

/// A weight matrix rounded to int8 per feature and group of [`GROUP`]
/// inputs (values kept as i16 for the products), in panels of [`NR`]
/// features. Features past `n` are zero with scale 0.
#[derive(Clone, Default)]
pub struct PackedW8 {
    n: usize,
    k: usize,
    /// Panel `p`, pair `s`, lane `l`, input `b` at
    /// `((p * pairs + s) * NR + l) * 2 + b`.
    values: Vec<i16>,
    /// Panel `p`, group `g`, lane `l` at `(p * groups + g) * NR + l`.
    scales: Vec<f32>,
    /// Per input, the factor the activations are multiplied by before they
    /// are rounded (`1 / s` of the smoothing), if any.
    act_mul: Option<Vec<f32>>,
}

impl PackedW8 {
    /// Quantizes and packs the `n x k` matrix whose row `j` `row(j, out)`
    /// writes, input `kk`'s weights first multiplied by `smooth[kk]` and
    /// the activations' input `kk` by `1 / smooth[kk]` (SmoothQuant: the
    /// products unchanged in exact arithmetic, the activations' outlying
    /// inputs tamed), if given.
    ///
    /// # Panics
    /// If `smooth` is given and not `k` long.
    pub fn from_rows(
        n: usize,
        k: usize,
        smooth: Option<&[f32]>,
        mut row: impl FnMut(usize, &mut [f32]),
    ) -> PackedW8 {
        if let Some(s) = smooth {
            assert_eq!(s.len(), k, "one smoothing factor per input");
        }
        let groups = k.div_ceil(GROUP);
        let pairs = groups * GROUP / 2;
        let n_panels = n.div_ceil(NR);
        let mut values = vec![0i16; n_panels * pairs * NR * 2];
        let mut scales = vec![0f32; n_panels * groups * NR];
        let mut buf = vec![0f32; k];
        let mut q = [0i8; GROUP];
        for j in 0..n {
            row(j, &mut buf);
            if let Some(s) = smooth {
                buf.iter_mut().zip(s).for_each(|(v, &s)| *v *= s);
            }
            let (p, lane) = (j / NR, j % NR);
            for (g, chunk) in buf.chunks(GROUP).enumerate() {
                scales[(p * groups + g) * NR + lane] =
                    quantize_row_i8(chunk, &mut q[..chunk.len()]);
                for (b, &v) in q[..chunk.len()].iter().enumerate() {
                    let kk = g * GROUP + b;
                    let at = ((p * pairs + kk / 2) * NR + lane) * 2 + kk % 2;
                    values[at] = i16::from(v);
                }
            }
        }
        PackedW8 {
            n,
            k,
            values,
            scales,
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

    /// Bytes held (the values as stored, two bytes each).
    pub fn size_bytes(&self) -> usize {
        self.values.len() * 2 + self.scales.len() * 4
    }

    /// Groups of [`GROUP`] inputs per row.
    pub(crate) fn groups(&self) -> usize {
        self.k.div_ceil(GROUP)
    }

    /// Panel `p`'s lines, `groups * GROUP / 2` of `2 * NR` values.
    pub(crate) fn panel(&self, p: usize) -> &[i16] {
        let len = self.groups() * GROUP * NR;
        &self.values[p * len..(p + 1) * len]
    }

    /// Panel `p`'s scales, `groups` lines of 16.
    pub(crate) fn panel_scales(&self, p: usize) -> &[f32] {
        let len = self.groups() * NR;
        &self.scales[p * len..(p + 1) * len]
    }
}

/// `x` rounded to int8 (a group of weights; see the module): writes
/// `q[..x.len()]`, returns the scale `max|x| / 127` (0 below [`TINY`], NaN
/// for a non-finite `x`, the values zeros then).
pub fn quantize_row_i8(x: &[f32], q: &mut [i8]) -> f32 {
    let amax_bits = x
        .iter()
        .map(|v| v.to_bits() & 0x7fff_ffff)
        .max()
        .unwrap_or(0);
    if amax_bits >= 0x7f80_0000 {
        q[..x.len()].fill(0);
        return f32::NAN;
    }
    let amax = f32::from_bits(amax_bits);
    if amax < TINY {
        q[..x.len()].fill(0);
        return 0.0;
    }
    let inv = 127.0 / amax;
    for (o, &v) in q.iter_mut().zip(x) {
        *o = (v * inv).round_ties_even().clamp(-127.0, 127.0) as i8;
    }
    amax / 127.0
}

/// `x` rounded to 16-bit integers (see the module): writes `q[..x.len()]`,
/// returns the row's scale.
pub fn quantize_row_i16(x: &[f32], q: &mut [i16]) -> f32 {
    let amax_bits = x
        .iter()
        .map(|v| v.to_bits() & 0x7fff_ffff)
        .max()
        .unwrap_or(0);
    let zeros = |q: &mut [i16], scale: f32| {
        q[..x.len()].fill(0);
        scale
    };
    if amax_bits >= 0x7f80_0000 {
        return zeros(q, f32::NAN);
    }
    let amax = f32::from_bits(amax_bits);
    if amax < TINY {
        return zeros(q, 0.0);
    }
    let inv = QA / amax;
    for (o, &v) in q.iter_mut().zip(x) {
        *o = (v * inv).round_ties_even().clamp(-QA, QA) as i16;
    }
    amax / QA
}

/// `x` times `mul` (element by element, if given; at least as long as
/// `x`) rounded by [`quantize_row_i16`], `scratch` holding the product:
/// the reference for the kernel sets' quantizers.
pub fn quantize_row_i16_scaled(
    x: &[f32],
    mul: Option<&[f32]>,
    q: &mut [i16],
    scratch: &mut Vec<f32>,
) -> f32 {
    match mul {
        Some(mul) => {
            scratch.clear();
            scratch.extend(x.iter().zip(mul).map(|(&v, &c)| v * c));
            quantize_row_i16(scratch, q)
        }
        None => quantize_row_i16(x, q),
    }
}

/// A product's activations rounded row by row: row `i`'s values at
/// `i * ld` (`ld` the padded `k`, the padding zero), its scale
/// `scales[i]`.
#[derive(Default)]
pub(crate) struct QuantRows16 {
    pub values: Vec<i16>,
    pub scales: Vec<f32>,
    pub ld: usize,
    scaled: Vec<f32>,
}

impl QuantRows16 {
    /// Quantizes every row of `a` (times `w`'s activation factors, if
    /// any) with [`quantize_row_i16_scaled`].
    pub fn fill(&mut self, a: Acts, w: &PackedW8) {
        let mut scaled = std::mem::take(&mut self.scaled);
        self.fill_with(a, w, |x, mul, q| {
            quantize_row_i16_scaled(x, mul, q, &mut scaled)
        });
        self.scaled = scaled;
    }

    /// As [`QuantRows16::fill`] with a kernel set's quantizer, which must
    /// give [`quantize_row_i16_scaled`]'s bits: `quantize(x, mul, q)`
    /// writes `q[..x.len()]` and returns the scale.
    pub fn fill_with(
        &mut self,
        a: Acts,
        w: &PackedW8,
        mut quantize: impl FnMut(&[f32], Option<&[f32]>, &mut [i16]) -> f32,
    ) {
        let k = w.k;
        self.ld = w.groups() * GROUP;
        self.values.resize(a.m * self.ld, 0);
        self.scales.resize(a.m, 0.0);
        for (i, (row, scale)) in self
            .values
            .chunks_exact_mut(self.ld)
            .zip(&mut self.scales)
            .enumerate()
        {
            let x = &a.a[i * a.lda..i * a.lda + k];
            *scale = quantize(x, w.act_mul.as_deref(), &mut row[..k]);
            row[k..].fill(0);
        }
    }
}

thread_local! {
    /// The activations of the current product on this thread.
    pub(crate) static ROWS16: RefCell<QuantRows16> = RefCell::new(QuantRows16::default());
}

/// Bytes of weights in a block of panels that stays in the L2 cache while
/// every row goes past it.
// Used by the x86 kernels only (other targets run the scalar reference).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const B_BLOCK_BYTES: usize = 512 * 1024;

/// Calls `tile(rows, p)` for every panel `p` of `panels` and every tile of
/// `m` rows, the tiles of nearly equal height (at most `max_rows`, e.g. 25
/// rows as 9 + 8 + 8), a block of panels of `w` at a time (GotoBLAS's
/// order: the block's weights stay in the L2 cache while every row goes
/// past them). The order changes no bit: each value is computed by one
/// tile alone.
// Used by the x86 kernels only (other targets run the scalar reference).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn for_each_tile(
    m: usize,
    w: &PackedW8,
    panels: Range<usize>,
    max_rows: usize,
    mut tile: impl FnMut(Range<usize>, usize),
) {
    if m == 0 || panels.is_empty() {
        return;
    }
    let n_tiles = m.div_ceil(max_rows);
    let (base, extra) = (m / n_tiles, m % n_tiles);
    let panel_bytes = std::mem::size_of_val(w.panel(0));
    let block = (B_BLOCK_BYTES / panel_bytes.max(1)).max(1);
    let mut p0 = panels.start;
    while p0 < panels.end {
        let p1 = (p0 + block).min(panels.end);
        let mut i = 0;
        for t in 0..n_tiles {
            let h = base + usize::from(t < extra);
            for p in p0..p1 {
                tile(i..i + h, p);
            }
            i += h;
        }
        p0 = p1;
    }
}

/// `C = A · Wᵀ` with the products of the module for the output features of
/// `panels`, every row of `a`, bias and activation as `out` says; the
/// active kernel set's code.
///
/// # Panics
/// If the shapes do not fit.
///
/// # Safety
/// As [`crate::gemm::gemm_panels`]: `out.ptr` valid for writes at
/// `i * out.ld + j` for every row `i < a.m` and feature `j < w.n()` of
/// those panels, and those places the caller's alone during the call.
pub unsafe fn gemm_w8a16_panels(a: Acts, w: &PackedW8, panels: Range<usize>, out: OutPtr) {
    check(&a, w, &panels, &out);
    // SAFETY: the shapes were checked; the output contract is the
    // caller's.
    unsafe { (crate::table::active().gemm_w8a16_panels.f)(a, w, panels, out) };
}

/// The shape checks every kernel set's entry relies on.
pub(crate) fn check(a: &Acts, w: &PackedW8, panels: &Range<usize>, out: &OutPtr) {
    a.check(w.k);
    assert!(panels.end <= w.n_panels(), "panel range out of bounds");
    assert!(
        out.bias.is_none_or(|b| b.len() >= w.n),
        "bias shorter than n"
    );
}

/// The portable reference for [`gemm_w8a16_panels`].
///
/// # Safety
/// As [`gemm_w8a16_panels`].
pub unsafe fn gemm_w8a16_panels_scalar(a: Acts, w: &PackedW8, panels: Range<usize>, out: OutPtr) {
    check(&a, w, &panels, &out);
    ROWS16.with(|rows| {
        let mut rows = rows.borrow_mut();
        rows.fill(a, w);
        let groups = w.groups();
        for p in panels {
            let panel = w.panel(p);
            let sw = w.panel_scales(p);
            let cols = (w.n - p * NR).min(NR);
            for i in 0..a.m {
                let qa = &rows.values[i * rows.ld..(i + 1) * rows.ld];
                let mut acc = [0f32; NR];
                for g in 0..groups {
                    let mut sums = [0i32; NR];
                    let lines = &panel[g * GROUP * NR..(g + 1) * GROUP * NR];
                    let xs = &qa[g * GROUP..(g + 1) * GROUP];
                    for (two, line) in xs.chunks_exact(2).zip(lines.chunks_exact(2 * NR)) {
                        for (s, wl) in sums.iter_mut().zip(line.chunks_exact(2)) {
                            *s += i32::from(two[0]) * i32::from(wl[0])
                                + i32::from(two[1]) * i32::from(wl[1]);
                        }
                    }
                    for (l, (a, s)) in acc.iter_mut().zip(sums).enumerate() {
                        *a += s as f32 * sw[g * NR + l];
                    }
                }
                let mut v = [0f32; NR];
                for l in 0..cols {
                    v[l] = acc[l] * rows.scales[i];
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

/// Rows for checking a kernel set's quantizer against
/// [`quantize_row_i16_scaled`]: every length 0..=70 and some longer, with
/// and without factors; zeros, denormals, ties after scaling, values near
/// the largest, an infinity, a NaN, factors that overflow or vanish.
#[cfg(all(test, target_arch = "x86_64"))]
pub(crate) fn quantizer_cases() -> Vec<(Vec<f32>, Option<Vec<f32>>)> {
    let mut next = crate::xorshift(0x51ED_2701);
    let mut value = move || ((next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
    let mut cases = Vec::new();
    for n in (0..=70).chain([127, 384, 385, 1536]) {
        let x: Vec<f32> = (0..n).map(|_| value() * 8.0).collect();
        let mul: Vec<f32> = (0..n).map(|_| 4f32.powf(value())).collect();
        cases.push((x.clone(), None));
        cases.push((x, Some(mul)));
    }
    let special: [&dyn Fn(usize) -> f32; 7] = [
        &|_| 0.0,
        &|i| f32::from_bits(1 + i as u32) * if i % 2 == 0 { 1.0 } else { -1.0 },
        // Largest 32767 * 2 (factor 0.5): every value a tie k + 0.5.
        &|i| {
            if i == 0 {
                65534.0
            } else {
                (i as f32 % 200.0) - 99.0
            }
        },
        &|i| if i % 3 == 0 { -3e38 } else { 1e30 },
        &|i| if i == 17 { f32::INFINITY } else { 1.0 },
        &|i| if i == 5 { f32::NAN } else { -2.0 },
        &|i| if i == 40 { 1e-29 } else { 1e-31 },
    ];
    for f in special {
        for n in [1, 7, 8, 9, 15, 16, 17, 33, 41, 100] {
            let x: Vec<f32> = (0..n).map(f).collect();
            cases.push((x.clone(), None));
            // Factors 2 (overflowing 3e38), 0.5 and 1e-10 (vanishing).
            let mul: Vec<f32> = (0..n).map(|i| [2.0, 0.5, 1e-10][i % 3]).collect();
            cases.push((x, Some(mul)));
        }
    }
    cases
}

/// Checks `quantize` (a kernel set's quantizer) against
/// [`quantize_row_i16_scaled`] on [`quantizer_cases`], every value and the
/// scale bit for bit.
#[cfg(all(test, target_arch = "x86_64"))]
pub(crate) fn check_quantizer(quantize: impl Fn(&[f32], Option<&[f32]>, &mut [i16]) -> f32) {
    let mut scratch = Vec::new();
    for (x, mul) in quantizer_cases() {
        let n = x.len();
        let mut want = vec![7i16; n + 3];
        let mut got = want.clone();
        let s_want = quantize_row_i16_scaled(&x, mul.as_deref(), &mut want, &mut scratch);
        let s_got = quantize(&x, mul.as_deref(), &mut got);
        assert_eq!(
            s_got.to_bits(),
            s_want.to_bits(),
            "scale, {n} values {mul:?}"
        );
        assert_eq!(got, want, "{n} values {x:?} {mul:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::KernelSet;
    use crate::math::Activation;
    use crate::table::GemmW8A16PanelsFn;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut next = crate::xorshift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        (0..n)
            .map(|_| ((next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0)
            .collect()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    fn pack(w: &[f32], n: usize, k: usize, smooth: Option<&[f32]>) -> PackedW8 {
        PackedW8::from_rows(n, k, smooth, |j, out| {
            out.copy_from_slice(&w[j * k..(j + 1) * k])
        })
    }

    /// Runs `f` over the panels split in three ranges (as threads split
    /// them), NaN where nothing was written.
    fn run(
        f: GemmW8A16PanelsFn,
        a: &[f32],
        m: usize,
        w: &PackedW8,
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

    /// The definition, independent of the packed layout.
    #[allow(clippy::too_many_arguments)]
    fn definition(
        a: &[f32],
        w: &[f32],
        m: usize,
        n: usize,
        k: usize,
        smooth: Option<&[f32]>,
        bias: Option<&[f32]>,
        act: Option<Activation>,
    ) -> Vec<f32> {
        let ones = vec![1f32; k];
        let s = smooth.unwrap_or(&ones);
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            let x: Vec<f32> = a[i * k..(i + 1) * k]
                .iter()
                .zip(s)
                .map(|(&v, &s)| if smooth.is_some() { v * (1.0 / s) } else { v })
                .collect();
            let mut qa = vec![0i16; k];
            let sa = quantize_row_i16(&x, &mut qa);
            let row = &mut c[i * n..(i + 1) * n];
            for (j, out) in row.iter_mut().enumerate() {
                let wr: Vec<f32> = w[j * k..(j + 1) * k]
                    .iter()
                    .zip(s)
                    .map(|(&v, &s)| if smooth.is_some() { v * s } else { v })
                    .collect();
                let mut acc = 0f32;
                for (xg, wg) in qa.chunks(GROUP).zip(wr.chunks(GROUP)) {
                    let mut qw = vec![0i8; wg.len()];
                    let sw = quantize_row_i8(wg, &mut qw);
                    let sum: i32 = xg
                        .iter()
                        .zip(&qw)
                        .map(|(&x, &y)| i32::from(x) * i32::from(y))
                        .sum();
                    acc += sum as f32 * sw;
                }
                *out = acc * sa + bias.map_or(0.0, |b| b[j]);
            }
            if let Some(act) = act {
                crate::math::reference::activate(act, row);
            }
        }
        c
    }

    fn check_all_sets(
        a: &[f32],
        w: &[f32],
        (m, n, k): (usize, usize, usize),
        smooth: Option<&[f32]>,
        bias: Option<&[f32]>,
        act: Option<Activation>,
    ) -> usize {
        let packed = pack(w, n, k, smooth);
        let want = bits(&definition(a, w, m, n, k, smooth, bias, act));
        let mut checked = 0;
        for set in KernelSet::ALL {
            let Some(t) = set.table() else {
                eprintln!("SKIPPED {}: not supported by this CPU", set.name());
                continue;
            };
            let got = bits(&run(t.gemm_w8a16_panels.f, a, m, &packed, bias, act));
            assert!(got == want, "{} {m}x{n}x{k} {act:?}", set.name());
            checked += 1;
        }
        checked
    }

    /// Tile heights 1..=13 and uneven row counts, odd `k` (1, 3, 31, 33,
    /// 385, 767), partial last groups and panels, panels split as threads
    /// split them, smoothing, bias and activations: every kernel set gives
    /// the definition's bits.
    #[test]
    fn every_set_gives_the_definitions_bits_for_every_shape() {
        let mut checked = 0;
        for &(m, n, k) in &[
            (1, 1, 1),
            (2, 16, 3),
            (3, 17, 31),
            (4, 33, 33),
            (5, 40, 64),
            (6, 48, 65),
            (7, 31, 96),
            (9, 100, 385),
            (10, 16, 767),
            (13, 47, 63),
            (25, 70, 768),
            (37, 300, 384),
            (100, 18, 1536),
        ] {
            let a = values(m * k, 11 + m as u64);
            let w = values(n * k, 13 + n as u64);
            let bias = values(n, 17);
            let smooth: Vec<f32> = values(k, 31).iter().map(|v| 4f32.powf(*v)).collect();
            for (s, b, act) in [
                (None, None, None),
                (Some(&smooth[..]), Some(&bias[..]), None),
                (None, Some(&bias[..]), Some(Activation::GeluErf)),
                (Some(&smooth[..]), None, Some(Activation::Relu)),
            ] {
                checked += check_all_sets(&a, &w, (m, n, k), s, b, act);
            }
        }
        eprintln!("{checked} w8a16 products equal to the definition, bit for bit");
    }

    /// Rows of zeros, denormals, huge values, ties, an infinity and a NaN
    /// (those rows' and features' products NaN, nothing else), weights the
    /// same; the largest group sums (±32767 · ±127 over a whole group).
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
        row(&mut a, 2, &|kk| if kk % 3 == 0 { -1e30 } else { 1e30 });
        row(&mut a, 3, &|kk| {
            if kk == 70 {
                32767.0
            } else {
                kk as f32 - 35.5
            }
        });
        row(&mut a, 4, &|kk| if kk == 9 { f32::INFINITY } else { 1.0 });
        row(&mut a, 5, &|kk| if kk == 30 { f32::NAN } else { -1.0 });
        row(&mut a, 6, &|_| -3.0);
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
        row(&mut w, 4, &|_| 5.0);
        let bias = values(n, 9);
        for (b, act) in [(None, None), (Some(&bias[..]), Some(Activation::GeluErf))] {
            let want = definition(&a, &w, m, n, k, None, b, act);
            for i in 0..m {
                for j in 0..n {
                    let nan = i == 4 || i == 5 || j == 2;
                    assert_eq!(want[i * n + j].is_nan(), nan, "[{i}][{j}]");
                }
            }
            check_all_sets(&a, &w, (m, n, k), None, b, act);
        }
    }

    /// The weights' quantizer: the largest magnitude maps to ±127, ties
    /// round to even, the scale is max|x| / 127; zeros, denormal groups and
    /// non-finite groups give zeros.
    #[test]
    fn quantize_row_i8_rounds_to_nearest_even_in_range() {
        let mut q = [0i8; 6];
        // Factor 127 / 127 = 1: 2.5 -> 2, 3.5 -> 4, -0.5 -> 0.
        let s = quantize_row_i8(&[2.5, 3.5, -0.5, -127.0, 126.5, 1.49], &mut q);
        assert_eq!(s, 1.0);
        assert_eq!(q, [2, 4, 0, -127, 126, 1]);
        let s = quantize_row_i8(&[0.0, -0.0, 1e-31, 0.0, 0.0, 0.0], &mut q);
        assert_eq!((s, q), (0.0, [0; 6]));
        let s = quantize_row_i8(&[1.0, f32::INFINITY, 2.0, 0.0, 0.0, 0.0], &mut q);
        assert!(s.is_nan());
        assert_eq!(q, [0; 6]);
        let x = values(1000, 3);
        let mut q = vec![0i8; 1000];
        let s = quantize_row_i8(&x, &mut q);
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert_eq!(s, amax / 127.0);
        assert!(q.iter().any(|&v| v.abs() == 127) && !q.contains(&i8::MIN));
        for (&v, &qv) in x.iter().zip(&q) {
            assert!((v - f32::from(qv) * s).abs() <= s * 0.5001, "{v} {qv}");
        }
    }

    #[test]
    fn quantize_row_i16_rounds_to_nearest_even_in_range() {
        let mut q = [0i16; 5];
        // Factor 1: 2.5 -> 2, 3.5 -> 4, -0.5 -> 0.
        let s = quantize_row_i16(&[2.5, 3.5, -0.5, -32767.0, 1.49], &mut q);
        assert_eq!(s, 1.0);
        assert_eq!(q, [2, 4, 0, -32767, 1]);
        let s = quantize_row_i16(&[0.0, 1e-31, 0.0, 0.0, 0.0], &mut q);
        assert_eq!((s, q), (0.0, [0; 5]));
        let s = quantize_row_i16(&[1.0, f32::NAN, 0.0, 0.0, 0.0], &mut q);
        assert!(s.is_nan() && q == [0; 5]);
    }

    #[test]
    fn a_row_gives_the_same_bits_alone_or_in_any_batch() {
        let (n, k) = (50, 200);
        let packed = pack(&values(n * k, 3), n, k, None);
        let a = values(30 * k, 4);
        let f = crate::table::active().gemm_w8a16_panels.f;
        let all = run(f, &a, 30, &packed, None, None);
        for i in [0, 7, 29] {
            let one = run(f, &a[i * k..(i + 1) * k], 1, &packed, None, None);
            assert_eq!(bits(&one), bits(&all[i * n..(i + 1) * n]));
        }
    }
}
