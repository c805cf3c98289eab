//! Q4_K: super-blocks of 256 values in 8 groups of 32; 4-bit values with a
//! 6-bit scale and 6-bit min per group, both times f16 super-scales,
//! `x = d * sc * q - dmin * m`; mirrors `block_q4_K` (ggml-common.h),
//! `get_scale_min_k4` and `dequantize_row_q4_K` (ggml-quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.

use super::float::f16_le;
use super::{Block, QK_K};

/// One Q4_K super-block: 144 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ4K {
    /// Super-scale of the scales, f16 little-endian.
    pub d: [u8; 2],
    /// Super-scale of the mins, f16 little-endian.
    pub dmin: [u8; 2],
    /// Eight 6-bit scales and eight 6-bit mins (see [`scale_min_k4`]).
    pub scales: [u8; 12],
    /// 4-bit values: 32 bytes per pair of groups, group `2p` in the low
    /// nibbles and group `2p + 1` in the high nibbles.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);

// SAFETY: #[repr(C)] and made only of u8 arrays.
unsafe impl Block for BlockQ4K {}

/// (scale, min) of group `j` (0..8) from the 12 packed bytes shared by Q4_K
/// and Q5_K. Groups 0..4 use the low 6 bits of bytes `j` and `j + 4`; groups
/// 4..8 take their low nibbles from byte `j + 4` and their top two bits
/// from the spare top bits of bytes `j - 4` and `j`. `j` is taken modulo 8.
pub fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    let j = j % 8;
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        let sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        let m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
        (sc, m)
    }
}

impl BlockQ4K {
    /// Dequantizes the super-block; per group `d1 = d * sc`, `m1 = dmin * m`
    /// and `y = d1 * q - m1`, in that order (as ggml).
    pub fn to_f32(&self, y: &mut [f32; QK_K]) {
        let d = f16_le(self.d);
        let dmin = f16_le(self.dmin);
        for (g, out) in y.chunks_exact_mut(32).enumerate() {
            let (sc, m) = scale_min_k4(g, &self.scales);
            let d1 = d * f32::from(sc);
            let m1 = dmin * f32::from(m);
            let shift = 4 * (g % 2);
            let q = &self.qs[32 * (g / 2)..][..32];
            for (y, &b) in out.iter_mut().zip(q) {
                *y = d1 * f32::from((b >> shift) & 0x0f) - m1;
            }
        }
    }
}
