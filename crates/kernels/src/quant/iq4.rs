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
//! Only reading is here (dequantization and the dot products); writing
//! these types (llama-quantize's search for the scales) is not.

use super::float::f16_le;
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
