//! Q5_1: 32 values as 5-bit integers with an f16 scale and minimum,
//! `x = d * q + m`; mirrors `block_q5_1` (ggml-common.h),
//! `dequantize_row_q5_1` and `quantize_row_q5_1_ref` (ggml-quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.

use super::float::{f16_le, f16_le_from};
use super::q5_0::{q5_pack, q5_pair};
use super::{Block, QK};

/// One Q5_1 block: 24 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ5_1 {
    /// Scale, f16 little-endian.
    pub d: [u8; 2],
    /// Minimum (offset), f16 little-endian.
    pub m: [u8; 2],
    /// Fifth bits: bit `j` of this little-endian u32 belongs to value `j`.
    pub qh: [u8; 4],
    /// Low four bits, laid out as in Q5_0.
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);

// SAFETY: #[repr(C)] and made only of u8 arrays.
unsafe impl Block for BlockQ5_1 {}

impl BlockQ5_1 {
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
        let qh = u32::from_le_bytes(self.qh);
        for j in 0..QK / 2 {
            let (q0, q1) = q5_pair(&self.qs, qh, j);
            y[j] = f32::from(q0) * d + m;
            y[j + QK / 2] = f32::from(q1) * d + m;
        }
    }

    /// Quantizes 32 values: `d = (max - min) / 31`,
    /// `q = trunc((x - min) / d + 0.5)`.
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
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };

        let mut q = [0u8; QK];
        for (qj, &v) in q.iter_mut().zip(x) {
            // As ggml: no clamp (the maximum lands on 31 and nothing above
            // it), and only the low five bits are stored; `as u8` saturates
            // where C's conversion would be undefined for out-of-range input.
            *qj = ((v - min) * id + 0.5) as u8;
        }
        let (qs, qh) = q5_pack(&q);
        BlockQ5_1 {
            d: f16_le_from(d),
            m: f16_le_from(min),
            qh,
            qs,
        }
    }
}
