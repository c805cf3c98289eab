//! Q4_0: 32 values as 4-bit integers times one f16 scale, `x = d * (q - 8)`;
//! mirrors `block_q4_0` (ggml-common.h), `dequantize_row_q4_0` and
//! `quantize_row_q4_0_ref` (ggml-quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.

use super::float::{f16_le, f16_le_from};
use super::{first_largest_magnitude, Block, QK};

/// One Q4_0 block: 18 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ4_0 {
    /// Scale, f16 little-endian.
    pub d: [u8; 2],
    /// Byte `j` holds value `j` in its low nibble and value `j + 16` in its
    /// high nibble.
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);

// SAFETY: #[repr(C)] and made only of u8 arrays.
unsafe impl Block for BlockQ4_0 {}

impl BlockQ4_0 {
    /// The scale as f32.
    pub fn d(&self) -> f32 {
        f16_le(self.d)
    }

    /// Dequantizes the block: `y = (q - 8) * d`.
    pub fn to_f32(&self, y: &mut [f32; QK]) {
        let d = self.d();
        for (j, &q) in self.qs.iter().enumerate() {
            let x0 = i32::from(q & 0x0f) - 8;
            let x1 = i32::from(q >> 4) - 8;
            y[j] = x0 as f32 * d;
            y[j + QK / 2] = x1 as f32 * d;
        }
    }

    /// Quantizes 32 values. The value of largest magnitude (the first one,
    /// on ties) maps to -8 exactly, so `d = max / -8`; the others round
    /// half up via `trunc(x / d + 8.5)`, clamped to 15.
    #[inline(always)]
    pub fn from_f32(x: &[f32; QK]) -> Self {
        let (_, max) = first_largest_magnitude(x);
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };

        let mut qs = [0u8; QK / 2];
        for (j, q) in qs.iter_mut().enumerate() {
            let x0 = x[j] * id;
            let x1 = x[j + QK / 2] * id;
            // As ggml: truncate to i8 (saturating here, where C would be
            // undefined for out-of-range inputs), then clamp to 15.
            let xi0 = ((x0 + 8.5) as i8).min(15) as u8;
            let xi1 = ((x1 + 8.5) as i8).min(15) as u8;
            *q = xi0 | (xi1 << 4);
        }
        BlockQ4_0 {
            d: f16_le_from(d),
            qs,
        }
    }
}
