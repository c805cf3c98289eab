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
    pub fn from_f32(x: &[f32; QK]) -> Self {
        let (d, qs) = quantize_q8(x);
        BlockQ8_0 {
            d: f16_le_from(d),
            qs,
        }
    }
}
