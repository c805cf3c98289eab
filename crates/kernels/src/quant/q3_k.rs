//! Q3_K: super-blocks of 256 values in 16 groups of 16; 3-bit signed values
//! (2 low bits plus a high-bit mask) with a 6-bit signed scale per group
//! times an f16 super-scale, `x = d * (sc - 32) * (q - 4)`; mirrors
//! `block_q3_K` (ggml-common.h) and `dequantize_row_q3_K` (ggml-quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.

use super::float::f16_le;
use super::{Block, QK_K};

/// One Q3_K super-block: 110 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ3K {
    /// High bits: bit `k` of byte `l` belongs to value `32k + l`; a *clear*
    /// bit means 4 is subtracted.
    pub hmask: [u8; QK_K / 8],
    /// Low 2 bits, laid out as in Q2_K.
    pub qs: [u8; QK_K / 4],
    /// Sixteen 6-bit scales (see [`BlockQ3K::scales`]).
    pub scales: [u8; 12],
    /// Super-scale, f16 little-endian.
    pub d: [u8; 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110);

// SAFETY: #[repr(C)] and made only of u8 arrays.
unsafe impl Block for BlockQ3K {}

impl BlockQ3K {
    /// The 16 group scales, already offset by -32 (range -32..=31).
    ///
    /// Scale `j` has its low nibble in byte `j` (j < 8, low nibble) or
    /// `j - 8` (high nibble), and its top two bits in byte `8 + j % 4` at
    /// bit `2 * (j / 4)`.
    pub fn scales(&self) -> [i8; 16] {
        let b = &self.scales;
        let mut out = [0i8; 16];
        for (j, s) in out.iter_mut().enumerate() {
            let low = if j < 8 { b[j] & 0x0f } else { b[j - 8] >> 4 };
            let high = (b[8 + j % 4] >> (2 * (j / 4))) & 3;
            *s = (low | (high << 4)) as i8 - 32;
        }
        out
    }

    /// Dequantizes the super-block; per group `dl = d * sc` and
    /// `y = dl * q` (as ggml).
    pub fn to_f32(&self, y: &mut [f32; QK_K]) {
        let d = f16_le(self.d);
        // Group g (y[16g..16g + 16]) lives in half g / 8, at bit shift
        // 2 * k with k = (g / 2) % 4, bytes 16 * (g % 2) .. + 16; its high
        // bits are bit 4 * (g / 8) + k of the same hmask bytes.
        for (g, &sc) in self.scales().iter().enumerate() {
            let dl = d * f32::from(sc);
            let k = (g / 2) % 4;
            let m = 1u8 << (4 * (g / 8) + k);
            let lo = 16 * (g % 2);
            let q = &self.qs[32 * (g / 8) + lo..][..16];
            let h = &self.hmask[lo..][..16];
            for (l, (&qb, &hb)) in q.iter().zip(h).enumerate() {
                let v = ((qb >> (2 * k)) & 3) as i8 - if hb & m != 0 { 0 } else { 4 };
                y[16 * g + l] = dl * f32::from(v);
            }
        }
    }
}
