//! IQ4_NL and IQ4_XS: 4-bit codes read through a fixed non-linear table
//! ([`KVALUES_IQ4NL`], sixteen signed values denser near zero) times a
//! scale. Mirrors `block_iq4_nl` / `block_iq4_xs` and `kvalues_iq4nl`
//! (ggml-common.h) and `dequantize_row_iq4_nl` / `dequantize_row_iq4_xs`
//! (ggml-quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>, and
//! gguf-py's `gguf.quants.IQ4_NL` / `IQ4_XS`.
//!
//! - IQ4_NL: 32 values, one f16 scale: `x = d * KVALUES_IQ4NL[q]`.
//! - IQ4_XS: 256 values in eight runs of 32, one f16 scale `d` and a 6-bit
//!   scale `ls` per run (low four bits in `scales_l`, high two in
//!   `scales_h`): `x = d * (ls - 32) * KVALUES_IQ4NL[q]`.
//!
//! In both, byte `j` of a run's sixteen holds value `j` in its low nibble
//! and value `j + 16` in its high nibble (as Q4_0).
//!
//! Writing them ([`BlockIq4Nl::from_f32`], [`BlockIq4Xs::from_f32`]) is
//! ggml's `quantize_iq4_nl` / `quantize_iq4_xs` without an importance
//! matrix (what `llama-quantize` runs without `--imatrix`): per run of 32,
//! a scale search over fifteen candidate scales weighted by `x²`; for
//! IQ4_XS the runs' scales are then rounded to six bits of one super-block
//! scale and the codes chosen again. Byte-exact: the same float operations
//! in the same order (see `ksearch.rs` on why that holds).

use super::float::{f16_le, f16_le_from};
use super::ksearch::{nearest_int, GROUP_MAX_EPS};
use super::{Block, QK, QK_K};

/// The sixteen values a 4-bit IQ4 code stands for.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// One IQ4_NL block: 18 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockIq4Nl {
    /// Scale, f16 little-endian.
    pub d: [u8; 2],
    /// The 32 codes, two per byte (see the module notes).
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockIq4Nl>() == 18);

// SAFETY: #[repr(C)] and made only of u8 arrays.
unsafe impl Block for BlockIq4Nl {}

/// Writes the 32 values `KVALUES_IQ4NL[q] * d` of one run of sixteen code
/// bytes.
#[inline(always)]
fn run_to_f32(qs: &[u8], d: f32, y: &mut [f32]) {
    for (j, &q) in qs.iter().enumerate() {
        y[j] = d * f32::from(KVALUES_IQ4NL[usize::from(q & 0x0f)]);
        y[j + 16] = d * f32::from(KVALUES_IQ4NL[usize::from(q >> 4)]);
    }
}

impl BlockIq4Nl {
    /// The scale as f32.
    pub fn d(&self) -> f32 {
        f16_le(self.d)
    }

    /// Dequantizes the block: `y = d * KVALUES_IQ4NL[q]`.
    pub fn to_f32(&self, y: &mut [f32; QK]) {
        run_to_f32(&self.qs, self.d(), y);
    }
}

/// One IQ4_XS super-block: 136 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockIq4Xs {
    /// Super-block scale, f16 little-endian.
    pub d: [u8; 2],
    /// High two bits of run `r`'s scale at bits `2r..2r+2` (u16 little-endian).
    pub scales_h: [u8; 2],
    /// Low four bits of run `r`'s scale: byte `r / 2`, low nibble for even
    /// `r`, high for odd.
    pub scales_l: [u8; QK_K / 64],
    /// The 256 codes, sixteen bytes per run of 32.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockIq4Xs>() == 136);

// SAFETY: #[repr(C)] and made only of u8 arrays.
unsafe impl Block for BlockIq4Xs {}

impl BlockIq4Xs {
    /// The super-block scale as f32.
    pub fn d(&self) -> f32 {
        f16_le(self.d)
    }

    /// Run `r`'s signed scale `ls - 32` (`-32..=31`).
    #[inline(always)]
    pub fn run_scale(&self, r: usize) -> i32 {
        let low = (self.scales_l[r / 2] >> (4 * (r % 2))) & 0x0f;
        let high = (u16::from_le_bytes(self.scales_h) >> (2 * r)) & 3;
        (i32::from(low) | (i32::from(high) << 4)) - 32
    }

    /// Dequantizes the super-block: `y = d * (ls - 32) * KVALUES_IQ4NL[q]`,
    /// the run's factor `d * (ls - 32)` rounded first (as ggml).
    pub fn to_f32(&self, y: &mut [f32; QK_K]) {
        let d = self.d();
        for (r, (qs, y)) in self
            .qs
            .chunks_exact(16)
            .zip(y.chunks_exact_mut(32))
            .enumerate()
        {
            run_to_f32(qs, d * self.run_scale(r) as f32, y);
        }
    }
}

/// The index of the value of [`KVALUES_IQ4NL`] nearest `x` (ggml's
/// `best_index_int8`, comparison for comparison: a binary search, the
/// upper value on a tie, 15 for NaN).
#[inline(always)]
fn best_index(x: f32) -> usize {
    let v = |i: usize| f32::from(KVALUES_IQ4NL[i]);
    if x <= v(0) {
        return 0;
    }
    if x >= v(15) {
        return 15;
    }
    let (mut ml, mut mu) = (0, 15);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < v(mav) {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - v(mu - 1) < v(mu) - x {
        mu - 1
    } else {
        mu
    }
}

/// Candidate scales tried on each side of the first guess (ggml's `ntry`).
const NTRY: i32 = 7;

/// The best scale of one run of 32 (`quantize_row_iq4_nl_impl`'s inner
/// search with weights `x²`): 0 for a run of (near) zeros.
#[inline(always)]
fn run_scale(xb: &[f32]) -> f32 {
    let mut weight = [0.0f32; 32];
    for (w, &x) in weight.iter_mut().zip(xb) {
        *w = x * x;
    }
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &x in xb {
        let ax = x.abs();
        if ax > amax {
            amax = ax;
            max = x;
        }
    }
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let v0 = f32::from(KVALUES_IQ4NL[0]);
    let sums = |id: f32| {
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        for (&x, &w) in xb.iter().zip(&weight) {
            let q = f32::from(KVALUES_IQ4NL[best_index(id * x)]);
            sumqx += w * q * x;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    };
    let d = -max / v0;
    let (sumqx, sumq2) = sums(1.0 / d);
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -NTRY..=NTRY {
        let id = (itry + i32::from(KVALUES_IQ4NL[0])) as f32 / max;
        let (sumqx, sumq2) = sums(id);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// Packs a run's 32 codes as the blocks store them (value `j` in byte
/// `j`'s low nibble, value `j + 16` in its high one).
#[inline(always)]
fn pack_run(codes: &[u8; 32], qs: &mut [u8]) {
    for (j, q) in qs.iter_mut().enumerate() {
        *q = codes[j] | (codes[j + 16] << 4);
    }
}

/// The codes of a run at scale `d` (all index 8, value 1, for `d` = 0:
/// ggml multiplies by an inverse of 0).
#[inline(always)]
fn run_codes(xb: &[f32], d: f32) -> [u8; 32] {
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut codes = [0u8; 32];
    for (c, &x) in codes.iter_mut().zip(xb) {
        *c = best_index(id * x) as u8;
    }
    codes
}

impl BlockIq4Nl {
    /// Quantizes 32 values as `llama-quantize` does without an importance
    /// matrix (see the module notes).
    #[inline(always)]
    pub fn from_f32(x: &[f32; QK]) -> Self {
        let d = run_scale(x);
        let mut qs = [0u8; QK / 2];
        pack_run(&run_codes(x, d), &mut qs);
        BlockIq4Nl {
            d: f16_le_from(d),
            qs,
        }
    }
}

impl BlockIq4Xs {
    /// Quantizes 256 values as `llama-quantize` does without an importance
    /// matrix: each run's best scale, then the super-block scale
    /// `-max / 32` of the largest one, each run's scale rounded to six
    /// bits of it, and the codes chosen again at the rounded scales.
    #[inline(always)]
    pub fn from_f32(x: &[f32; QK_K]) -> Self {
        let mut scales = [0.0f32; QK_K / 32];
        let (mut amax_scale, mut max_scale) = (0.0f32, 0.0f32);
        for (s, xb) in scales.iter_mut().zip(x.chunks_exact(32)) {
            *s = run_scale(xb);
            if s.abs() > amax_scale {
                amax_scale = s.abs();
                max_scale = *s;
            }
        }
        let d = -max_scale / 32.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut b = BlockIq4Xs {
            d: f16_le_from(d),
            scales_h: [0; 2],
            scales_l: [0; QK_K / 64],
            qs: [0; QK_K / 2],
        };
        let mut scales_h = 0u16;
        for (r, (xb, &s)) in x.chunks_exact(32).zip(&scales).enumerate() {
            let l = nearest_int(id * s).clamp(-32, 31);
            let codes = run_codes(xb, d * l as f32);
            pack_run(&codes, &mut b.qs[16 * r..16 * r + 16]);
            let l = (l + 32) as u8;
            b.scales_l[r / 2] |= (l & 0x0f) << (4 * (r % 2));
            scales_h |= u16::from(l >> 4) << (2 * r);
        }
        b.scales_h = scales_h.to_le_bytes();
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_scales_take_their_bits_from_both_fields() {
        let mut b = BlockIq4Xs {
            d: [0; 2],
            scales_h: [0; 2],
            scales_l: [0; 4],
            qs: [0; 128],
        };
        assert!((0..8).all(|r| b.run_scale(r) == -32));
        // Run 3: low nibble of byte 1's high half, high bits 6..8.
        b.scales_l[1] = 0xa0;
        b.scales_h = (0b11u16 << 6).to_le_bytes();
        assert_eq!(b.run_scale(3), (0x0a | 0x30) - 32);
        assert_eq!(b.run_scale(2), -32);
        b.scales_l = [0xff; 4];
        b.scales_h = [0xff; 2];
        assert!((0..8).all(|r| b.run_scale(r) == 31));
    }

    #[test]
    fn nl_values_go_low_nibble_first() {
        let mut b = BlockIq4Nl {
            d: [0x00, 0x3c],
            qs: [0; 16],
        }; // d = 1.0
        b.qs[0] = 0xf0; // value 0: code 0, value 16: code 15
        let mut y = [0.0; QK];
        b.to_f32(&mut y);
        assert_eq!(y[0], -127.0);
        assert_eq!(y[16], 113.0);
        assert_eq!(y[1], -127.0);
    }
}
