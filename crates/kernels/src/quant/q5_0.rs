//! Q5_0: 32 values as 5-bit integers times one f16 scale, `x = d * (q - 16)`;
//! mirrors `block_q5_0` (ggml-common.h), `dequantize_row_q5_0` and
//! `quantize_row_q5_0_ref` (ggml-quants.c) of
//! <https://github.com/ggml-org/llama.cpp/tree/master/ggml/src>.

use super::float::{f16_le, f16_le_from};
use super::{first_largest_magnitude, Block, QK};

/// One Q5_0 block: 22 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ5_0 {
    /// Scale, f16 little-endian.
    pub d: [u8; 2],
    /// Fifth bits: bit `j` of this little-endian u32 belongs to value `j`.
    pub qh: [u8; 4],
    /// Low four bits: value `j` in the low nibble of byte `j`, value
    /// `j + 16` in its high nibble.
    pub qs: [u8; QK / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);

// SAFETY: #[repr(C)] and made only of u8 arrays.
unsafe impl Block for BlockQ5_0 {}

/// The 5-bit values `(j, j + 16)` of a Q5 block: low nibbles from `qs`,
/// fifth bits from `qh` (shared by Q5_0 and Q5_1).
#[inline]
pub(crate) fn q5_pair(qs: &[u8; QK / 2], qh: u32, j: usize) -> (u8, u8) {
    let h0 = ((qh >> j) & 1) as u8;
    let h1 = ((qh >> (j + QK / 2)) & 1) as u8;
    ((qs[j] & 0x0f) | (h0 << 4), (qs[j] >> 4) | (h1 << 4))
}

/// Packs 5-bit values `q` (only the low 5 bits are kept) into `(qs, qh)`.
#[inline(always)]
pub(crate) fn q5_pack(q: &[u8; QK]) -> ([u8; QK / 2], [u8; 4]) {
    let mut qs = [0u8; QK / 2];
    let mut qh = 0u32;
    for (j, b) in qs.iter_mut().enumerate() {
        let (a, c) = (q[j], q[j + QK / 2]);
        *b = (a & 0x0f) | ((c & 0x0f) << 4);
        qh |= u32::from((a >> 4) & 1) << j;
        qh |= u32::from((c >> 4) & 1) << (j + QK / 2);
    }
    (qs, qh.to_le_bytes())
}

impl BlockQ5_0 {
    /// The scale as f32.
    pub fn d(&self) -> f32 {
        f16_le(self.d)
    }

    /// Dequantizes the block: `y = (q - 16) * d`.
    pub fn to_f32(&self, y: &mut [f32; QK]) {
        let d = self.d();
        let qh = u32::from_le_bytes(self.qh);
        for j in 0..QK / 2 {
            let (q0, q1) = q5_pair(&self.qs, qh, j);
            y[j] = (i32::from(q0) - 16) as f32 * d;
            y[j + QK / 2] = (i32::from(q1) - 16) as f32 * d;
        }
    }

    /// Quantizes 32 values: the value of largest magnitude maps to -16, so
    /// `d = max / -16`; `q = trunc(x / d + 16.5)` clamped to 31.
    #[inline(always)]
    pub fn from_f32(x: &[f32; QK]) -> Self {
        let (_, max) = first_largest_magnitude(x);
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };

        let mut q = [0u8; QK];
        for (qj, &v) in q.iter_mut().zip(x) {
            // As ggml: truncate to i8 (saturating), then clamp to 31.
            *qj = ((v * id + 16.5) as i8).min(31) as u8;
        }
        let (qs, qh) = q5_pack(&q);
        BlockQ5_0 {
            d: f16_le_from(d),
            qh,
            qs,
        }
    }
}
