//! Q2_K: super-blocks of 256 values in 16 groups of 16; 2-bit values with a
//! 4-bit scale and 4-bit min per group, both times f16 super-scales,
//! `x = d * sc * q - dmin * m`; mirrors `block_q2_K` (ggml-common.h) and
//! `dequantize_row_q2_K` (ggml-quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.

use super::float::f16_le;
use super::{Block, QK_K};

/// One Q2_K super-block: 84 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ2K {
    /// Per group of 16: scale in the low nibble, min in the high nibble.
    pub scales: [u8; QK_K / 16],
    /// 2-bit values. Each half of the block (128 values) uses 32 bytes: the
    /// bits `2k..2k+2` of byte `l` hold value `32k + l` of that half.
    pub qs: [u8; QK_K / 4],
    /// Super-scale of the scales, f16 little-endian.
    pub d: [u8; 2],
    /// Super-scale of the mins, f16 little-endian.
    pub dmin: [u8; 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84);

// SAFETY: #[repr(C)] and made only of u8 arrays.
unsafe impl Block for BlockQ2K {}

impl BlockQ2K {
    /// Dequantizes the super-block; per group `dl = d * sc`, `ml = dmin * m`
    /// and `y = dl * q - ml`, in that order (as ggml).
    pub fn to_f32(&self, y: &mut [f32; QK_K]) {
        let d = f16_le(self.d);
        let dmin = f16_le(self.dmin);
        // Group g (16 values, y[16g..16g + 16]) lives in half g / 8, at
        // bit shift 2 * ((g / 2) % 4), bytes 16 * (g % 2) .. + 16.
        for (g, &sc) in self.scales.iter().enumerate() {
            let dl = d * f32::from(sc & 0x0f);
            let ml = dmin * f32::from(sc >> 4);
            let shift = 2 * ((g / 2) % 4);
            let q = &self.qs[32 * (g / 8) + 16 * (g % 2)..][..16];
            for (l, &b) in q.iter().enumerate() {
                y[16 * g + l] = dl * f32::from((b >> shift) & 3) - ml;
            }
        }
    }
}
