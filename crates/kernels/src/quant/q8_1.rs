//! Q8_1: Q8_0 plus the f16 `s = d * sum(q)`, used for activations in dot
//! products with Q4_1/Q5_1; mirrors `block_q8_1` (ggml-common.h) and
//! `quantize_row_q8_1_ref` (ggml-quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.
//!
//! The block is 36 bytes (f16 d, f16 s, 32 x i8), as in ggml; the `gguf`
//! Python package's size table (40) is out of date. ggml has no
//! `dequantize_row_q8_1`; [`BlockQ8_1::to_f32`] is `y = q * d`, the Q8_0
//! formula, and ignores `s`.

use super::float::{f16_le, f16_le_from};
use super::q8_0::quantize_q8;
use super::{Block, QK};

/// One Q8_1 block: 36 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ8_1 {
    /// Scale, f16 little-endian.
    pub d: [u8; 2],
    /// `d * sum(qs)` (with the f32 `d`, before it was rounded to f16), f16
    /// little-endian.
    pub s: [u8; 2],
    /// The quantized values.
    pub qs: [i8; QK],
}

const _: () = assert!(std::mem::size_of::<BlockQ8_1>() == 36);

// SAFETY: #[repr(C)] and made only of u8/i8 arrays.
unsafe impl Block for BlockQ8_1 {}

impl BlockQ8_1 {
    /// The scale as f32.
    pub fn d(&self) -> f32 {
        f16_le(self.d)
    }

    /// The stored `d * sum(q)` as f32.
    pub fn s(&self) -> f32 {
        f16_le(self.s)
    }

    /// Dequantizes the block: `y = q * d`.
    pub fn to_f32(&self, y: &mut [f32; QK]) {
        let d = self.d();
        for (y, &q) in y.iter_mut().zip(&self.qs) {
            *y = f32::from(q) * d;
        }
    }

    /// Quantizes 32 values exactly as Q8_0 does, and adds `s`.
    #[inline(always)]
    pub fn from_f32(x: &[f32; QK]) -> Self {
        let (d, qs) = quantize_q8(x);
        let sum: i32 = qs.iter().map(|&q| i32::from(q)).sum();
        BlockQ8_1 {
            d: f16_le_from(d),
            s: f16_le_from(sum as f32 * d),
            qs,
        }
    }
}
