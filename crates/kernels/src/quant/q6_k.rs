//! Q6_K: super-blocks of 256 values in 16 groups of 16; 6-bit signed values
//! with an i8 scale per group times an f16 super-scale,
//! `x = d * sc * (q - 32)`; mirrors `block_q6_K` (ggml-common.h) and
//! `dequantize_row_q6_K` (ggml-quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.

use super::float::f16_le;
use super::{Block, QK_K};

/// One Q6_K super-block: 210 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ6K {
    /// Low four bits. Each half (128 values) uses 64 bytes: value
    /// `l + 32k` (l < 32) of the half is in byte `l + 32 * (k % 2)`, low
    /// nibble for k < 2, high nibble otherwise.
    pub ql: [u8; QK_K / 2],
    /// High two bits: each half uses 32 bytes, value `l + 32k` of the half
    /// at bits `2k..2k+2` of byte `l`.
    pub qh: [u8; QK_K / 4],
    /// Group scales.
    pub scales: [i8; QK_K / 16],
    /// Super-scale, f16 little-endian.
    pub d: [u8; 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);

// SAFETY: #[repr(C)] and made only of u8/i8 arrays.
unsafe impl Block for BlockQ6K {}

impl BlockQ6K {
    /// Dequantizes the super-block: `y = (d * sc) * q`, in that order (ggml
    /// writes `d * sc[is] * q` and C evaluates it left to right).
    pub fn to_f32(&self, y: &mut [f32; QK_K]) {
        let d = f16_le(self.d);
        // Run r (32 values, y[32r..32r + 32]) is in half h = r / 4 with
        // k = r % 4; its scales are groups 2r and 2r + 1.
        for (r, out) in y.chunks_exact_mut(32).enumerate() {
            let (h, k) = (r / 4, r % 4);
            let ql = &self.ql[64 * h + 32 * (k % 2)..][..32];
            let qh = &self.qh[32 * h..][..32];
            let nib = 4 * (k / 2);
            for (l, (y, (&lo, &hi))) in out.iter_mut().zip(ql.iter().zip(qh)).enumerate() {
                let q = (((lo >> nib) & 0x0f) | (((hi >> (2 * k)) & 3) << 4)) as i8 - 32;
                let sc = self.scales[2 * r + l / 16];
                *y = d * f32::from(sc) * f32::from(q);
            }
        }
    }
}
