//! Q4_1: 32 values as 4-bit integers with an f16 scale and minimum,
//! `x = d * q + m`; mirrors `block_q4_1` (ggml-common.h),
//! `dequantize_row_q4_1` and `quantize_row_q4_1_ref` (ggml-quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.

use super::float::{f16_le, f16_le_from};
use super::{Block, QK};

/// One Q4_1 block: 20 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ4_1 {
    /// Scale, f16 little-endian.
    pub d: [u8; 2],
    /// Minimum (offset), f16 little-endian.
    pub m: [u8; 2],
    /// Byte `j`: value `j` in the low nibble, value `j + 16` in the high one.
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);

// SAFETY: #[repr(C)] and made only of u8 arrays.
unsafe impl Block for BlockQ4_1 {}

impl BlockQ4_1 {
    /// The scale as f32.
    pub fn d(&self) -> f32 {
        f16_le(self.d)
    }

    /// The minimum as f32.
    pub fn m(&self) -> f32 {
        f16_le(self.m)
    }

    /// Dequantizes the block: `y = q * d + m`.
    pub fn to_f32(&self, y: &mut [f32; QK]) {
        let (d, m) = (self.d(), self.m());
        for (j, &q) in self.qs.iter().enumerate() {
            y[j] = f32::from(q & 0x0f) * d + m;
            y[j + QK / 2] = f32::from(q >> 4) * d + m;
        }
    }

    /// Quantizes 32 values: `d = (max - min) / 15`, `q = trunc((x - min) / d
    /// + 0.5)` clamped to 15.
    #[inline(always)]
    pub fn from_f32(x: &[f32; QK]) -> Self {
        let mut min = f32::MAX;
        let mut max = -f32::MAX;
        for &v in x {
            if v < min {
                min = v;
            }
            if v > max {
                max = v;
            }
        }
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };

        let mut qs = [0u8; QK / 2];
        for (j, q) in qs.iter_mut().enumerate() {
            let x0 = (x[j] - min) * id;
            let x1 = (x[j + QK / 2] - min) * id;
            // As ggml: truncate to i8 (saturating), then clamp to 15.
            let xi0 = ((x0 + 0.5) as i8).min(15) as u8;
            let xi1 = ((x1 + 0.5) as i8).min(15) as u8;
            *q = xi0 | (xi1 << 4);
        }
        BlockQ4_1 {
            d: f16_le_from(d),
            m: f16_le_from(min),
            qs,
        }
    }
}
