//! Q8_0: 32 values as i8 times one f16 scale, `x = d * q`; mirrors
//! `block_q8_0` (ggml-common.h), `dequantize_row_q8_0` and
//! `quantize_row_q8_0_ref` (ggml-quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.

use super::float::{f16_le, f16_le_from};
use super::{Block, QK};

/// One Q8_0 block: 34 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ8_0 {
    /// Scale, f16 little-endian.
    pub d: [u8; 2],
    /// The quantized values.
    pub qs: [i8; QK],
}

const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);

// SAFETY: #[repr(C)] and made only of u8/i8 arrays.
unsafe impl Block for BlockQ8_0 {}

/// Symmetric 8-bit quantization of 32 values, shared by Q8_0 and Q8_1:
/// `d = amax / 127` (in f32, before rounding to f16) and
/// `q = round(x / d)`, halves away from zero (C's `roundf`).
pub(crate) fn quantize_q8(x: &[f32; QK]) -> (f32, [i8; QK]) {
    (crate::table::active().quantize_q8.f)(x)
}

/// The scalar reference of [`quantize_q8`].
pub(crate) fn quantize_q8_scalar(x: &[f32; QK]) -> (f32, [i8; QK]) {
    // C's `MAX(amax, fabsf(v))`, spelled out so that NaNs behave the same.
    let amax = x
        .iter()
        .fold(0.0f32, |m, v| if m > v.abs() { m } else { v.abs() });
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; QK];
    for (q, &v) in qs.iter_mut().zip(x) {
        // |v * id| <= 127 up to rounding, so the cast does not saturate for
        // finite input (and is saturating, not undefined, otherwise).
        *q = super::round_half_away(v * id) as i8;
    }
    (d, qs)
}

/// Rows per panel of [`act_panels`].
pub const ACT_PANEL_ROWS: usize = 16;

/// One Q8_0 activation block as the many-row kernels read it from a panel
/// ([`act_panels`]): its values, its scale as f32 (exactly the f16's value)
/// and `-128 * sum(qs)`, the start of an integer sum that then adds
/// `sum((w + 128) * q)` (unsigned times signed, as VNNI's `vpdpbusd`
/// multiplies) to leave `sum(w * q)`. Worked out once per product instead
/// of once per group of weight rows (a 61,950-row output layer has 3,872
/// sixteen-row groups, each of which would convert the same scales and sum
/// the same bytes again).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ActBlockFacts {
    pub d: f32,
    pub offset: i32,
    pub qs: [i8; QK],
}

/// Q8_0 activation rows laid out for the many-row kernels: `acts` holds
/// rows of `row_bytes` bytes one after the other, and `out` receives, for
/// each run of [`ACT_PANEL_ROWS`] whole rows (a panel; rows after the last
/// whole panel are left out), block 0 of each of its rows, then block 1 of
/// each, and so on: row `t`'s block `b` at
/// `(t / 16 * n + b) * 16 + t % 16`, `n = row_bytes / 34`. A kernel then
/// walks one pointer through the panel, the sixteen rows' blocks side by
/// side.
pub fn act_panels(acts: &[u8], row_bytes: usize, out: &mut Vec<ActBlockFacts>) {
    out.clear();
    let size = std::mem::size_of::<BlockQ8_0>();
    let n = row_bytes / size;
    if n == 0 {
        return;
    }
    for panel in acts.chunks_exact(ACT_PANEL_ROWS * row_bytes) {
        for b in 0..n {
            out.extend(panel.chunks_exact(row_bytes).map(|row| {
                let block = &row[b * size..(b + 1) * size];
                let mut qs = [0i8; QK];
                for (q, &byte) in qs.iter_mut().zip(&block[2..]) {
                    *q = byte as i8;
                }
                ActBlockFacts {
                    d: f16_le([block[0], block[1]]),
                    offset: -128 * qs.iter().map(|&q| i32::from(q)).sum::<i32>(),
                    qs,
                }
            }));
        }
    }
}

/// One row of activations quantized to Q8_0 as the many-row kernels take
/// them: `x` (whole 32-value blocks) into `out` (34 bytes per block, as
/// [`BlockQ8_0::from_f32`] writes them) and, if `facts` is not empty, each
/// block's [`ActBlockFacts`] (as [`act_panels`] works them out) at
/// `facts[b * ACT_PANEL_ROWS]`, a row's place in its panel: the
/// quantization and the panel in one pass over the values.
///
/// # Panics
/// If `x` is not whole blocks, `out` not as long as their bytes, or
/// `facts` neither empty nor long enough for every block.
pub fn quantize_acts_row(x: &[f32], out: &mut [u8], facts: &mut [ActBlockFacts]) {
    let n = x.len() / QK;
    assert!(
        x.len() == n * QK && out.len() == n * std::mem::size_of::<BlockQ8_0>(),
        "whole blocks"
    );
    assert!(
        facts.is_empty() || n == 0 || facts.len() > (n - 1) * ACT_PANEL_ROWS,
        "a panel place for every block"
    );
    (crate::table::active().quantize_acts_row.f)(x, out, facts)
}

/// [`quantize_acts_row`] with each block quantized by `q` (a set's
/// [`quantize_q8`]); the arguments checked by the caller.
#[inline(always)]
pub(crate) fn quantize_acts_row_with(
    x: &[f32],
    out: &mut [u8],
    facts: &mut [ActBlockFacts],
    q: impl Fn(&[f32; QK]) -> (f32, [i8; QK]),
) {
    let size = std::mem::size_of::<BlockQ8_0>();
    for (b, (x, o)) in x
        .chunks_exact(QK)
        .zip(out.chunks_exact_mut(size))
        .enumerate()
    {
        let Ok(x) = <&[f32; QK]>::try_from(x) else {
            continue;
        };
        let (d, qs) = q(x);
        let d = f16_le_from(d);
        o[..2].copy_from_slice(&d);
        for (o, &q) in o[2..].iter_mut().zip(&qs) {
            *o = q as u8;
        }
        if let Some(f) = facts.get_mut(b * ACT_PANEL_ROWS) {
            *f = ActBlockFacts {
                d: f16_le(d),
                offset: -128 * qs.iter().map(|&q| i32::from(q)).sum::<i32>(),
                qs,
            };
        }
    }
}

/// The scalar reference of [`quantize_acts_row`].
pub(crate) fn quantize_acts_row_scalar(x: &[f32], out: &mut [u8], facts: &mut [ActBlockFacts]) {
    quantize_acts_row_with(x, out, facts, quantize_q8_scalar)
}

impl BlockQ8_0 {
    /// The scale as f32.
    pub fn d(&self) -> f32 {
        f16_le(self.d)
    }

    /// Dequantizes the block: `y = q * d`.
    pub fn to_f32(&self, y: &mut [f32; QK]) {
        let d = self.d();
        for (y, &q) in y.iter_mut().zip(&self.qs) {
            *y = f32::from(q) * d;
        }
    }

    /// Quantizes 32 values: `d = amax / 127` and `q = round(x / d)`, halves
    /// away from zero (C's `roundf`).
    #[inline(always)]
    pub fn from_f32(x: &[f32; QK]) -> Self {
        let (d, qs) = quantize_q8(x);
        BlockQ8_0 {
            d: f16_le_from(d),
            qs,
        }
    }
}

#[cfg(test)]
mod simd_tests {
    use super::*;

    #[test]
    fn fast_block_quantization_matches_scalar() {
        let mut next = crate::xorshift(0x2545_f491_4f6c_dd1du64);
        let mut blocks: Vec<[f32; QK]> = Vec::new();
        for case in 0..20_000 {
            let scale = [1e-30f32, 1e-3, 1.0, 3.0, 1e6, 3e38, 1e-38][case % 7];
            let mut x = [0f32; QK];
            for v in x.iter_mut() {
                *v = ((next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * scale;
            }
            if case % 5 == 0 {
                // Exact ties after scaling: amax 127 makes id exactly 1.
                x[0] = 127.0;
                for (i, v) in x.iter_mut().enumerate().skip(1) {
                    *v = (i as f32 - 16.0) + 0.5;
                }
            }
            blocks.push(x);
        }
        blocks.push([0.0; QK]);
        blocks.push([-0.0; QK]);
        let mut odd = [1.0f32; QK];
        odd[3] = f32::NAN;
        blocks.push(odd);
        odd[3] = f32::INFINITY;
        blocks.push(odd);
        odd[3] = f32::MIN_POSITIVE / 4.0;
        blocks.push(odd);
        for set in crate::dispatch::KernelSet::ALL {
            let Some(t) = set.table() else {
                eprintln!("SKIPPED {}: not supported by this CPU", set.name());
                continue;
            };
            for x in &blocks {
                let (d0, q0) = quantize_q8_scalar(x);
                let (d1, q1) = (t.quantize_q8.f)(x);
                assert!(
                    d0.to_bits() == d1.to_bits() || (d0.is_nan() && d1.is_nan()),
                    "{} {x:?}",
                    set.name()
                );
                assert_eq!(q0, q1, "{} {x:?}", set.name());
            }
        }
    }

    /// Rows quantized with their panel facts by every set: the same bytes
    /// as `BlockQ8_0::from_f32` block by block, and the same facts as
    /// `act_panels` of those bytes, at the row's panel place, for rows of
    /// finite values at every scale (ties, zeros, values so small that
    /// `1 / d` overflows, so large that `d` overflows f16) and with NaNs
    /// and infinities in some blocks.
    #[test]
    fn rows_with_facts_match_blocks_and_panels() {
        let mut next = crate::xorshift(0x51_7cc1_b727_220au64);
        let size = std::mem::size_of::<BlockQ8_0>();
        for (case, n) in [1usize, 2, 3, 16, 5, 8, 16, 7].into_iter().enumerate() {
            let (rows, cols) = (ACT_PANEL_ROWS, n * QK);
            let mut x = vec![0f32; rows * cols];
            for (i, v) in x.iter_mut().enumerate() {
                let scale = [1e-30f32, 1e-3, 1.0, 3e38, 1e-38, 0.0, 2.0][(i / QK + case) % 7];
                *v = ((next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * scale;
            }
            if case % 2 == 1 {
                x[3] = f32::NAN;
                x[cols + 40 % cols] = f32::NEG_INFINITY;
                // Exact ties after scaling in another block.
                let b = &mut x[2 * cols..2 * cols + QK];
                b[0] = 127.0;
                for (i, v) in b.iter_mut().enumerate().skip(1) {
                    *v = (i as f32 - 16.0) + 0.5;
                }
            }
            let mut want = vec![0u8; rows * n * size];
            for (xb, ob) in x.chunks_exact(QK).zip(want.chunks_exact_mut(size)) {
                let blk = BlockQ8_0::from_f32(xb.try_into().unwrap());
                ob[..2].copy_from_slice(&blk.d);
                ob[2..]
                    .iter_mut()
                    .zip(&blk.qs)
                    .for_each(|(o, &q)| *o = q as u8);
            }
            let mut want_facts = Vec::new();
            act_panels(&want, n * size, &mut want_facts);
            for set in crate::dispatch::KernelSet::ALL {
                let Some(t) = set.table() else {
                    eprintln!("SKIPPED {}: not supported by this CPU", set.name());
                    continue;
                };
                let mut got = vec![0u8; rows * n * size];
                let mut facts = vec![ActBlockFacts::default(); rows * n];
                for (r, (xr, or)) in x
                    .chunks_exact(cols)
                    .zip(got.chunks_exact_mut(n * size))
                    .enumerate()
                {
                    (t.quantize_acts_row.f)(xr, or, &mut facts[r..]);
                }
                assert_eq!(got, want, "{} case {case}", set.name());
                // Compared as bits: the scales are f16 values, never NaN.
                let bits = |f: &[ActBlockFacts]| -> Vec<(u32, i32, [i8; QK])> {
                    f.iter().map(|f| (f.d.to_bits(), f.offset, f.qs)).collect()
                };
                assert_eq!(
                    bits(&facts),
                    bits(&want_facts),
                    "{} case {case}",
                    set.name()
                );
                // No facts wanted: the same bytes.
                let mut alone = vec![0u8; n * size];
                (t.quantize_acts_row.f)(&x[..cols], &mut alone, &mut []);
                assert_eq!(alone, want[..n * size], "{} case {case}", set.name());
            }
        }
    }
}
