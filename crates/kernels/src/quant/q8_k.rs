//! Q8_K: 256 values as i8 times an f32 scale, with sums of each 16 values,
//! used for activations in k-quant dot products; mirrors `block_q8_K`
//! (ggml-common.h), `quantize_row_q8_K_ref` and `dequantize_row_q8_K`
//! (ggml-quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.

use super::{Block, QK_K};

/// One Q8_K super-block: 292 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ8K {
    /// Scale, f32 little-endian (not f16).
    pub d: [u8; 4],
    /// The quantized values.
    pub qs: [i8; QK_K],
    /// Sum of each 16 consecutive values, i16 little-endian.
    pub bsums: [[u8; 2]; QK_K / 16],
}

const _: () = assert!(std::mem::size_of::<BlockQ8K>() == 292);

// SAFETY: #[repr(C)] and made only of u8/i8 arrays.
unsafe impl Block for BlockQ8K {}

impl BlockQ8K {
    /// The scale.
    pub fn d(&self) -> f32 {
        f32::from_le_bytes(self.d)
    }

    /// Sum of values `16 * i .. 16 * i + 16` (for `i` in 0..16).
    pub fn bsum(&self, i: usize) -> i16 {
        i16::from_le_bytes(self.bsums[i % (QK_K / 16)])
    }

    /// Dequantizes the block: `y = d * q`.
    pub fn to_f32(&self, y: &mut [f32; QK_K]) {
        let d = self.d();
        for (y, &q) in y.iter_mut().zip(&self.qs) {
            *y = d * f32::from(q);
        }
    }

    /// Quantizes 256 values: the value of largest magnitude (the first, on
    /// ties) maps to -127, `iscale = -127 / max`, `q = round(iscale * x)`
    /// with ties to even (ggml's `nearest_int`), capped at 127, and
    /// `d = 1 / iscale`.
    ///
    /// For an all-zero block ggml writes `d = 0` and zero values but leaves
    /// `bsums` untouched; here they are zero too (the sums of those values).
    pub fn from_f32(x: &[f32; QK_K]) -> Self {
        let mut out = BlockQ8K {
            d: [0; 4],
            qs: [0; QK_K],
            bsums: [[0; 2]; QK_K / 16],
        };
        let mut amax = 0.0f32;
        let mut max = 0.0f32;
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            return out;
        }
        let iscale = -127.0 / max;
        for (q, &v) in out.qs.iter_mut().zip(x) {
            // `nearest_int` is round-half-even for |v| < 2^22; here
            // |iscale * v| <= 127 (NaN, from infinite input, gives 0 as in
            // ggml's bit trick).
            let n = super::round_ties_even(iscale * v) as i32;
            *q = n.min(127) as i8;
        }
        for (s, q) in out.bsums.iter_mut().zip(out.qs.chunks_exact(16)) {
            // 16 values of at most 127 in magnitude: fits in i16.
            let sum: i32 = q.iter().map(|&v| i32::from(v)).sum();
            *s = (sum as i16).to_le_bytes();
        }
        out.d = (1.0 / iscale).to_le_bytes();
        out
    }
}
